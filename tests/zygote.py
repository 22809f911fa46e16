"""A fork-server ("zygote") for the processes the MCP proxy's tests start: the upstream
MCP servers (tests/mcp_*_upstream.py) and the undolog command itself, the proxy and the
worker (tests/undolog_main.py, `python -m undolog.cli` for the tests).

``import mcp`` costs about a second of CPU per process (pydantic models built at import),
and the proxy's tests start some 170 upstreams and as many proxies. The zygote imports
mcp and undolog once and forks a ready child for each: the process the test (or the
proxy) starts as always, the "launcher", calls ``hand_over()`` before it imports mcp,
sends its argv, cwd, environment and fds 0/1/2 to the zygote, and waits for the child as
if it were the child:

    test/proxy -> launcher  - - socket - -  zygote -> supervisor -> child (runs the script)

- the child gets the launcher's stdin/stdout/stderr, argv, cwd, environment and
  open-files limit, its own session, and runs the script as __main__; the processes it
  starts in turn (a proxy's upstreams) are forked from the zygote too;
- SIGTERM, SIGINT or SIGHUP to the launcher is passed on to the child; the launcher
  exits with the child's exit status, or dies by the signal that killed it (a child
  killed by pid ends its launcher);
- the supervisor (one per child) kills the child once the launcher's end of the socket
  closes: a SIGKILL of the launcher, or of its process group (the proxy's close of an
  upstream), ends the child too, as it would a plain process.

Not passed on: SIGSTOP and SIGCONT (a test that pauses a process starts it plainly). The
code a child runs is the zygote's copy, imported when the test run began.

Without ``UNDOLOG_TEST_ZYGOTE`` (a script run by hand, the examples) or without a zygote
listening there, ``hand_over()`` returns and the script runs as a plain process.
tests/conftest.py starts one zygote per pytest (xdist) worker for tests/mcp_proxy/; it
ends with the fixture, or, the worker killed, within _PARENT_POLL of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ENV = "UNDOLOG_TEST_ZYGOTE"
# The pid of a process forked from the zygote, in its own environment: its script's own
# hand_over() returns there, while the processes it starts (the proxy's upstreams) are
# forked in turn, ENV being left to them.
FORKED = "UNDOLOG_TEST_ZYGOTE_FORKED"
_INT = struct.Struct("!i")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PARENT_POLL = 0.5  # seconds between two looks at whether the zygote's parent lives


# --- the launcher's side: the upstream script's first lines ------------------------------


def _recv_int(sock: socket.socket) -> int | None:
    data = b""
    while len(data) < _INT.size:
        chunk = sock.recv(_INT.size - len(data))
        if not chunk:
            return None
        data += chunk
    return int(_INT.unpack(data)[0])


def hand_over() -> None:
    """Run this script in a child of the zygote named by UNDOLOG_TEST_ZYGOTE, if one is
    listening, and exit as that child does; otherwise return (a plain run)."""
    path = os.environ.get(ENV)
    if not path or os.environ.get(FORKED) == str(os.getpid()):
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return  # no zygote (it ended, or the variable leaked): run plainly
    request = json.dumps(
        {
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "exe": sys.executable,
            # a test's preexec_fn may have lowered it (tests/slow_clients.py's fd_limit)
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        }
    ).encode()
    socket.send_fds(sock, [_INT.pack(len(request)) + request], [0, 1, 2])
    pid = _recv_int(sock)
    if pid is None:  # refused (another interpreter): the fds are still ours alone
        sock.close()
        return
    # the pipes are the upstream's alone now, as they would be a plain process's: the
    # proxy sees EOF on them when the upstream ends, not when its launcher does
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def forward(signum: int, _frame: object) -> None:
        # through the supervisor, which knows whether the upstream still runs (no pid reuse)
        with contextlib.suppress(OSError):  # it is gone: its status is on its way
            sock.send(bytes([signum]))

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    status = _recv_int(sock)
    if status is None:  # the zygote's supervisor died: say so as a crash would
        os._exit(70)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        if -code != signal.SIGKILL:  # the one it cannot set (and needs not)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)  # a signal we cannot die by (e.g. SIGSTOP): as a shell says
    os._exit(code)


# --- the zygote's side ----------------------------------------------------------------


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    size = int(_INT.unpack(msg[: _INT.size])[0])
    body = msg[_INT.size :]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("launcher left mid-request")
        body += chunk
    return json.loads(body), fds


def _supervise(conn: socket.socket, pid: int) -> None:
    """Between the launcher and its upstream until one ends: never returns."""
    pidfd = os.pidfd_open(pid)
    try:
        conn.sendall(_INT.pack(pid))
        while True:
            ready, _, _ = select.select([conn.fileno(), pidfd], [], [])
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                conn.sendall(_INT.pack(status))
                break
            signals = conn.recv(64)
            if not signals:  # the launcher is gone (SIGKILL, its group killed)
                _kill_group(pid)
                os.waitpid(pid, 0)
                break
            for signum in signals:
                os.kill(pid, signum)
    except OSError:
        _kill_group(pid)
    finally:
        os._exit(0)


def _kill_group(pid: int) -> None:
    """SIGKILL to the upstream's process group, as the proxy's close kills a plain
    upstream's group: the processes it started die with it. Its own pid alone while it
    has no group yet (forked, not yet setsid: its group is then the zygote's)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        os.kill(pid, signal.SIGKILL)


def serve(listener: socket.socket, parent: int) -> tuple[dict[str, Any], list[int]]:
    """Accept launchers until ``parent`` (the pytest worker that started the zygote) is
    gone: its own session kept a Ctrl-C from it, and so a killed worker's zygote lived
    on, ~90 MB each. Returns only in a forked upstream: its request and fds, to run
    (run_upstream)."""
    # finished supervisors are reaped by the kernel; the zygote waits for none of them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        if not select.select([listener], [], [], _PARENT_POLL)[0]:
            if os.getppid() != parent:  # the pytest worker is gone (killed): so are we
                with contextlib.suppress(OSError):
                    os.unlink(str(listener.getsockname()).removesuffix(".new"))  # renamed
                os._exit(0)
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _read_request(conn)
        except (OSError, EOFError, ValueError):
            conn.close()
            continue
        if request.get("exe") != sys.executable:
            # another interpreter (another venv): the launcher, told nothing, runs plainly
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        # fork copies only the calling thread: a lock another thread held stays held
        assert threading.active_count() == 1, "the zygote must be single-threaded to fork"
        if os.fork() == 0:  # the supervisor
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # so that waitpid sees its child
            pid = os.fork()
            if pid == 0:  # the upstream
                conn.close()
                return request, fds
            for fd in fds:
                os.close(fd)
            _supervise(conn, pid)
        conn.close()
        for fd in fds:
            os.close(fd)


def run_upstream(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked upstream: become the launcher's process, run its script."""
    import runpy

    os.setsid()  # its own session and process group, as the proxy starts a plain upstream
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
    env = {**request["env"], FORKED: str(os.getpid())}
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(request["argv"])
    script = str(Path(sys.argv[0]).resolve())
    sys.path[0] = os.path.dirname(script)  # as `python script.py` would have it
    runpy.run_path(script, run_name="__main__")


def start(path: Path) -> subprocess.Popen[bytes]:
    """Start a zygote listening on ``path``: ready once the path exists."""
    return subprocess.Popen(
        [sys.executable, __file__, str(path), str(os.getpid())],
        # no terminal of pytest's: the upstreams' stdio objects, made at the zygote's
        # start, buffer as a plain upstream's do on the proxy's pipes
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C of pytest is no signal for it
    )


def _preload() -> None:
    """What the upstream scripts import, so that each forked child has it already."""
    import argparse  # noqa: F401
    import asyncio  # noqa: F401

    import anyio._backends._asyncio  # noqa: F401
    import mcp.server.context
    import mcp.server.mcpserver
    import mcp.server.mcpserver.exceptions
    import mcp.server.mcpserver.resources.types  # noqa: F401
    import mcp_types  # noqa: F401
    import pydantic  # noqa: F401

    # and the undolog command (tests/undolog_main.py): the proxy, the worker
    import undolog.cli
    import undolog.cli.mcp_proxy
    import undolog.cli.worker
    import undolog.mcp_proxy.proxy
    import undolog.mcp_proxy.server  # noqa: F401


if __name__ == "__main__":
    _preload()
    _target = Path(sys.argv[1])
    _listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bound under another name, then renamed: the path exists once the zygote listens
    _listener.bind(f"{_target}.new")
    _listener.listen(64)
    os.rename(f"{_target}.new", _target)
    run_upstream(*serve(_listener, int(sys.argv[2])))  # returns only in a forked upstream
