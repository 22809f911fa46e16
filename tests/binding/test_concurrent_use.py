"""One session used by several tasks or threads at once, cancelled, or left while a call
of it still runs: nothing runs twice, nothing is lost, no error is raised in another
session than its own."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from test_unwaited_results import effects

from undolog import (
    AsyncUndoLog,
    CompensationDescriptor,
    InvalidStateTransition,
    NotInSession,
    PayloadTooLarge,
    ToolTier,
    UndoLog,
    aengine,
    engine,
    undolog_tool,
)

BIG = 1024 * 1024 + 10  # characters: over the engine's payload limit (1 MiB of JSON)
ran: list[str] = []
gate: dict[str, asyncio.Event] = {}
started, release = threading.Event(), threading.Event()


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def aact(what: str, pause: float = 0.0, big: int = 0) -> Any:
    ran.append(what)
    if what in gate:
        await gate[what].wait()
    await asyncio.sleep(pause)
    return {"done": what} if not big else "x" * big


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def act(what: str, big: int = 0) -> Any:
    ran.append(what)
    return {"done": what} if not big else "x" * big


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def blocked(what: str) -> Any:
    ran.append(what)
    started.set()
    assert release.wait(10)
    return {"done": what}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()
    gate.clear()
    started.clear()
    release.clear()


def test_async_calls_gathered_in_one_session_each_run_once(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)

    async def scenario() -> uuid.UUID:
        async with ul.session(agent="t") as s:
            got = await asyncio.gather(*(aact(f"n{i}", pause=0.001 * (i % 3)) for i in range(40)))
            assert got == [{"done": f"n{i}"} for i in range(40)]
        assert s.state == "completed"
        return s.session_id

    sid = asyncio.run(scenario())
    assert sorted(ran) == sorted(f"n{i}" for i in range(40))
    assert effects(dsn, sid) == [(i, "committed") for i in range(40)]


def test_sync_calls_from_threads_of_one_session_each_run_once(dsn: str) -> None:
    ul = UndoLog(dsn)
    with ul.session(agent="t") as s, concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(contextvars.copy_context().run, act, f"n{i}") for i in range(60)]
        assert sorted(f.result()["done"] for f in futures) == sorted(f"n{i}" for i in range(60))
    assert s.state == "completed"
    assert effects(dsn, s.session_id) == [(i, "committed") for i in range(60)]


def test_an_async_call_finishing_after_its_block_was_left_never_reaches_the_next_session(
    dsn: str,
) -> None:
    """A task the block did not wait for finishes its call after the block was left and
    its pooled connection went to the next session: its commit must not be sent there
    (its answer, a LateResult of the first session, was raised by the second)."""
    undone: list[Any] = []

    async def scenario() -> tuple[uuid.UUID, uuid.UUID]:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=1) as pool:
            ul = AsyncUndoLog(pool=pool)
            ul.compensation("undo")(lambda call: undone.append(call))
            gate["stray"] = asyncio.Event()
            with pytest.raises(InvalidStateTransition, match="still executing"):
                async with ul.session(agent="t") as first:
                    stray = asyncio.create_task(aact("stray"))
                    while "stray" not in ran:
                        await asyncio.sleep(0.01)
            assert first.state == "compensated"  # the call still executing: undone
            async with ul.session(agent="t") as second:
                await aact("a")
                gate["stray"].set()
                with pytest.raises(NotInSession, match="after its block was left"):
                    await stray
                await aact("b")
            assert second.state == "completed"
            return first.session_id, second.session_id

    first, second = asyncio.run(scenario())
    assert effects(dsn, first) == [(0, "compensated")]
    assert effects(dsn, second) == [(0, "committed"), (1, "committed")]
    assert len(undone) == 1


def test_a_sync_call_finishing_after_its_block_was_left_never_reaches_the_next_session(
    dsn: str,
) -> None:
    """The same with a thread the sync block did not wait for."""
    undone: list[Any] = []
    with ConnectionPool(dsn, min_size=1, max_size=1) as pool:
        ul = UndoLog(pool=pool)
        ul.compensation("undo")(lambda call: undone.append(call))
        with concurrent.futures.ThreadPoolExecutor(1) as threads:
            with (
                pytest.raises(InvalidStateTransition, match="still executing"),
                ul.session(agent="t") as first,
            ):
                stray = threads.submit(contextvars.copy_context().run, blocked, "stray")
                assert started.wait(10)
            assert first.state == "compensated"
            with ul.session(agent="t") as second:
                act("a")
                release.set()
                with pytest.raises(NotInSession, match="after its block was left"):
                    stray.result(10)
                act("b")
            assert second.state == "completed"
    assert effects(dsn, first.session_id) == [(0, "compensated")]
    assert effects(dsn, second.session_id) == [(0, "committed"), (1, "committed")]
    assert len(undone) == 1


def test_a_call_made_after_its_block_was_left_is_refused_and_takes_no_other_sessions_error(
    dsn: str,
) -> None:
    """A task created in the block makes its first call after the block was left, while
    its pooled connection serves the next session, whose last result was refused: the
    call is refused without sending anything, and the refusal stays the second
    session's (the stray call took it and raised it as its own)."""

    async def scenario() -> uuid.UUID:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=1) as pool:
            ul = AsyncUndoLog(pool=pool)
            ul.compensation("undo")(lambda call: None)
            gate["go"] = asyncio.Event()
            async with ul.session(agent="t") as first:
                later = asyncio.create_task(gate["go"].wait())
                late_call = asyncio.create_task(_after(later, aact("late")))
            assert first.state == "completed"
            with pytest.raises(PayloadTooLarge):
                async with ul.session(agent="t") as second:
                    await aact("big", big=BIG)  # its commit's answer: not read yet
                    gate["go"].set()
                    stray_error: BaseException | None = None
                    try:
                        await late_call
                    except BaseException as exc:  # whatever it is, it is checked below
                        stray_error = exc
                    assert isinstance(stray_error, NotInSession), repr(stray_error)
            return second.session_id

    assert effects(dsn, asyncio.run(scenario())) == [(0, "compensated")]
    assert ran == ["big"]


async def _after(first: asyncio.Task[Any], then: Any) -> Any:
    await first
    return await then


def test_an_earlier_results_error_is_raised_also_when_the_not_run_record_fails(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next call's intercept reads the last result's error, and its own call,
    journaled in the same round trip, is to be recorded as not run: when that record
    fails too (the connection lost, or, with several threads or tasks, another call's
    error read by that statement and raised in its place), the earlier error is still
    the one raised, not lost."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    real = engine.send_result

    def lost_on_not_run(conn: Any, what: str, *args: Any, wait: bool, **kw: Any) -> None:
        if what == "fail" and wait:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        real(conn, what, *args, wait=wait, **kw)

    monkeypatch.setattr(engine, "send_result", lost_on_not_run)
    with pytest.raises(PayloadTooLarge) as caught, ul.session(agent="t") as s:
        act("big", big=BIG)
        act("next")
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert ran == ["big"]
    assert s.state == "compensated"


def test_an_interrupt_while_recording_the_not_run_call_goes_on(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same record interrupted (Ctrl-C, a cancellation) rather than failed: the
    earlier error was raised in its place, so an agent catching Exception swallowed the
    interrupt. Now the interrupt goes on, the earlier error noted on it."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    real = engine.send_result

    def interrupted_on_not_run(conn: Any, what: str, *args: Any, wait: bool, **kw: Any) -> None:
        if what == "fail" and wait:
            raise KeyboardInterrupt
        real(conn, what, *args, wait=wait, **kw)

    monkeypatch.setattr(engine, "send_result", interrupted_on_not_run)
    with pytest.raises(KeyboardInterrupt) as caught, ul.session(agent="t"):
        act("big", big=BIG)
        act("next")
    assert any("PayloadTooLarge" in note for note in caught.value.__notes__), caught.value
    assert ran == ["big"]


def test_a_gathered_call_cancelled_mid_body_fails_the_session_and_is_undone(dsn: str) -> None:
    """One of the calls gathered in a session is cancelled (its timeout) while the others
    commit: its outcome is unknown, so the session fails and the walk undoes what ran."""
    undone: list[Any] = []
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: undone.append(call))

    async def expire_once_running(scope: asyncio.Timeout) -> None:
        # its timeout comes once its body runs (its intercept answered), not after a
        # fixed 50 ms, which a loaded machine can spend before the intercept is answered
        while "slow" not in ran:
            await asyncio.sleep(0.005)
        scope.reschedule(asyncio.get_running_loop().time())

    async def timed(i: int) -> Any:
        if i != 3:
            return await aact(f"n{i}", pause=0.01)
        async with asyncio.timeout(None) as scope:
            expiry = asyncio.create_task(expire_once_running(scope))
            try:
                return await aact("slow", pause=5)
            finally:
                expiry.cancel()

    async def scenario() -> uuid.UUID:
        sid: list[uuid.UUID] = []
        with pytest.raises(InvalidStateTransition):
            async with ul.session(agent="t") as s:
                sid.append(s.session_id)
                got = await asyncio.gather(*(timed(i) for i in range(8)), return_exceptions=True)
                assert isinstance(got[3], TimeoutError)
        assert s.state == "compensated"
        return sid[0]

    sid = asyncio.run(scenario())
    assert sorted(state for _, state in effects(dsn, sid)) == ["compensated"] * 8
    assert len(undone) == 8


def test_a_cancelled_intercept_is_cancelled_and_the_earlier_error_noted_at_the_exit(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next call's intercept cancelled (its task's timeout, an anyio scope) while the
    last result's error waits to be raised: that error was raised in place of the
    cancellation, so an agent catching Exception swallowed the cancellation. Now the
    cancellation goes on, and the session's exit notes the earlier error on it."""
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)

    async def cancelled(conn: Any, *args: Any, **kw: Any) -> Any:
        await aengine.settle(conn)  # the last result's answer read: its error kept
        raise asyncio.CancelledError  # then cancelled, waiting for its own answer

    async def scenario() -> tuple[BaseException, str]:
        try:
            async with ul.session(agent="t") as s:
                await aact("big", big=BIG)
                monkeypatch.setattr(aengine, "intercept_hot", cancelled)
                await aact("next")
        except BaseException as exc:
            monkeypatch.undo()
            return exc, s.state
        raise AssertionError("the session's block was not left by an error")

    exc, state = asyncio.run(scenario())
    assert isinstance(exc, asyncio.CancelledError), repr(exc)
    assert any("PayloadTooLarge" in n or "payload" in n.lower() for n in exc.__notes__), (
        exc.__notes__
    )
    assert state == "compensated"
