"""Sessions an agent login holds cost a worker's pass little. An agent holds its own
failed sessions as long as it keeps open a transaction that made one of their calls again
(a replay, answered from the journal, takes the session's key, shared), any number of
them in one transaction: each worker pass waited lock_session's 5 s for each (then
SessionBusy) before it walked another login's session. The worker's claim now waits
walk.CLAIM_WAIT, and leaves a held session for its next pass.

A real worker (walk.Worker in this process, a pass at a time) against a real database."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from undolog import approvals, engine, errors, saga, walk
from undolog.walk import Worker
from worker_support import Conn, failed_session, state_of


def _worker(dsn: str, delete_user: Callable[[Any], None]) -> Worker:
    """A worker in this process, walking one pass at a time when told (run(once=True))."""
    return Worker(
        lambda: psycopg.connect(dsn, autocommit=True), {"delete_user": delete_user}, notify=False
    )


def test_sessions_an_agent_holds_do_not_stall_a_pass_for_another_login(
    conn: Conn, dsn: str, login: Callable[..., Conn]
) -> None:
    agent = login("undolog_agent")
    held = [failed_session(agent, "delete_user", n) for n in range(4)]
    holder = psycopg.connect(dsn, user=str(agent.info.user))  # one transaction, left open
    for n, sid in enumerate(held):
        again = engine.intercept(
            holder, sid, 0, "create_user", "compensable", {"user": n}, {"name": "delete_user"}
        )
        assert again.action == "replay"
    victim = failed_session(conn, "delete_user", 7)
    undone: list[int] = []
    worker = _worker(dsn, lambda call: undone.append(call.result["user_id"]))
    try:
        started = time.monotonic()
        worker.run(once=True)
        took = time.monotonic() - started
        assert state_of(conn, victim) == "compensated" and undone == [7]
        assert took < 5, took  # 4 x 5 s before
        assert [state_of(conn, sid) for sid in held] == ["failed"] * 4
        holder.rollback()  # let go: walked by the next pass
        worker.run(once=True)
        assert [state_of(conn, sid) for sid in held] == ["compensated"] * 4
        assert sorted(undone) == [0, 1, 2, 3, 7]
    finally:
        holder.close()
        worker.stop()


def test_a_lock_the_claim_meets_after_the_session_is_a_held_session_not_an_error(
    conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim's short wait is its whole transaction's: past the session's lock, a wait
    for another lock (here the session's chain head, which the claim's history row moves;
    a month's drain, a migrate) also gives up after walk.CLAIM_WAIT. That session is held
    for this pass, as one whose key is held, not an error logged as a fault."""
    sid = failed_session(conn, "delete_user", 1)
    holder = psycopg.connect(dsn)  # the table's owner: a lock no agent could take
    holder.execute(
        "SELECT FROM undolog.undolog_chain_heads WHERE session_id = %s FOR UPDATE", (sid,)
    )
    undone: list[int] = []
    worker = _worker(dsn, lambda call: undone.append(call.result["user_id"]))
    try:
        with caplog.at_level(logging.INFO, logger="undolog"):
            worker.run(once=True)
        assert state_of(conn, sid) == "failed" and undone == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        assert "held" in caplog.text
        holder.rollback()
        worker.run(once=True)
        assert state_of(conn, sid) == "compensated" and undone == [1]
    finally:
        holder.close()
        worker.stop()


def test_a_report_waiting_for_a_row_another_transaction_holds_gives_up(
    conn: Conn, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that commits its own call while the walk holds it, in a transaction it
    leaves open, holds the effect's row (finish_execution locks it): the walk's report,
    which updates that row, waited for it for ever, and the worker with it. Each try now
    waits walk.REPORT_WAIT for a lock; given up, the walk of that session raises
    SessionBusy (the claim expires and is handed out again) and the worker goes on."""
    monkeypatch.setattr(walk, "REPORT_WAIT", 0.2)
    sid = failed_session(conn, "delete_user", 1)
    holders: list[psycopg.Connection[Any]] = []

    def compensate(call: Any) -> None:  # the row is taken while the compensation runs
        holder = psycopg.connect(dsn)
        holder.execute(
            "SELECT FROM undolog.undolog_effect_log WHERE session_id = %s FOR SHARE", (sid,)
        )
        holders.append(holder)

    worker = _worker(dsn, compensate)
    passed = threading.Thread(target=lambda: worker.run(once=True), daemon=True)
    try:
        passed.start()
        passed.join(30)
        assert not passed.is_alive(), "the worker's pass is still waiting for the report"
        assert len(holders) == 1 and state_of(conn, sid) == "compensating"
    finally:
        for holder in holders:
            holder.close()
        worker.stop()


def test_a_report_of_a_call_whose_decision_is_held_open_gives_up(
    login: Callable[..., Conn],
) -> None:
    """An agent's commit or fail of its IRREVERSIBLE call while an approver's decision on
    it is in a transaction left open waited for the call's row (finish_execution locks
    it) as long as that transaction stayed open: for ever, or, with a lock_timeout of the
    agent's, 55P03, a SQLSTATE the errors table does not name (the SQL API's fuzz, round
    9). It waits as long as lock_session would, then SessionBusy (UL030), nothing done."""
    agent, approver = login("undolog_agent"), login("undolog_approver")
    session = engine.begin_session(agent, agent="a")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None and call.effect_id is not None
    effect = call.effect_id
    reports: list[Callable[[], None]] = [
        lambda: engine.commit(agent, effect, {"sent": True}),
        lambda: engine.fail(agent, effect, "no"),
    ]
    approver.execute("BEGIN")
    try:
        approvals.approve(approver, call.approval_id, "alice")
        agent.execute("SET lock_timeout = '200ms'")  # lock_session's wait, shortened
        for report in reports:
            started = time.monotonic()
            with pytest.raises(errors.SessionBusy, match="held by a transaction") as raised:
                report()
            assert time.monotonic() - started < 2
            assert raised.value.hint and "Report the outcome again" in raised.value.hint
    finally:
        approver.execute("ROLLBACK")
    state = agent.execute(
        "SELECT state FROM undolog.undolog_effect_log WHERE effect_id = %s", (call.effect_id,)
    ).fetchone()
    assert state == ("pending",)  # the decision rolled back, the reports changed nothing


def test_a_commit_left_open_does_not_stall_the_sweep(dsn: str, login: Callable[..., Conn]) -> None:
    """An agent that commits one of its calls in a transaction it leaves open holds its
    session's chain head (the commit is a link of it), which the sweep did not try:
    fail_expired_sessions() (every worker pass's, recover()'s, for every login) waited for
    it, once the lease ran out, as long as the transaction stayed open (the SQL API's
    fuzz, round 9). The sweep now skips that session, as it skips a held one."""
    agent, operator = login("undolog_agent"), login("undolog_operator")
    lapsing = engine.begin_session(agent, agent="a", lease=timedelta(seconds=1))
    first = engine.intercept(agent, lapsing, 0, "send", "compensable", {}, {"name": "undo"})
    assert first.effect_id is not None
    holder = psycopg.connect(dsn, user=str(agent.info.user))  # one transaction, left open
    try:
        engine.commit(holder, first.effect_id, {"sent": 1})
        time.sleep(1.1)  # the lease runs out
        operator.execute("SET statement_timeout = '3s'")  # it waited for ever
        for sweep in ("fail_expired_sessions", "recover"):
            swept = operator.execute(f"SELECT * FROM undolog.{sweep}()").fetchall()
            assert swept == []  # skipped while held
    finally:
        holder.rollback()
        holder.close()
    swept = operator.execute("SELECT * FROM undolog.fail_expired_sessions()").fetchall()
    assert swept == [(lapsing,)]


def _gives_up(person: Conn, act: Callable[[], object]) -> None:
    """The person's move on a session the agent holds, its wait shortened to lock_session's
    own under the person's 300 ms lock_timeout: SessionBusy, saying what to do, and the
    caller's lock_timeout as it was."""
    person.execute("SET lock_timeout = '300ms'")  # lock_session's wait, shortened
    with pytest.raises(errors.SessionBusy, match="held by a transaction") as raised:
        act()
    assert raised.value.hint and "pg_terminate_backend" in raised.value.hint
    assert "Waited 00:00:00.3 for it" in str(raised.value)  # the DETAIL: the bound reached
    assert person.execute("SHOW lock_timeout").fetchone() == ("300ms",)  # the caller's own


@pytest.mark.parametrize("move", ["approve", "reject", "rollback"])
def test_a_persons_move_behind_a_commit_left_open_gives_up(
    dsn: str, login: Callable[..., Conn], move: str
) -> None:
    """An agent that commits one of its calls in a transaction it leaves open holds its
    session's chain head, which a decision's or a rollback's history rows link to: the
    person's approve, reject or rollback of that session waited for it as long as the
    transaction stayed open (roles.md promises the bounded wait, then UL030; the SQL
    API's fuzz, round 9). It waits as long as lock_session would (here the approver's own
    300 ms), then SessionBusy, nothing written; once the agent's transaction ends, the
    same move goes through."""
    agent, approver = login("undolog_agent"), login("undolog_approver")
    session = engine.begin_session(agent, agent="a")
    first = engine.intercept(agent, session, 0, "send", "compensable", {}, {"name": "undo"})
    asked = engine.intercept(agent, session, 1, "wire", "irreversible", {"cents": 5})
    assert first.effect_id is not None and asked.approval_id is not None
    approval = asked.approval_id

    def act() -> object:
        if move == "approve":
            return approvals.approve(approver, approval, "alice")
        if move == "reject":
            return approvals.reject(approver, approval, "alice", "no")
        return saga.rollback_session(approver, session, "alice", "wrong customer")

    before = _behind_a_commit_left_open(
        dsn, agent, first.effect_id, approver, session, act, late=False
    )
    requests = approver.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval,),
    ).fetchone()
    assert requests == ("pending",) and before[0] == "awaiting_approval"
    act()  # the agent's transaction ended: nothing holds the session
    assert state_of(approver, session) == ("active" if move == "approve" else "compensating")


def _written(conn: Conn, session: Any) -> tuple[Any, ...]:
    """What a move writes of a session: its state, resolution, operator actions, and its
    history chain's length (every history row is a link of it)."""
    row = conn.execute(
        "SELECT s.state, s.resolved_at, s.undo_floor,"
        " (SELECT count(*) FROM undolog.undolog_operator_actions AS o"
        "  WHERE o.session_id = s.session_id),"
        " (SELECT h.seq FROM undolog.undolog_chain_heads AS h"
        "  WHERE h.session_id = s.session_id)"
        " FROM undolog.undolog_sessions AS s WHERE s.session_id = %s",
        (session,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _behind_a_commit_left_open(
    dsn: str,
    agent: Conn,
    effect: Any,
    person: Conn,
    session: Any,
    act: Callable[[], object],
    late: bool = True,
) -> tuple[Any, ...]:
    """The agent commits its call ``effect`` in a transaction it leaves open (``late``: a
    call the walk took, its result recorded, not committed), which holds the session's
    chain head: the person's move on the session gives up (_gives_up) and writes nothing.
    The transaction then ends; answers what the session had (_written) all along."""
    before = _written(person, session)
    holder = psycopg.connect(dsn, user=str(agent.info.user))  # one transaction, left open
    try:
        if late:
            with pytest.raises(errors.LateResult):
                engine.commit(holder, effect, {"sent": 1})  # recorded, not committed
        else:
            engine.commit(holder, effect, {"sent": 1})
        _gives_up(person, act)
        assert _written(person, session) == before
    finally:
        holder.rollback()
        holder.close()
    return before


@pytest.mark.parametrize("move", ["rollback_to", "rollback_last"])
def test_a_partial_undo_behind_a_commit_left_open_gives_up(
    dsn: str, login: Callable[..., Conn], move: str
) -> None:
    """rollback_to and rollback_last (a person's or an agent's partial undo) move the
    session active -> compensating, a history row linked to the session's chain head: an
    agent's call committed in a transaction it keeps open holds that head, and the undo
    waited for it as long as the transaction stayed open (or 55P03 under the caller's own
    lock_timeout). It waits as long as lock_session would, then SessionBusy, nothing
    written; once the agent's transaction ends, the same move goes through."""
    agent, operator = login("undolog_agent"), login("undolog_operator")
    session = engine.begin_session(agent, agent="a")
    first = engine.intercept(agent, session, 0, "send", "compensable", {}, {"name": "undo"})
    second = engine.intercept(agent, session, 1, "send", "compensable", {}, {"name": "undo"})
    assert first.effect_id is not None and second.effect_id is not None
    engine.commit(agent, first.effect_id, {"sent": 0})

    def act() -> str:
        if move == "rollback_to":
            return saga.rollback_to(operator, session, 0, "wrong address", by="alice")
        return saga.rollback_last(operator, session, 2, "wrong address", by="alice")

    before = _behind_a_commit_left_open(
        dsn, agent, second.effect_id, operator, session, act, late=False
    )
    assert before[0] == "active"
    assert act() == "compensating"  # the agent's transaction ended: nothing holds it


@pytest.mark.parametrize("move", ["resume", "retry", "abandon"])
def test_an_operators_move_behind_a_late_commit_left_open_gives_up(
    conn: Conn, dsn: str, login: Callable[..., Conn], move: str
) -> None:
    """A halted session's chain head can be held by its agent: a commit of a call the walk
    already took (a late one, paused past its lease) records a late_commit row in the
    effect's history, and holds it (and the call's row) while the agent's transaction stays
    open. The operator's resume, retry and abandon, whose writes link to that head (retry
    also moves the call's row), waited for it as long as that stayed open. They wait as
    long as lock_session would, then SessionBusy, nothing written; once the agent's
    transaction ends, the same move goes through."""
    agent, operator = login("undolog_agent"), login("undolog_operator")
    session = engine.begin_session(agent, agent="a")
    call = engine.intercept(
        agent, session, 0, "send", "compensable", {}, {"name": "undo", "max_attempts": 1}
    )
    assert call.effect_id is not None  # executing: the agent never reports it, in time
    engine.fail_session(agent, session, "the agent gave up")
    claim = saga.claim_compensation(conn, session)
    assert claim is not None
    saga.fail_compensation(conn, claim.undo_id, "refused")
    assert state_of(conn, session) == "halted"

    def act() -> str:
        if move == "resume":
            return saga.resume_session(operator, session, "alice", "refunded by hand")
        if move == "retry":
            return saga.retry_compensation(operator, claim.undo_id, "alice", "fixed")
        return saga.abandon_session(operator, session, "alice", "refunded by hand")

    _behind_a_commit_left_open(dsn, agent, call.effect_id, operator, session, act)
    assert act() == ("halted" if move == "abandon" else "compensating")


def test_a_rollback_of_a_partial_walk_behind_a_late_commit_left_open_gives_up(
    conn: Conn, dsn: str, login: Callable[..., Conn]
) -> None:
    """rollback_session of a session in the partial walk of a rollback_to (the walk made
    whole) writes no history of the session's own but its operator action, a link of the
    chain too, which it wrote after setting the caller's lock_timeout back: an agent's late
    report of a call the walk took, in a transaction it keeps open, holds that head, and
    the rollback waited for it as long as that stayed open. Bounded, then SessionBusy."""
    agent, operator = login("undolog_agent"), login("undolog_operator")
    session = engine.begin_session(agent, agent="a")
    call = engine.intercept(agent, session, 0, "send", "compensable", {}, {"name": "undo"})
    assert call.effect_id is not None  # executing when the walk takes it
    assert saga.rollback_to(operator, session, 0, "wrong address", by="alice") == "compensating"
    assert saga.claim_compensation(conn, session) is not None

    def act() -> str:
        return saga.rollback_session(operator, session, "alice", "all of it")

    before = _behind_a_commit_left_open(dsn, agent, call.effect_id, operator, session, act)
    assert before[2] is not None  # a partial walk's floor
    assert act() == "compensating"
    assert _written(operator, session)[2] is None  # the whole walk now


@pytest.mark.parametrize("move", ["rollback_to", "approve"])
def test_a_persons_move_in_a_deadlock_with_its_agent_gives_up_as_held(
    conn: Conn, dsn: str, login: Callable[..., Conn], move: str
) -> None:
    """The agent's transaction that holds the session's chain head (a call committed in it)
    then waits for the session itself (a heartbeat, its next call), which the person's move
    holds while it waits for that head: PostgreSQL ends the deadlock after
    deadlock_timeout (1 s), and the person got a raw DeadlockDetected (40P01) naming the
    engine's internals, not SessionBusy. SessionBusy now, nothing written; the agent goes
    on."""
    agent, person = login("undolog_agent"), login("undolog_operator", "undolog_approver")
    session = engine.begin_session(agent, agent="a")
    first = engine.intercept(agent, session, 0, "send", "compensable", {}, {"name": "undo"})
    second = engine.intercept(agent, session, 1, "send", "compensable", {}, {"name": "undo"})
    assert first.effect_id is not None and second.effect_id is not None
    engine.commit(agent, first.effect_id, {"sent": 0})
    asked = None
    if move == "approve":
        asked = engine.intercept(agent, session, 2, "wire", "irreversible", {"cents": 5})
        assert asked.approval_id is not None
    before = _written(conn, session)
    raised: list[BaseException] = []

    def act() -> None:
        try:
            if asked is not None and asked.approval_id is not None:
                approvals.approve(person, asked.approval_id, "alice")
            else:
                saga.rollback_to(person, session, 0, "wrong address", by="alice")
        except BaseException as exc:  # looked at below
            raised.append(exc)

    holder = psycopg.connect(dsn, user=str(agent.info.user))  # one transaction, left open
    try:
        engine.commit(holder, second.effect_id, {"sent": 1})  # holds the chain head
        pid = person.info.backend_pid
        acting = threading.Thread(target=act)
        acting.start()
        deadline = time.monotonic() + 10
        waits = "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks WHERE pid = %s AND NOT granted)"
        while holder.execute(waits, (pid,)).fetchone() != (True,):  # the move waits for the head
            assert time.monotonic() < deadline, "the move never waited"
            time.sleep(0.01)
        engine.heartbeat(holder, session)  # waits for the session the move holds
        acting.join(10)
    finally:
        holder.rollback()
        holder.close()
    assert len(raised) == 1 and isinstance(raised[0], errors.SessionBusy), raised
    # The DETAIL says a deadlock ended the wait, not that it waited its bound (5 s).
    assert "A deadlock ended the wait" in str(raised[0]) and "Waited" not in str(raised[0])
    assert raised[0].hint and "pg_terminate_backend" in raised[0].hint
    assert _written(conn, session) == before
    assert before[0] == ("awaiting_approval" if asked else "active")


@pytest.mark.parametrize("move", ["call", "heartbeat"])
def test_an_agents_move_in_a_deadlock_with_its_own_other_transaction_is_held(
    conn: Conn, dsn: str, login: Callable[..., Conn], move: str
) -> None:
    """An agent's transaction that reported one of its calls, still open, holds the
    session's chain head; its other connection fails the session (lock_session, then the
    history row, which waits for that head); the first transaction's next call
    (lock_session_shared) or heartbeat (lock_session) then waits for the session: a
    deadlock. PostgreSQL ends the transaction whose deadlock_timeout runs out first in the
    cycle; when it was the first one's (it began waiting a deadlock_timeout after the
    other), the agent got a raw DeadlockDetected (40P01). SessionBusy now, saying to end
    this transaction; the other one goes on."""
    agent = login("undolog_agent")
    name = str(agent.info.user)
    conn.execute(f"ALTER ROLE {name} SET deadlock_timeout = '100ms'")  # its next logins'
    session = engine.begin_session(agent, agent="a")
    first = engine.intercept(agent, session, 0, "send", "compensable", {}, {"name": "undo"})
    assert first.effect_id is not None
    holder = psycopg.connect(dsn, user=name)  # one transaction, left open
    other = psycopg.connect(dsn, user=name, autocommit=True)
    failed: list[BaseException | str] = []

    def fail() -> None:
        try:
            failed.append(engine.fail_session(other, session, "the agent gave up"))
        except BaseException as exc:  # looked at below
            failed.append(exc)

    def act() -> object:
        if move == "heartbeat":
            return engine.heartbeat(holder, session)
        return engine.intercept(holder, session, 1, "send", "compensable", {}, {"name": "undo"})

    failing = threading.Thread(target=fail)
    try:
        engine.commit(holder, first.effect_id, {"sent": 1})  # holds the chain head
        failing.start()
        waits = "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks WHERE pid = %s AND NOT granted)"
        deadline = time.monotonic() + 10
        while conn.execute(waits, (other.info.backend_pid,)).fetchone() != (True,):
            assert time.monotonic() < deadline, "fail_session never waited"
            time.sleep(0.01)
        time.sleep(0.3)  # its deadlock check (100 ms) found no cycle: the move's finds it
        with pytest.raises(errors.SessionBusy, match="waits for this one") as raised:
            act()
        assert raised.value.hint and "Roll this transaction back" in raised.value.hint
        assert "A deadlock ended the wait" in str(raised.value)
        holder.rollback()
        failing.join(10)
    finally:
        holder.close()
        other.close()
    assert failed == ["failed"], failed  # the other transaction went on
