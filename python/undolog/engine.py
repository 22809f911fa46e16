"""The engine's SQL API from Python: one function per SQL function, one round trip each.

These are the low-level calls the decorator and the CLI build on; any psycopg connection
works (autocommit, or inside a transaction the caller owns). Database errors of the
project's class come out as ``UndoLogError`` subclasses (undolog.errors).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from undolog.errors import translate
from undolog.signature import call_signature as sign

Connection = psycopg.Connection[Any]


@dataclass(frozen=True)
class Interception:
    """What intercept() answered: the action tells the caller what to do next."""

    effect_id: uuid.UUID | None
    action: str  # execute | replay | await_approval | in_progress | rejected
    state: str | None
    result_snapshot: Any
    approval_id: uuid.UUID | None


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise the engine's SQLSTATEs as UndoLogError subclasses."""
    try:
        yield
    except psycopg.Error as exc:
        err = translate(exc)
        if err is exc:
            raise
        raise err from exc


def begin_session(
    conn: Connection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    with translated():
        row = conn.execute(
            "SELECT undolog.begin_session(%s, %s, %s, %s)",
            (session_id, agent, Jsonb(dict(metadata or {})), lease),
        ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def heartbeat(conn: Connection, session_id: uuid.UUID) -> datetime:
    with translated():
        row = conn.execute("SELECT undolog.heartbeat(%s)", (session_id,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def intercept(
    conn: Connection,
    session_id: uuid.UUID,
    step_index: int,
    tool_name: str,
    tier: str,
    args: Mapping[str, Any],
    compensation: Mapping[str, Any] | None = None,
    call_signature: str | None = None,
) -> Interception:
    """Journal a call before its body runs. The signature is computed unless given."""
    signature = call_signature or sign(session_id, step_index, tool_name, args)
    with translated():
        row = conn.execute(
            "SELECT * FROM undolog.intercept(%s, %s, %s, %s, %s, %s, %s)",
            (
                session_id,
                step_index,
                tool_name,
                tier,
                Jsonb(dict(args)),
                signature,
                None if compensation is None else Jsonb(dict(compensation)),
            ),
        ).fetchone()
    assert row is not None
    return Interception(*row)


def commit(conn: Connection, effect_id: uuid.UUID, result: Any) -> None:
    with translated():
        conn.execute("SELECT undolog.commit(%s, %s)", (effect_id, Jsonb(result)))


def fail(conn: Connection, effect_id: uuid.UUID, error: str) -> None:
    with translated():
        conn.execute("SELECT undolog.fail(%s, %s)", (effect_id, error))


def complete_session(conn: Connection, session_id: uuid.UUID) -> str:
    with translated():
        row = conn.execute("SELECT undolog.complete_session(%s)", (session_id,)).fetchone()
    assert row is not None
    return str(row[0])


def fail_session(conn: Connection, session_id: uuid.UUID, error: str) -> str:
    with translated():
        row = conn.execute("SELECT undolog.fail_session(%s, %s)", (session_id, error)).fetchone()
    assert row is not None
    return str(row[0])
