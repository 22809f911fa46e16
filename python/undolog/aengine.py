"""undolog.engine for ``psycopg.AsyncConnection``: the same SQL functions, awaited."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from undolog import engine
from undolog.engine import Interception, Params, translated

AsyncConnection = psycopg.AsyncConnection[Any]


async def _one(conn: AsyncConnection, query: str, params: Params) -> tuple[Any, ...]:
    with translated():
        row: tuple[Any, ...] | None = await (await conn.execute(query, params)).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


async def fetch_optional(
    conn: AsyncConnection, query: str, params: Params = ()
) -> tuple[Any, ...] | None:
    """One round trip that answers at most one row (None: no row); the engine's errors
    translated, as engine.fetch_all's."""
    with translated():
        row: tuple[Any, ...] | None = await (await conn.execute(query, params)).fetchone()
    return row


async def begin_session(
    conn: AsyncConnection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    params = engine.begin_session_params(session_id, agent, metadata, lease)
    return uuid.UUID(str((await _one(conn, engine.BEGIN_SESSION, params))[0]))


async def session_state(conn: AsyncConnection, session_id: uuid.UUID) -> str:
    return str((await _one(conn, engine.SESSION_STATE, (session_id,)))[0])


async def heartbeat(conn: AsyncConnection, session_id: uuid.UUID) -> datetime:
    expires: datetime = (await _one(conn, engine.HEARTBEAT, (session_id,)))[0]
    return expires


async def register_tool(
    conn: AsyncConnection,
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> uuid.UUID:
    params = engine.register_tool_params(tool_name, tier, compensation, on_reject)
    tool_id: uuid.UUID = (await _one(conn, engine.register_tool_query(params), params))[0]
    return tool_id


async def approval_decision(
    conn: AsyncConnection, approval_id: uuid.UUID
) -> engine.ApprovalDecision | None:
    """As engine.approval_decision, awaited."""
    with translated():
        rows = await (await conn.execute(engine.APPROVAL_DECISION, (approval_id,))).fetchall()
    return engine.ApprovalDecision(*rows[0]) if rows else None


async def intercept(
    conn: AsyncConnection,
    session_id: uuid.UUID,
    step_index: int,
    tool_name: str,
    tier: str,
    args: Mapping[str, Any],
    compensation: Mapping[str, Any] | None = None,
    call_signature: str | None = None,
) -> Interception:
    params = engine.intercept_params(
        session_id, step_index, tool_name, tier, args, compensation, call_signature
    )
    return Interception(*(await _one(conn, engine.INTERCEPT, params)))


async def commit(
    conn: AsyncConnection, effect_id: uuid.UUID, result: Any, *, asynchronous: bool = False
) -> None:
    query = engine.COMMIT_ASYNC if asynchronous else engine.COMMIT
    engine.check_late((await _one(conn, query, (effect_id, Jsonb(result))))[0], effect_id, "commit")


async def fail(
    conn: AsyncConnection, effect_id: uuid.UUID, error: str, *, asynchronous: bool = False
) -> None:
    query = engine.FAIL_ASYNC if asynchronous else engine.FAIL
    engine.check_late((await _one(conn, query, (effect_id, error)))[0], effect_id, "fail")


async def set_async_results(conn: AsyncConnection, on: bool) -> None:
    await _one(conn, engine.ASYNC_RESULTS, ("on" if on else "off",))


async def complete_session(conn: AsyncConnection, session_id: uuid.UUID) -> str:
    return str((await _one(conn, engine.COMPLETE_SESSION, (session_id,)))[0])


async def fail_session(conn: AsyncConnection, session_id: uuid.UUID, error: str) -> str:
    return str((await _one(conn, engine.FAIL_SESSION, (session_id, error)))[0])
