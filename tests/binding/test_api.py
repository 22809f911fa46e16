"""The Python API's gaps a newcomer met: every name of __all__
imports; what ``with ul.session() as s`` yields; ``async with`` on an UndoLog; the
approval round trip with the session id and timedeltas; a crashed step that is still
executing is said at once and the caller chooses how long to wait; the quickstart used as
a worker's --app does not run its agent."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import undolog
from undolog import (
    ActiveSession,
    AsyncUndoLog,
    AwaitingApprovalError,
    CallInProgress,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    approvals,
    engine,
    undolog_tool,
)

Conn = psycopg.Connection[Any]
booked: list[int] = []
paid: list[int] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
async def book_async(n: int) -> dict[str, int]:
    booked.append(n)
    return {"n": n}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
def book(n: int) -> dict[str, int]:
    booked.append(n)
    return {"n": n}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def pay(cents: int) -> dict[str, int]:
    paid.append(cents)
    return {"paid": cents}


@pytest.fixture(autouse=True)
def _fresh_ledgers() -> None:
    booked.clear()
    paid.clear()


def test_every_name_in_all_imports_and_star_import_works() -> None:
    assert [name for name in undolog.__all__ if not hasattr(undolog, name)] == []
    namespace: dict[str, Any] = {}
    exec("from undolog import *", namespace)
    assert set(undolog.__all__) <= set(namespace)
    # the engine raises these (UL014, UL015): they are part of the API
    assert namespace["ApprovalAlreadyDecided"].sqlstate == "UL014"
    assert namespace["ApprovalExpired"].sqlstate == "UL015"


def with_undo_registry(ul: UndoLog) -> list[int]:
    undone: list[int] = []

    @ul.compensation("unbook")
    async def unbook(call: CompensationCall) -> None:
        undone.append(call.call_args["n"])

    return undone


def test_the_session_object_says_its_id_and_state(dsn: str) -> None:
    ul = UndoLog(dsn)
    undone = with_undo_registry(ul)
    with ul.session(agent="typed") as s:
        assert isinstance(s, ActiveSession) and isinstance(s.session_id, uuid.UUID)
        assert s.state == "active"
        book(1)
    assert s.state == "completed"
    with pytest.raises(RuntimeError), ul.session(agent="typed") as failed:
        book(2)
        raise RuntimeError("changed its mind")
    assert failed.state == "compensated" and undone == [2]
    assert ActiveSession.__doc__ and "session_id" in ActiveSession.__doc__


def test_async_with_on_an_undolog(dsn: str) -> None:
    ul = UndoLog(dsn)  # not AsyncUndoLog: the same client serves async tools
    undone = with_undo_registry(ul)

    async def agent() -> tuple[ActiveSession, ActiveSession]:
        async with ul.session(agent="async-on-sync") as done:
            assert (await book_async(1)) == {"n": 1}
        try:
            async with ul.session(agent="async-on-sync") as failed:
                await book_async(2)
                raise RuntimeError("changed its mind")
        except RuntimeError:
            pass
        return done, failed

    done, failed = asyncio.run(agent())
    assert (done.state, failed.state) == ("completed", "compensated")
    assert booked == [1, 2] and undone == [2]
    with ul.session(agent="sync-again") as again:  # and `with` still works on it
        book(3)
    assert again.state == "completed"


def test_async_with_on_an_undolog_over_a_sync_pool_says_what_to_use(dsn: str) -> None:
    ul = UndoLog(pool=ConnectionPool(dsn, open=False))

    async def agent() -> None:
        async with ul.session():
            pass

    with pytest.raises(TypeError, match="AsyncUndoLog"):
        asyncio.run(agent())


def test_the_approval_round_trip_with_the_session_id_and_timedeltas(
    agent_dsn: str, conn: Conn
) -> None:
    ul = UndoLog(agent_dsn)
    with pytest.raises(AwaitingApprovalError) as waiting, ul.session(agent="payer") as s:
        pay(500)
    err = waiting.value
    assert err.session_id == s.session_id and s.state == "awaiting_approval"
    assert paid == []
    started = time.monotonic()
    assert ul.wait_for_decision(err.approval_id, timeout=timedelta(milliseconds=300)) is None
    assert 0.25 < time.monotonic() - started < 5
    decide = threading.Timer(0.3, approvals.approve, (conn, err.approval_id, "alice"))
    decide.start()
    decision = ul.wait_for_decision(err.approval_id, timeout=timedelta(seconds=20))
    decide.join()
    assert decision == "approved"
    with ul.session(err.session_id, agent="payer") as resumed:
        assert pay(500) == {"paid": 500}
    assert paid == [500] and resumed.state == "completed"
    with pytest.raises(TypeError):
        ul.wait_for_decision(err.approval_id, timeout="soon")  # type: ignore[arg-type]


def crashed_step(conn: Conn, sid: uuid.UUID) -> uuid.UUID:
    """An earlier run of the agent journaled book(1) as step 0 and died in its body."""
    engine.begin_session(conn, sid, agent="crashy")
    hit = engine.intercept(conn, sid, 0, "book", "compensable", {"n": 1}, {"name": "unbook"})
    assert hit.action == "execute" and hit.effect_id is not None
    return hit.effect_id


def test_a_crashed_step_still_executing_is_said_at_once_and_can_fail_now(
    dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    sid = uuid.uuid4()
    crashed_step(conn, sid)
    ul = UndoLog(dsn)
    undone = with_undo_registry(ul)
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="undolog"),
        pytest.raises(CallInProgress) as stuck,
        ul.session(sid, agent="crashy", in_progress_wait=0) as s,
    ):
        book(1)
    assert time.monotonic() - started < 5  # not 30 s of silence
    assert "journaled as executing" in caplog.text and "in_progress_wait=0" in caplog.text
    assert (stuck.value.session_id, stuck.value.step_index) == (sid, 0)
    assert stuck.value.tool_name == "book"
    # leaving with it failed the session; the walk compensated the call that may have acted
    assert s.state == "compensated" and undone == [1] and booked == []


def test_a_shorter_wait_then_call_in_progress(dsn: str, conn: Conn) -> None:
    sid = uuid.uuid4()
    crashed_step(conn, sid)
    ul = UndoLog(dsn, in_progress_wait=timedelta(milliseconds=400))
    with_undo_registry(ul)
    started = time.monotonic()
    with pytest.raises(CallInProgress), ul.session(sid, agent="crashy"):
        book(1)
    assert 0.35 < time.monotonic() - started < 5


def test_a_call_that_finishes_while_waited_for_replays(dsn: str, conn: Conn) -> None:
    sid = uuid.uuid4()
    effect = crashed_step(conn, sid)
    ul = UndoLog(dsn)
    finish = threading.Timer(0.3, engine.commit, (conn, effect, {"n": 1}))
    finish.start()
    with ul.session(sid, agent="slow-elsewhere", in_progress_wait=10) as s:
        assert book(1) == {"n": 1}
    finish.join()
    assert booked == [] and s.state == "completed"  # the body ran once, elsewhere


def test_the_quickstart_as_a_workers_app_does_not_run_the_agent(dsn: str) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    out = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "worker", "--app", "quickstart:ul", "--once"],
        cwd=examples,
        env={**os.environ, "UNDOLOG_DSN": dsn},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "top result" not in out.stdout and out.stdout == ""
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM undolog.undolog_sessions").fetchone() == (0,)


def test_the_approval_round_trip_example_runs(
    agent_dsn: str, conn: Conn, run_asking_example: Callable[..., tuple[list[str], list[str]]]
) -> None:
    _, rest = run_asking_example(
        "approval_round_trip.py",
        agent_dsn,
        lambda approval: approvals.approve(conn, approval, "alice", "checked"),
    )
    assert rest[1:] == ["paid 5000 cents to user 42", "session completed"], rest


def test_in_progress_wait_on_an_async_session(dsn: str, conn: Conn) -> None:
    sid = uuid.uuid4()
    engine.begin_session(conn, sid, agent="crashy")
    hit = engine.intercept(conn, sid, 0, "book_async", "compensable", {"n": 4}, {"name": "unbook"})
    assert hit.action == "execute"
    ul = AsyncUndoLog(dsn, in_progress_wait=0)
    undone: list[int] = []

    @ul.compensation("unbook")
    def unbook(call: CompensationCall) -> None:
        undone.append(call.call_args["n"])

    async def agent() -> ActiveSession:
        async with ul.session(sid, agent="crashy") as s:
            await book_async(4)
        return s  # pragma: no cover (the call above raises)

    started = time.monotonic()
    with pytest.raises(CallInProgress):
        asyncio.run(agent())
    assert time.monotonic() - started < 5 and undone == [4] and booked == []


def test_an_engine_error_says_what_to_do_next_as_its_hint_and_a_note(conn: Conn) -> None:
    """The engine's HINT (every error it raises has one) reaches the agent author: the
    exception's ``hint``, and a note that its traceback shows under the message."""
    sid = engine.begin_session(conn)
    engine.complete_session(conn, sid)
    with pytest.raises(undolog.SessionNotActive) as caught:
        engine.intercept(conn, sid, 0, "pay", "irreversible", {"cents": 1})
    err = caught.value
    assert err.hint is not None and err.hint.startswith("Begin a new session"), err.hint
    assert err.__notes__ == [f"hint: {err.hint}"]
    assert "hint: Begin a new session" in "".join(traceback.format_exception(err))
