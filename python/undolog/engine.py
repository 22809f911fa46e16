"""The engine's SQL API from Python: one function per SQL function, one round trip each.

These are the low-level calls the decorator, the session and the CLI build on; any
psycopg connection works (autocommit, or inside a transaction the caller owns).
``undolog.aengine`` has the same functions for ``psycopg.AsyncConnection``. Database
errors of the project's class come out as ``UndoLogError`` subclasses (undolog.errors).
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

from undolog.errors import InvalidArgument, LateResult, translate
from undolog.signature import call_signature as sign
from undolog.signature import check_storable

Connection = psycopg.Connection[Any]
Params = tuple[Any, ...]

# The engine's step_index is a PostgreSQL integer.
MAX_STEP_INDEX = 2**31 - 1
# The session state machine's states (docs/design/state-machines.md), for the faces'
# filters and choices.
SESSION_STATES = (
    "active",
    "awaiting_approval",
    "completed",
    "failed",
    "compensating",
    "compensated",
    "halted",
)


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


# Each SQL function as (query, parameters), shared by this module and undolog.aengine.

BEGIN_SESSION = "SELECT undolog.begin_session(%s, %s, %s, %s)"
HEARTBEAT = "SELECT undolog.heartbeat(%s)"
INTERCEPT = "SELECT * FROM undolog.intercept(%s, %s, %s, %s, %s, %s, %s)"
COMMIT = "SELECT undolog.commit(%s, %s)"
REGISTER_TOOL = "SELECT undolog.register_tool(%s, %s, %s)"
# on_reject sent only when it is not the default: a default tool's registration is then
# the same statement for an engine before on_reject existed.
REGISTER_TOOL_ON_REJECT = "SELECT undolog.register_tool(%s, %s, %s, p_on_reject => %s)"
APPROVAL_DECISION = (
    "SELECT approval_id, session_id, effect_id, tool_name, decision, decided_by, decided_at,"
    " reason, on_reject, session_state, session_continues"
    " FROM undolog.approval_decision(%s)"
)
# The result record committed asynchronously (see commit() below).
COMMIT_ASYNC = "SELECT undolog.commit(%s, %s, true)"
FAIL = "SELECT undolog.fail(%s, %s)"
FAIL_ASYNC = "SELECT undolog.fail(%s, %s, true)"
# Replay bookkeeping on this connection commits asynchronously (read by intercept).
ASYNC_RESULTS = "SELECT set_config('undolog.async_results', %s, false)"
COMPLETE_SESSION = "SELECT undolog.complete_session(%s)"
FAIL_SESSION = "SELECT undolog.fail_session(%s, %s)"
SESSION_STATE = "SELECT state FROM undolog.sessions_list WHERE session_id = %s"


def begin_session_params(
    session_id: uuid.UUID | None,
    agent: str | None,
    metadata: Mapping[str, Any] | None,
    lease: timedelta,
) -> Params:
    return (session_id, agent, Jsonb(dict(metadata or {})), lease)


def intercept_params(
    session_id: uuid.UUID,
    step_index: int,
    tool_name: str,
    tier: str,
    args: Mapping[str, Any],
    compensation: Mapping[str, Any] | None = None,
    call_signature: str | None = None,
) -> Params:
    """The signature is computed unless given. What can be signed but not stored (U+0000,
    nesting past the limit) is refused here, before anything is sent."""
    signature = call_signature or sign(session_id, step_index, tool_name, args)
    check_storable(args)
    if compensation is not None:
        check_storable(compensation, "compensation")
    if not 0 <= step_index <= MAX_STEP_INDEX:
        raise InvalidArgument(f"step_index must be an integer in 0..{MAX_STEP_INDEX}")
    return (
        session_id,
        step_index,
        tool_name,
        tier,
        Jsonb(dict(args)),
        signature,
        None if compensation is None else Jsonb(dict(compensation)),
    )


def fetch_one(conn: Connection, query: str, params: Params = ()) -> tuple[Any, ...]:
    """One round trip that answers one row; the engine's errors translated."""
    with translated():
        row: tuple[Any, ...] | None = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


def fetch_all(conn: Connection, query: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """One round trip that answers any number of rows; the engine's errors translated."""
    with translated():
        return conn.execute(query, params).fetchall()


def begin_session(
    conn: Connection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    row = fetch_one(conn, BEGIN_SESSION, begin_session_params(session_id, agent, metadata, lease))
    return uuid.UUID(str(row[0]))


def session_state(conn: Connection, session_id: uuid.UUID) -> str:
    return str(fetch_one(conn, SESSION_STATE, (session_id,))[0])


def heartbeat(conn: Connection, session_id: uuid.UUID) -> datetime:
    expires: datetime = fetch_one(conn, HEARTBEAT, (session_id,))[0]
    return expires


def register_tool_params(
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> Params:
    described = (tool_name, tier, Jsonb(dict(compensation)) if compensation is not None else None)
    return described if on_reject == "fail_session" else (*described, on_reject)


def register_tool_query(params: Params) -> str:
    """The statement for register_tool_params' answer."""
    return REGISTER_TOOL if len(params) == 3 else REGISTER_TOOL_ON_REJECT


def register_tool(
    conn: Connection,
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> uuid.UUID:
    """Register a tool of this login (idempotent): answers its tool_id. UL018 when a
    live registration of the name says otherwise (tier, compensation or on_reject);
    UL008 for an on_reject other than 'fail_session' or 'continue'."""
    params = register_tool_params(tool_name, tier, compensation, on_reject)
    tool_id: uuid.UUID = fetch_one(conn, register_tool_query(params), params)[0]
    return tool_id


@dataclass(frozen=True)
class ApprovalDecision:
    """What became of an approval request (undolog.approval_decision)."""

    approval_id: uuid.UUID
    session_id: uuid.UUID
    effect_id: uuid.UUID
    tool_name: str | None
    decision: str  # pending | approved | rejected | expired
    decided_by: str | None  # None for the engine's own expiry
    decided_at: datetime | None
    reason: str | None
    on_reject: str  # the call's tool's registration: fail_session | continue
    session_state: str
    session_continues: bool  # the session can still take calls (active/awaiting_approval)


def approval_decision(conn: Connection, approval_id: uuid.UUID) -> ApprovalDecision | None:
    """The decision on an approval request, or None when it is unknown or not this
    login's to see (row-level security: an agent sees its own sessions' requests)."""
    rows = fetch_all(conn, APPROVAL_DECISION, (approval_id,))
    return ApprovalDecision(*rows[0]) if rows else None


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
    """Journal a call before its body runs (the signature is computed unless given)."""
    params = intercept_params(
        session_id, step_index, tool_name, tier, args, compensation, call_signature
    )
    return Interception(*fetch_one(conn, INTERCEPT, params))


def commit(
    conn: Connection, effect_id: uuid.UUID, result: Any, *, asynchronous: bool = False
) -> None:
    """executing -> committed. ``asynchronous``: this transaction commits without waiting
    for its WAL flush; a result lost in a server crash leaves the effect executing, which
    the undo walk compensates (outcome unknown). Inside a transaction of your own, that
    makes your own writes in it asynchronous too. LateResult when the walk had already
    taken the effect (the engine recorded the result and flagged the session)."""
    row = fetch_one(conn, COMMIT_ASYNC if asynchronous else COMMIT, (effect_id, Jsonb(result)))
    check_late(row[0], effect_id, "commit")


def fail(conn: Connection, effect_id: uuid.UUID, error: str, *, asynchronous: bool = False) -> None:
    """executing -> pending (the call never took effect); ``asynchronous`` as commit()."""
    check_late(
        fetch_one(conn, FAIL_ASYNC if asynchronous else FAIL, (effect_id, error))[0],
        effect_id,
        "fail",
    )


def check_late(answer: Any, effect_id: uuid.UUID, what: str) -> None:
    """Raise LateResult when commit or fail answered 'late'."""
    if answer == "late":
        raise LateResult(
            f"effect {effect_id}: this {what} arrived after the undo walk had taken the call "
            "(its lease lapsed while the agent was paused); the engine recorded it in the "
            "effect's history, which flags the session for an operator (needs_attention)"
        )


def set_async_results(conn: Connection, on: bool) -> None:
    """Replay bookkeeping on this connection commits asynchronously (or no longer does)."""
    fetch_one(conn, ASYNC_RESULTS, ("on" if on else "off",))


def complete_session(conn: Connection, session_id: uuid.UUID) -> str:
    return str(fetch_one(conn, COMPLETE_SESSION, (session_id,))[0])


def fail_session(conn: Connection, session_id: uuid.UUID, error: str) -> str:
    return str(fetch_one(conn, FAIL_SESSION, (session_id, error))[0])
