"""The approval gate end to end: decisions wake LISTENing connections, an approved call
executes exactly once, deadlines expire in real time, and each refusal has its exception.

Each actor has its own connection under its group role (SET ROLE, as the test database's
superuser may), so every call below also proves the role holds the grant it needs.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from undolog import AsyncUndoLog, aapprovals, approvals, engine
from undolog.approvals import CHANNEL
from undolog.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    InvalidArgument,
    PermissionDenied,
    TooManyPendingApprovals,
    UnknownApproval,
)

Conn = psycopg.Connection[Any]


def _connect(dsn: str, role: str | None) -> Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    if role is not None:
        conn.execute(f"SET ROLE {role}")
    return conn


@pytest.fixture
def agent(dsn: str) -> Iterator[Conn]:
    with _connect(dsn, "undolog_agent") as c:
        yield c


@pytest.fixture
def approver(dsn: str) -> Iterator[Conn]:
    with _connect(dsn, "undolog_approver") as c:
        yield c


@pytest.fixture
def operator(dsn: str) -> Iterator[Conn]:
    with _connect(dsn, "undolog_operator") as c:
        yield c


@pytest.fixture
def listener(dsn: str) -> Iterator[Conn]:
    """A connection LISTENing on the approvals channel (any role may LISTEN)."""
    with _connect(dsn, "undolog_agent") as c:
        c.execute(f"LISTEN {CHANNEL}")
        yield c


def _set_database_timeout(conn: Conn, value: str) -> None:
    """The deadline is the database's setting (a session-level SET is ignored)."""
    dbname = conn.info.dbname
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET undolog.approval_timeout = '{value}'")


def _gated_call(agent: Conn, tool: str = "drop_database") -> engine.Interception:
    session_id = engine.begin_session(agent, agent="test")
    answer = engine.intercept(agent, session_id, 0, tool, "irreversible", {"name": "prod"})
    assert answer.action == "await_approval"
    assert answer.approval_id is not None
    return answer


def _events(listener: Conn, count: int, timeout: float = 5.0) -> list[str]:
    """The payloads of the wake-ups received: always empty (a notification
    carries nothing another agent may not read; waiters re-read the tables)."""
    return [
        n.payload
        for n in listener.notifies(timeout=timeout, stop_after=count)
        if n.channel == CHANNEL
    ]


def _session_of(conn: Conn, approval_id: uuid.UUID) -> tuple[uuid.UUID, str]:
    row = conn.execute(
        "SELECT s.session_id, s.state FROM undolog.undolog_approval_requests AS a "
        "JOIN undolog.undolog_sessions AS s USING (session_id) WHERE a.approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_decision_wakes_a_listening_connection(
    agent: Conn, approver: Conn, listener: Conn
) -> None:
    answer = _gated_call(agent)
    assert answer.approval_id is not None and answer.effect_id is not None
    [requested] = _events(listener, 1)
    assert requested == ""  # a new request wakes approvers' dashboards, naming nothing

    assert approvals.approve(approver, answer.approval_id, "alice", "backup checked") == (
        "approved"
    )
    notices = list(listener.notifies(timeout=5.0, stop_after=1))
    assert len(notices) == 1
    assert notices[0].payload == ""  # a wake-up: the decision is read from the table
    assert approvals.approval_state(approver, answer.approval_id) == "approved"


def test_a_rejection_wakes_the_listener_and_sends_the_session_to_its_undo_walk(
    agent: Conn, approver: Conn, listener: Conn
) -> None:
    answer = _gated_call(agent, "wire_money")
    assert answer.approval_id is not None
    _events(listener, 1)
    assert approvals.reject(approver, answer.approval_id, "bob", "too much") == "rejected"
    assert _events(listener, 1) == [""]
    assert approvals.approval_state(approver, answer.approval_id) == "rejected"
    assert _session_of(approver, answer.approval_id)[1] == "compensating"
    again = engine.intercept(
        agent,
        _session_of(approver, answer.approval_id)[0],
        0,
        "wire_money",
        "irreversible",
        {"name": "prod"},
    )
    assert (again.action, again.state) == ("rejected", "rejected")


def test_nobody_is_woken_by_a_decision_that_rolled_back(
    agent: Conn, dsn: str, listener: Conn
) -> None:
    answer = _gated_call(agent)
    assert answer.approval_id is not None
    _events(listener, 1)
    with _connect(dsn, "undolog_approver") as approver:
        approver.autocommit = False
        approvals.approve(approver, answer.approval_id, "alice")
        approver.rollback()
        assert _events(listener, 1, timeout=0.5) == []
        approvals.approve(approver, answer.approval_id, "alice")
        assert _events(listener, 1, timeout=0.1) == []  # not yet committed
        approver.commit()
    assert _events(listener, 1) == [""]
    assert approvals.approval_state(agent, answer.approval_id) == "approved"


def test_approve_then_the_same_call_executes_exactly_once(agent: Conn, approver: Conn) -> None:
    session_id = engine.begin_session(agent)
    args = {"name": "prod"}
    first = engine.intercept(agent, session_id, 0, "drop_database", "irreversible", args)
    assert (first.action, first.state) == ("await_approval", "pending")
    assert first.approval_id is not None

    # Until a human decides, asking again does not run it.
    waiting = engine.intercept(agent, session_id, 0, "drop_database", "irreversible", args)
    assert (waiting.action, waiting.approval_id) == ("await_approval", first.approval_id)

    approvals.approve(approver, first.approval_id, "alice")
    assert approvals.approval_state(agent, first.approval_id) == "approved"

    run = engine.intercept(agent, session_id, 0, "drop_database", "irreversible", args)
    assert (run.action, run.effect_id) == ("execute", first.effect_id)
    busy = engine.intercept(agent, session_id, 0, "drop_database", "irreversible", args)
    assert busy.action == "in_progress"
    assert run.effect_id is not None
    engine.commit(agent, run.effect_id, {"dropped": True})
    replay = engine.intercept(agent, session_id, 0, "drop_database", "irreversible", args)
    assert (replay.action, replay.result_snapshot) == ("replay", {"dropped": True})

    transitions = agent.execute(
        # the whole life: the creation and the commit are recorded in the effect's row,
        # the rest as history rows; the timeline shows both in chain order
        "SELECT from_state, to_state FROM undolog.effect_timeline "
        "WHERE effect_id = %s AND event = 'transition' ORDER BY seq, at",
        (first.effect_id,),
    ).fetchall()
    assert transitions == [
        (None, "pending"),
        ("pending", "approved"),
        ("approved", "executing"),
        ("executing", "committed"),
    ]
    assert engine.complete_session(agent, session_id) == "completed"


def _waited_while_approved(
    agent: Conn, dsn: str, approval_id: uuid.UUID, poll_interval: float
) -> tuple[str | None, float]:
    """wait_for_decision while a person approves the request 0.3 s from now, on a
    connection of their own: the decision and the seconds the wait took."""

    def decide_later() -> None:
        time.sleep(0.3)
        with _connect(dsn, "undolog_approver") as approver:
            approvals.approve(approver, approval_id, "alice")

    started = time.monotonic()
    thread = threading.Thread(target=decide_later)
    thread.start()
    try:
        decision = approvals.wait_for_decision(
            agent, approval_id, timeout=10, poll_interval=poll_interval
        )
    finally:
        thread.join()
    return decision, time.monotonic() - started


def test_wait_for_decision_returns_when_a_human_decides(agent: Conn, dsn: str) -> None:
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None

    # poll_interval is long: only the notification can wake it this fast
    decision, waited = _waited_while_approved(agent, dsn, approval_id, poll_interval=30)
    assert decision == "approved"
    assert waited < 5
    # it cleaned up after itself
    assert list(agent.notifies(timeout=0.2)) == []


def test_past_the_notification_queue_limit_nothing_is_notified_and_nothing_fails(
    agent: Conn, conn: Conn, dsn: str, listener: Conn
) -> None:
    """PostgreSQL's notification queue is one for the cluster and any login may fill it;
    once full, every transaction that NOTIFYs fails at its commit. Past the database's
    undolog.notify_queue_percent of it, a request and its decision are not notified: both
    commit, no listener is woken, and a wait sees the decision by its poll. (0 counts
    the queue as full whatever its use: filling its 8 GB is not a test.)"""
    dbname = conn.info.dbname
    conn.execute(f'ALTER DATABASE "{dbname}" SET undolog.notify_queue_percent = 0')
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None
    assert _events(listener, 1, timeout=0.5) == []

    decision, waited = _waited_while_approved(agent, dsn, approval_id, poll_interval=1)
    assert decision == "approved"
    assert 1 <= waited < 5  # by the poll: no wake-up came
    assert _events(listener, 1, timeout=0.5) == []

    # below the limit (the default, 50), the next request wakes the listener again
    conn.execute(f'ALTER DATABASE "{dbname}" RESET undolog.notify_queue_percent')
    _gated_call(agent, "wire")  # the catalogue's value, read by each call
    assert _events(listener, 1) == [""]

    # a value that is not a percentage is refused with its name, and nothing is written
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET undolog.notify_queue_percent = 'half'")
    session_id = engine.begin_session(agent, agent="test")
    with pytest.raises(InvalidArgument, match=r"undolog\.notify_queue_percent"):
        engine.intercept(agent, session_id, 0, "wire", "irreversible", {"n": 2})
    assert engine.session_state(agent, session_id) == "active"
    assert agent.execute(
        "SELECT count(*) FROM undolog.undolog_approval_requests WHERE session_id = %s",
        (session_id,),
    ).fetchone() == (0,)


def test_wait_for_decision_times_out_or_answers_at_once(agent: Conn, approver: Conn) -> None:
    answer = _gated_call(agent)
    assert answer.approval_id is not None
    started = time.monotonic()
    assert (
        approvals.wait_for_decision(agent, answer.approval_id, timeout=0.3, poll_interval=0.1)
        is None
    )
    assert time.monotonic() - started < 3
    approvals.reject(approver, answer.approval_id, "bob")
    assert approvals.wait_for_decision(agent, answer.approval_id, timeout=5) == "rejected"
    with pytest.raises(UnknownApproval):
        approvals.wait_for_decision(agent, uuid.uuid4(), timeout=1)


def test_a_deadline_expires_in_real_time(
    agent: Conn, approver: Conn, operator: Conn, listener: Conn, conn: Conn
) -> None:
    _set_database_timeout(conn, "200 milliseconds")
    answer = _gated_call(agent)
    assert answer.approval_id is not None
    _events(listener, 1)
    time.sleep(0.4)

    with pytest.raises(ApprovalExpired, match="can no longer be approved"):
        approvals.approve(approver, answer.approval_id, "alice")
    assert approvals.approval_state(approver, answer.approval_id) == "pending"
    assert _events(listener, 1, timeout=0.3) == []

    assert approvals.expire_approvals(operator) == [answer.approval_id]
    assert approvals.expire_approvals(operator) == []
    assert _events(listener, 1) == [""]
    assert approvals.approval_state(approver, answer.approval_id) == "expired"
    assert _session_of(approver, answer.approval_id)[1] == "compensating"
    row = approver.execute(
        "SELECT decision, decided_by, effect_state FROM undolog.decided_approvals "
        "WHERE approval_id = %s",
        (answer.approval_id,),
    ).fetchone()
    assert row == ("expired", None, "rejected")


def test_a_transaction_opened_before_the_deadline_cannot_approve_after_it(
    agent: Conn, approver: Conn, conn: Conn
) -> None:
    # now() is when a transaction began: an approver who opened one before the deadline
    # must not approve after it. The deadline is checked against the clock, and the
    # decision's time is when it was made.
    _set_database_timeout(conn, "300 milliseconds")
    answer = _gated_call(agent)
    assert answer.approval_id is not None
    approver.autocommit = False
    approver.execute("SELECT 1")  # the transaction starts before the deadline
    time.sleep(0.5)
    with pytest.raises(ApprovalExpired, match="can no longer be approved"):
        approvals.approve(approver, answer.approval_id, "alice")
    approver.rollback()
    approver.autocommit = True
    assert approvals.approval_state(approver, answer.approval_id) == "pending"

    # Rejecting in such a transaction records the truth: expired, closed now.
    _set_database_timeout(conn, "1 hour")
    late = _gated_call(agent, "wire_money")
    assert late.approval_id is not None
    with approver.transaction():
        started = approver.execute("SELECT now()").fetchone()
        time.sleep(0.2)
        assert approvals.reject(approver, late.approval_id, "bob") == "rejected"
    row = approver.execute(
        "SELECT decided_at FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (late.approval_id,),
    ).fetchone()
    assert started is not None and row is not None
    assert row[0] > started[0]  # the decision's own time, not its transaction's start


def test_each_refusal_has_its_exception_and_writes_nothing(agent: Conn, approver: Conn) -> None:
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None

    with pytest.raises(UnknownApproval):
        approvals.approve(approver, uuid.uuid4(), "alice")
    with pytest.raises(InvalidArgument, match="decided_by"):
        approvals.approve(approver, approval_id, " \t\n")
    with pytest.raises(PermissionDenied):
        approvals.approve(agent, approval_id, "the agent itself")
    with pytest.raises(PermissionDenied):
        approvals.expire_approvals(approver)
    assert approvals.approval_state(approver, approval_id) == "pending"

    approvals.approve(approver, approval_id, "alice")
    with pytest.raises(ApprovalAlreadyDecided, match="already decided"):
        approvals.reject(approver, approval_id, "bob")
    assert approvals.approval_state(approver, approval_id) == "approved"


def test_a_login_asking_at_once_from_many_sessions_stops_at_its_bound(
    agent: Conn, conn: Conn, dsn: str
) -> None:
    """undolog.max_pending_approvals bounds a login's pending requests exactly, even when
    its sessions ask at the same moment on their own connections; the refused calls write
    nothing, and the binding raises TooManyPendingApprovals."""
    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.max_pending_approvals = 5')
    start = threading.Barrier(8)

    def ask(_: int) -> str:
        with _connect(dsn, "undolog_agent") as c:
            session_id = engine.begin_session(c, agent="flood")
            start.wait(timeout=10)
            try:
                engine.intercept(c, session_id, 0, "wire", "irreversible", {"n": 1})
            except TooManyPendingApprovals as exc:
                assert exc.sqlstate == "UL029"
                return "refused"
            return "asked"

    engine.register_tool(agent, "wire", "irreversible", None)
    threads: list[str] = []
    workers = [threading.Thread(target=lambda i=i: threads.append(ask(i))) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert sorted(threads) == ["asked"] * 5 + ["refused"] * 3
    pending, effects = agent.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_approval_requests WHERE state = 'pending'),"
        " (SELECT count(*) FROM undolog.undolog_effect_log)"
    ).fetchone() or (0, 0)
    assert (pending, effects) == (5, 5)


def test_a_refusal_that_ends_the_session_closes_its_other_request(
    agent: Conn, approver: Conn
) -> None:
    answer = _gated_call(agent)
    assert answer.approval_id is not None
    session_id, _ = _session_of(approver, answer.approval_id)
    # The waiting session takes a second IRREVERSIBLE call: it asks too.
    second = engine.intercept(agent, session_id, 1, "send_invoice", "irreversible", {"n": 1})
    assert second.action == "await_approval"
    assert second.approval_id not in (None, answer.approval_id)
    approvals.reject(approver, answer.approval_id, "bob", "not today")
    assert _session_of(approver, second.approval_id)[1] == "compensating"
    row = approver.execute(
        "SELECT state, decided_by, reason FROM undolog.undolog_approval_requests"
        " WHERE approval_id = %s",
        (second.approval_id,),
    ).fetchone()
    assert row is not None
    assert row[:2] == ("rejected", "bob")
    assert str(answer.approval_id) in row[2]
    with pytest.raises(ApprovalAlreadyDecided):
        approvals.approve(approver, second.approval_id, "alice")


def _wait_until_blocked(observer: Conn, pid: int, timeout: float = 5.0) -> None:
    """Wait until backend ``pid`` waits on a lock, so the race is really a race."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited on a lock")


def _race(
    dsn: str, observer: Conn, role: str, call: Any
) -> tuple[list[object], threading.Thread, int]:
    """Run ``call(conn)`` in a thread on a new connection under ``role``, and wait until it
    is blocked on a lock (held by the caller's open transaction). ``observer`` watches
    pg_stat_activity: it must be privileged (others' wait events are hidden from plain
    roles) and in autocommit (the view is a snapshot per transaction). Answers (outcome
    box, thread, pid)."""
    other = _connect(dsn, role)
    pid = other.info.backend_pid
    outcome: list[object] = []

    def run() -> None:
        with other:
            try:
                outcome.append(call(other))
            except Exception as exc:
                outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    _wait_until_blocked(observer, pid)
    return outcome, thread, pid


def test_two_racing_decisions_decide_once(agent: Conn, dsn: str, conn: Conn) -> None:
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None
    with _connect(dsn, "undolog_approver") as first:
        first.autocommit = False
        assert approvals.approve(first, approval_id, "alice") == "approved"
        outcome, thread, _ = _race(
            dsn, conn, "undolog_approver", lambda c: approvals.reject(c, approval_id, "bob")
        )
        first.commit()
        thread.join(timeout=10)
    [result] = outcome
    assert isinstance(result, ApprovalAlreadyDecided)
    assert approvals.approval_state(agent, approval_id) == "approved"


def test_a_sweep_racing_a_rejection_skips_what_the_human_decided(
    agent: Conn, dsn: str, conn: Conn
) -> None:
    _set_database_timeout(conn, "100 milliseconds")
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None
    time.sleep(0.2)
    with _connect(dsn, "undolog_approver") as human:
        human.autocommit = False
        assert approvals.reject(human, approval_id, "bob") == "expired"  # too late
        with _connect(dsn, "undolog_operator") as sweeper:
            started = time.monotonic()
            # the session is held by the human's decision: skipped at once, not waited for
            assert approvals.expire_approvals(sweeper) == []
            assert time.monotonic() - started < 2
        human.commit()
    with _connect(dsn, "undolog_operator") as sweeper:
        assert approvals.expire_approvals(sweeper) == []  # decided: not expired twice
    row = agent.execute(
        "SELECT state, decided_by FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row == ("expired", "bob")


def test_a_decision_racing_an_intercept_of_the_same_call_waits_instead_of_deadlocking(
    dsn: str, conn: Conn
) -> None:
    with _connect(dsn, "undolog_agent") as agent:
        answer = _gated_call(agent)
        approval_id = answer.approval_id
        assert approval_id is not None
        session_id, _ = _session_of(agent, approval_id)
        agent.autocommit = False
        # Asking again locks the session (FOR SHARE) and the effect (FOR UPDATE).
        again = engine.intercept(
            agent, session_id, 0, "drop_database", "irreversible", {"name": "prod"}
        )
        assert again.action == "await_approval"
        outcome, thread, _ = _race(
            dsn, conn, "undolog_approver", lambda c: approvals.approve(c, approval_id, "alice")
        )
        agent.commit()
        thread.join(timeout=10)
        assert outcome == ["approved"]
        agent.autocommit = True
        run = engine.intercept(
            agent, session_id, 0, "drop_database", "irreversible", {"name": "prod"}
        )
        assert run.action == "execute"


# --- the async twin (undolog.aapprovals, the source approvals.py is generated from) -----


def test_the_async_twin_decides_and_waits_on_an_async_connection(agent: Conn, dsn: str) -> None:
    """aapprovals on psycopg.AsyncConnection: the wait is woken by the decision's
    notification (the poll is 30 s), and the engine's refusals arrive translated."""
    answer = _gated_call(agent)
    approval_id = answer.approval_id
    assert approval_id is not None

    async def scenario() -> tuple[str | None, float]:
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as waiter,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as approver,
        ):
            await waiter.execute("SET ROLE undolog_agent")
            await approver.execute("SET ROLE undolog_approver")
            with pytest.raises(PermissionDenied):
                await aapprovals.approve(waiter, approval_id, "the agent itself")
            with pytest.raises(InvalidArgument, match="decided_by"):
                await aapprovals.reject(approver, approval_id, " ")
            assert await aapprovals.approval_state(approver, approval_id) == "pending"

            async def decide_later() -> str:
                await asyncio.sleep(0.3)
                return await aapprovals.approve(approver, approval_id, "alice", "checked")

            started = time.monotonic()
            decider = asyncio.create_task(decide_later())
            decision = await aapprovals.wait_for_decision(
                waiter, approval_id, timeout=10, poll_interval=30
            )
            assert await decider == "approved"
            with pytest.raises(ApprovalAlreadyDecided):
                await aapprovals.reject(approver, approval_id, "bob")
            with pytest.raises(UnknownApproval):
                await aapprovals.wait_for_decision(waiter, uuid.uuid4(), timeout=1)
            return decision, time.monotonic() - started

    decision, took = asyncio.run(scenario())
    assert decision == "approved"
    assert took < 5
    assert approvals.approval_state(agent, approval_id) == "approved"


def test_async_undolog_decides_through_the_async_twin(agent: Conn, dsn: str) -> None:
    """AsyncUndoLog.approve/reject/wait_for_decision run on the event loop (no thread)."""
    first, second = _gated_call(agent).approval_id, _gated_call(agent, "wire_money").approval_id
    assert first is not None and second is not None

    async def scenario() -> tuple[str | None, str, str, str | None]:
        ul = AsyncUndoLog(dsn)
        pending = await ul.wait_for_decision(first, timeout=0.2, poll_interval=0.1)
        approved = await ul.approve(first, "alice")
        rejected = await ul.reject(second, "bob", "too much")
        waited = await ul.wait_for_decision(second, timeout=2)
        return pending, approved, rejected, waited

    assert asyncio.run(scenario()) == (None, "approved", "rejected", "rejected")


# --- a wait woken by the caller's own LISTEN, with progress reports ----------------------


class _RelayedListener(aapprovals.Wakeup):
    """What a process that holds many waits keeps (the MCP proxy's one LISTEN): a task
    reading one LISTEN connection sets the wake-up of each wait; this one counts the
    wake-ups its wait took."""

    woken = 0

    async def relay(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for _ in conn.notifies():
            self.set()

    async def wait(self, timeout: float) -> bool:
        woken = await super().wait(timeout)
        self.woken += woken
        return woken


async def _as_agent(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET ROLE undolog_agent")


def test_a_caller_supplied_listener_wakes_a_wait_that_reads_on_a_pool(
    agent: Conn, dsn: str
) -> None:
    """The wait LISTENs on nothing of its own: a decision made from another connection
    reaches it through the caller's LISTEN (the poll is 30 s, so only the wake-up can end
    it this fast), each read takes a pool connection for that read only, and the
    progress callback is called from the start and then every 0.2 s."""
    approval_id = _gated_call(agent).approval_id
    assert approval_id is not None
    waited: list[float] = []

    async def on_progress(seconds: float) -> None:
        waited.append(seconds)

    async def scenario() -> tuple[str | None, float, int, list[str]]:
        wake = _RelayedListener()
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listening,
            AsyncConnectionPool(
                dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, configure=_as_agent
            ) as pool,
        ):
            await listening.execute(f"LISTEN {CHANNEL}")
            relay = asyncio.create_task(wake.relay(listening))

            async def decide_later() -> None:
                await asyncio.sleep(0.7)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                    await c.execute("SET ROLE undolog_approver")
                    await aapprovals.approve(c, approval_id, "alice")

            started = time.monotonic()
            decider = asyncio.create_task(decide_later())
            decision = await aapprovals.wait_for_decision(
                pool, approval_id, 10, 30, listener=wake,
                on_progress=on_progress, progress_every=0.2,
            )  # fmt: skip
            took = time.monotonic() - started
            await decider
            relay.cancel()
            async with pool.connection() as c:
                channels = await (await c.execute("SELECT pg_listening_channels()")).fetchall()
            return decision, took, wake.woken, [str(row[0]) for row in channels]

    decision, took, woken, channels = asyncio.run(scenario())
    assert decision == "approved"
    assert took < 5
    assert woken >= 1
    assert channels == []  # the pool's connection never listened
    assert len(waited) >= 3 and waited[0] < 0.1, waited
    assert all(b - a >= 0.15 for a, b in itertools.pairwise(waited)), waited


def test_a_wait_with_a_listener_answers_none_at_its_deadline(agent: Conn, dsn: str) -> None:
    """Nobody decides: the deadline answers None, the progress reported until then."""
    approval_id = _gated_call(agent).approval_id
    assert approval_id is not None
    waited: list[float] = []

    async def on_progress(seconds: float) -> None:
        waited.append(seconds)

    async def scenario() -> tuple[str | None, float]:
        wake = _RelayedListener()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as reader:
            await reader.execute("SET ROLE undolog_agent")
            started = time.monotonic()
            decision = await aapprovals.wait_for_decision(
                reader, approval_id, 0.6, 30, listener=wake,
                on_progress=on_progress, progress_every=0.25,
            )  # fmt: skip
            return decision, time.monotonic() - started

    decision, took = asyncio.run(scenario())
    assert decision is None
    assert 0.6 <= took < 3
    assert len(waited) == 3, waited  # at 0, 0.25 and 0.5 s
    with pytest.raises(ValueError, match="needs a listener"):
        asyncio.run(_wait_on_a_pool_alone(dsn, approval_id))


async def _wait_on_a_pool_alone(dsn: str, approval_id: uuid.UUID) -> str | None:
    async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
        return await aapprovals.wait_for_decision(pool, approval_id, 1)


def test_the_sync_wait_reports_its_progress_on_its_own_listen(agent: Conn) -> None:
    """The generated twin: on_progress is called (not awaited), the wait's own LISTEN."""
    approval_id = _gated_call(agent).approval_id
    assert approval_id is not None
    waited: list[float] = []
    decision = approvals.wait_for_decision(
        agent, approval_id, 0.5, 30, on_progress=waited.append, progress_every=0.2
    )
    assert decision is None
    assert len(waited) == 3, waited  # at 0, 0.2 and 0.4 s
    assert list(agent.notifies(timeout=0.2)) == []  # it cleaned up after itself


def test_a_wait_refuses_a_pause_that_is_not_positive(agent: Conn) -> None:
    """A zero poll or progress interval would read the state in a loop without pause: the
    wait refuses it before it reads anything."""
    approval_id = _gated_call(agent).approval_id
    assert approval_id is not None
    with pytest.raises(ValueError, match="must be positive"):
        approvals.wait_for_decision(agent, approval_id, 0.5, 0)
    with pytest.raises(ValueError, match="must be positive"):
        approvals.wait_for_decision(
            agent, approval_id, 0.5, 30, on_progress=lambda _: None, progress_every=0
        )
