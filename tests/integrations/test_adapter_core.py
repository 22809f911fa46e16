"""The adapters' round trips (undolog.integrations._arun and its generated twin _run),
against a real PostgreSQL: the async reads raise the binding's errors, as the sync twin's
do."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from undolog import (
    AsyncUndoLog,
    CompensationCall,
    CompensationDescriptor,
    NotInSession,
    ToolTier,
    aapprovals,
    undolog_tool,
)
from undolog.errors import PermissionDenied
from undolog.integrations import _arun, _core, _run


def test_async_and_sync_reads_raise_the_same_undolog_error(
    dsn: str, login: Callable[..., psycopg.Connection[Any]]
) -> None:
    """A login with no engine role may read nothing: both twins say PermissionDenied (the
    binding's error, with what to do), not psycopg's InsufficientPrivilege."""
    nobody = login()
    name = nobody.info.user
    with pytest.raises(PermissionDenied):
        _run.approval_of_step(nobody, uuid.uuid4(), "payout", "call-1")

    async def read() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, user=name, autocommit=True) as c:
            with pytest.raises(PermissionDenied):
                await _arun.approval_of_step(c, uuid.uuid4(), "payout", "call-1")
            await aapprovals.approval_state(c, uuid.uuid4())  # what pydantic_ai reads

    with pytest.raises(PermissionDenied):
        asyncio.run(read())


async def _left_behind(ul: AsyncUndoLog, pool_reused: bool = False) -> BaseException | None:
    """A framework tool call pinned to its call id's step (``_core.pinned_step``), in a
    task the run's session block did not wait for, made once the block was left (the run
    raised): what the call raised. ``pool_reused``: by then the client's pooled
    connection serves another session."""

    @ul.compensation("undo")
    def undo(call: CompensationCall) -> None:  # pragma: no cover (never called)
        pass

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
    async def act(x: int) -> int:
        return x

    go = asyncio.Event()
    outcome: list[BaseException | None] = []

    async def framework_task() -> None:
        with _core.pinned_step("call_1"):
            await go.wait()
            try:
                await act(1)
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)

    with pytest.raises(RuntimeError):
        async with ul.session(uuid.uuid4()):
            task = asyncio.create_task(framework_task())
            await asyncio.sleep(0)  # the task is pinned in the run's session
            raise RuntimeError("the framework run failed; its other task goes on")
    if pool_reused:
        async with ul.session(uuid.uuid4()):
            go.set()
            await task
    else:
        go.set()
        await task
    return outcome[0]


def test_a_pinned_call_after_the_run_block_was_left_is_refused(dsn: str) -> None:
    """The pinned call sees the run's session with its own step counter; that the run's
    block was left is the run's to say: the call raises NotInSession and sends nothing
    (not psycopg's 'the connection is closed')."""
    got = asyncio.run(_left_behind(AsyncUndoLog(dsn)))
    assert isinstance(got, NotInSession), f"got {got!r}"


def test_a_pinned_call_after_the_run_block_was_left_never_reaches_a_pooled_session(
    dsn: str,
) -> None:
    """With a pool, the connection the run used serves another session by the time the
    call is made: NotInSession, and nothing of it is sent in that other session."""

    async def main() -> BaseException | None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False) as pool:
            return await _left_behind(AsyncUndoLog(pool=pool), pool_reused=True)

    got = asyncio.run(main())
    assert isinstance(got, NotInSession), f"got {got!r}"


def test_json_form_is_what_the_journal_signs() -> None:
    """A typed argument's JSON form (what an adapter journals and signs); a plain JSON
    value is itself (its signature unchanged); a set is sorted, so that its signature is
    the same in every process; what has no JSON form is left for the signature to refuse."""
    plain = {"a": [1, "x", None, True], "b": {"c": 1.5}}
    assert _core.json_form(plain) == plain
    assert _core.json_form(datetime.date(2025, 1, 2)) == "2025-01-02"
    assert _core.json_form(Decimal("12.50")) == "12.50"
    assert _core.json_form({"s": {"b", "c", "a"}}) == {"s": ["a", "b", "c"]}
    assert _core.json_form(frozenset({3, 1, 2})) == [1, 2, 3]
    unknown = object()
    assert _core.json_form(unknown) is unknown


def test_tool_differences_tell_a_changed_tool_from_a_changed_call() -> None:
    """A shown call whose named arguments are the journal's, completed otherwise by the
    tool's defaults as it is now, is told apart by the tool (a parameter added, removed,
    a default changed); an argument the call names that differs, another step, or a
    shown call in the journal's own form (nothing named) is not the tool's doing."""
    sid = uuid.uuid4()
    step = _core.step_for("c2")

    def shown(args: dict[str, Any], named: dict[str, Any] | None) -> _core.ShownCall:
        return _core.ShownCall(sid, "payout", "c2", args, named)

    journaled = (sid, step, "payout", {"cents": 500, "memo": "", "fee": 1})
    now = shown({"cents": 500, "currency": "EUR", "fee": 2}, {"cents": 500})
    assert _core.tool_differences(now, journaled) == [
        'it now takes currency (default "EUR"), which the journaled call does not have',
        'it no longer takes memo (journaled "")',
        "its default fee is 2, the journaled call's 1",
    ]
    assert (
        _core.tool_differences(shown({"cents": 5, "memo": "", "fee": 1}, {"cents": 5}), journaled)
        is None
    )
    assert _core.tool_differences(shown(now.args, None), journaled) is None
    other_step = (sid, _core.step_for("c3"), "payout", journaled[3])
    assert _core.tool_differences(now, other_step) is None
    same = shown({"cents": 500, "memo": "", "fee": 1}, {"cents": 500})
    assert _core.tool_differences(same, journaled) is None
