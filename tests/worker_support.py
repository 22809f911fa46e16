"""`undolog worker` as a subprocess, with a small agent app whose compensations write a
file: shared by the worker's tests and the tool registry's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import engine
from undolog.walk import Worker

Conn = psycopg.Connection[Any]

APP = """
import time
from pathlib import Path
from undolog import UndoLog

ul = UndoLog()
here = Path(__file__).parent

@ul.compensation("delete_user")
def delete_user(call):
    with open(here / "undone.txt", "a") as f:
        f.write(f"{call.result['user_id']}\\n")

@ul.compensation("always_fails")
def always_fails(call):
    raise RuntimeError("refund refused: bad\\x00byte")

@ul.compensation("slow")
def slow(call):
    (here / f"started-{call.attempt}").write_text(str(call.undo_id))
    time.sleep(float((here / "slow_seconds").read_text()))
    with open(here / "undone.txt", "a") as f:
        f.write(f"slow {call.result['user_id']}\\n")
"""


def failed_session(
    conn: Conn, compensation: str, user_id: int, max_attempts: int | None = None
) -> uuid.UUID:
    """A failed session with one committed COMPENSABLE call, compensated by ``compensation``."""
    sid = engine.begin_session(conn, agent="worker-test")
    descriptor: dict[str, Any] = {"name": compensation}
    if max_attempts is not None:
        descriptor["max_attempts"] = max_attempts
    hit = engine.intercept(
        conn, sid, 0, "create_user", "compensable", {"user": user_id}, descriptor
    )
    assert hit.effect_id is not None
    engine.commit(conn, hit.effect_id, {"user_id": user_id})
    engine.fail_session(conn, sid, "the agent gave up")
    return sid


def state_of(conn: Conn, sid: uuid.UUID) -> str:
    return engine.session_state(conn, sid)


def wait_until(check: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


class WorkerProcess:
    """`undolog worker` as a subprocess; stderr goes to a file the test reads."""

    def __init__(self, dsn: str, app_dir: Path, *extra: str) -> None:
        self.log = app_dir / "worker.log"
        self.out = app_dir / "worker.out"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "undolog.cli",
                "worker",
                "--app",
                "agentapp:ul",
                "--interval",
                "0.1",
                "--dsn",
                dsn,
                *extra,
            ],
            cwd=app_dir,
            stdout=self.out.open("w"),
            stderr=self.log.open("w"),
            env={k: v for k, v in os.environ.items() if k != "UNDOLOG_DSN"},
        )

    def stderr(self) -> str:
        return self.log.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 15.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "agentapp.py").write_text(textwrap.dedent(APP))
    (tmp_path / "slow_seconds").write_text("0")
    return tmp_path


@pytest.fixture
def start_worker(app_dir: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(dsn: str, *extra: str) -> WorkerProcess:
        worker = WorkerProcess(dsn, app_dir, *extra)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def run_in_thread(worker: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """worker.run() in a daemon thread; what it raised, if anything, in the list."""
    raised: list[BaseException] = []

    def body() -> None:
        try:
            worker.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, raised
