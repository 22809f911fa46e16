"""The engine's SQL API from Python: one function per SQL function, one round trip each.

These are the low-level calls the decorator, the session and the CLI build on. Two twins
with the same functions: ``undolog.aengine`` on a ``psycopg.AsyncConnection`` (awaited;
the source, written by hand) and ``undolog.engine`` on a ``psycopg.Connection``
(generated from it by tools/async_to_sync.py). Any connection works (autocommit, or
inside a transaction the caller owns). Database errors of the project's class come out
as ``UndoLogError`` subclasses (undolog.errors).

What the twins share without a twin (the answers' records, each function's parameters)
is in undolog.engine_common, and the hot path's wire protocol (intercept_hot,
send_result, settle) in undolog.engine_wire; both modules re-export the public names
(``engine.Interception``, ``engine.HotCall``, ``engine.take_unsettled`` ...). How a
result sent without waiting is read (a task of its own, or the connection's next
statement) is the pair undolog._acompat / undolog._compat.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from undolog import _acompat
from undolog.engine_common import MAX_STEP_INDEX as MAX_STEP_INDEX
from undolog.engine_common import SESSION_STATES as SESSION_STATES
from undolog.engine_common import SWEEP_BATCH as SWEEP_BATCH
from undolog.engine_common import ApprovalDecision as ApprovalDecision
from undolog.engine_common import ApprovalEdit as ApprovalEdit
from undolog.engine_common import Interception as Interception
from undolog.engine_common import Params as Params
from undolog.engine_common import SessionHalt as SessionHalt
from undolog.engine_common import (
    begin_session_params,
    check_late,
    commit_params,
    fail_params,
    intercept_params,
    intercept_tool_params,
    register_tool_params,
    register_tool_query,
)
from undolog.engine_common import translated as translated
from undolog.engine_wire import HotCall as HotCall
from undolog.engine_wire import (
    intercept_gen,
    result_params,
    send_gen,
    settle_gen,
    wire_if_any,
    wire_of,
)
from undolog.engine_wire import take_unsettled as take_unsettled
from undolog.queries import QUERIES

AsyncConnection = psycopg.AsyncConnection[Any]


async def fetch_one(conn: AsyncConnection, query: str, params: Params = ()) -> tuple[Any, ...]:
    """One round trip that answers one row; the engine's errors translated."""
    row = await fetch_optional(conn, query, params)
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


async def fetch_optional(
    conn: AsyncConnection, query: str, params: Params = ()
) -> tuple[Any, ...] | None:
    """One round trip that answers at most one row (None: no row); the engine's errors
    translated."""
    async with _acompat.exclusive(wire_of(conn)):  # no result sent between settle and execute
        await settle(conn)
        with translated():
            cursor = await conn.execute(query, params)
            row: tuple[Any, ...] | None = await cursor.fetchone()
    return row


async def fetch_all(
    conn: AsyncConnection, query: str, params: Params = ()
) -> list[tuple[Any, ...]]:
    """One round trip that answers any number of rows; the engine's errors translated."""
    async with _acompat.exclusive(wire_of(conn)):  # as fetch_optional
        await settle(conn)
        with translated():
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()


async def fetch_in_batches(
    conn: AsyncConnection,
    query: str,
    *,
    batch: int,
    on_progress: _acompat.CountProgress | None,
    caller: str,
    most: int | None = None,
) -> list[tuple[Any, ...]]:
    """The rows of a sweep that runs ``query`` (which takes ``%(limit)s``) again, each
    run in a transaction of its own committed before the next, until one answers fewer
    than ``batch`` rows: a sweep whose every row is a subtransaction that writes stays
    below the backend's cache of them (see :data:`SWEEP_BATCH`), and each run lets its
    rows' locks go as soon as it is done. ``most``: stop once this many rows are swept
    (the last run asks only for what is left), however many more are due; None, no
    bound. ``conn`` in autocommit mode, or in none with no transaction open (each run is
    then a ``conn.transaction()``); ValueError inside an open transaction, which each
    run would commit (``caller`` names the function in its message).
    ``on_progress(rows_so_far)`` is called (awaited, on the async side) after each run
    but the last; what it raises ends the sweep, the runs before it committed.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    if most is not None and most < 1:
        raise ValueError(f"most must be at least 1, not {most}")
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        raise ValueError(
            f"{caller} commits a transaction per batch: call it outside the "
            "transaction open on this connection (or on an autocommit connection)"
        )
    swept: list[tuple[Any, ...]] = []
    while True:
        limit = batch if most is None else min(batch, most - len(swept))
        if conn.autocommit:
            rows = await fetch_all(conn, query, {"limit": limit})
        else:
            async with conn.transaction():
                rows = await fetch_all(conn, query, {"limit": limit})
        swept += rows
        if len(rows) < limit or (most is not None and len(swept) >= most):
            return swept
        if on_progress is not None:
            await on_progress(len(swept))


async def begin_session(
    conn: AsyncConnection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    params = begin_session_params(session_id, agent, metadata, lease)
    row = await fetch_one(conn, QUERIES["begin_session"], params)
    return uuid.UUID(str(row[0]))


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
    """Register a tool of this login (idempotent): answers its tool_id. UL018 when a
    live registration of the name says otherwise (tier, compensation or on_reject);
    UL008 for an on_reject other than 'fail_session' or 'continue'."""
    params = register_tool_params(tool_name, tier, compensation, on_reject)
    row = await fetch_one(conn, register_tool_query(params), params)
    tool_id: uuid.UUID = row[0]
    return tool_id


async def approval_decision(
    conn: AsyncConnection, approval_id: uuid.UUID
) -> ApprovalDecision | None:
    """The decision on an approval request, or None when it is unknown or not this
    login's to see (row-level security: an agent sees its own sessions' requests)."""
    rows = await fetch_all(conn, QUERIES["approval_decision"], {"approval_id": approval_id})
    return ApprovalDecision(*rows[0]) if rows else None


async def approval_edit(
    conn: AsyncConnection, session_id: uuid.UUID, effect_id: uuid.UUID
) -> ApprovalEdit | None:
    """The edit of the call ``effect_id``'s approval, or None when its approval made no
    edit (or it is not this login's to see: an agent sees its own sessions' calls)."""
    params = {"session_id": session_id, "effect_id": effect_id}
    rows = await fetch_all(conn, QUERIES["approval_edit"], params)
    return ApprovalEdit(*rows[0]) if rows else None


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
    """Journal a call before its body runs (the signature is computed unless given)."""
    params = intercept_params(
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
    """Journal a call of the registered tool ``tool_id`` (register_tool's answer) before
    its body runs: its name, tier and compensation are the registration's, checked when
    it was registered. UnknownTool (UL017) when the id is not a live registration of
    this login: register the tool again and call with the new id."""
    params = intercept_tool_params(session_id, tool_id, step_index, args, call_signature)
    return Interception(*(await fetch_one(conn, QUERIES["intercept_tool"], params)))


async def commit(
    conn: AsyncConnection, effect_id: uuid.UUID, result: Any, *, asynchronous: bool = False
) -> None:
    """executing -> committed. ``asynchronous``: this transaction commits without waiting
    for its WAL flush; a result lost in a server crash leaves the effect executing, which
    the undo walk compensates (outcome unknown). Inside a transaction of your own, that
    makes your own writes in it asynchronous too. LateResult when the walk had already
    taken the effect (the engine recorded the result and flagged the session)."""
    params = commit_params(effect_id, result, asynchronous)
    check_late((await fetch_one(conn, QUERIES["commit"], params))[0], effect_id, "commit")


async def fail(
    conn: AsyncConnection, effect_id: uuid.UUID, error: str, *, asynchronous: bool = False
) -> None:
    """executing -> pending (the call never took effect); ``asynchronous`` as commit()."""
    params = fail_params(effect_id, error, asynchronous)
    check_late((await fetch_one(conn, QUERIES["fail"], params))[0], effect_id, "fail")


async def set_async_results(conn: AsyncConnection, on: bool) -> None:
    """Replay bookkeeping on this connection commits asynchronously (or no longer does)."""
    await fetch_one(conn, QUERIES["set_async_results"], {"value": "on" if on else "off"})


async def complete_session(conn: AsyncConnection, session_id: uuid.UUID) -> str:
    row = await fetch_one(conn, QUERIES["complete_session"], {"session_id": session_id})
    return str(row[0])


async def session_halt(conn: AsyncConnection, session_id: uuid.UUID) -> SessionHalt:
    row = await fetch_one(conn, QUERIES["session_halt"], {"session_id": session_id})
    return SessionHalt(*row)


async def fail_session(conn: AsyncConnection, session_id: uuid.UUID, error: str) -> str:
    params = {"session_id": session_id, "error": error}
    row = await fetch_one(conn, QUERIES["fail_session"], params)
    return str(row[0])


# The hot path (undolog.engine_wire): its statements are sent in pipeline mode, and a
# result's answer is read later (read_later in the pair _acompat/_compat: by a task of
# its own on the async side, by the connection's next statement on the sync side).


async def settle(conn: AsyncConnection) -> None:
    """Read the answers still unread on this connection (their errors are kept for
    take_unsettled); nothing to do, and no round trip, when there are none."""
    wire = wire_if_any(conn)
    if wire is None:
        return
    async with _acompat.exclusive(wire):
        if not wire.unread:
            return
        async with conn.lock:
            with contextlib.suppress(psycopg.Error):  # kept in wire.errors
                await conn.wait(settle_gen(conn, wire))


async def intercept_hot(
    conn: AsyncConnection, call: HotCall, *, guard: Callable[[], None] | None = None
) -> Interception:
    """intercept_tool in one round trip, with the answer to the result sent before it
    (its error, if any, kept for take_unsettled). UnknownTool when ``call.tool_id`` is
    no live registration of this login (retired since): register again, then retry.
    ``guard`` is called with the connection held, just before anything is sent: what it
    raises is raised, nothing sent (the decorator's: the session's block was left)."""
    wire = wire_of(conn)
    with translated():
        async with _acompat.exclusive(wire), conn.lock:
            if guard is not None:
                guard()
            got: Interception = await conn.wait(intercept_gen(conn, wire, call))
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
    guard: Callable[[], None] | None = None,
) -> None:
    """Send a commit (``text``: the result's JSON) or a fail (``text``: the error) and
    return at once; its answer is read later (by the connection's next statement; on
    an async connection, by a task that holds the connection's lock until then).
    ``wait``: read it now, and raise its error here (durable results). ``guard`` as
    intercept_hot's."""
    wire = wire_of(conn)
    name, params, seg = result_params(wire, what, session_id, effect_id, text, asynchronous)
    async with _acompat.exclusive(wire):
        await conn.lock.acquire()
        try:
            if guard is not None:
                guard()
            with translated():
                await conn.wait(send_gen(conn, wire, name, params, seg))
        except BaseException:
            conn.lock.release()
            raise
        if not wait:
            _acompat.read_later(conn, wire)  # it releases the lock
            return
        try:
            with contextlib.suppress(psycopg.Error):  # kept in wire.errors
                await conn.wait(settle_gen(conn, wire))
        finally:
            conn.lock.release()
    if (err := take_unsettled(conn)) is not None:
        raise err
