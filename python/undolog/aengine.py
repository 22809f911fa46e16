"""undolog.engine for ``psycopg.AsyncConnection``: the same SQL functions, awaited."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg

from undolog import engine
from undolog.engine import Interception, Params, translated
from undolog.queries import QUERIES

AsyncConnection = psycopg.AsyncConnection[Any]


async def fetch_one(conn: AsyncConnection, query: str, params: Params = ()) -> tuple[Any, ...]:
    """As engine.fetch_one, awaited."""
    await settle(conn)
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


async def fetch_all(
    conn: AsyncConnection, query: str, params: Params = ()
) -> list[tuple[Any, ...]]:
    """As engine.fetch_all, awaited."""
    await settle(conn)
    with translated():
        return await (await conn.execute(query, params)).fetchall()


async def begin_session(
    conn: AsyncConnection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    params = engine.begin_session_params(session_id, agent, metadata, lease)
    return uuid.UUID(str((await fetch_one(conn, QUERIES["begin_session"], params))[0]))


async def session_state(conn: AsyncConnection, session_id: uuid.UUID) -> str:
    row = await fetch_one(conn, QUERIES["session_state"], {"session_id": session_id})
    return str(row[0])


async def heartbeat(conn: AsyncConnection, session_id: uuid.UUID) -> datetime:
    row = await fetch_one(conn, QUERIES["heartbeat"], {"session_id": session_id})
    expires: datetime = row[0]
    return expires


async def register_tool(
    conn: AsyncConnection,
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> uuid.UUID:
    params = engine.register_tool_params(tool_name, tier, compensation, on_reject)
    tool_id: uuid.UUID = (await fetch_one(conn, engine.register_tool_query(params), params))[0]
    return tool_id


async def approval_decision(
    conn: AsyncConnection, approval_id: uuid.UUID
) -> engine.ApprovalDecision | None:
    """As engine.approval_decision, awaited."""
    await settle(conn)
    with translated():
        query = await conn.execute(QUERIES["approval_decision"], {"approval_id": approval_id})
        rows = await query.fetchall()
    return engine.ApprovalDecision(*rows[0]) if rows else None


async def approval_edit(
    conn: AsyncConnection, session_id: uuid.UUID, effect_id: uuid.UUID
) -> engine.ApprovalEdit | None:
    """As engine.approval_edit, awaited."""
    with translated():
        query = await conn.execute(
            QUERIES["approval_edit"], {"session_id": session_id, "effect_id": effect_id}
        )
        rows = await query.fetchall()
    return engine.ApprovalEdit(*rows[0]) if rows else None


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
    return Interception(*(await fetch_one(conn, QUERIES["intercept"], params)))


async def intercept_tool(
    conn: AsyncConnection,
    session_id: uuid.UUID,
    tool_id: uuid.UUID,
    step_index: int,
    args: Mapping[str, Any],
    call_signature: str,
) -> Interception:
    """As engine.intercept_tool, awaited."""
    params = engine.intercept_tool_params(session_id, tool_id, step_index, args, call_signature)
    return Interception(*(await fetch_one(conn, QUERIES["intercept_tool"], params)))


async def commit(
    conn: AsyncConnection, effect_id: uuid.UUID, result: Any, *, asynchronous: bool = False
) -> None:
    params = engine.commit_params(effect_id, result, asynchronous)
    engine.check_late((await fetch_one(conn, QUERIES["commit"], params))[0], effect_id, "commit")


async def fail(
    conn: AsyncConnection, effect_id: uuid.UUID, error: str, *, asynchronous: bool = False
) -> None:
    params = engine.fail_params(effect_id, error, asynchronous)
    engine.check_late((await fetch_one(conn, QUERIES["fail"], params))[0], effect_id, "fail")


async def set_async_results(conn: AsyncConnection, on: bool) -> None:
    await fetch_one(conn, QUERIES["set_async_results"], {"value": "on" if on else "off"})


async def complete_session(conn: AsyncConnection, session_id: uuid.UUID) -> str:
    return str((await fetch_one(conn, QUERIES["complete_session"], {"session_id": session_id}))[0])


async def session_halt(conn: AsyncConnection, session_id: uuid.UUID) -> engine.SessionHalt:
    row = await fetch_one(conn, QUERIES["session_halt"], {"session_id": session_id})
    return engine.SessionHalt(*row)


async def fail_session(conn: AsyncConnection, session_id: uuid.UUID, error: str) -> str:
    return str(
        (
            await fetch_one(
                conn, QUERIES["fail_session"], {"session_id": session_id, "error": error}
            )
        )[0]
    )


# An async session's result is read by a task of its own, which holds the connection's
# lock from the moment the result is sent until its answer is read: anything else on the
# connection (a heartbeat, a framework integration's own query, the next intercept)
# waits for the lock as for any statement in flight, and never finds the connection
# busy. The agent's own work between two calls overlaps the wait.


async def _read_then_release(conn: AsyncConnection, wire: engine._Wire) -> None:
    try:
        await conn.wait(engine.settle_gen(conn, wire))
    except psycopg.Error:
        pass  # kept in wire.errors
    finally:
        conn.lock.release()


async def settle(conn: AsyncConnection) -> None:
    """As engine.settle, awaited: the answers still unread are read (their errors kept
    for engine.take_unsettled)."""
    wire = engine._wires.get(conn)
    if wire is None:
        return
    if (reader := wire.reader) is not None:
        wire.reader = None
        await asyncio.shield(reader)
    if wire.unread:
        async with conn.lock:
            with contextlib.suppress(psycopg.Error):  # kept in wire.errors
                await conn.wait(engine.settle_gen(conn, wire))


async def intercept_hot(conn: AsyncConnection, call: engine.HotCall) -> Interception:
    """As engine.intercept_hot (intercept_tool), awaited (after the previous result's
    answer)."""
    wire = engine.wire_of(conn)
    await settle(conn)
    with translated():
        async with conn.lock:
            got: Interception = await conn.wait(engine.intercept_gen(conn, wire, call))
    return got


async def send_result(
    conn: AsyncConnection,
    what: str,
    session_id: uuid.UUID,
    effect_id: uuid.UUID,
    text: str,
    *,
    asynchronous: bool,
    wait: bool,
) -> None:
    """As engine.send_result, awaited; unless ``wait``, its answer is read by a task
    that holds the connection's lock until then."""
    wire = engine.wire_of(conn)
    name, params, seg = engine.result_params(wire, what, session_id, effect_id, text, asynchronous)
    await settle(conn)
    await conn.lock.acquire()
    try:
        with translated():
            await conn.wait(engine.send_gen(conn, wire, name, params, seg))
    except BaseException:
        conn.lock.release()
        raise
    if not wait:
        wire.reader = asyncio.create_task(_read_then_release(conn, wire))
        return
    try:
        with contextlib.suppress(psycopg.Error):  # kept in wire.errors
            await conn.wait(engine.settle_gen(conn, wire))
    finally:
        conn.lock.release()
    if (err := engine.take_unsettled(conn)) is not None:
        raise err
