"""A hostile login's probes that broke the engine, each as a test that failed before its
fix: self-approval through another agent's session, compressed payloads past the limit,
notifications naming other agents' sessions, an advisory lock any login could hold to
stop maintenance, and blank-looking names, reasons and nesting past the limit
(docs/design/roles.md: every login may be an adversary of every other)."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from undolog import approvals, chain, engine, errors, saga
from undolog.migrations import MIGRATE_LOCK_KEY

Conn = psycopg.Connection[Any]
UNDO = {"name": "undo"}
# The advisory key partition maintenance used to take (undolog.partition_lock_key()).
OLD_PARTITION_LOCK_KEY = 7557806069434771457


def _sig() -> str:
    return secrets.token_hex(32)


# --- who made the call decides nothing about it ---------------------------------------


def test_a_login_cannot_approve_its_own_call_made_in_another_agents_session(
    login: Callable[..., Conn],
) -> None:
    owner = login("undolog_agent")
    both = login("undolog_agent", "undolog_approver")  # decides on any session's calls
    other_approver = login("undolog_approver")
    session = engine.begin_session(owner, agent="owner")
    # It can no longer make a call in another agent's session at all: only the owner
    # makes and reports a session's calls. In its own session, its call is its own.
    with pytest.raises(errors.PermissionDenied, match="belongs to another role"):
        engine.intercept(both, session, 0, "wire", "irreversible", {"cents": 5})
    session = engine.begin_session(both, agent="both")
    call = engine.intercept(both, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.action == "await_approval" and call.approval_id is not None
    maker = both.execute(
        "SELECT intercepted_by FROM undolog.undolog_effect_log WHERE effect_id = %s",
        (call.effect_id,),
    ).fetchone()
    assert maker == (both.info.user,)
    shown = other_approver.execute(
        "SELECT requested_by FROM undolog.pending_approvals WHERE approval_id = %s",
        (call.approval_id,),
    ).fetchone()
    assert shown == (both.info.user,)  # the approver sees who asked
    with pytest.raises(errors.PermissionDenied, match="cannot approve its own call"):
        approvals.approve(both, call.approval_id, "me", "looks fine")
    assert approvals.approval_state(other_approver, call.approval_id) == "pending"
    # Another approver may; and the maker may still say no to its own call.
    assert approvals.approve(other_approver, call.approval_id, "alice") == "approved"


def _wires_waiting(agent: Conn, count: int) -> list[uuid.UUID]:
    """``count`` sessions of ``agent``, each with an irreversible call waiting for a
    person: their approval ids."""
    waiting = []
    for _ in range(count):
        session = engine.begin_session(agent, agent="billing")
        call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
        assert call.approval_id is not None
        waiting.append(call.approval_id)
    return waiting


def test_a_login_that_can_become_the_calls_maker_cannot_approve_it(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    """Self-approval was refused by name only (session_user against the session's owner
    and the call's maker). A login that is a member of another can SET ROLE to it and,
    as it, set its password (PostgreSQL lets a role change its own), then log in as it:
    an approver granted an agent's login (GRANT billing_agent TO alice) made calls as
    the agent and approved them as herself; an agent granted an approver's login took
    the approver's. Red team round 12: a login that can become the maker, or that the
    maker can become, is the maker."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    other = login("undolog_approver")
    a, b = agent.info.user, approver.info.user
    calls = _wires_waiting(agent, 3)
    conn.execute(f"GRANT {a} TO {b}")
    # the premise: membership hands the agent's login over
    approver.execute(f"SET ROLE {a}")
    approver.execute(f"ALTER ROLE {a} PASSWORD 'taken-over'")
    approver.execute("RESET ROLE")
    with pytest.raises(errors.PermissionDenied, match="cannot approve its own call"):
        approvals.approve(approver, calls[0], "alice")
    with pytest.raises(errors.PermissionDenied, match="cannot approve its own call"):
        approvals.approve(approver, calls[0], "alice", args={"cents": 500})
    conn.execute(f"REVOKE {a} FROM {b}")
    conn.execute(f"GRANT {b} TO {a}")  # the other way round: the agent may become her
    with pytest.raises(errors.PermissionDenied, match="cannot approve its own call"):
        approvals.approve(approver, calls[1], "alice")
    with pytest.raises(errors.PermissionDenied, match="cannot approve its own call"):
        approvals.approve(agent, calls[1], "alice")  # an approver by inheritance
    conn.execute(f"REVOKE {b} FROM {a}")
    assert approvals.approve(approver, calls[1], "alice") == "approved"
    assert approvals.approve(other, calls[0], "bob") == "approved"
    # a superuser is a member of every role to PostgreSQL: its calls are still others'
    session = engine.begin_session(conn, agent="root")
    call = engine.intercept(conn, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    assert approvals.approve(other, call.approval_id, "bob") == "approved"
    # a session whose owner's login was dropped since is still decided (no role to ask
    # about is no error)
    agent.close()
    conn.execute(f"ALTER ROLE {a} RENAME TO {a}_gone")
    try:
        assert approvals.approve(other, calls[2], "bob") == "approved"
    finally:
        conn.execute(f"ALTER ROLE {a}_gone RENAME TO {a}")


def test_a_noinherit_login_that_can_become_the_maker_through_a_group_cannot_approve_it(
    conn: Conn, login: Callable[..., Conn]
) -> None:
    """The test above grants one login to the other directly, to logins that inherit: it
    went on passing with the membership asked as 'USAGE' (privileges inherited) rather
    than 'MEMBER'. A NOINHERIT login inherits nothing and may still SET ROLE to every
    role it is a member of, through a group too, and then set that login's password:
    it is the maker all the same. And two logins that share only a group role (both
    members of undolog_agent) are no members of each other: neither may become the
    other, and a login that is an agent and an approver decides another agent's call."""
    agent = login("undolog_agent")
    peer = login("undolog_agent", "undolog_approver")
    sly = login()
    a, s = agent.info.user, sly.info.user
    group = f"{s}_group"
    conn.execute(f"ALTER ROLE {s} NOINHERIT")
    conn.execute(f"GRANT undolog_approver TO {s}")
    conn.execute(f"CREATE ROLE {group} NOLOGIN")
    try:
        conn.execute(f"GRANT {a} TO {group}")
        conn.execute(f"GRANT {group} TO {s}")
        session = engine.begin_session(agent, agent="billing")
        call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
        assert call.approval_id is not None
        # the premise: through the group, the NOINHERIT login takes the agent's login
        sly.execute(f"SET ROLE {a}")
        sly.execute(f"ALTER ROLE {a} PASSWORD 'taken-over'")
        sly.execute("SET ROLE undolog_approver")  # NOINHERIT: how it approves at all
        with pytest.raises(errors.PermissionDenied, match="member of that login"):
            approvals.approve(sly, call.approval_id, "sly")
        assert approvals.approval_state(peer, call.approval_id) == "pending"
        assert approvals.approve(peer, call.approval_id, "peer") == "approved"
    finally:
        sly.execute("RESET ROLE")
        conn.execute(f"DROP ROLE {group}")


def test_a_createrole_login_approves_no_calls_but_a_superusers_nor_are_its_own_approved(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    """PostgreSQL 15 lets a CREATEROLE login set the password of every role but a
    superuser's, and grant itself any such role, without being a member of it: an
    approver holding CREATEROLE took an agent's login (ALTER ROLE ... PASSWORD, no
    membership that pg_has_role could see) and approved its calls, or made a login of
    its own (CREATE ROLE sock LOGIN IN ROLE undolog_agent) to make the calls with; an
    agent holding it made itself an approver to approve its own calls the same way.
    (PostgreSQL 16 makes it a member, with ADMIN OPTION, of the roles it may alter:
    the membership check sees those.) On 15, a CREATEROLE login is either side of any
    call but a superuser's."""
    if conn.info.server_version >= 160000:
        pytest.skip("PostgreSQL 16 shows a CREATEROLE login's reach as membership")
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    other = login("undolog_approver")
    a, b = agent.info.user, approver.info.user
    calls = _wires_waiting(agent, 2)
    conn.execute(f"ALTER ROLE {b} CREATEROLE")
    # the premise: no membership, and yet the agent's login is hers
    assert conn.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", (b, a)).fetchone() == (False,)
    approver.execute(f"ALTER ROLE {a} PASSWORD 'taken-over'")
    with pytest.raises(errors.PermissionDenied, match="holds CREATEROLE") as refused:
        approvals.approve(approver, calls[0], "alice")
    assert refused.value.hint is not None and f"ALTER ROLE {b} NOCREATEROLE" in refused.value.hint
    assert approvals.approval_state(other, calls[0]) == "pending"
    assert approvals.reject(approver, calls[0], "alice", "no") == "rejected"  # refusing is safe
    conn.execute(f"ALTER ROLE {b} NOCREATEROLE")
    # the maker holding it: whoever approves may be a login it made, or its own
    conn.execute(f"ALTER ROLE {a} CREATEROLE")
    with pytest.raises(errors.PermissionDenied, match="holds CREATEROLE") as refused:
        approvals.approve(other, calls[1], "bob")
    assert refused.value.hint is not None and "A superuser must decide" in refused.value.hint
    assert approvals.approve(conn, calls[1], "root") == "approved"  # a superuser may
    conn.execute(f"ALTER ROLE {a} NOCREATEROLE")
    session = engine.begin_session(agent, agent="billing")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    assert approvals.approve(approver, call.approval_id, "alice") == "approved"


def test_the_maker_of_a_call_is_part_of_its_identity(conn: Conn) -> None:
    session = engine.begin_session(conn)
    call = engine.intercept(conn, session, 0, "send", "compensable", {}, UNDO)
    with pytest.raises(errors.AppendOnlyViolation, match="maker"):
        engine.fetch_all(
            conn,
            "UPDATE undolog.undolog_effect_log SET intercepted_by = 'someone else'"
            " WHERE effect_id = %s",
            (call.effect_id,),
        )


# --- the limit is the uncompressed size -----------------------------------------------


def test_eight_mib_built_in_a_temp_table_is_refused_though_it_compresses(conn: Conn) -> None:
    conn.execute(
        "CREATE TEMP TABLE big AS SELECT jsonb_build_object('x', repeat('a', 8388608)) AS v"
    )
    stored = conn.execute("SELECT pg_column_size(v), octet_length(v::text) FROM big").fetchone()
    assert stored is not None and stored[0] < 1048576 < stored[1]  # compressed in the table
    session = engine.begin_session(conn)
    with pytest.raises(errors.PayloadTooLarge, match="args is 8388617 bytes"):
        engine.fetch_one(
            conn,
            "SELECT * FROM undolog.intercept(%s, 0, 't', 'compensable',"
            " (SELECT v FROM big), %s, %s)",
            (session, _sig(), Jsonb(UNDO)),
        )
    call = engine.intercept(conn, session, 0, "t", "compensable", {}, UNDO)
    with pytest.raises(errors.PayloadTooLarge, match="result"):
        engine.fetch_one(conn, "SELECT undolog.commit(%s, (SELECT v FROM big))", (call.effect_id,))
    with pytest.raises(errors.PayloadTooLarge, match="metadata"):
        engine.fetch_one(
            conn, "SELECT undolog.begin_session(NULL, 'a', (SELECT v FROM big), '1 minute')"
        )
    with pytest.raises(errors.PayloadTooLarge, match="compensation"):
        engine.fetch_one(
            conn,
            "SELECT * FROM undolog.intercept(%s, 1, 't', 'compensable', '{}', %s,"
            " jsonb_build_object('name', 'undo', 'args', (SELECT v FROM big)))",
            (session, _sig()),
        )


# --- a notification tells nobody anything ---------------------------------------------


def test_notifications_carry_nothing_about_other_agents_sessions(
    login: Callable[..., Conn],
) -> None:
    agent_a, agent_b = login("undolog_agent"), login("undolog_agent")
    approver = login("undolog_approver")
    agent_b.execute("LISTEN undolog_approvals")
    session = engine.begin_session(agent_a, agent="a")
    call = engine.intercept(agent_a, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    approvals.approve(approver, call.approval_id, "alice")
    payloads = [n.payload for n in agent_b.notifies(timeout=5, stop_after=2)]
    assert payloads == ["", ""]  # woken twice (request, decision), told nothing
    # What B may re-read shows nothing of A's session either (row-level security).
    assert approvals.approval_state(agent_b, call.approval_id) is None


def test_a_payloadless_wake_up_ends_wait_for_decision_at_once(dsn: str, conn: Conn) -> None:
    session = engine.begin_session(conn)
    call = engine.intercept(conn, session, 0, "wire", "irreversible", {})
    assert call.approval_id is not None
    timer = threading.Timer(0.3, approvals.approve, (conn, call.approval_id, "alice"))
    timer.start()
    with psycopg.connect(dsn, autocommit=True) as waiter:
        # poll_interval is long: only the (empty) notification can end it this soon
        assert approvals.wait_for_decision(waiter, call.approval_id, 20, 15) == "approved"
    timer.join()


# --- maintenance's lock is one agents cannot take -------------------------------------


def test_an_agent_holding_the_old_advisory_key_does_not_stop_maintenance(
    login: Callable[..., Conn], conn: Conn
) -> None:
    agent = login("undolog_agent")
    # An agent may no longer take any advisory lock (see the session-lock probes below);
    # another login of the owner's holds the old key instead.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT pg_advisory_lock(%s)", (OLD_PARTITION_LOCK_KEY,))
    holder = psycopg.connect(conn.info.dsn, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (OLD_PARTITION_LOCK_KEY,))
    conn.execute("SET lock_timeout = '2s'")
    done = conn.execute("SELECT * FROM undolog.maintain_partitions(3, 12)").fetchall()
    assert all(action == "created" for action, _ in done)
    assert conn.execute("SELECT * FROM undolog.ensure_partitions(1)").fetchall() == []
    # Nor can an agent take the lock maintenance takes now.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT FROM undolog.undolog_maintenance_lock FOR UPDATE")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT FROM undolog.undolog_maintenance_lock FOR KEY SHARE")
    holder.close()


# --- the session's advisory lock is the engine's alone ----------------------------------

ADVISORY_CALLS = [
    "pg_advisory_lock(1)",
    "pg_advisory_lock(1, 2)",
    "pg_advisory_lock_shared(1)",
    "pg_try_advisory_lock(1)",
    "pg_try_advisory_lock_shared(1, 2)",
    "pg_advisory_xact_lock(1)",
    "pg_advisory_xact_lock_shared(1)",
    "pg_try_advisory_xact_lock(1, 2)",
    "pg_try_advisory_xact_lock_shared(1)",
    "pg_advisory_unlock(1)",
    "pg_advisory_unlock_shared(1, 2)",
    "pg_advisory_unlock_all()",
]


@pytest.mark.parametrize("call", ADVISORY_CALLS)
def test_an_agent_login_cannot_call_an_advisory_lock_function(
    login: Callable[..., Conn], call: str
) -> None:
    agent = login("undolog_agent")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute(f"SELECT pg_catalog.{call}")


def test_a_signature_spelling_another_locks_key_holds_nothing_of_it(
    login: Callable[..., Conn], conn: Conn, dsn: str
) -> None:
    """The signature lock's key used to be the signature's first 64 bits, and the engine
    cannot check a signature but for its form: an agent sent one spelling the migrate
    lock's key, or another login's pending-approvals key, kept its transaction open, and
    `undolog migrate` and that login's irreversible calls waited for it."""
    squatter = login("undolog_agent")
    victim = login("undolog_agent")
    row = conn.execute(
        "SELECT undolog.advisory_key('pending_approvals', %s)", (victim.info.user,)
    ).fetchone()
    assert row is not None
    pending_key: int = row[0]
    engine.register_tool(squatter, "put", "compensable", UNDO)
    held = engine.begin_session(squatter, agent="squatter")
    squatter.autocommit = False
    for step, key in enumerate((MIGRATE_LOCK_KEY, pending_key)):
        aimed = f"{key & (2**64 - 1):016x}" + "0" * 48
        got = engine.intercept(
            squatter, held, step, "put", "compensable", {"n": step}, UNDO, call_signature=aimed
        )
        assert got.action == "execute"
    try:  # the squatter's transaction is open, holding its signatures' keys
        with psycopg.connect(dsn, autocommit=True) as owner:
            (free,) = owner.execute(
                "SELECT pg_catalog.pg_try_advisory_lock(%s)", (MIGRATE_LOCK_KEY,)
            ).fetchone() or (False,)
            assert free, "an agent holds the migrate lock"
            owner.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
        victim.execute("SET lock_timeout = '2s'")
        engine.register_tool(victim, "wire", "irreversible", None)
        asked = engine.begin_session(victim, agent="victim")
        answer = engine.intercept(victim, asked, 0, "wire", "irreversible", {"cents": 1})
        assert answer.action == "await_approval"
    finally:
        squatter.rollback()


def test_a_login_naming_another_sessions_in_an_open_transaction_holds_nothing_of_it(
    login: Callable[..., Conn],
) -> None:
    """A refused call stays in its transaction until that ends, locks and all: a
    heartbeat or a complete_session naming another login's session took the session's row
    and its lock before learning whose it was, and an intercept its lock, so the owner's
    calls, heartbeats and completion waited for as long as the other kept it open."""
    victim = login("undolog_agent")
    squatter = login("undolog_agent")
    engine.register_tool(victim, "put", "compensable", UNDO)
    sid = engine.begin_session(victim, agent="victim")
    holds = [psycopg.connect(squatter.info.dsn, password=None) for _ in range(3)]
    try:
        for held, statement in zip(
            holds,
            (
                "SELECT undolog.heartbeat(%s)",
                "SELECT undolog.complete_session(%s)",
                "SELECT * FROM undolog.intercept(%s, 0, 'put', 'compensable', '{}', "
                + "repeat('a', 64), '{\"name\": \"undo\"}')",
            ),
            strict=True,
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                held.execute(statement, (sid,))  # refused; the transaction stays open
        victim.execute("SET lock_timeout = '2s'")
        engine.heartbeat(victim, sid)
        got = engine.intercept(victim, sid, 0, "put", "compensable", {"n": 1}, UNDO)
        assert got.effect_id is not None
        engine.commit(victim, got.effect_id, {"ok": True})
        assert engine.complete_session(victim, sid) == "completed"
    finally:
        for held in holds:
            held.close()


@pytest.mark.parametrize("tier", ["compensable", "irreversible"])
def test_a_login_that_knows_a_calls_signature_cannot_keep_it_in_progress(
    login: Callable[..., Conn], tier: str
) -> None:
    """A call's lock key was its signature alone, and a login that reads a session (an
    approver, an agent that is one too) knows its calls' signatures: it journaled a call
    with the owner's signature in a session of its own, left that transaction open, and
    the owner's call made again answered in_progress for as long as it stayed open. The
    key is now the session's and the signature's, tried once the caller is known to be
    the owner: naming the owner's session with the signature (refused) holds nothing
    either."""
    owner = login("undolog_agent")
    both = login("undolog_agent", "undolog_approver")
    undo = UNDO if tier == "compensable" else None
    sid = engine.begin_session(owner, agent="owner")
    first = engine.intercept(owner, sid, 0, "send", tier, {"to": "x"}, undo)
    assert first.effect_id is not None
    if tier == "compensable":
        engine.commit(owner, first.effect_id, {"sent": True})
        expected = "replay"
    else:
        assert first.approval_id is not None
        approvals.approve(both, first.approval_id, "ann")
        expected = "execute"
    seen = both.execute(
        "SELECT call_signature FROM undolog.undolog_undo_stack WHERE session_id = %s", (sid,)
    ).fetchall()
    assert len(seen) == 1
    sig: str = seen[0][0]
    owner.execute("SET lock_timeout = '2s'")
    # Each in a transaction of the login's, left open: the owner's session named with the
    # signature (refused), then a call with it in a session of the login's own.
    with psycopg.connect(both.info.dsn) as naming:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # no savepoint around it
            naming.execute(
                "SELECT * FROM undolog.intercept(%s, 0, 'send', %s, %s, %s, %s)",
                (sid, tier, Jsonb({"to": "x"}), sig, Jsonb(undo) if undo else None),
            )
        again = engine.intercept(owner, sid, 0, "send", tier, {"to": "x"}, undo)
        assert again.action == expected, "a refused call's open transaction holds the call"
        if tier == "irreversible":  # its body failed: the approved call may run again
            assert again.effect_id is not None
            engine.fail(owner, again.effect_id, "the body failed")
    with psycopg.connect(both.info.dsn) as own:
        mine = engine.begin_session(own, agent="squatter")
        own.commit()
        got = engine.intercept(own, mine, 0, "anything", tier, {}, undo, call_signature=sig)
        assert got.action in ("execute", "await_approval")
        again = engine.intercept(owner, sid, 0, "send", tier, {"to": "x"}, undo)
        assert again.action == expected, "another login's open transaction holds the call"


def test_an_agents_open_transaction_holds_a_person_5_s_at_most_and_no_sweep(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """An agent may hold its own session in a transaction it leaves open. A person's
    rollback waited for it as long as it liked, and expire_approvals, walking the expired
    requests in session order, waited there for every login's expiry. Now the person gets
    SessionBusy (UL030) after lock_session's 5 s, and the sweep skips that session."""
    holder = login("undolog_agent")
    other = login("undolog_agent")
    approver = login("undolog_approver")
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 s'")
    engine.register_tool(holder, "wire", "irreversible", None)
    engine.register_tool(other, "wire", "irreversible", None)
    held_sid = engine.begin_session(holder, agent="holder")
    engine.intercept(holder, held_sid, 0, "wire", "irreversible", {"n": 1})
    other_sid = engine.begin_session(other, agent="other")
    engine.intercept(other, other_sid, 0, "wire", "irreversible", {"n": 2})
    time.sleep(1.2)  # both requests are past their deadline
    holder.autocommit = False
    engine.intercept(holder, held_sid, 0, "wire", "irreversible", {"n": 1})  # holds its row
    try:
        expired = approvals.expire_approvals(conn)
        states = dict(
            conn.execute(
                "SELECT session_id, state FROM undolog.undolog_approval_requests"
            ).fetchall()
        )
        assert len(expired) == 1 and states == {held_sid: "pending", other_sid: "expired"}
        started = time.monotonic()
        with pytest.raises(errors.SessionBusy, match="held by a transaction"):
            saga.rollback_session(approver, held_sid, "ann", "stop it")
        assert 4.5 < time.monotonic() - started < 15
    finally:
        holder.rollback()
    assert saga.rollback_session(approver, held_sid, "ann", "stop it") in ("failed", "compensating")


def test_a_deciders_open_transaction_holds_the_agents_next_call_5_s_at_most(
    login: Callable[..., Conn],
) -> None:
    """A person's decision holds the session (lock_session) until its transaction ends,
    and the agent's next compensable call waited for it as long as it liked: its shared
    take of the session's lock had no bound. Now it is tried first and, held, waited for
    as lock_session waits (5 s), then SessionBusy (UL030), nothing journaled; a shorter
    lock_timeout of the caller's is its bound, and the caller keeps its own after."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    sid = engine.begin_session(agent, agent="a")
    asked = engine.intercept(agent, sid, 0, "wire", "irreversible", {})
    assert asked.approval_id is not None
    agent.execute("SET statement_timeout = '20s'")  # "as long as it liked", here
    approver.autocommit = False
    approvals.approve(approver, asked.approval_id, "bob")  # decided, its transaction open
    try:
        started = time.monotonic()
        with pytest.raises(errors.SessionBusy, match="held by a transaction"):
            engine.intercept(agent, sid, 1, "send", "compensable", {}, UNDO)
        assert 4.5 < time.monotonic() - started < 15
        agent.execute("SET lock_timeout = '1s'")
        started = time.monotonic()
        with pytest.raises(errors.SessionBusy):
            engine.intercept(agent, sid, 1, "send", "compensable", {}, UNDO)
        assert time.monotonic() - started < 4
    finally:
        approver.rollback()
    agent.execute("RESET lock_timeout")
    own_timeout = agent.execute("SHOW lock_timeout").fetchone()
    approvals.approve(approver, asked.approval_id, "bob")
    threading.Timer(1.0, approver.commit).start()  # lets go while the agent waits
    agent.autocommit = False
    try:
        got = engine.intercept(agent, sid, 1, "send", "compensable", {}, UNDO)
        assert got.action == "execute"
        assert agent.execute("SHOW lock_timeout").fetchone() == own_timeout
        agent.commit()
    finally:
        agent.rollback()
        agent.autocommit = True
    journaled = agent.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s", (sid,)
    ).fetchone()
    assert journaled == (2,)


def _partial_walk(login: Callable[..., Conn]) -> tuple[Conn, Conn, uuid.UUID]:
    """An agent's session of two committed calls that a person undoes from step 1 (its
    walk partial: the agent goes on heartbeating it); answers the agent's and a walker's
    connections and the session."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    walker = login("undolog_operator")
    sid = engine.begin_session(agent, agent="holder")
    for step in (0, 1):
        call = engine.intercept(
            agent, sid, step, "book", "compensable", {"n": step}, {"name": "unbook"}
        )
        assert call.effect_id is not None
        engine.commit(agent, call.effect_id, {"ok": step})
    assert saga.rollback_to(approver, sid, 1, "wrong room", "ann") == "compensating"
    return agent, walker, sid


def test_an_agents_open_transaction_holds_a_walkers_report_5_s_at_most(
    login: Callable[..., Conn],
) -> None:
    """The same for a walker: while a person's "undo from here" walks a live session, its
    agent goes on heartbeating it, and may leave that transaction open. The worker's
    report of the compensation it had just run waited for it as long as it liked, and the
    worker with it: every other session's walk waited. Now the report is SessionBusy
    (UL030) after lock_session's 5 s, nothing recorded, and goes through once the agent
    lets go."""
    agent, walker, sid = _partial_walk(login)
    claim = saga.claim_compensation(walker, sid)
    assert claim is not None
    walker.execute("SET statement_timeout = '20s'")  # "as long as it liked", here
    agent.autocommit = False
    engine.heartbeat(agent, sid)  # the walk is partial: its agent is alive, and holds it
    try:
        started = time.monotonic()
        with pytest.raises(errors.SessionBusy, match="held by a transaction"):
            saga.complete_compensation(walker, claim.undo_id, claim.attempt)
        assert 4.5 < time.monotonic() - started < 15
    finally:
        agent.rollback()
    saga.complete_compensation(walker, claim.undo_id, claim.attempt)
    assert saga.claim_compensation(walker, sid) is None  # the walk ends at its floor
    assert engine.session_state(walker, sid) == "active"


def test_a_walker_reports_again_while_an_agent_holds_its_session(
    login: Callable[..., Conn], caplog: pytest.LogCaptureFixture
) -> None:
    """The walk's side of the test above: the compensation ran, and its report met
    SessionBusy; run_walk let it go up, the entry stayed claimed until claim_timeout and
    the compensation would have run a second time. Now the walker reports again while
    the session is held (REPORT_TRIES in all), and the compensation runs once."""
    from undolog import walk

    agent, walker, sid = _partial_walk(login)
    ran: list[int] = []
    holding = threading.Event()

    def hold_for(seconds: float) -> None:
        agent.autocommit = False
        engine.heartbeat(agent, sid)  # the partial walk's agent, alive: holds the session
        holding.set()
        time.sleep(seconds)
        agent.rollback()

    def unbook(call: Any) -> None:
        ran.append(call.call_args["n"])
        threading.Thread(target=hold_for, args=(6.5,), daemon=True).start()
        assert holding.wait(5)

    with caplog.at_level("WARNING", logger="undolog.walk"):
        state = walk.run_walk(walker, sid, {"unbook": unbook}, wait=20)
    assert state == "active" and ran == [1]
    assert any("trying again (2 of 3)" in r.getMessage() for r in caplog.records)


def test_complete_session_refuses_a_snapshot_older_than_its_wait(
    login: Callable[..., Conn],
) -> None:
    """Under REPEATABLE READ, complete_session's snapshot predated a call journaled while
    it waited for the session, so it completed the session over a call still executing."""
    agent = login("undolog_agent")
    sid = engine.begin_session(agent, agent="rr")
    agent.autocommit = False
    agent.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    with pytest.raises(errors.InvalidArgument, match="runs at READ COMMITTED, not REPEATABLE"):
        engine.complete_session(agent, sid)
    agent.rollback()
    agent.autocommit = True
    assert engine.complete_session(agent, sid) == "completed"


def test_sessions_sharing_their_last_64_bits_get_different_lock_keys(conn: Conn) -> None:
    # Version 1 UUIDs made by one process: the same clock sequence and node.
    node, clock_seq = 0x0242AC120002, 0x1234
    ids = [uuid.uuid1(node=node, clock_seq=clock_seq) for _ in range(50)]
    assert len({u.int & (2**64 - 1) for u in ids}) == 1
    keys = conn.execute(
        "SELECT count(DISTINCT undolog.session_lock_key(u, 'ann')) FROM unnest(%s::uuid[]) AS u",
        (ids,),
    ).fetchone()
    assert keys == (50,)


def test_a_login_squatting_a_session_key_neither_stalls_it_nor_keeps_it_alive(
    login: Callable[..., Conn], conn: Conn
) -> None:
    victim = login("undolog_agent")
    squatter = login("undolog_agent")
    sid = engine.begin_session(victim, agent="victim", lease=timedelta(seconds=1))
    (key,) = conn.execute(
        "SELECT undolog.session_lock_key(%s, %s)", (sid, victim.info.user)
    ).fetchone() or (None,)
    # The key is there for anyone to read while the victim journals a call...
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        squatter.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (key,))
    # ...and the victim's calls and heartbeats go on without waiting.
    victim.execute("SET lock_timeout = '500ms'")
    started = time.monotonic()
    assert engine.intercept(victim, sid, 0, "create_user", "compensable", {}, UNDO).action == (
        "execute"
    )
    engine.heartbeat(victim, sid)
    assert time.monotonic() - started < 0.5
    # The victim dies (its lease lapses): recovery fails it rather than skip it as alive.
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 s'"
        " WHERE session_id = %s",
        (sid,),
    )
    assert sid in saga.recover(conn)
    assert engine.session_state(conn, sid) == "failed"


def test_a_login_that_is_an_approver_too_holds_nothing_naming_another_session_in_begin(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """begin_session answers another login's session unchanged to an approver or
    operator, without an error: a login that holds the agent role too (begin_session is
    the agent's) took that session's row (its ON CONFLICT DO UPDATE locked the row its
    WHERE then left alone) and kept it for as long as its transaction stayed open. The
    owner's heartbeats and calls were refused after 5 s each (UL030), the sweep skipped
    the session as busy, and once let go it was failed as 'lease expired' and undone:
    a person ended an agent's session with no operator action recorded."""
    victim = login("undolog_agent")
    both = login("undolog_agent", "undolog_approver")
    sid = engine.begin_session(victim, agent="victim", lease=timedelta(seconds=30))
    (expires,) = conn.execute(
        "SELECT lease_expires_at FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone() or (None,)
    with psycopg.connect(both.info.dsn, password=None) as held:  # its transaction stays open
        assert engine.begin_session(held, sid, lease=timedelta(hours=1)) == sid
        assert conn.execute(
            "SELECT lease_expires_at FROM undolog.undolog_sessions WHERE session_id = %s",
            (sid,),
        ).fetchone() == (expires,)  # answered unchanged: nobody renewed it
        victim.execute("SET lock_timeout = '2s'")
        started = time.monotonic()
        engine.heartbeat(victim, sid)
        got = engine.intercept(victim, sid, 0, "create_user", "compensable", {}, UNDO)
        assert got.effect_id is not None
        engine.commit(victim, got.effect_id, {"ok": True})
        assert time.monotonic() - started < 2
        assert engine.complete_session(victim, sid) == "completed"


def test_two_maintainers_still_serialise(dsn: str, conn: Conn) -> None:
    with psycopg.connect(dsn) as first:
        first.execute("SELECT * FROM undolog.ensure_partitions(1)").fetchall()  # holds it
        waiting = conn.execute(
            "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
            " WHERE c.relname = 'undolog_maintenance_lock' AND l.pid = %s",
            (first.info.backend_pid,),
        ).fetchone()
        assert waiting == (1,)
        conn.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            conn.execute("SELECT * FROM undolog.ensure_partitions(1)")
        first.rollback()
    conn.execute("SELECT * FROM undolog.ensure_partitions(1)").fetchall()


def test_an_agents_sessions_cannot_make_an_anchor_past_its_bound(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """Any agent login moves chain heads at will (a new session links its first row):
    one anchor of every moved head went over jsonb's 256 MB past some 2.1 million of
    them, and write_anchor failed, and maintain_partitions with it, on every run. An
    anchor now records at most anchor_max_heads, the next ones the rest, chained."""
    assert conn.execute("SELECT undolog.anchor_max_heads()").fetchone() == (10_000,)
    # Its bound made 100 in this test's own database: the same write_anchor cuts the
    # heads at it, with 110 sessions to begin rather than 10,010 (18 s here).
    conn.execute(
        "CREATE OR REPLACE FUNCTION undolog.anchor_max_heads() RETURNS integer"
        " LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 100'"
    )
    bound = conn.execute("SELECT undolog.anchor_max_heads()").fetchone()
    assert bound == (100,)
    # Ten agent logins, each beginning a tenth: every begin_session counts its login's
    # unfinished sessions (the live-sessions cap), so one login's 10,001 took 38 s.
    for _ in range(10):
        login("undolog_agent").execute(
            "SELECT count(undolog.begin_session()) FROM generate_series(1, %s)",
            (bound[0] // 10 + 1,),
        )
    written = conn.execute(
        "SELECT anchor_id, sessions FROM undolog.write_anchor() ORDER BY anchor_id"
    ).fetchall()
    assert [sessions for _id, sessions in written] == [bound[0], 10]
    chained = conn.execute(
        "SELECT a.prev = b.anchor_hash, a.heads ?| ARRAY(SELECT jsonb_object_keys(b.heads))"
        " FROM undolog.undolog_chain_anchors AS a, undolog.undolog_chain_anchors AS b"
        " WHERE a.anchor_id = %s AND b.anchor_id = %s",
        (written[1][0], written[0][0]),
    ).fetchone()
    assert chained == (True, False)  # the second follows the first, with other heads
    assert chain.verify(conn).ok
    again = conn.execute("SELECT sessions FROM undolog.write_anchor()").fetchall()
    assert again == [(0,)]  # none moved since: one anchor, recording none


def test_maintenance_anchors_an_agents_heads_before_it_takes_its_strong_locks(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """A run that drops (or attaches) a month holds ACCESS EXCLUSIVE from its DDL to its
    commit, every agent's call waiting; the anchor, whose time any agent login grows (a
    new session moves a head; 2.2 million took 48 s to anchor), came after the DDL. It
    comes first now, under no lock stronger than a write."""
    agent = login("undolog_agent")
    agent.execute("SELECT count(undolog.begin_session()) FROM generate_series(1, 3)")
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")
    said: list[str] = []
    conn.add_notice_handler(lambda diag: said.append(diag.message_primary or ""))
    conn.execute("SET client_min_messages = debug1")
    done = conn.execute("SELECT * FROM undolog.maintain_partitions(3, 12)").fetchall()
    conn.execute("RESET client_min_messages")
    assert ("dropped", "undolog_effect_log_2024_01") in done
    ddl = [m for m in said if "DDL from epoch" in m]
    assert len(ddl) == 1, said
    ddl_from = float(ddl[0].rsplit("epoch ", 1)[1].rstrip(")"))
    anchored = conn.execute(
        "SELECT extract(epoch FROM written_at), (SELECT count(*) FROM jsonb_object_keys(heads))"
        " FROM undolog.undolog_chain_anchors"
    ).fetchall()
    assert len(anchored) == 1 and anchored[0][1] >= 3
    assert float(anchored[0][0]) < ddl_from


# --- blank is blank in every script; one nesting limit --------------------------------


@pytest.mark.parametrize("blank", ["\t", " \t\n", "\u00a0", "\u200b", "\u00a0\u200b\u3000"])
def test_blank_operators_reasons_and_names_are_refused(conn: Conn, blank: str) -> None:
    unknown = uuid.uuid4()  # refused before the session is even looked up
    with pytest.raises(errors.InvalidArgument, match="p_by"):
        saga.resume_session(conn, unknown, blank)
    with pytest.raises(errors.InvalidArgument, match="p_by"):
        saga.abandon_session(conn, unknown, blank, "done by hand")
    with pytest.raises(errors.InvalidArgument, match="p_reason"):
        saga.abandon_session(conn, unknown, "alice", blank)
    with pytest.raises(errors.InvalidArgument, match="p_reason"):
        saga.rollback_session(conn, unknown, "alice", blank)
    session = engine.begin_session(conn)
    with pytest.raises(errors.InvalidArgument, match="tool_name"):
        engine.intercept(conn, session, 0, blank, "compensable", {}, UNDO)
    with pytest.raises(errors.InvalidCompensation, match="name"):
        engine.intercept(conn, session, 0, "t", "compensable", {}, {"name": blank})
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s", (session,)
    ).fetchone() == (0,)


def test_a_compensation_name_is_held_to_a_tool_names_length(conn: Conn) -> None:
    # The name of the tool that undoes a call is shown wherever the call's undo is (each
    # undo entry of a session's page, its Retry button, the tools list): an agent login
    # registering one of a megabyte made every such page of its sessions a megabyte a row.
    longest = {"name": "u" * 200}
    assert engine.register_tool(conn, "ok", "compensable", longest)
    for too_long in ({"name": "u" * 201}, {"name": "u" * 500_000}):
        with pytest.raises(errors.InvalidCompensation, match="at most 200 characters"):
            engine.register_tool(conn, "long", "compensable", too_long)
    # refused as a call's descriptor too, as malformed, before the registry is read
    session = engine.begin_session(conn)
    query = "SELECT * FROM undolog.intercept(%s, 0, 'long', 'compensable', '{}', %s, %s)"
    with pytest.raises(errors.InvalidCompensation, match="at most 200 characters"):
        engine.fetch_one(conn, query, (session, _sig(), Jsonb({"name": "u" * 201})))
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_tools WHERE tool_name = 'long'"
    ).fetchone() == (0,)


def test_visible_names_in_any_script_pass(conn: Conn) -> None:
    session = engine.begin_session(conn)
    for step, name in enumerate(["créer", "\u00a0x", "名前", "a\u200bb"]):
        assert engine.intercept(conn, session, step, name, "compensable", {}, UNDO).action == (
            "execute"
        )


def test_delete_of_the_undo_history_is_refused_even_when_empty(conn: Conn) -> None:
    assert conn.execute("SELECT count(*) FROM undolog.undolog_undo_history").fetchone() == (0,)
    with pytest.raises(errors.AppendOnlyViolation):
        engine.fetch_one(conn, "DELETE FROM undolog.undolog_undo_history RETURNING 1")
    with pytest.raises(errors.AppendOnlyViolation):
        engine.fetch_one(conn, "UPDATE undolog.undolog_undo_history SET event = event RETURNING 1")


def _nested_jsonb(depth: int) -> str:
    """JSON text of an object of exactly ``depth`` levels: {"a": [[...]]}."""
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def test_the_engine_enforces_the_same_nesting_limit_as_the_binding(conn: Conn) -> None:
    depth = conn.execute("SELECT undolog.max_nesting_depth()").fetchone()
    assert depth == (64,)
    session = engine.begin_session(conn)
    engine.register_tool(conn, "t", "compensable", UNDO)
    query = "SELECT * FROM undolog.intercept(%s, %s, 't', 'compensable', %s::jsonb, %s, %s)"
    ok = engine.fetch_one(conn, query, (session, 0, _nested_jsonb(64), _sig(), Jsonb(UNDO)))
    assert ok[1] == "execute"
    with pytest.raises(errors.PayloadTooLarge, match="limit of 64 levels"):
        engine.fetch_one(conn, query, (session, 1, _nested_jsonb(65), _sig(), Jsonb(UNDO)))
    with pytest.raises(errors.PayloadTooLarge, match="limit of 64 levels"):
        engine.fetch_one(conn, query, (session, 1, _nested_jsonb(5000), _sig(), Jsonb(UNDO)))
    with pytest.raises(errors.PayloadTooLarge, match="result nests deeper"):
        engine.fetch_one(conn, "SELECT undolog.commit(%s, %s::jsonb)", (ok[0], _nested_jsonb(65)))
    with pytest.raises(errors.PayloadTooLarge, match="metadata nests deeper"):
        engine.fetch_one(
            conn,
            "SELECT undolog.begin_session(NULL, 'a', %s::jsonb, '1 minute')",
            (_nested_jsonb(65),),
        )
    # Brackets inside strings are not nesting.
    flat = '{"s": "' + "[" * 200 + '"}'
    assert engine.fetch_one(conn, query, (session, 2, flat, _sig(), Jsonb(UNDO)))[1] == "execute"


def test_the_roles_page_advisory_lock_statements_do_what_it_says(
    login: Callable[..., Conn], conn: Conn, dsn: str
) -> None:
    # As after a migration by a database owner who is not a superuser: PUBLIC may still
    # take advisory locks. The page's statements (examples/advisory_locks.sql), run by a
    # superuser, take them away from everyone but the engine's owner and the granted role.
    conn.execute(
        "DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid::regprocedure"
        " FROM pg_proc AS p WHERE p.pronamespace = 'pg_catalog'::regnamespace"
        " AND p.proname ~ '^pg_(try_)?advisory_' LOOP"
        " EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f); END LOOP; END $$"
    )
    agent = login("undolog_agent")
    assert agent.execute("SELECT pg_try_advisory_lock(1)").fetchone() == (True,)
    agent.execute("SELECT pg_advisory_unlock(1)")
    script = Path(__file__).resolve().parents[2] / "examples" / "advisory_locks.sql"
    subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(script)],
        check=True,
        capture_output=True,
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT pg_try_advisory_lock(1)")
    with psycopg.connect(dsn, user="jobs", autocommit=True) as jobs:
        assert jobs.execute("SELECT pg_try_advisory_lock(1)").fetchone() == (True,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            jobs.execute("SELECT pg_advisory_lock_shared(1)")  # only what it was granted


def test_a_session_begun_while_another_login_names_it_is_still_not_theirs(
    login: Callable[..., Conn],
) -> None:
    """The owner check of heartbeat and complete_session (lock_own_session) read the
    session's owner, then locked its row: for an id not yet begun, the first read found
    nothing and skipped the check, and when the owner's begin_session committed between
    the two reads, another login renewed, or completed, that session. fail_session had
    the same gap (a login that is an approver too passed its second check). The fault
    suite found it once in 100,000 hostile calls; here another login calls them on each
    id without pause while its owner begins it, 150 times."""
    owner = login("undolog_agent")
    other_dsn = login("undolog_agent", "undolog_approver").info.dsn
    took: list[str] = []

    def hammer(sid: uuid.UUID, begun: threading.Event) -> None:
        with psycopg.connect(other_dsn, autocommit=True) as other:
            while True:
                done = begun.is_set()
                for statement in ("fail_session", "heartbeat", "complete_session"):
                    try:
                        args = "%s, 'hostile'" if statement == "fail_session" else "%s"
                        other.execute(f"SELECT undolog.{statement}({args})", (sid,))
                        took.append(f"{statement} {sid}")
                    except (psycopg.errors.InsufficientPrivilege, errors.UnknownSession):
                        pass
                    except psycopg.Error as exc:
                        if exc.sqlstate != "UL002":
                            raise
                if done:  # one more round once the session surely exists
                    return

    for _ in range(150):
        sid, begun = uuid.uuid4(), threading.Event()
        thread = threading.Thread(target=hammer, args=(sid, begun))
        thread.start()
        time.sleep(0.002)
        engine.begin_session(owner, sid, agent="owner")
        begun.set()
        thread.join()
        assert engine.session_state(owner, sid) == "active"
    assert took == []
