"""Approval requests past their deadline and sessions whose lease ran out, by the
hundred, and which transaction expired or failed each: shared by the tests of a mass
expiry and a mass recovery (the engine's, the command's, the dashboard's)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg

from undolog import engine

Conn = psycopg.Connection[Any]


def past_deadline(conn: Conn, n: int) -> list[uuid.UUID]:
    """The ids of ``n`` new requests past their deadline, a session each, journaled in one
    statement by ``conn``'s login (the database's deadline set to 1 s, then waited out)."""
    dbname = conn.info.dbname
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET undolog.approval_timeout = '1 s'")
    conn.execute(f'ALTER DATABASE "{dbname}" SET undolog.max_pending_approvals = 10000')
    engine.register_tool(conn, "wire", "irreversible", None)
    rows = conn.execute(
        """
        SELECT i.approval_id
        FROM (SELECT gen_random_uuid() AS sid FROM generate_series(1, %(n)s)) AS g,
             LATERAL undolog.begin_session(g.sid) AS b,
             LATERAL undolog.intercept(
                 g.sid, 0, 'wire', 'irreversible', '{}',
                 encode(sha256(convert_to(g.sid::text, 'UTF8')), 'hex')) AS i
        """,
        {"n": n},
    ).fetchall()
    time.sleep(1.2)
    return [row[0] for row in rows]


def expired_per_transaction(conn: Conn, approval_ids: list[uuid.UUID]) -> list[int]:
    """How many of these requests each transaction expired, in the order they ran. The
    transaction is told by the effect's updated_at: the guard sets it to now(), the start
    of the transaction that rejected the effect."""
    rows = conn.execute(
        """
        SELECT count(*) FROM undolog.undolog_approval_requests AS a
        JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
        WHERE a.approval_id = ANY(%s) AND a.state = 'expired' AND e.state = 'rejected'
        GROUP BY e.updated_at ORDER BY e.updated_at
        """,
        (approval_ids,),
    ).fetchall()
    return [int(row[0]) for row in rows]


def lease_run_out(conn: Conn, n: int) -> list[uuid.UUID]:
    """The ids of ``n`` new active sessions whose lease ran out (their agents died),
    begun in one statement by ``conn``'s login, their leases then moved into the past."""
    rows = conn.execute(
        "SELECT undolog.begin_session(gen_random_uuid()) FROM generate_series(1, %(n)s)",
        {"n": n},
    ).fetchall()
    sessions = [row[0] for row in rows]
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'"
        " WHERE session_id = ANY(%s)",
        (sessions,),
    )
    return sessions


def failed_per_transaction(conn: Conn, session_ids: list[uuid.UUID]) -> list[int]:
    """How many of these sessions each transaction failed for their expired lease, in the
    order they ran. The transaction is told by the session's updated_at: the guard sets
    it to now(), the start of the transaction that failed it."""
    rows = conn.execute(
        """
        SELECT count(*) FROM undolog.undolog_sessions
        WHERE session_id = ANY(%s) AND state = 'failed' AND error = 'lease expired'
        GROUP BY updated_at ORDER BY updated_at
        """,
        (session_ids,),
    ).fetchall()
    return [int(row[0]) for row in rows]


def in_sweep_order(conn: Conn, approval_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """These requests in the order a sweep takes them (its session's, then its own id)."""
    rows = conn.execute(
        "SELECT approval_id FROM undolog.undolog_approval_requests"
        " WHERE approval_id = ANY(%s) ORDER BY session_id, approval_id",
        (approval_ids,),
    ).fetchall()
    return [row[0] for row in rows]


@contextlib.contextmanager
def expiry_refused(conn: Conn, approval_id: uuid.UUID) -> Iterator[None]:
    """While in the block, the expiry of this request raises (P0001 'refused by the
    test'), as any statement of a sweep may fail."""
    with _update_refused(conn, "undolog_approval_requests", "approval_id", approval_id):
        yield


@contextlib.contextmanager
def failure_refused(conn: Conn, session_id: uuid.UUID) -> Iterator[None]:
    """While in the block, failing this session raises (P0001 'refused by the test'), as
    any statement of a recovery may fail."""
    with _update_refused(conn, "undolog_sessions", "session_id", session_id):
        yield


@contextlib.contextmanager
def _update_refused(conn: Conn, table: str, column: str, key: uuid.UUID) -> Iterator[None]:
    """While in the block, an update of the row of undolog.``table`` whose ``column`` is
    ``key`` raises: a trigger, with a function of the database's own (the trigger runs in
    the sweep's backend, which sees no other backend's pg_temp)."""
    conn.execute(
        "CREATE FUNCTION public.refused_by_the_test() RETURNS trigger LANGUAGE plpgsql"
        " AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER refuse_one BEFORE UPDATE ON undolog.{table}"
        f" FOR EACH ROW WHEN (OLD.{column} = '{key}')"
        " EXECUTE FUNCTION public.refused_by_the_test()"
    )
    try:
        yield
    finally:
        conn.execute(f"DROP TRIGGER refuse_one ON undolog.{table}")
        conn.execute("DROP FUNCTION public.refused_by_the_test()")
