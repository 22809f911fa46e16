"""The login's pending-approvals lock in the engine's lock order (docs/design/
state-machines.md): a new IRREVERSIBLE call takes it before its session's locks. It was
taken after them, so a client running its own transactions on two sessions of one login
closed a cycle: T1 asked in session A (A's locks, then the login's), T2 asked in B (B's
locks, then waited for the login's, held by T1), T1 asked in B (waited for B's, held by
T2), and PostgreSQL ended one of them with 40P01."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import test_check_then_act
from psycopg.types.json import Jsonb

from undolog import engine
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]
ASK = "SELECT action FROM undolog.intercept(%s, %s, 'wire', 'irreversible', %s, %s)"


def _ask(c: Conn, session: uuid.UUID, step: int) -> str:
    """A new irreversible call of ``session``, in ``c``'s open transaction: the action."""
    args = {"step": step}
    row = c.execute(
        ASK, (session, step, Jsonb(args), call_signature(session, step, "wire", args))
    ).fetchone()
    assert row is not None
    return str(row[0])


_waits = test_check_then_act._waits_or_ends  # one definition of "it waits"


def test_two_transactions_asking_in_each_others_sessions_do_not_deadlock(
    login: Callable[..., Conn], conn: Conn
) -> None:
    agent = login("undolog_agent")
    engine.register_tool(agent, "wire", "irreversible", None)
    a = engine.begin_session(agent, agent="a")
    b = engine.begin_session(agent, agent="b")
    failures: list[str] = []
    asked: list[str] = []

    with psycopg.connect(agent.info.dsn) as t1, psycopg.connect(agent.info.dsn) as t2:
        t2_pid = t2.info.backend_pid

        def second() -> None:
            try:
                asked.append(_ask(t2, b, 0))
                asked.append(_ask(t2, a, 1))
                t2.commit()
            except psycopg.Error as exc:
                failures.append(f"T2: {exc.sqlstate}")
                t2.rollback()

        assert _ask(t1, a, 0) == "await_approval"  # T1 holds A, and asked
        thread = threading.Thread(target=second)
        thread.start()
        try:
            # T2 asks in B and waits for T1 (before B's locks, or, before the fix, after).
            assert _waits(conn, t2_pid, thread)
            try:
                assert _ask(t1, b, 1) == "await_approval"
                t1.commit()
            except psycopg.Error as exc:
                failures.append(f"T1: {exc.sqlstate}")
                t1.rollback()
        finally:
            thread.join(timeout=30)
        assert not thread.is_alive()

    assert failures == []  # before the fix: ['T2: 40P01'] (or T1's)
    assert asked == ["await_approval", "await_approval"]
    row = conn.execute(
        "SELECT count(*) FROM undolog.undolog_approval_requests"
        " WHERE state = 'pending' AND session_id IN (%s, %s)",
        (a, b),
    ).fetchone()
    assert row == (4,)


def test_a_new_irreversible_call_waits_a_bounded_time_for_its_logins_lock(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """T1 asked and keeps its transaction open: T2, asking in another session of the
    login, waits for the login's lock (before its session's) as long as lock_session would
    wait for a session, then is refused with UL030 and has changed nothing. Before, it
    waited after its session's locks, with no bound but the caller's lock_timeout (55P03)."""
    agent = login("undolog_agent")
    engine.register_tool(agent, "wire", "irreversible", None)
    a = engine.begin_session(agent, agent="a")
    b = engine.begin_session(agent, agent="b")
    with psycopg.connect(agent.info.dsn) as t1, psycopg.connect(agent.info.dsn) as t2:
        assert _ask(t1, a, 0) == "await_approval"  # held open
        t2.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.Error, match="approval requests of") as refused:
            _ask(t2, b, 0)
        assert refused.value.sqlstate == "UL030"
        t2.rollback()
        # T2's refused call held nothing of B: a third transaction locks it at once.
        with psycopg.connect(agent.info.dsn, autocommit=True) as t3:
            t3.execute("SET lock_timeout = '300ms'")
            t3.execute("SELECT undolog.heartbeat(%s)", (b,))
        t1.rollback()
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (b,)
    ).fetchone()
    assert row == ("active",)


def test_an_irreversible_call_made_again_does_not_wait_for_its_logins_lock(
    login: Callable[..., Conn],
) -> None:
    """A call already asked, made again, does not ask: it answers await_approval while
    another transaction of the login holds the login's lock."""
    agent = login("undolog_agent")
    engine.register_tool(agent, "wire", "irreversible", None)
    a = engine.begin_session(agent, agent="a")
    b = engine.begin_session(agent, agent="b")
    assert _ask(agent, b, 0) == "await_approval"  # asked, committed
    with psycopg.connect(agent.info.dsn) as t1, psycopg.connect(agent.info.dsn) as t2:
        assert _ask(t1, a, 0) == "await_approval"  # held open
        t2.execute("SET lock_timeout = '300ms'")
        assert _ask(t2, b, 0) == "await_approval"
        t2.commit()
        t1.rollback()
