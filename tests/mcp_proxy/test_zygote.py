"""tests/zygote.py: an upstream forked from the zygote (conftest.py starts one) lives and
dies as the plain process the proxy started would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

import zygote
from slow_clients import fd_limit

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "mcp_session_upstream.py"  # it records its pid at each put


def _request(mid: int, method: str, params: Mapping[str, object]) -> bytes:
    return (
        json.dumps({"jsonrpc": "2.0", "id": mid, "method": method, "params": params}) + "\n"
    ).encode()


def _started(
    ledger: Path, preexec_fn: Callable[[], None] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """The launcher, and the pid of the upstream that runs its script (from the ledger)."""
    env = {**os.environ, "UPSTREAM_LEDGER": str(ledger)}
    assert env.get(zygote.ENV), "no zygote: the fixture did not start one"
    launcher = subprocess.Popen(
        [sys.executable, str(UPSTREAM)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,  # as the proxy starts it: its own process group
        preexec_fn=preexec_fn,
    )
    assert launcher.stdin is not None and launcher.stdout is not None
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    launcher.stdin.write(_request(1, "initialize", hello))
    launcher.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    launcher.stdin.write(
        _request(2, "tools/call", {"name": "put", "arguments": {"key": "k", "value": "v"}})
    )
    launcher.stdin.flush()
    assert json.loads(launcher.stdout.readline())["id"] == 1
    assert json.loads(launcher.stdout.readline())["id"] == 2
    (pid,) = {json.loads(line)["pid"] for line in ledger.read_text().splitlines()}
    assert pid != launcher.pid  # it did run in the zygote's child
    return launcher, pid


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists():  # reaped by its supervisor: no zombie left
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("end", ["stdin closed", "SIGTERM", "group SIGKILL", "upstream SIGKILL"])
def test_an_upstream_ends_with_its_launcher_and_the_launcher_with_it(
    tmp_path: Path, end: str
) -> None:
    launcher, pid = _started(tmp_path / "ledger.jsonl")
    assert launcher.stdin is not None
    if end == "stdin closed":
        launcher.stdin.close()  # the MCP shutdown: the upstream exits 0, so does its launcher
        assert launcher.wait(5) == 0
    elif end == "SIGTERM":
        launcher.send_signal(signal.SIGTERM)  # passed on: both die by it
        assert launcher.wait(5) == -signal.SIGTERM
    elif end == "group SIGKILL":
        os.killpg(launcher.pid, signal.SIGKILL)  # the proxy's last resort on close
        assert launcher.wait(5) == -signal.SIGKILL
    else:
        os.kill(pid, signal.SIGKILL)  # a test that kills the upstream by its pid
        assert launcher.wait(5) == -signal.SIGKILL
    assert _gone(pid), f"the upstream {pid} outlived its launcher"


def test_the_launchers_open_files_limit_is_the_upstreams(tmp_path: Path) -> None:
    """A test that lowers a process's RLIMIT_NOFILE (fd_limit, to flood it) lowers its
    forked child's: the zygote's own would be left otherwise."""
    launcher, pid = _started(tmp_path / "ledger.jsonl", preexec_fn=fd_limit(64))
    assert launcher.stdin is not None
    limits = Path(f"/proc/{pid}/limits").read_text()
    launcher.stdin.close()
    assert launcher.wait(5) == 0
    (line,) = [row for row in limits.splitlines() if row.startswith("Max open files")]
    assert line.split()[3] == "64", line


def test_the_zygote_of_a_killed_pytest_worker_ends(tmp_path: Path) -> None:
    """The zygote has its own session (no Ctrl-C of pytest's reaches it): a worker killed
    mid-run (SIGKILL, no fixture teardown) left it running for good, mcp imported. It ends
    once its parent is gone, its socket removed. (serve() as the zygote runs it, without
    the seconds of its imports.)"""
    path = tmp_path / "socket"
    worker = subprocess.Popen(
        [sys.executable, "-c", SERVE_AND_WAIT, str(path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
    )
    assert worker.stdout is not None
    pid = int(worker.stdout.readline())
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, f"the zygote {pid} outlived its pytest worker"
        time.sleep(0.02)
    assert not path.exists()


SERVE_AND_WAIT = """
import os, socket, sys, time
import zygote
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen()
worker = os.getpid()
pid = os.fork()
if pid == 0:
    zygote.serve(listener, worker)
print(pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Running: an orphan's zombie (a container's pid 1 may reap none) is no zygote."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_what_an_upstream_started_dies_with_its_group(tmp_path: Path) -> None:
    """The proxy's last resort on close kills the upstream's process group: a plain
    upstream's children die with it. A forked one is in a session of its own, not its
    launcher's: its supervisor killed it alone, and what it started lived on."""
    script = tmp_path / "parent_upstream.py"
    script.write_text(PARENT_UPSTREAM.format(tests=str(ROOT / "tests")))
    assert os.environ.get(zygote.ENV), "no zygote: the fixture did not start one"
    launcher = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert launcher.stdout is not None
    upstream, child = (int(word) for word in launcher.stdout.readline().split())
    assert upstream != launcher.pid  # it did run in the zygote's child
    os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.wait(5) == -signal.SIGKILL
    assert _gone(upstream), f"the upstream {upstream} outlived its launcher"
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, f"the upstream's child {child} outlived it"
        time.sleep(0.01)


PARENT_UPSTREAM = """
import sys
sys.path.insert(0, {tests!r})
import zygote
zygote.hand_over()
import os, subprocess, time
child = subprocess.Popen(["sleep", "60"])
print(os.getpid(), child.pid, flush=True)
time.sleep(60)
"""
