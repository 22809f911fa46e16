"""A journaled call left executing (its outcome unknown) must never let its session
complete, nor leave it active until its lease runs out: the block's end fails it, so that
the walk compensates the call at once, also when the agent caught the error that left the
call executing and carried on."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    CompensationCall,
    CompensationDescriptor,
    InvalidStateTransition,
    PayloadTooLarge,
    ResultNotJSON,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.context import current_session

Conn = psycopg.Connection[Any]
BIG = 1024 * 1024 + 10  # characters: over the engine's payload limit
undone: list[str] = []
busy: list[asyncio.Task[Any]] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def act(n: int, big: int = 0) -> Any:
    return "x" * big if big else n


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def quick_then_busy(n: int) -> int:
    """Returns at once, while a query of the agent's own holds the session's connection
    (as a heartbeat waiting for a locked session row does): its result waits to be sent."""
    conn = current_session().connection
    assert isinstance(conn, psycopg.AsyncConnection)
    busy.append(asyncio.create_task(conn.execute("SELECT pg_sleep(1.5)")))
    await asyncio.sleep(0.1)
    return n


def _register(ul: UndoLog | AsyncUndoLog) -> None:
    @ul.compensation("undo")
    def undo(call: CompensationCall) -> None:
        undone.append(f"{call.tool_name}{call.call_args}")


def _states(conn: Conn, sid: uuid.UUID) -> tuple[str, list[str]]:
    rows = conn.execute(
        "SELECT state FROM undolog.undolog_effect_log WHERE session_id = %s ORDER BY step_index",
        (sid,),
    ).fetchall()
    return engine.session_state(conn, sid), [r[0] for r in rows]


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()
    busy.clear()


def test_a_timeout_before_the_result_was_sent_fails_the_session(dsn: str, conn: Conn) -> None:
    """The agent's timeout fires after the body returned, while its result waits for the
    connection: the call is left executing; the agent catches the timeout and goes on."""
    ul = AsyncUndoLog(dsn)
    _register(ul)
    sid: list[uuid.UUID] = []

    async def agent() -> None:
        async with ul.session() as s:
            sid.append(s.session_id)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(quick_then_busy(1), 0.5)
            await busy[0]

    with pytest.raises(InvalidStateTransition, match="outcome of quick_then_busy step 0"):
        asyncio.run(agent())
    assert _states(conn, sid[0]) == ("compensated", ["compensated"])
    assert undone == ["quick_then_busy{'n': 1}"]


def test_a_durable_result_refused_and_caught_fails_the_session(dsn: str, conn: Conn) -> None:
    """durable_results: the commit's error is raised by the call; the agent catches it and
    goes on, but the call stayed executing."""
    ul = UndoLog(dsn, durable_results=True)
    _register(ul)
    with pytest.raises(InvalidStateTransition, match="outcome of act step 0"), ul.session() as s:
        with pytest.raises(PayloadTooLarge):
            act(0, big=BIG)
        act(1)
    assert _states(conn, s.session_id) == ("compensated", ["compensated", "compensated"])
    assert undone == ["act{'n': 1, 'big': 0}", "act{'n': 0, 'big': 1048586}"]


def test_a_call_left_executing_elsewhere_fails_the_session_at_its_end(dsn: str, conn: Conn) -> None:
    """Another run of the same session (an agent that crashed mid-call, resumed with a
    run that did not reach that step) left a call executing: the block's end does not
    leave the session active with it until its lease runs out."""
    ul = UndoLog(dsn)
    _register(ul)
    with (
        pytest.raises(InvalidStateTransition, match="still executing") as caught,
        ul.session() as s,
    ):
        act(0)
        with psycopg.connect(dsn, autocommit=True) as crashed:
            engine.intercept(
                crashed, s.session_id, 1, "act", "compensable", {"n": 9}, {"name": "undo"}
            )
    assert any("was not completed" in note for note in caught.value.__notes__)
    assert _states(conn, s.session_id) == ("compensated", ["compensated", "compensated"])
    assert s.state == "compensated"
    assert undone == ["act{'n': 9}", "act{'n': 0, 'big': 0}"]


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def nested(levels: int) -> Any:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def test_a_result_nested_too_deep_for_json_is_result_not_json(dsn: str, conn: Conn) -> None:
    """json.dumps gives out with RecursionError, not TypeError: the call's outcome is
    unknown all the same, said as ResultNotJSON."""
    ul = UndoLog(dsn)
    _register(ul)
    with (
        pytest.raises(InvalidStateTransition, match="cannot complete"),
        ul.session() as s,
        pytest.raises(ResultNotJSON, match="JSON cannot carry"),
    ):
        nested(100_000)
    assert _states(conn, s.session_id) == ("compensated", ["compensated"])
    assert undone == ["nested{'levels': 100000}"]


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def slow(n: int) -> int:
    await asyncio.sleep(5)
    return n


def test_a_session_cancelled_by_an_anyio_scope_is_failed_and_walked(dsn: str, conn: Conn) -> None:
    """An anyio cancel scope (the MCP SDK's, Starlette's) cancels every await inside it
    until it is left, the session's exit included: the exit still fails the session and
    walks it, instead of leaving it active until its lease runs out."""
    anyio = pytest.importorskip("anyio")
    ul = AsyncUndoLog(dsn)
    _register(ul)
    sid: list[uuid.UUID] = []

    async def agent() -> None:
        with anyio.move_on_after(0.5):
            async with ul.session() as s:
                sid.append(s.session_id)
                await slow(1)

    anyio.run(agent)
    assert _states(conn, sid[0]) == ("compensated", ["compensated"])
    assert undone == ["slow{'n': 1}"]


def test_an_exit_cancelled_while_it_completes_the_session_still_completes_it(
    dsn: str, conn: Conn
) -> None:
    """The block ended, and its exit waits to complete the session (another transaction
    holds the session's row) when an anyio cancel scope cancels it: the exit still
    completes the session, then the cancellation goes on, rather than leave the session
    active until its lease runs out and recovery undoes work that had finished."""
    anyio = pytest.importorskip("anyio")
    ul = AsyncUndoLog(dsn)
    sid: list[uuid.UUID] = []
    holder = psycopg.connect(dsn)  # its transaction holds the row until it rolls back
    release = threading.Timer(1.2, holder.rollback)

    async def agent() -> None:
        with anyio.move_on_after(0.5) as scope:
            async with ul.session() as s:
                sid.append(s.session_id)
                holder.execute(
                    "SELECT FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE",
                    (s.session_id,),
                )
                release.start()
            # the exit ran shielded: the scope's cancellation comes at the next await
            await anyio.sleep(0)
            raise AssertionError("not cancelled after the exit")  # pragma: no cover
        assert scope.cancelled_caught

    cpu = time.process_time()
    try:
        anyio.run(agent)
    finally:
        release.join()
        holder.close()
    assert engine.session_state(conn, sid[0]) == "completed"
    # the exit waited about 0.7 s for the row, without spinning on the scope's cancels
    # (unshielded, anyio cancels the waiting task at every turn of the loop)
    assert time.process_time() - cpu < 0.3


def test_a_cancellation_during_the_exit_is_not_lost_when_the_exit_raises() -> None:
    """The exit's work raised (a late result, a halted walk) while the task was being
    cancelled: the cancellation goes on, the work's error under it, rather than the
    error alone, which an agent may catch and carry on as if never cancelled."""
    from undolog import _acompat

    async def work() -> None:
        await asyncio.sleep(0.2)
        raise ValueError("the exit's own error")

    async def main() -> BaseException:
        task = asyncio.create_task(_acompat.uncancelled(work()))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except BaseException as exc:  # what it raised is the point
            return exc
        raise AssertionError("the exit returned")

    raised = asyncio.run(main())
    assert isinstance(raised, asyncio.CancelledError), raised
    assert isinstance(raised.__context__, ValueError)
