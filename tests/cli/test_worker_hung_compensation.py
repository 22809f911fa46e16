"""A synchronous compensation that never returns does not hold its worker
(docs/operations/worker.md, "A compensation that does not return"): the worker waits for
it until shortly before its claim expires, records the attempt as failed, leaves the call
in an abandoned thread whose outcome is never recorded, and serves the other sessions; at
``max_abandoned`` such threads it claims nothing more until one ends.

A real worker against a real database: Worker in this process where the test must hold
the compensation on a threading.Event, ``undolog worker`` as a subprocess for its option.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog.walk import CompensationCall, Worker
from worker_support import Conn, WorkerProcess, failed_session, state_of, wait_until

# A claim of 2 s: the worker gives a compensation some 1.8 s; retries are due 100 ms later.
FAST_CLAIMS = "-c undolog.claim_timeout=2s -c undolog.retry_base=100ms"


def history(conn: Conn, sid: uuid.UUID) -> list[tuple[Any, ...]]:
    """The session's undo entry's transitions: (from, to, attempt, error recorded)."""
    rows = conn.execute(
        "SELECT from_state, to_state, attempt, detail ->> 'error'"
        " FROM undolog.undolog_undo_history WHERE session_id = %s ORDER BY history_id",
        (sid,),
    ).fetchall()
    return [tuple(r) for r in rows]


def last_error(conn: Conn, sid: uuid.UUID) -> str | None:
    row = conn.execute(
        "SELECT last_error FROM undolog.undolog_undo_stack WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    error: str | None = row[0]
    return error


def attempts(conn: Conn, sid: uuid.UUID) -> tuple[str, int]:
    row = conn.execute(
        "SELECT state, attempts FROM undolog.undolog_undo_stack WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    return (row[0], row[1])


@pytest.fixture
def serve(dsn: str) -> Iterator[Callable[..., Worker]]:
    """serve(compensations, **options): a Worker running in a thread of this process,
    stopped when the test ends."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(compensations: dict[str, Callable[..., Any]], **options: Any) -> Worker:
        worker = Worker(
            lambda: psycopg.connect(dsn, autocommit=True, options=FAST_CLAIMS),
            compensations,
            interval=0.1,
            **options,
        )
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
        thread.join(timeout=10)


def test_a_hung_compensation_is_failed_at_its_deadline_and_the_others_are_served(
    conn: Conn, serve: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """Session A's compensation blocks (attempt 1) until the test releases it; session
    B, failed after it, is walked meanwhile. A's attempt 1 is recorded as failed, once,
    with the reason; attempt 2 completes it. When attempt 1's call finally returns, its
    outcome is not recorded: the journal is as it was, and the log says so."""
    release = threading.Event()
    returned: list[int] = []
    undone: list[int] = []

    def hangs(call: CompensationCall) -> None:
        if call.attempt == 1:
            release.wait()
        returned.append(call.attempt)

    hung = failed_session(conn, "hangs", 1)
    caplog.set_level(logging.INFO, logger="undolog.walk")
    try:
        serve({"hangs": hangs, "delete_user": lambda call: undone.append(call.result["user_id"])})
        wait_until(lambda: attempts(conn, hung) == ("compensating", 1), what="A's claim")
        other = failed_session(conn, "delete_user", 2)
        wait_until(lambda: state_of(conn, other) == "compensated", what="B's walk, A hanging")
        assert undone == [2] and not release.is_set()
        wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry")
        assert returned == [2]  # attempt 1 still hangs
        before = history(conn, hung)
        assert [h[:3] for h in before] == [
            ("pending", "compensating", 1),
            ("compensating", "pending", 1),
            ("pending", "compensating", 2),
            ("compensating", "compensated", 2),
        ], before
        assert "did not return within 1.8 s" in (before[1][3] or ""), before
        assert "did not return within 1.8 s" in caplog.text
    finally:
        release.set()
    wait_until(lambda: returned == [2, 1], what="attempt 1's late return")
    wait_until(lambda: "is not recorded" in caplog.text, what="the late return's log line")
    time.sleep(0.3)
    assert history(conn, hung) == before  # nothing recorded for the late return
    assert "stale claim" not in caplog.text


def test_at_max_abandoned_the_worker_claims_nothing_until_one_returns(
    conn: Conn, serve: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """One abandoned thread allowed: after A's, the worker leaves B failed and A's retry
    unclaimed, and says why; once A's call returns, it walks both."""
    release = threading.Event()

    def hangs(call: CompensationCall) -> None:
        release.wait()

    hung = failed_session(conn, "hangs", 1)
    caplog.set_level(logging.INFO, logger="undolog.walk")
    try:
        serve({"hangs": hangs, "delete_user": lambda call: None}, max_abandoned=1)
        wait_until(lambda: attempts(conn, hung) == ("compensating", 1), what="A's claim")
        other = failed_session(conn, "delete_user", 2)
        wait_until(lambda: "claims nothing" in caplog.text, what="the bound's log line")
        time.sleep(1.0)  # passes go by: nothing is claimed
        assert state_of(conn, other) == "failed"
        assert attempts(conn, hung) == ("pending", 1)
    finally:
        release.set()
    wait_until(lambda: state_of(conn, other) == "compensated", what="B, once A returned")
    wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry")
    assert attempts(conn, hung) == ("compensated", 2)


def test_a_hung_async_compensation_is_cancelled_at_its_deadline(
    conn: Conn, serve: Callable[..., Worker]
) -> None:
    """An async compensation (run with asyncio.run: the CLI's worker has no loop) that
    awaits for ever is cancelled at the deadline, so no thread is left behind."""
    cancelled = threading.Event()

    async def hangs(call: CompensationCall) -> None:
        if call.attempt == 1:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    hung = failed_session(conn, "hangs", 1)
    worker = serve({"hangs": hangs})
    wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry")
    assert cancelled.is_set() and worker.abandoned == 0
    error = history(conn, hung)[1][3] or ""
    assert error.startswith("CompensationTimeout: did not return within 1.8 s"), error


def test_a_hung_async_compensation_on_the_workers_loop_is_cancelled(
    conn: Conn, serve: Callable[..., Worker]
) -> None:
    """Worker(loop=...): the compensation's task is cancelled on that loop."""
    cancelled = threading.Event()
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()

    async def hangs(call: CompensationCall) -> None:
        if call.attempt == 1:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    try:
        hung = failed_session(conn, "hangs", 1)
        worker = serve({"hangs": hangs}, loop=loop)
        wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry")
        assert cancelled.wait(5) and worker.abandoned == 0
        assert "did not return within 1.8 s" in (history(conn, hung)[1][3] or "")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(5)
        loop.close()


APP = """
import time
from undolog import UndoLog

ul = UndoLog()

@ul.compensation("hangs")
def hangs(call):
    if call.attempt == 1:
        time.sleep(3600)

@ul.compensation("delete_user")
def delete_user(call):
    pass
"""


def test_undolog_worker_compensation_timeout(dsn: str, conn: Conn, tmp_path: Path) -> None:
    """`undolog worker --compensation-timeout 1`: a hung compensation's attempt is failed
    after 1 s (the claim, 5 minutes, would have held the worker that long)."""
    (tmp_path / "agentapp.py").write_text(APP)
    hung = failed_session(conn, "hangs", 1)
    worker = WorkerProcess(dsn, tmp_path, "--compensation-timeout", "1")
    try:
        wait_until(lambda: attempts(conn, hung)[1] == 1, what="A's claim")
        other = failed_session(conn, "delete_user", 2)
        wait_until(lambda: state_of(conn, other) == "compensated", what="B's walk")
        wait_until(lambda: last_error(conn, hung) is not None, what="A's failed attempt")
        assert "did not return within 1.0 s" in (last_error(conn, hung) or "")
        assert "did not return within 1.0 s" in worker.stderr()
        assert worker.stop() == 0  # the abandoned thread does not hold the exit
    finally:
        worker.kill()
