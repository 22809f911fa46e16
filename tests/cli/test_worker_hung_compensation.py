"""A synchronous compensation that never returns does not hold its worker
(docs/operations/worker.md, "A compensation that does not return"): the worker waits for
it until shortly before its claim expires, records the attempt as failed, leaves the call
in an abandoned thread whose outcome is never recorded, and serves the other sessions; at
``max_abandoned`` such threads it ends (WorkerStuck; `undolog worker` exits 75) for its
supervisor to restart it. A stopping worker gives a hung compensation up within seconds.

A real worker against a real database: Worker in this process where the test must hold
the compensation on a threading.Event, ``undolog worker`` as a subprocess for its option.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import saga
from undolog.saga import Claim
from undolog.walk import (
    CompensationCall,
    CompensationDeadline,
    Worker,
    WorkerStuck,
    run_walk,
)
from worker_support import (
    Conn,
    WorkerProcess,
    failed_session,
    run_in_thread,
    state_of,
    wait_until,
)

# A claim of 2 s: the worker gives a compensation some 1.8 s; retries are due 100 ms later.
FAST_CLAIMS = "-c undolog.claim_timeout=2s -c undolog.retry_base=100ms"
# The deadline the worker gives a compensation: a tenth of its 2 s claim before it
# expires, less what the claim took to reach the attempt (more on a loaded machine).
DEADLINE = re.compile(r"did not return within 1\.[5-8] s")


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
        assert DEADLINE.search(before[1][3] or ""), before
        assert DEADLINE.search(caplog.text)
    finally:
        release.set()
    wait_until(lambda: returned == [2, 1], what="attempt 1's late return")
    wait_until(lambda: "is not recorded" in caplog.text, what="the late return's log line")
    time.sleep(0.3)
    assert history(conn, hung) == before  # nothing recorded for the late return
    assert "stale claim" not in caplog.text


def test_at_max_abandoned_the_worker_ends_and_a_restart_halts_the_session(
    conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A compensation that always hangs (max_attempts 3), two abandoned threads allowed:
    attempts 1 and 2 are given up, and then the worker ends with WorkerStuck (a thread
    cannot be stopped: only a restart ends them) instead of claiming nothing for ever.
    A new worker (the restart) makes attempt 3, the last: the session halts."""
    release = threading.Event()
    calls: list[int] = []

    def hangs(call: CompensationCall) -> None:
        calls.append(call.attempt)
        release.wait()

    def worker() -> Worker:
        return Worker(
            lambda: psycopg.connect(dsn, autocommit=True, options=FAST_CLAIMS),
            {"hangs": hangs},
            interval=0.1,
            max_abandoned=2,
        )

    hung = failed_session(conn, "hangs", 1, max_attempts=3)
    caplog.set_level(logging.INFO, logger="undolog.walk")
    first = worker()
    restarted = worker()
    try:
        thread, raised = run_in_thread(first)
        thread.join(timeout=20)
        assert not thread.is_alive(), "the worker at its bound did not end"
        assert len(raised) == 1 and isinstance(raised[0], WorkerStuck), raised
        message = str(raised[0])
        assert "hangs" in message and "restart" in message, message
        assert str(hung) in message or "attempt 2" in message, message
        assert attempts(conn, hung) == ("pending", 2) and calls == [1, 2]
        # the restart: its own threads, none abandoned yet
        thread, raised = run_in_thread(restarted)
        wait_until(lambda: state_of(conn, hung) == "halted", what="the last attempt's halt")
        assert attempts(conn, hung) == ("compensation_failed", 3) and calls == [1, 2, 3]
        assert "did not return within" in (last_error(conn, hung) or "")
        time.sleep(0.3)
        assert thread.is_alive() and not raised  # one abandoned of two: it serves on
    finally:
        first.stop()
        restarted.stop()
        release.set()


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
    assert error.startswith("CompensationTimeout: ") and DEADLINE.search(error), error


def test_a_compensation_timeout_longer_than_the_claim_is_cut_to_the_claims_deadline(
    conn: Conn, serve: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """A compensation timeout of 60 s with a claim of 2 s: the attempt is given up at the
    claim's deadline (some 1.8 s), not at 60 s, and the log says once why. Waited for
    past its claim, the compensation ran beside the walker that took the claim over."""
    ran: list[tuple[int, float]] = []

    async def hangs(call: CompensationCall) -> None:
        ran.append((call.attempt, time.monotonic()))
        if call.attempt == 1:
            await asyncio.sleep(3600)

    caplog.set_level(logging.WARNING, logger="undolog.walk")
    hung = failed_session(conn, "hangs", 1)
    serve({"hangs": hangs}, compensation_timeout=60.0)
    wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry", timeout=15)
    assert [attempt for attempt, _ in ran] == [1, 2]
    error = history(conn, hung)[1][3] or ""
    assert DEADLINE.search(error), error
    assert ran[1][1] - ran[0][1] < 5, ran  # not 60 s
    assert caplog.text.count("is longer than what the claim has left") == 1, caplog.text


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
        assert DEADLINE.search(history(conn, hung)[1][3] or "")
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


ALWAYS_HANGS = """
import time
from undolog import UndoLog

ul = UndoLog()

@ul.compensation("hangs")
def hangs(call):
    time.sleep(3600)
"""


def test_undolog_worker_at_its_bound_exits_75_and_a_restart_halts_the_session(
    dsn: str, conn: Conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`undolog worker` with its 4 abandoned calls exits 75 (WorkerStuck: restart me),
    naming them; restarted, it makes the last attempt (the 5th) and the session halts."""
    (tmp_path / "agentapp.py").write_text(ALWAYS_HANGS)
    monkeypatch.setenv("PGOPTIONS", "-c undolog.retry_base=50ms")
    hung = failed_session(conn, "hangs", 1)
    worker = WorkerProcess(dsn, tmp_path, "--compensation-timeout", "0.3")
    try:
        assert worker.proc.wait(timeout=20) == 75
        assert attempts(conn, hung) == ("pending", 4)
        err = worker.stderr()
        assert "WorkerStuck" in err or "stuck" in err, err
        assert "hangs" in err and "restart" in err, err
    finally:
        worker.kill()
    restarted = WorkerProcess(dsn, tmp_path, "--compensation-timeout", "0.3")
    try:
        wait_until(lambda: state_of(conn, hung) == "halted", what="the 5th attempt's halt")
        assert attempts(conn, hung) == ("compensation_failed", 5)
        assert restarted.stop() == 0
    finally:
        restarted.kill()


def test_sigterm_gives_up_a_hung_compensation_at_once(dsn: str, conn: Conn, tmp_path: Path) -> None:
    """SIGTERM while a compensation hangs (the default deadline: some 295 s): the worker
    gives it up after STOP_GRACE (5 s), records its attempt as failed, and exits 0 within
    the grace and a margin, before a supervisor's kill (Docker's 10 s), leaving nothing
    claimed."""
    (tmp_path / "agentapp.py").write_text(APP)
    hung = failed_session(conn, "hangs", 1)
    worker = WorkerProcess(dsn, tmp_path)
    try:
        wait_until(lambda: attempts(conn, hung) == ("compensating", 1), what="A's claim")
        time.sleep(0.3)  # it runs
        started = time.monotonic()
        assert worker.stop(timeout=15) == 0
        took = time.monotonic() - started
        assert 4.5 < took < 7.5, took
        assert attempts(conn, hung) == ("pending", 1)
        error = last_error(conn, hung) or ""
        assert "stopped" in error, error
    finally:
        worker.kill()


SLOW = """
import time
from undolog import UndoLog

ul = UndoLog()

@ul.compensation("slow")
def slow(call):
    time.sleep(4)  # a compensation that works: a 4 s API call
"""


def test_sigterm_during_a_slow_compensation_that_works_lets_it_finish(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    """The review's case: a deploy restarts the worker (SIGTERM) while a 4 s compensation
    runs (max_attempts 2). Within STOP_GRACE it returns, and its success is recorded:
    restarts do not use its attempts nor halt its session."""
    (tmp_path / "agentapp.py").write_text(SLOW)
    sid = failed_session(conn, "slow", 1, max_attempts=2)
    worker = WorkerProcess(dsn, tmp_path)
    try:
        wait_until(lambda: attempts(conn, sid) == ("compensating", 1), what="the claim")
        time.sleep(0.5)
        assert worker.stop(timeout=15) == 0
        # the entry is done; the session is closed by the next claim (the restart's)
        assert attempts(conn, sid) == ("compensated", 1)
        assert [h[:3] for h in history(conn, sid)] == [
            ("pending", "compensating", 1),
            ("compensating", "compensated", 1),
        ], history(conn, sid)
    finally:
        worker.kill()
    restarted = WorkerProcess(dsn, tmp_path)
    try:
        wait_until(lambda: state_of(conn, sid) == "compensated", what="the restart's claim")
        assert restarted.stop(timeout=15) == 0
    finally:
        restarted.kill()


def test_an_async_compensation_that_ignores_cancellation_counts_as_abandoned(
    conn: Conn, serve: Callable[..., Worker]
) -> None:
    """Worker(loop=...): a task that swallows its cancellation goes on running on the
    loop: it is counted among the abandoned (max_abandoned), and its late end is not
    recorded."""
    release = threading.Event()
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()

    async def stubborn(call: CompensationCall) -> None:
        if call.attempt == 1:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):  # ignores it
                    await asyncio.sleep(0.05)

    try:
        hung = failed_session(conn, "stubborn", 1)
        worker = serve({"stubborn": stubborn}, loop=loop)
        wait_until(lambda: state_of(conn, hung) == "compensated", what="A's retry")
        assert worker.abandoned == 1
        before = history(conn, hung)
        release.set()
        wait_until(lambda: worker.abandoned == 0, what="the stubborn task's end")
        time.sleep(0.2)
        assert history(conn, hung) == before
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        running.join(5)
        loop.close()


def test_an_async_compensation_that_returns_at_its_deadline_is_a_success(
    conn: Conn, serve: Callable[..., Worker]
) -> None:
    """Worker(loop=...): a compensation whose task ends just past its deadline (here it
    blocks its loop, so its cancellation cannot be delivered) returned: its attempt is
    recorded as done, not failed."""
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()

    async def late(call: CompensationCall) -> None:
        time.sleep(0.6)  # blocks the loop past the 0.5 s deadline, then returns

    try:
        sid = failed_session(conn, "late", 1)
        serve({"late": late}, loop=loop, compensation_timeout=0.5)
        wait_until(lambda: state_of(conn, sid) == "compensated", what="the walk")
        assert [h[:3] for h in history(conn, sid)] == [
            ("pending", "compensating", 1),
            ("compensating", "compensated", 1),
        ], history(conn, sid)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(5)
        loop.close()


class _Hooked(CompensationDeadline):
    """The worker's deadline, with ``before`` run (on a real database) just before it
    reads how long the claim has left: a race made to happen."""

    def __init__(self, before: Callable[[Claim], None], timeout: float | None = None) -> None:
        super().__init__(timeout)
        self.before = before

    def seconds_for(self, conn: Any, session_id: uuid.UUID, claim: Claim) -> float | None:
        self.before(claim)
        return super().seconds_for(conn, session_id, claim)


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["claim_deadline", "compensation_timeout"])
def test_a_claim_taken_over_before_its_compensation_runs_is_not_run(
    conn: Conn,
    dsn: str,
    serve: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
    timeout: float | None,
) -> None:
    """The claim expires and another walker takes the entry (attempt 2) before this
    worker starts its compensation (a worker paused past its claim, SIGSTOP, and
    resumed): it does not run it (its claim is no longer its own), and says so. Also
    with --compensation-timeout, whose deadline is not the claim's: it ran the
    compensation beside the walker that took the entry over (red team, round 7)."""
    calls: list[int] = []
    sid = failed_session(conn, "noted", 1)
    other = psycopg.connect(dsn, autocommit=True)

    def taken_over(claim: Claim) -> None:
        if claim.attempt == 1:
            time.sleep(2.1)  # the 2 s claim expires
            taken = saga.claim_compensation(other, sid)
            assert taken is not None and taken.attempt == 2

    caplog.set_level(logging.INFO, logger="undolog.walk")
    try:
        worker = serve({"noted": lambda call: calls.append(call.attempt)})
        worker.deadline = _Hooked(taken_over, timeout)
        wait_until(lambda: "no longer this worker's" in caplog.text, what="the log line")
        time.sleep(0.3)
        assert calls == []
        assert attempts(conn, sid) == ("compensating", 2)
        assert "did not return" not in caplog.text
    finally:
        other.close()


def test_a_claim_expired_before_its_compensation_runs_is_claimed_again_first(
    conn: Conn, serve: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """The claim expires before this worker starts its compensation, and no walker took
    the entry yet (any may, at any moment): the worker does not run it on the expired
    claim (it ran it, some 0.5 s, while another walker could take the entry and run it
    too), but claims the entry again and runs it as attempt 2."""
    calls: list[int] = []
    sid = failed_session(conn, "noted", 1)

    def expired(claim: Claim) -> None:
        if claim.attempt == 1:
            time.sleep(2.1)  # the 2 s claim expires

    caplog.set_level(logging.INFO, logger="undolog.walk")
    worker = serve({"noted": lambda call: calls.append(call.attempt)})
    worker.deadline = _Hooked(expired)
    wait_until(lambda: state_of(conn, sid) == "compensated", what="the walk")
    assert calls == [2]
    assert "no longer this worker's" in caplog.text


def test_a_failure_to_read_the_claims_deadline_uses_no_attempt(
    conn: Conn, dsn: str, serve: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """The query for the claim's time left fails (a lock timeout here): the compensation
    never ran, so no attempt is recorded as failed; the entry is walked later."""
    calls: list[int] = []
    sid = failed_session(conn, "noted", 1)
    locker = psycopg.connect(dsn)
    walker: list[Any] = []

    def refused(claim: Claim) -> None:
        if claim.attempt == 1:
            locker.execute("LOCK TABLE undolog.undolog_undo_stack IN ACCESS EXCLUSIVE MODE")
            walker[0].execute("SET lock_timeout = '100ms'")

    def connect() -> Any:
        c = psycopg.connect(dsn, autocommit=True, options=FAST_CLAIMS)
        walker[:] = [c]
        return c

    class Released(_Hooked):
        def seconds_for(self, conn: Any, session_id: uuid.UUID, claim: Claim) -> float | None:
            try:
                return super().seconds_for(conn, session_id, claim)
            finally:
                locker.rollback()
                conn.execute("RESET lock_timeout")

    caplog.set_level(logging.INFO, logger="undolog.walk")
    try:
        worker = Worker(connect, {"noted": lambda call: calls.append(call.attempt)}, interval=0.1)
        worker.deadline = Released(refused)
        thread, raised = run_in_thread(worker)
        wait_until(lambda: state_of(conn, sid) == "compensated", what="the walk")
        assert calls == [2]
        # attempt 1 was never failed (its claim expired, and attempt 2 ran)
        assert ("compensating", "pending", 1) not in [h[:3] for h in history(conn, sid)]
        assert not any("lock" in (h[3] or "").lower() for h in history(conn, sid))
        worker.stop()
        thread.join(10)
        assert not raised
    finally:
        locker.close()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_while_reading_the_claims_deadline_records_the_attempt(
    conn: Conn, dsn: str, interrupt: type[BaseException]
) -> None:
    """Ctrl-C (or sys.exit from a signal handler) while the walker reads how long its
    claim has left: the attempt is recorded (the entry is due again after its backoff,
    not left claimed until claim_timeout), the compensation is not run, and the
    interrupt goes on up."""
    calls: list[int] = []
    sid = failed_session(conn, "noted", 1)

    def interrupted(claim: Claim) -> None:
        raise interrupt()

    with psycopg.connect(dsn, autocommit=True) as walker, pytest.raises(interrupt):
        run_walk(
            walker,
            sid,
            {"noted": lambda call: calls.append(call.attempt)},
            wait=0.0,
            deadline=_Hooked(interrupted),
        )
    assert calls == []
    assert attempts(conn, sid) == ("pending", 1)
    assert interrupt.__name__ in (last_error(conn, sid) or "")
