"""A sweep that skips a session keeps none of its locks: recover() and expire_approvals()
pass over a session another transaction holds (its row, or its advisory lock an intercept
holds shared) and go on; what they tried to take of it must not stay held until the
sweep's transaction ends, where it would block the session's own agent and its walker
for nothing. (They used to try the advisory lock in the scan's WHERE, before the row lock
SKIP LOCKED: a session skipped for its row kept its advisory lock.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from undolog import engine

Conn = psycopg.Connection[Any]
UNDO = {"name": "undo"}


def _lock_key(conn: Conn, sid: uuid.UUID) -> int:
    row = conn.execute(
        "SELECT undolog.session_lock_key(s.session_id, s.owner_role)"
        " FROM undolog.undolog_sessions AS s WHERE s.session_id = %s",
        (sid,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _expire_lease(conn: Conn, sid: uuid.UUID) -> None:
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 s'"
        " WHERE session_id = %s",
        (sid,),
    )


def _advisory_free(conn: Conn, key: int) -> bool:
    """Whether another transaction could take the session's advisory lock exclusive now
    (as lock_session would), without waiting: tried in a transaction of its own."""
    with conn.transaction():
        row = conn.execute("SELECT pg_catalog.pg_try_advisory_xact_lock(%s)", (key,)).fetchone()
    return bool(row and row[0])


def _advisory_held_by(conn: Conn, pid: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_locks AS l"
        " WHERE l.locktype = 'advisory' AND l.pid = %s AND l.granted",
        (pid,),
    ).fetchone()
    return int(row[0]) if row else 0


def _row_free(conn: Conn, sid: uuid.UUID) -> bool:
    """Whether another transaction could lock the session's row now, without waiting."""
    try:
        with conn.transaction():
            conn.execute(
                "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE NOWAIT",
                (sid,),
            )
    except psycopg.errors.LockNotAvailable:
        return False
    return True


@contextmanager
def _open(dsn: str) -> Iterator[Conn]:
    """A connection whose statements run in one transaction left open, rolled back after."""
    c = psycopg.connect(dsn)
    try:
        yield c
    finally:
        c.rollback()
        c.close()


def _state(conn: Conn, sid: uuid.UUID) -> str | None:
    return engine.session_state(conn, sid)


def test_recover_keeps_no_advisory_lock_of_a_session_it_skips_for_its_row(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    agent = login("undolog_agent")
    sid = engine.begin_session(agent, agent="held")
    _expire_lease(conn, sid)
    key = _lock_key(conn, sid)
    with _open(dsn) as holder, _open(dsn) as sweeper:
        holder.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE", (sid,)
        )
        recovered = [r[0] for r in sweeper.execute("SELECT * FROM undolog.recover()").fetchall()]
        assert sid not in recovered
        # The sweep's transaction is still open: it holds nothing of the skipped session.
        assert _advisory_held_by(conn, sweeper.info.backend_pid) == 0
        assert _advisory_free(conn, key)
        sweeper.rollback()
        holder.rollback()
    # Once nobody holds it, the next run fails it, as before.
    with _open(dsn) as sweeper:
        recovered = [r[0] for r in sweeper.execute("SELECT * FROM undolog.recover()").fetchall()]
        sweeper.commit()
    assert sid in recovered
    assert _state(conn, sid) == "failed"


def test_recover_leaves_the_row_of_a_session_it_skips_for_an_intercept_unlocked(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    """The other order of the same skip: an intercept in flight holds the advisory lock
    shared; recover must not keep the session's row locked either (the agent's heartbeat
    would wait for the sweep's transaction)."""
    agent = login("undolog_agent")
    sid = engine.begin_session(agent, agent="in flight")
    _expire_lease(conn, sid)
    agent.autocommit = False
    try:
        got = engine.intercept(agent, sid, 0, "put", "compensable", {"n": 1}, UNDO)
        assert got.action == "execute"
        with _open(dsn) as sweeper:
            recovered = [
                r[0] for r in sweeper.execute("SELECT * FROM undolog.recover()").fetchall()
            ]
            assert sid not in recovered
            assert _advisory_held_by(conn, sweeper.info.backend_pid) == 0
            assert _row_free(conn, sid)
            # The agent, still in its transaction, renews its lease without waiting.
            agent.execute("SET LOCAL lock_timeout = '500ms'")
            started = time.monotonic()
            engine.heartbeat(agent, sid)
            assert time.monotonic() - started < 0.5
    finally:
        agent.rollback()
        agent.autocommit = True
    assert _state(conn, sid) == "active"


def test_expire_approvals_keeps_no_advisory_lock_of_a_session_it_skips_for_its_row(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    agent = login("undolog_agent")
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 s'")
    engine.register_tool(agent, "wire", "irreversible", None)
    sid = engine.begin_session(agent, agent="held")
    engine.intercept(agent, sid, 0, "wire", "irreversible", {"n": 1})
    time.sleep(1.2)  # the request is past its deadline
    key = _lock_key(conn, sid)
    with _open(dsn) as holder, _open(dsn) as sweeper:
        holder.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE", (sid,)
        )
        expired = sweeper.execute("SELECT * FROM undolog.expire_approvals()").fetchall()
        assert expired == []
        assert _advisory_held_by(conn, sweeper.info.backend_pid) == 0
        assert _advisory_free(conn, key)
        sweeper.rollback()
        holder.rollback()
    with _open(dsn) as sweeper:
        expired = sweeper.execute("SELECT * FROM undolog.expire_approvals()").fetchall()
        sweeper.commit()
    assert len(expired) == 1
    assert _state(conn, sid) == "compensating"


def test_expire_approvals_leaves_the_row_of_a_session_it_skips_for_its_advisory_lock_unlocked(
    dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    agent = login("undolog_agent")
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 s'")
    engine.register_tool(agent, "wire", "irreversible", None)
    sid = engine.begin_session(agent, agent="in flight")
    engine.intercept(agent, sid, 0, "wire", "irreversible", {"n": 1})
    time.sleep(1.2)
    key = _lock_key(conn, sid)
    with _open(dsn) as holder, _open(dsn) as sweeper:
        # What an intercept of the session holds while it journals a call.
        holder.execute("SELECT pg_catalog.pg_advisory_xact_lock_shared(%s)", (key,))
        assert sweeper.execute("SELECT * FROM undolog.expire_approvals()").fetchall() == []
        assert _row_free(conn, sid)
        sweeper.rollback()
        holder.rollback()
    assert _state(conn, sid) == "awaiting_approval"
