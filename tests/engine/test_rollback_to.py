"""Undo to a point (undolog.rollback_to): a live session's latest calls are undone, last
first, through the undo walk of a failed session, and the session then goes on. Through
the binding (session.undo_to / undo_last, sync and async), as the agent's own login where
the database allows it, and racing the agent's next call on real concurrent connections."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    CompensationDescriptor,
    InvalidArgument,
    LateResult,
    NothingToUndo,
    PermissionDenied,
    SessionHalted,
    SessionNotActive,
    StepUndone,
    ToolTier,
    UndoLog,
    engine,
    saga,
    undolog_tool,
    walk,
)
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]
undone: list[str] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
def book(room: str) -> dict[str, Any]:
    return {"booking": room}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
async def abook(room: str) -> dict[str, Any]:
    return {"booking": room}


def _unbook(call: CompensationCall) -> None:
    undone.append(call.result["booking"])


def _app(dsn: str, client: type[UndoLog] | type[AsyncUndoLog] = UndoLog) -> Any:
    ul = client(dsn, walk_wait=5.0)
    ul.compensation("unbook")(_unbook)
    return ul


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()


def _history(conn: Conn, sid: uuid.UUID) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT from_state, to_state, detail FROM undolog.undolog_session_history"
        " WHERE session_id = %s ORDER BY history_id",
        (sid,),
    ).fetchall()


def _allow_agents(conn: Conn) -> None:
    db = conn.info.dbname
    conn.execute(f'ALTER DATABASE "{db}" SET undolog.agent_rollback_to = on')


def test_undo_to_undoes_the_latest_calls_and_the_session_goes_on(dsn: str, conn: Conn) -> None:
    ul = _app(dsn)
    with ul.session(agent="travel") as s:
        book("flight")
        book("hotel")
        book("car")
        assert s.undo_to(1, "the customer changed the dates") == "active"
        assert undone == ["car", "hotel"]
        book("train")  # step 3: the session goes on at a later step
    assert s.state == "completed"
    steps = conn.execute(
        "SELECT step_index, tool_name, state, args ->> 'room' FROM undolog.undolog_effect_log"
        " WHERE session_id = %s ORDER BY step_index",
        (s.session_id,),
    ).fetchall()
    assert steps == [
        (0, "book", "committed", "flight"),
        (1, "book", "compensated", "hotel"),
        (2, "book", "compensated", "car"),
        (3, "book", "committed", "train"),
    ]
    moves = [(f, t) for f, t, _ in _history(conn, s.session_id)]
    assert moves == [
        (None, "active"),
        ("active", "compensating"),
        ("compensating", "active"),
        ("active", "completed"),
    ]
    asked = _history(conn, s.session_id)[1][2]["rollback_to"]
    assert (asked["step"], asked["reason"], asked["login"]) == (
        1,
        "the customer changed the dates",
        conn.info.user,
    )
    action = conn.execute(
        "SELECT action, reason FROM undolog.undolog_operator_actions WHERE session_id = %s",
        (s.session_id,),
    ).fetchall()
    assert action == [("rollback_to", "step 1: the customer changed the dates")]


def test_a_rerun_of_the_session_replays_what_stands_and_refuses_an_undone_step(
    dsn: str, conn: Conn
) -> None:
    ul = _app(dsn)
    with ul.session(agent="travel") as s:
        book("flight")
        book("hotel")
        assert s.undo_last(1) == "active"
    assert undone == ["hotel"]
    with (
        pytest.raises(StepUndone, match=r"step 1 .* was undone by rollback_to"),
        ul.session(s.session_id),
    ):
        book("flight")  # replays
        book("hotel")  # was undone: refused, with what to do
    assert undone == ["hotel"]  # the session had completed: the refusal undoes nothing
    rows = conn.execute(
        "SELECT step_index, state FROM undolog.undolog_effect_log WHERE session_id = %s"
        " ORDER BY step_index",
        (s.session_id,),
    ).fetchall()
    assert rows[1] == (1, "compensated")


def test_undo_last_counts_calls_and_refuses_more_than_there_are(dsn: str) -> None:
    ul = _app(dsn)
    with ul.session() as s:
        book("a")
        book("b")
        book("c")
        with pytest.raises(NothingToUndo):
            s.undo_last(4)
        with pytest.raises(InvalidArgument):
            s.undo_last(0)
        assert s.undo_last(2) == "active"
        assert undone == ["c", "b"]
        with pytest.raises(NothingToUndo):
            s.undo_to(1)  # already undone


def test_async_session_undo_last(dsn: str) -> None:
    ul = _app(dsn, AsyncUndoLog)

    async def agent() -> str:
        async with ul.session() as s:
            await abook("x")
            await abook("y")
            assert await s.undo_last(1, "not y") == "active"
            await abook("z")
        return str(s.state)

    assert asyncio.run(agent()) == "completed"
    assert undone == ["y"]


def test_the_agents_own_login_needs_the_database_to_allow_it(
    agent_dsn: str, dsn: str, conn: Conn
) -> None:
    ul = _app(agent_dsn)
    with ul.session() as s:
        book("a")
        book("b")
        with pytest.raises(PermissionDenied, match="may not undo its own session"):
            s.undo_last(1)
        _allow_agents(conn)
        # An agent login may not run the walk itself: it asks, and the worker walks.
        assert s.undo_last(1, wait=0.0) == "compensating"
        with pytest.raises(SessionNotActive):
            book("c")  # refused while the walk runs (UL010)
        assert walk.work(conn, {"unbook": _unbook}) == {s.session_id: "active"}
        assert undone == ["b"]
        book("c")
    assert s.state == "completed"
    asked = _history(conn, s.session_id)[1][2]["rollback_to"]
    assert asked["by"] == asked["login"] != conn.info.user
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_operator_actions WHERE session_id = %s",
        (s.session_id,),
    ).fetchone() == (0,)


def test_a_login_that_is_an_approver_too_undoes_its_own_session_as_staff(
    dsn: str, conn: Conn
) -> None:
    """By design (docs/tutorials/undo-to-a-point.md: "An operator or approver may undo any
    session to a point"): a login holding undolog_approver beside undolog_agent undoes its
    own sessions where the database does not allow agents to, as staff, and the undo is
    recorded as a person's (an operator action, its login), not as the agent's own. Red
    team round 12 asked whether the approver's role was a way around
    undolog.agent_rollback_to; it is the staff's power, held by grant, and it shows."""
    name = f"both_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_agent, undolog_approver")
    try:
        ul = _app(psycopg.conninfo.make_conninfo(dsn, user=name))
        with ul.session() as s:
            book("a")
            book("b")
            # an approver runs no walk: it asks, and the worker walks
            assert s.undo_last(1, wait=0.0) == "compensating"
            assert walk.work(conn, {"unbook": _unbook}) == {s.session_id: "active"}
            book("c")
        assert undone == ["b"]
        asked = _history(conn, s.session_id)[1][2]["rollback_to"]
        assert asked["login"] == name
        assert conn.execute(
            "SELECT action FROM undolog.undolog_operator_actions WHERE session_id = %s",
            (s.session_id,),
        ).fetchall() == [("rollback_to",)]
    finally:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def test_an_irreversible_call_in_the_range_halts_the_walk(dsn: str, conn: Conn) -> None:
    sid = engine.begin_session(conn)
    for step, (tool, tier) in enumerate(
        [("book", "compensable"), ("wire", "irreversible"), ("book", "compensable")]
    ):
        args = {"room": f"r{step}"}
        comp = {"name": "unbook"} if tier == "compensable" else None
        got = engine.intercept(conn, sid, step, tool, tier, args, comp)
        if got.action == "await_approval":
            assert got.approval_id is not None
            with psycopg.connect(dsn, autocommit=True) as other:  # a person approves
                other.execute("SET SESSION AUTHORIZATION DEFAULT")
                other.execute("CREATE ROLE approver_x IN ROLE undolog_approver")
                other.execute("SET SESSION AUTHORIZATION approver_x")
                other.execute("SELECT undolog.approve(%s, 'ann')", (got.approval_id,))
                other.execute("RESET SESSION AUTHORIZATION")
                other.execute("DROP ROLE approver_x")
            got = engine.intercept(conn, sid, step, tool, tier, args, comp)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"booking": f"r{step}"})
    plan = saga.rollback_to_plan(conn, sid, 1)
    assert [(p.step_index, p.action) for p in plan] == [(2, "undo"), (1, "stop")]
    assert saga.rollback_to(conn, sid, 1, "undo the wire") == "compensating"
    assert walk.run_walk(conn, sid, {"unbook": _unbook}, wait=1.0) == "halted"
    assert undone == ["r2"]


# Races with the agent's next call, on real concurrent connections.


def _wait_until_blocked(observer: Conn, pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited on a lock")


def _in_thread(dsn: str, call: Any) -> tuple[list[object], threading.Thread, int]:
    other = psycopg.connect(dsn, autocommit=True)
    outcome: list[object] = []

    def run() -> None:
        with other:
            try:
                outcome.append(call(other))
            except Exception as exc:  # asserted by the test
                outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return outcome, thread, other.info.backend_pid


def _call(c: Conn, sid: uuid.UUID, step: int) -> engine.Interception:
    return engine.intercept(
        c, sid, step, "book", "compensable", {"room": f"r{step}"}, {"name": "unbook"}
    )


def test_a_call_in_flight_when_rollback_to_is_asked_is_undone_with_the_rest(
    dsn: str, conn: Conn
) -> None:
    sid = engine.begin_session(conn)
    for step in range(2):
        got = _call(conn, sid, step)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"booking": f"r{step}"})
    with psycopg.connect(dsn) as agent:  # the agent's next call, not committed yet
        assert _call(agent, sid, 2).action == "execute"
        outcome, thread, pid = _in_thread(
            dsn, lambda c: saga.rollback_to(c, sid, 1, "undo from step 1")
        )
        _wait_until_blocked(conn, pid)  # rollback_to waits for the call to be journaled
        agent.commit()
    thread.join(timeout=10)
    assert outcome == ["compensating"]
    claimed = saga.claim_compensation(conn, sid)
    assert claimed is not None and claimed.args == {"room": "r2"}  # the in-flight call first


def test_a_commit_after_the_partial_walk_took_the_call_is_late_and_says_why(
    conn: Conn,
) -> None:
    sid = engine.begin_session(conn)
    got = _call(conn, sid, 0)
    assert got.effect_id is not None
    assert saga.rollback_to(conn, sid, 0, "undo the call in flight") == "compensating"
    assert saga.claim_compensation(conn, sid) is not None  # the walk takes it
    with pytest.raises(LateResult) as late:
        engine.commit(conn, got.effect_id, {"booking": "r0"})
    # the lease did not lapse: the message must not say it did, and names rollback_to
    assert "rollback_to" in str(late.value)
    assert "lapsed while the agent was paused" not in str(late.value)


def test_undo_last_does_not_count_a_failed_call_at_the_top(dsn: str, conn: Conn) -> None:
    """A call that never took effect is no call to undo: "the last call" is the one
    below it, and the walk undoes it (it used to undo nothing and end active)."""
    sid = engine.begin_session(conn)
    for step in range(3):
        got = _call(conn, sid, step)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"booking": f"r{step}"})
    failed = _call(conn, sid, 3)
    assert failed.effect_id is not None
    engine.fail(conn, failed.effect_id, "the upstream refused it")
    assert [p.action for p in saga.rollback_to_plan(conn, sid, 0)] == [
        "skip",
        "undo",
        "undo",
        "undo",
    ]
    assert saga.rollback_last(conn, sid, 1, "the last call was wrong") == "compensating"
    assert walk.run_walk(conn, sid, {"unbook": _unbook}, wait=1.0) == "active"
    assert undone == ["r2"]
    with pytest.raises(NothingToUndo):  # three calls were left: r0, r1, and r2 is undone
        saga.rollback_last(conn, sid, 3, "more than there are")


def test_a_call_made_while_rollback_to_commits_is_refused_then_goes_on_after_the_walk(
    dsn: str, conn: Conn
) -> None:
    sid = engine.begin_session(conn)
    for step in range(2):
        got = _call(conn, sid, step)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"booking": f"r{step}"})
    with psycopg.connect(dsn) as person:
        assert saga.rollback_to(person, sid, 1, "undo step 1") == "compensating"
        outcome, thread, pid = _in_thread(dsn, lambda c: _call(c, sid, 2))
        _wait_until_blocked(conn, pid)  # the agent's call waits for the session
        person.commit()
    thread.join(timeout=10)
    [refused] = outcome
    assert isinstance(refused, SessionNotActive)  # UL010, as during any walk
    assert walk.run_walk(conn, sid, {"unbook": _unbook}, wait=1.0) == "active"
    assert undone == ["r1"]
    assert _call(conn, sid, 2).action == "execute"  # the session goes on


def test_many_agent_calls_racing_rollback_to_are_each_undone_or_refused(
    dsn: str, conn: Conn
) -> None:
    sid = engine.begin_session(conn)
    got = _call(conn, sid, 0)
    assert got.effect_id is not None
    engine.commit(conn, got.effect_id, {"booking": "r0"})
    start = threading.Barrier(5)
    results: dict[int, object] = {}

    def agent(step: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            start.wait()
            try:
                answer = _call(c, sid, step)
                assert answer.effect_id is not None
                engine.commit(c, answer.effect_id, {"booking": f"r{step}"})
                results[step] = "made"
            except Exception as exc:  # refused: asserted below
                results[step] = exc

    threads = [threading.Thread(target=agent, args=(step,)) for step in range(1, 5)]
    for t in threads:
        t.start()
    with psycopg.connect(dsn, autocommit=True) as person:
        start.wait()
        saga.rollback_to(person, sid, 0, "undo everything so far")
    for t in threads:
        t.join(timeout=10)
    state = walk.run_walk(conn, sid, {"unbook": _unbook}, wait=2.0)
    made = sorted(step for step, r in results.items() if r == "made")
    refused = [r for r in results.values() if r != "made"]
    # A call journaled before the rollback took the session is undone with the rest; one
    # after it is refused; none stands, and no body's result escaped the walk.
    assert all(isinstance(r, SessionNotActive | psycopg.Error) for r in refused), refused
    assert state == "active"
    standing = conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s"
        " AND state NOT IN ('compensated', 'pending')",
        (sid,),
    ).fetchone()
    assert standing == (0,), (made, refused)
    assert sorted(undone) == sorted(["r0", *[f"r{s}" for s in made]])


# A walk halted inside the session block: a compensation that cannot be undone halts an
# undo_to walk while the agent's block is still open. The block's heartbeat keeps the
# session's lease (recover() must not take a halted agent for a dead one, nor the session
# for abandoned once an operator resumes the walk and it goes on), and the block's exit
# reads the halt and says so.

LEASE = timedelta(seconds=1)


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("uncharge", max_attempts=1),
)
def charge(card: str) -> dict[str, Any]:
    return {"charge": card}


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("uncharge", max_attempts=1),
)
async def acharge(card: str) -> dict[str, Any]:
    return {"charge": card}


def _uncharge(call: CompensationCall) -> None:
    raise RuntimeError(f"the bank refuses to refund {call.result['charge']}")


def _halting_app(dsn: str, client: type[UndoLog] | type[AsyncUndoLog] = UndoLog) -> Any:
    ul = _app(dsn, client)
    ul.lease = LEASE
    ul.compensation("uncharge")(_uncharge)
    return ul


def _lease_left(conn: Conn, sid: uuid.UUID) -> tuple[str, float]:
    row = conn.execute(
        "SELECT state, extract(epoch FROM lease_expires_at - now())::float8"
        " FROM undolog.sessions_list WHERE session_id = %s",
        (sid,),
    ).fetchone()
    assert row is not None
    return str(row[0]), float(row[1])


def _past_the_lease_nothing_recovers_it(conn: Conn, sid: uuid.UUID, state: str) -> None:
    time.sleep(LEASE.total_seconds() * 3)
    assert sid not in saga.recover(conn)
    now, left = _lease_left(conn, sid)
    assert now == state and left > 0, (now, left)  # the heartbeat renewed it meanwhile


def test_a_halted_partial_walk_keeps_its_heartbeat_and_the_exit_raises_the_halt(
    dsn: str, conn: Conn
) -> None:
    ul = _halting_app(dsn)
    with (
        pytest.raises(SessionHalted, match="the bank refuses to refund visa") as raised,
        ul.session(agent="shop") as s,
    ):
        book("room")
        charge("visa")
        assert s.undo_to(0, "the customer cancelled") == "halted"
        _past_the_lease_nothing_recovers_it(conn, s.session_id, "halted")
    assert raised.value.session_id == s.session_id
    assert raised.value.halt_undo_id is not None
    assert s.state == "halted"
    assert undone == []  # the walk stopped at the charge, above the room


def test_a_partial_walk_resumed_while_the_block_is_open_goes_on_alive(dsn: str, conn: Conn) -> None:
    ul = _halting_app(dsn)
    with ul.session(agent="shop") as s:
        book("room")
        charge("visa")
        assert s.undo_to(0, "the customer cancelled") == "halted"
        _past_the_lease_nothing_recovers_it(conn, s.session_id, "halted")
        assert saga.resume_session(conn, s.session_id, "ops", "refunded by hand") == "compensating"
        assert walk.run_walk(conn, s.session_id, ul.compensations, wait=1.0) == "active"
        assert undone == ["room"]
        _past_the_lease_nothing_recovers_it(conn, s.session_id, "active")
        book("suite")  # the session goes on
    assert s.state == "completed"


def test_async_a_halted_partial_walk_keeps_its_heartbeat_and_the_exit_raises_the_halt(
    dsn: str, conn: Conn
) -> None:
    ul = _halting_app(dsn, AsyncUndoLog)

    async def agent() -> uuid.UUID:
        async with ul.session(agent="shop") as s:
            await abook("room")
            await acharge("visa")
            assert await s.undo_to(0, "the customer cancelled") == "halted"
            sid = s.session_id
            await asyncio.to_thread(_past_the_lease_nothing_recovers_it, conn, sid, "halted")
        raise AssertionError("the exit did not raise")

    with pytest.raises(SessionHalted, match="halted") as raised:
        asyncio.run(agent())
    assert raised.value.halt_undo_id is not None
    assert _lease_left(conn, raised.value.session_id)[0] == "halted"


def test_async_a_partial_walk_resumed_while_the_block_is_open_goes_on_alive(
    dsn: str, conn: Conn
) -> None:
    ul = _halting_app(dsn, AsyncUndoLog)

    def operator(sid: uuid.UUID) -> None:
        _past_the_lease_nothing_recovers_it(conn, sid, "halted")
        assert saga.resume_session(conn, sid, "ops", "refunded by hand") == "compensating"
        assert walk.run_walk(conn, sid, ul.compensations, wait=1.0) == "active"
        _past_the_lease_nothing_recovers_it(conn, sid, "active")

    async def agent() -> str:
        async with ul.session(agent="shop") as s:
            await abook("room")
            await acharge("visa")
            assert await s.undo_to(0, "the customer cancelled") == "halted"
            await asyncio.to_thread(operator, s.session_id)
            await abook("suite")
        return str(s.state)

    assert asyncio.run(agent()) == "completed"
    assert undone == ["room"]


def test_an_exception_leaving_a_halted_block_says_the_walk_halted(dsn: str) -> None:
    ul = _halting_app(dsn)
    with pytest.raises(SessionNotActive) as raised, ul.session() as s:
        charge("visa")
        assert s.undo_last(1) == "halted"
        book("room")  # refused: the session is halted
    assert not isinstance(raised.value, SessionHalted)  # the agent's own error leaves
    assert any("is halted: its undo_to walk stopped" in n for n in raised.value.__notes__)
    assert s.state == "halted"
