"""A journaled call's result (commit or fail) is sent without waiting for its answer;
the answer is read with the session's next statement. Every way that answer can go wrong
is raised, before the next journaled call's body runs or at the session's exit: a late
result, a result too large to journal, the connection lost in between. With
``durable_results=True`` the call itself waits for the answer and raises it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationDescriptor,
    InvalidStateTransition,
    LateResult,
    PayloadTooLarge,
    ResultNotJSON,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.integrations import _arun

BIG = 1024 * 1024 + 10  # characters: over the engine's payload limit (1 MiB of JSON)
ran: list[str] = []


def walk_takes_the_session(dsn: str, session_id: uuid.UUID) -> None:
    """What recovery does to an agent paused past its lease: the session fails and the
    walk claims its last call, so that call's result arrives late."""
    with psycopg.connect(dsn, autocommit=True) as other:
        engine.fail_session(other, session_id, "lease expired")
        other.execute("SELECT * FROM undolog.claim_compensation(%s)", (session_id,))


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def act(what: str, dsn: str = "", sid: str = "", big: int = 0) -> Any:
    ran.append(what)
    if what == "paused":
        walk_takes_the_session(dsn, uuid.UUID(sid))
    if what == "cut":  # the session's own backend goes away before the result is sent
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'unwaited-victim'"
            )
    return {"done": what} if not big else "x" * big


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def aact(what: str, dsn: str = "", sid: str = "", big: int = 0) -> Any:
    ran.append(what)
    if what == "paused":
        await asyncio.to_thread(walk_takes_the_session, dsn, uuid.UUID(sid))
    return {"done": what} if not big else "x" * big


def effects(dsn: str, sid: uuid.UUID) -> list[tuple[int, str]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT step_index, state FROM undolog.undolog_effect_log WHERE session_id = %s"
            " ORDER BY step_index",
            (sid,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()


def test_a_late_result_is_raised_before_the_next_call_runs(dsn: str) -> None:
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with (
        pytest.raises(LateResult, match="after the undo walk had taken the call"),
        ul.session(agent="t") as s,
    ):
        assert act("paused", dsn, str(s.session_id)) == {"done": "paused"}  # not waited
        act("next")
    assert ran == ["paused"]  # the next call's body never ran
    assert s.state in ("compensating", "compensated", "halted")


def test_a_late_result_is_raised_at_the_sessions_exit(dsn: str) -> None:
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(LateResult), ul.session(agent="t") as s:
        act("paused", dsn, str(s.session_id))
    assert ran == ["paused"]


def test_a_result_too_large_fails_the_session_and_the_next_call_does_not_run(dsn: str) -> None:
    ul = UndoLog(dsn)
    undone: list[Any] = []
    ul.compensation("undo")(lambda call: undone.append(call))
    with pytest.raises(PayloadTooLarge, match="over the limit"), ul.session(agent="t") as s:
        act("big", big=BIG)  # returns: its commit's answer is not read yet
        act("next")
    assert ran == ["big"]
    # The big call's outcome is unrecorded, so the walk compensated it; the next call was
    # journaled (in the same round trip) but never ran: recorded as failed, not undone.
    assert effects(dsn, s.session_id) == [(0, "compensated"), (1, "pending")]
    assert len(undone) == 1
    assert s.state == "compensated"


def test_a_result_too_large_is_raised_at_the_sessions_exit(dsn: str) -> None:
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(PayloadTooLarge), ul.session(agent="t") as s:
        act("big", big=BIG)
    assert effects(dsn, s.session_id) == [(0, "compensated")]


def test_an_error_leaving_the_block_carries_the_last_results_error(dsn: str) -> None:
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(KeyError) as caught, ul.session(agent="t"):
        act("big", big=BIG)
        raise KeyError("the agent's own error")
    assert any("PayloadTooLarge" in note for note in caught.value.__notes__)


def test_a_connection_lost_before_the_answer_is_raised_not_lost(dsn: str) -> None:
    victim = psycopg.conninfo.make_conninfo(dsn, application_name="unwaited-victim")
    ul = UndoLog(victim)
    with pytest.raises(psycopg.OperationalError) as caught, ul.session(agent="t") as s:
        act("cut", dsn)  # its result may or may not be sent; its answer never comes
        act("next")
    assert ran == ["cut"]
    text = str(caught.value) + " ".join(getattr(caught.value, "__notes__", []))
    assert "connection" in text.lower() or "terminat" in text.lower()
    # said once, by an error of its own raised from the connection's (not its own cause)
    err = caught.value
    assert err.__cause__ is not None and err.__cause__ is not err
    notes = getattr(err, "__notes__", [])
    assert sum("was lost with the connection" in note for note in notes) == 1, notes
    assert not any(note.startswith("and: ") for note in notes), notes
    # Nothing recorded the result: the call stays executing, outcome unknown, for
    # recovery to fail the session and the walk to compensate it.
    assert effects(dsn, s.session_id) == [(0, "executing")]


def test_durable_results_wait_and_raise_at_the_call(dsn: str) -> None:
    ul = UndoLog(dsn, durable_results=True)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(LateResult), ul.session(agent="t") as s:
        try:
            act("paused", dsn, str(s.session_id))
        except LateResult:
            ran.append("raised by the call itself")
            raise
    assert ran == ["paused", "raised by the call itself"]


def test_async_late_result_is_raised_before_the_next_call_runs(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)

    async def scenario() -> None:
        async with ul.session(agent="t") as s:
            assert await aact("paused", dsn, str(s.session_id)) == {"done": "paused"}
            await aact("next")

    with pytest.raises(LateResult):
        asyncio.run(scenario())
    assert ran == ["paused"]


def test_async_result_too_large_is_raised_at_the_sessions_exit(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    sid: list[uuid.UUID] = []

    async def scenario() -> None:
        async with ul.session(agent="t") as s:
            sid.append(s.session_id)
            await aact("big", big=BIG)

    with pytest.raises(PayloadTooLarge):
        asyncio.run(scenario())
    assert effects(dsn, sid[0]) == [(0, "compensated")]


def test_results_in_a_row_each_answered(dsn: str) -> None:
    """Many calls back to back: every result is committed, none waited for."""
    ul = UndoLog(dsn)
    with ul.session(agent="t") as s:
        for i in range(30):
            assert act(f"n{i}") == {"done": f"n{i}"}
    assert effects(dsn, s.session_id) == [(i, "committed") for i in range(30)]
    assert s.state == "completed"


def test_the_reference_example_runs_as_the_page_says(dsn: str) -> None:
    """docs/reference/python.md's example: the error raised by the next call, whose body
    does not run, and the session compensated."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "examples" / "unwaited_result.py")],
        env={**os.environ, "UNDOLOG_DSN": dsn, "PYTHONPATH": str(root / "python")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out == [
        "ran huge",
        "compensated {'name': 'huge'}",
        "raised: PayloadTooLarge",
        "session compensated",
    ], out


def test_calls_go_on_after_a_discard_all_dropped_the_prepared_statements(dsn: str) -> None:
    """A pool's reset (DISCARD ALL) drops the hot path's prepared statements: the next
    call prepares them again and runs once."""
    ul = UndoLog(dsn)
    with ul.session(agent="t") as s:
        act("one")
        conn = s.connection
        assert isinstance(conn, psycopg.Connection)
        engine.settle(conn)
        conn.execute("DISCARD ALL")
        act("two")
        act("three")
    assert ran == ["one", "two", "three"]
    assert effects(dsn, s.session_id) == [(0, "committed"), (1, "committed"), (2, "committed")]


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def pay(cents: int) -> int:
    ran.append("pay")
    return cents


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def apay(cents: int) -> int:
    ran.append("pay")
    return cents


def approvals(dsn: str, sid: uuid.UUID) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT state FROM undolog.undolog_approval_requests WHERE session_id = %s", (sid,)
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_a_result_too_large_then_an_irreversible_call_asks_nobody(dsn: str) -> None:
    """The unrecorded result's error is raised before the IRREVERSIBLE call's intercept
    is sent: no approval request is written (which would suspend the session, so that
    leaving the block could not fail it), the session fails and the walk compensates
    the unrecorded call, and nobody is asked about a payout of a doomed run."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(PayloadTooLarge), ul.session(agent="t") as s:
        act("big", big=BIG)
        pay(5)
    assert ran == ["big"]
    assert effects(dsn, s.session_id) == [(0, "compensated")]
    assert approvals(dsn, s.session_id) == []
    assert s.state == "compensated"


def test_async_result_too_large_then_an_irreversible_call_asks_nobody(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    sid: list[uuid.UUID] = []

    async def scenario() -> str:
        async with ul.session(agent="t") as s:
            sid.append(s.session_id)
            await aact("big", big=BIG)
            await apay(5)
        return s.state  # pragma: no cover

    with pytest.raises(PayloadTooLarge):
        asyncio.run(scenario())
    assert ran == ["big"]
    assert effects(dsn, sid[0]) == [(0, "compensated")]
    assert approvals(dsn, sid[0]) == []


def test_an_irreversible_call_after_a_recorded_result_is_asked(dsn: str) -> None:
    """The settling before an IRREVERSIBLE call raises only a refused result: a result
    the journal recorded leaves the call to be asked about as ever."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(AwaitingApprovalError), ul.session(agent="t") as s:
        act("small")
        pay(5)
    assert ran == ["small"]
    assert effects(dsn, s.session_id) == [(0, "committed"), (1, "pending")]
    assert approvals(dsn, s.session_id) == ["pending"]
    assert s.state == "awaiting_approval"


def test_a_refused_result_caught_then_the_payout_retried_asks_nobody(dsn: str) -> None:
    """The refused result's error is kept on the session once taken: an agent (or a
    framework's tool node) that catches it and calls the payout again gets it again,
    nothing sent, and the block's exit fails the session, also when every error was
    caught inside it."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(PayloadTooLarge) as left, ul.session(agent="t") as s:
        act("big", big=BIG)
        with pytest.raises(PayloadTooLarge) as first:
            pay(5)
        with pytest.raises(PayloadTooLarge) as again:
            pay(5)  # the agent retries the payout
        assert again.value is first.value
    assert left.value is first.value
    assert ran == ["big"]
    assert effects(dsn, s.session_id) == [(0, "compensated")]
    assert approvals(dsn, s.session_id) == []
    assert s.state == "compensated"


def test_async_refused_result_caught_then_the_payout_retried_asks_nobody(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    sid: list[uuid.UUID] = []
    retried: list[BaseException] = []

    async def scenario() -> None:
        async with ul.session(agent="t") as s:
            sid.append(s.session_id)
            await aact("big", big=BIG)
            for _ in range(2):  # the agent catches the error and retries the payout
                try:
                    await apay(5)
                except PayloadTooLarge as exc:
                    retried.append(exc)

    with pytest.raises(PayloadTooLarge):
        asyncio.run(scenario())
    assert len(retried) == 2 and retried[0] is retried[1]
    assert ran == ["big"]
    assert effects(dsn, sid[0]) == [(0, "compensated")]
    assert approvals(dsn, sid[0]) == []


def test_compensable_calls_after_a_caught_refused_result_go_on_and_are_undone(dsn: str) -> None:
    """The next journaled call raises the refused result's error and is recorded as
    failed (not run: "pending" in the log); a COMPENSABLE call after that, the error
    caught, runs as ever (the session can no longer complete: it is undone with the
    rest), and the exit raises the kept error again, failing the session."""
    ul = UndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    with pytest.raises(PayloadTooLarge), ul.session(agent="t") as s:
        act("big", big=BIG)
        with pytest.raises(PayloadTooLarge):
            act("next")
        act("after")
    assert ran == ["big", "after"]
    assert effects(dsn, s.session_id) == [(0, "compensated"), (1, "pending"), (2, "compensated")]
    assert approvals(dsn, s.session_id) == []
    assert s.state == "compensated"


def test_a_durable_refused_result_caught_then_a_payout_asks_nobody(dsn: str) -> None:
    """durable_results: the call raises its refused result itself and stays executing
    (outcome unknown); a payout after the caught error is not asked about either, and
    the session fails at the exit rather than wait for a person."""
    ul = UndoLog(dsn, durable_results=True)
    ul.compensation("undo")(lambda call: None)
    with (
        pytest.raises(InvalidStateTransition, match="outcome of act step 0"),
        ul.session(agent="t") as s,
    ):
        with pytest.raises(PayloadTooLarge):
            act("big", big=BIG)
        with pytest.raises(InvalidStateTransition, match="no IRREVERSIBLE call is asked"):
            pay(5)
    assert ran == ["big"]
    assert effects(dsn, s.session_id) == [(0, "compensated")]
    assert approvals(dsn, s.session_id) == []
    assert s.state == "compensated"


def test_a_framework_run_whose_tool_caught_a_refused_result_asks_nobody(dsn: str) -> None:
    """A framework's tool node catches the refused result's error (it reports it to the
    model), and the run then stops for a person: the kept error is raised before any
    held call's approval is requested, and the session fails."""
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    sid = uuid.uuid4()

    async def run() -> str:
        await aact("big", big=BIG)
        try:
            await aact("next")  # the tool node catches what this raises
        except PayloadTooLarge:
            ran.append("caught")
        return "stopped"

    with pytest.raises(PayloadTooLarge):
        asyncio.run(_arun.run_in_session(ul, sid, "t", run, lambda result: ["c2"]))
    assert ran == ["big", "caught"]
    assert effects(dsn, sid) == [(0, "compensated"), (1, "pending")]
    assert approvals(dsn, sid) == []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def aopaque(what: str) -> Any:
    ran.append(what)
    return object()  # JSON cannot carry it: the call's outcome is unknown


def test_a_framework_run_with_an_unknown_outcome_asks_nobody(dsn: str) -> None:
    """A tool node catches ResultNotJSON (the call left executing, outcome unknown), and
    the run stops for a person: the session can only fail, so no held call is asked."""
    ul = AsyncUndoLog(dsn)
    ul.compensation("undo")(lambda call: None)
    sid = uuid.uuid4()

    async def run() -> str:
        try:
            await aopaque("opaque")
        except ResultNotJSON:
            ran.append("caught")
        return "stopped"

    with pytest.raises(InvalidStateTransition, match="no IRREVERSIBLE call is asked"):
        asyncio.run(_arun.run_in_session(ul, sid, "t", run, lambda result: ["c2"]))
    assert ran == ["opaque", "caught"]
    assert effects(dsn, sid) == [(0, "compensated")]
    assert approvals(dsn, sid) == []
