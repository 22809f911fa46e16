"""The engine's SQL API from Python: one function per SQL function, one round trip each.

These are the low-level calls the decorator, the session and the CLI build on; any
psycopg connection works (autocommit, or inside a transaction the caller owns).
``undolog.aengine`` has the same functions for ``psycopg.AsyncConnection``. Database
errors of the project's class come out as ``UndoLogError`` subclasses (undolog.errors).
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq
from psycopg.types.json import Jsonb

from undolog.errors import InvalidArgument, LateResult, translate
from undolog.queries import QUERIES
from undolog.signature import call_signature as sign
from undolog.signature import check_storable

Connection = psycopg.Connection[Any]
# Positional (%s) or named (%(name)s, the catalogue's: undolog.queries) parameters.
Params = tuple[Any, ...] | Mapping[str, Any]

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


# Each SQL function's parameters for its catalogue query (undolog.queries), shared by this
# module and undolog.aengine.


def begin_session_params(
    session_id: uuid.UUID | None,
    agent: str | None,
    metadata: Mapping[str, Any] | None,
    lease: timedelta,
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "agent": agent,
        "metadata": Jsonb(dict(metadata or {})),
        "lease": lease,
    }


def intercept_params(
    session_id: uuid.UUID,
    step_index: int,
    tool_name: str,
    tier: str,
    args: Mapping[str, Any],
    compensation: Mapping[str, Any] | None = None,
    call_signature: str | None = None,
) -> dict[str, Any]:
    """The signature is computed unless given. What can be signed but not stored (U+0000,
    nesting past the limit) is refused here, before anything is sent."""
    signature = call_signature or sign(session_id, step_index, tool_name, args)
    check_storable(args)
    if compensation is not None:
        check_storable(compensation, "compensation")
    if not 0 <= step_index <= MAX_STEP_INDEX:
        raise InvalidArgument(f"step_index must be an integer in 0..{MAX_STEP_INDEX}")
    return {
        "session_id": session_id,
        "step_index": step_index,
        "tool_name": tool_name,
        "tier": tier,
        "args": Jsonb(dict(args)),
        "call_signature": signature,
        "compensation": None if compensation is None else Jsonb(dict(compensation)),
    }


def fetch_one(conn: Connection, query: str, params: Params = ()) -> tuple[Any, ...]:
    """One round trip that answers one row; the engine's errors translated."""
    with wire_of(conn).lock, translated():  # no result is sent between settle and execute
        settle(conn)
        row: tuple[Any, ...] | None = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


def fetch_all(conn: Connection, query: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """One round trip that answers any number of rows; the engine's errors translated."""
    with wire_of(conn).lock, translated():  # as fetch_one
        settle(conn)
        return conn.execute(query, params).fetchall()


def begin_session(
    conn: Connection,
    session_id: uuid.UUID | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lease: timedelta = timedelta(minutes=5),
) -> uuid.UUID:
    params = begin_session_params(session_id, agent, metadata, lease)
    return uuid.UUID(str(fetch_one(conn, QUERIES["begin_session"], params)[0]))


def session_state(conn: Connection, session_id: uuid.UUID) -> str:
    return str(fetch_one(conn, QUERIES["session_state"], {"session_id": session_id})[0])


def heartbeat(conn: Connection, session_id: uuid.UUID) -> datetime:
    expires: datetime = fetch_one(conn, QUERIES["heartbeat"], {"session_id": session_id})[0]
    return expires


def register_tool_params(
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> dict[str, Any]:
    """on_reject only when it is not the default: a default tool's registration is then
    the same statement for an engine before on_reject existed (register_tool_query)."""
    params: dict[str, Any] = {
        "tool_name": tool_name,
        "tier": tier,
        "compensation": Jsonb(dict(compensation)) if compensation is not None else None,
    }
    if on_reject != "fail_session":
        params["on_reject"] = on_reject
    return params


def register_tool_query(params: Mapping[str, Any]) -> str:
    """The catalogue's statement for register_tool_params' answer."""
    if "on_reject" in params:
        return QUERIES["register_tool_on_reject"]
    return QUERIES["register_tool"]


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
    rows = fetch_all(conn, QUERIES["approval_decision"], {"approval_id": approval_id})
    return ApprovalDecision(*rows[0]) if rows else None


@dataclass(frozen=True)
class ApprovalEdit:
    """The arguments a person approved an IRREVERSIBLE call with instead of the requested
    ones (undolog.approve_edited; read with undolog.approval_edit). The call's body runs
    with ``approved_args``; the journal keeps both, who edited and why."""

    approval_id: uuid.UUID
    tool_name: str
    requested_args: dict[str, Any]
    approved_args: dict[str, Any]
    decided_by: str
    decided_role: str
    decided_at: datetime
    reason: str | None

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Each argument the edit changed: (requested value, approved value)."""
        return {
            name: (self.requested_args.get(name), value)
            for name, value in self.approved_args.items()
            if self.requested_args.get(name) != value
        }

    @property
    def note(self) -> str:
        """What the agent (a model) is told beside the call's result."""
        changed = "; ".join(
            f"{name}: {json.dumps(old, ensure_ascii=False)} -> "
            f"{json.dumps(new, ensure_ascii=False)}"
            for name, (old, new) in self.changes.items()
        )
        why = f" (reason: {self.reason})" if self.reason else " (no reason given)"
        return (
            f"Note: {self.decided_by} changed the arguments of this {self.tool_name} call "
            f"before approving it{why}. It ran once, with the approved arguments, not the "
            f"requested ones: {changed}."
        )

    def as_dict(self) -> dict[str, Any]:
        """The edit as JSON-ready data (a framework's artifact, a tool result's meta)."""
        return {
            "approval_id": str(self.approval_id),
            "tool": self.tool_name,
            "requested_args": self.requested_args,
            "approved_args": self.approved_args,
            "edited_by": self.decided_by,
            "reason": self.reason,
        }


def approval_edit(
    conn: Connection, session_id: uuid.UUID, effect_id: uuid.UUID
) -> ApprovalEdit | None:
    """The edit of the call ``effect_id``'s approval, or None when its approval made no
    edit (or it is not this login's to see: an agent sees its own sessions' calls)."""
    rows = fetch_all(
        conn, QUERIES["approval_edit"], {"session_id": session_id, "effect_id": effect_id}
    )
    return ApprovalEdit(*rows[0]) if rows else None


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
    return Interception(*fetch_one(conn, QUERIES["intercept"], params))


def intercept_tool_params(
    session_id: uuid.UUID,
    tool_id: uuid.UUID,
    step_index: int,
    args: Mapping[str, Any],
    call_signature: str,
) -> dict[str, Any]:
    """The parameters of the catalogue's intercept_tool. The signature is the caller's:
    it is computed over the tool's name, which the id stands for."""
    check_storable(args)
    if not 0 <= step_index <= MAX_STEP_INDEX:
        raise InvalidArgument(f"step_index must be an integer in 0..{MAX_STEP_INDEX}")
    return {
        "session_id": session_id,
        "tool_id": tool_id,
        "step_index": step_index,
        "args": Jsonb(dict(args)),
        "call_signature": call_signature,
    }


def intercept_tool(
    conn: Connection,
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
    return Interception(*fetch_one(conn, QUERIES["intercept_tool"], params))


def commit(
    conn: Connection, effect_id: uuid.UUID, result: Any, *, asynchronous: bool = False
) -> None:
    """executing -> committed. ``asynchronous``: this transaction commits without waiting
    for its WAL flush; a result lost in a server crash leaves the effect executing, which
    the undo walk compensates (outcome unknown). Inside a transaction of your own, that
    makes your own writes in it asynchronous too. LateResult when the walk had already
    taken the effect (the engine recorded the result and flagged the session)."""
    params = commit_params(effect_id, result, asynchronous)
    check_late(fetch_one(conn, QUERIES["commit"], params)[0], effect_id, "commit")


def fail(conn: Connection, effect_id: uuid.UUID, error: str, *, asynchronous: bool = False) -> None:
    """executing -> pending (the call never took effect); ``asynchronous`` as commit()."""
    params = fail_params(effect_id, error, asynchronous)
    check_late(fetch_one(conn, QUERIES["fail"], params)[0], effect_id, "fail")


def commit_params(effect_id: uuid.UUID, result: Any, asynchronous: bool) -> dict[str, Any]:
    return {"effect_id": effect_id, "result": Jsonb(result), "async": asynchronous}


def fail_params(effect_id: uuid.UUID, error: str, asynchronous: bool) -> dict[str, Any]:
    return {"effect_id": effect_id, "error": error, "async": asynchronous}


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
    fetch_one(conn, QUERIES["set_async_results"], {"value": "on" if on else "off"})


def complete_session(conn: Connection, session_id: uuid.UUID) -> str:
    return str(fetch_one(conn, QUERIES["complete_session"], {"session_id": session_id})[0])


@dataclass(frozen=True)
class SessionHalt:
    """A session's state as its block's exit reads it after an undo walk; ``error`` and
    ``halt_undo_id`` say why and where a halted walk stopped; ``partial``: the walk is an
    undo_to's (it stops at a floor, and the session goes on after it)."""

    state: str
    error: str | None
    halt_undo_id: uuid.UUID | None
    partial: bool

    @property
    def halted_undo_to(self) -> bool:
        return self.state == "halted" and self.partial


def session_halt(conn: Connection, session_id: uuid.UUID) -> SessionHalt:
    return SessionHalt(*fetch_one(conn, QUERIES["session_halt"], {"session_id": session_id}))


def fail_session(conn: Connection, session_id: uuid.UUID, error: str) -> str:
    return str(
        fetch_one(conn, QUERIES["fail_session"], {"session_id": session_id, "error": error})[0]
    )


# The hot path: a journaled call's statements sent on the connection's libpq handle
# (conn.pgconn) in pipeline mode, as named prepared statements with text parameters, each
# followed by its own Sync, so that the server runs and commits each as soon as it
# arrives. A result (commit or fail) is sent without waiting for its answer: the answer
# is read by the connection's next statement (the next intercept, sent behind it in the
# same pipeline, a heartbeat, anything through fetch_one, or settle()), and an error in
# it is kept for the session to raise (take_unsettled) rather than lost.

# The catalogue's intercept_tool, its named parameters as these positional ones (HotCall's).
HOT_INTERCEPT_PARAMS = ("session_id", "tool_id", "step_index", "args", "call_signature")
# The catalogue's commit_effect and fail_effect, as result_params sends them.
HOT_COMMIT_PARAMS = ("session_id", "effect_id", "result", "async")
HOT_FAIL_PARAMS = ("session_id", "effect_id", "error", "async")


def positional(query: str, names: tuple[str, ...]) -> bytes:
    """A catalogue query with its named parameters as $1..$n, in ``names``' order, for a
    statement prepared on the libpq handle."""
    for n, name in enumerate(names, 1):
        query = query.replace(f"%({name})s", f"${n}")
    if "%(" in query:
        raise ValueError(f"a parameter not in {names}: {query}")
    return query.encode()


# Built once, at import: a call sends only the statement's name and its parameters.
_HOT: dict[bytes, bytes] = {
    b"undolog_hot_intercept_tool": positional(QUERIES["intercept_tool"], HOT_INTERCEPT_PARAMS),
    b"undolog_hot_commit": positional(QUERIES["commit_effect"], HOT_COMMIT_PARAMS),
    b"undolog_hot_fail": positional(QUERIES["fail_effect"], HOT_FAIL_PARAMS),
}
_PREPARED_MISSING = "26000"  # a DISCARD ALL (a pool's reset) dropped our statements
PQGen = Generator[Any, Any, Any]


@dataclass
class _Segment:
    """One statement sent and not yet read: what it was, and how many results (a PREPARE
    sent first adds one) come before its Sync."""

    what: str  # intercept | commit | fail
    commands: int
    effect_id: uuid.UUID | None = None


@dataclass
class _Wire:
    """A connection's hot-path state."""

    encoding: str
    prepared: set[bytes] = field(default_factory=set)
    unread: deque[_Segment] = field(default_factory=deque)
    # Errors of results already read (commit, fail), not yet raised to the session.
    errors: list[Exception] = field(default_factory=list)
    # An async connection's reader of an unread result (aengine.send_result).
    reader: Any = None
    # A sync connection's: held (before conn.lock) by whatever sends on the hot path and
    # by fetch_one from its settle() to its own statement, so that no result is sent in
    # between (psycopg would then read that result's answer as its own).
    lock: threading.RLock = field(default_factory=threading.RLock)


_wires: weakref.WeakKeyDictionary[Any, _Wire] = weakref.WeakKeyDictionary()


def wire_of(conn: Any) -> _Wire:
    wire = _wires.get(conn)
    if wire is None:
        wire = _wires[conn] = _Wire(conn.info.encoding)
    return wire


def _text(value: str, wire: _Wire) -> bytes:
    return value.encode(wire.encoding)


def queue(conn: Any, wire: _Wire, name: bytes, params: list[bytes | None], seg: _Segment) -> None:
    """Put one statement and its Sync in the output buffer (the caller flushes)."""
    pgconn = conn.pgconn
    if pgconn.pipeline_status == pq.PipelineStatus.OFF:
        pgconn.enter_pipeline_mode()
    if name not in wire.prepared:
        pgconn.send_prepare(name, _HOT[name])
        wire.prepared.add(name)
        seg.commands = 2
    pgconn.send_query_prepared(name, params)
    pgconn.pipeline_sync()
    wire.unread.append(seg)


def read_gen(conn: Any, wire: _Wire) -> PQGen:
    """Read the oldest unread statement's results up to its Sync: (answer, error)."""
    pgconn = conn.pgconn
    seg = wire.unread[0]
    answer: Any = None
    error: psycopg.Error | None = None
    for _ in range(seg.commands):
        for res in (yield from generators.fetch_many(pgconn)):
            if res.status == pq.ExecStatus.FATAL_ERROR and error is None:
                error = pg_errors.error_from_result(res, encoding=wire.encoding)
            elif res.status == pq.ExecStatus.TUPLES_OK:
                answer = res
    yield from generators.fetch_many(pgconn)  # its PIPELINE_SYNC
    wire.unread.popleft()
    if error is not None and error.sqlstate in (_PREPARED_MISSING, "42P05"):
        wire.prepared.clear()  # prepared again by the next statement
    if not wire.unread:
        pgconn.exit_pipeline_mode()
    return answer, error


def _result_error(seg: _Segment, answer: Any, error: psycopg.Error | None) -> Exception | None:
    """What a commit's or fail's answer tells the session: None when all went well."""
    if error is not None:
        err = translate(error)
        err.add_note(f"raised by the {seg.what} of effect {seg.effect_id}, sent without waiting")
        return err
    text = answer.get_value(0, 0) if answer is not None else None
    if text == b"late":
        assert seg.effect_id is not None
        try:
            check_late("late", seg.effect_id, seg.what)
        except LateResult as late:
            return late
    return None


def _lost(wire: _Wire, exc: psycopg.Error) -> None:
    """The connection failed while answers were unread: each unread result's outcome is
    unknown (it may or may not have been committed)."""
    for seg in wire.unread:
        if seg.what != "intercept":
            err = translate(exc)
            err.add_note(
                f"the answer to the {seg.what} of effect {seg.effect_id} was lost with the "
                "connection: whether it was recorded is unknown"
            )
            wire.errors.append(err)
    wire.unread.clear()


def settle_gen(conn: Any, wire: _Wire, keep: int = 0) -> PQGen:
    """Read every unread result but the last ``keep``, keeping their errors."""
    while len(wire.unread) > keep:
        seg = wire.unread[0]
        try:
            answer, error = yield from read_gen(conn, wire)
        except psycopg.Error as exc:
            _lost(wire, exc)
            raise
        if (err := _result_error(seg, answer, error)) is not None:
            wire.errors.append(err)


def settle(conn: Connection) -> None:
    """Read the answers still unread on this connection (their errors are kept for
    take_unsettled); nothing to do, and no round trip, when there are none."""
    wire = _wires.get(conn)
    if wire is None:
        return
    with wire.lock:
        if not wire.unread:
            return
        with conn.lock, contextlib.suppress(psycopg.Error):  # kept in wire.errors
            conn.wait(settle_gen(conn, wire))


def take_unsettled(conn: Any) -> Exception | None:
    """The first error of a result sent without waiting (the others as notes on it), or
    None; each error is answered once. Reads nothing: settle() first."""
    wire = _wires.get(conn)
    if wire is None or not wire.errors:
        return None
    first, *rest = wire.errors
    wire.errors.clear()
    for other in rest:
        first.add_note(f"and: {type(other).__name__}: {other}")
    return first


def _uuid(value: bytes | None) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(value.decode())


def interception_of(answer: Any) -> Interception:
    value = answer.get_value
    snapshot = value(0, 3)
    return Interception(
        _uuid(value(0, 0)),
        value(0, 1).decode(),
        None if (state := value(0, 2)) is None else state.decode(),
        None if snapshot is None else json.loads(snapshot),
        _uuid(value(0, 4)),
    )


@dataclass(frozen=True)
class HotCall:
    """A journaled call's intercept_tool parameters, as text (args: the canonical JSON
    the signature was computed over); ``tool_id`` is the tool's registration
    (register_tool's answer), which stands for its name, tier and compensation."""

    session_id: uuid.UUID
    tool_id: uuid.UUID
    step_index: int
    args_json: str
    call_signature: str

    def params(self, wire: _Wire) -> list[bytes | None]:
        # In HOT_INTERCEPT_PARAMS' order.
        return [
            str(self.session_id).encode(),
            str(self.tool_id).encode(),
            str(self.step_index).encode(),
            _text(self.args_json, wire),
            self.call_signature.encode(),
        ]


def intercept_gen(conn: Any, wire: _Wire, call: HotCall) -> PQGen:
    """intercept_tool, sent behind whatever result is still unread, then read in order."""
    name = b"undolog_hot_intercept_tool"
    queue(conn, wire, name, call.params(wire), _Segment("intercept", 1))
    yield from generators.send(conn.pgconn)
    yield from settle_gen(conn, wire, keep=1)
    try:
        answer, error = yield from read_gen(conn, wire)
    except psycopg.Error as exc:
        _lost(wire, exc)
        raise
    if error is not None:
        if error.sqlstate == _PREPARED_MISSING:  # after a DISCARD ALL: once more
            return (yield from intercept_gen(conn, wire, call))
        raise error
    return interception_of(answer)


def intercept_hot(conn: Connection, call: HotCall) -> Interception:
    """intercept_tool in one round trip, with the answer to the result sent before it
    (its error, if any, kept for take_unsettled). UnknownTool when ``call.tool_id`` is
    no live registration of this login (retired since): register again, then retry."""
    wire = wire_of(conn)
    with translated(), wire.lock, conn.lock:
        got: Interception = conn.wait(intercept_gen(conn, wire, call))
    return got


def result_params(
    wire: _Wire, what: str, session_id: uuid.UUID, effect_id: uuid.UUID, text: str, asyn: bool
) -> tuple[bytes, list[bytes | None], _Segment]:
    name = b"undolog_hot_commit" if what == "commit" else b"undolog_hot_fail"
    params: list[bytes | None] = [  # in HOT_COMMIT_PARAMS' (HOT_FAIL_PARAMS') order
        str(session_id).encode(),
        str(effect_id).encode(),
        _text(text, wire),
        b"true" if asyn else b"false",
    ]
    return name, params, _Segment(what, 1, effect_id)


def send_gen(
    conn: Any, wire: _Wire, name: bytes, params: list[bytes | None], seg: _Segment
) -> PQGen:
    queue(conn, wire, name, params, seg)
    yield from generators.send(conn.pgconn)


def send_result(
    conn: Connection,
    what: str,
    session_id: uuid.UUID,
    effect_id: uuid.UUID,
    text: str,
    *,
    asynchronous: bool,
    wait: bool,
) -> None:
    """Send a commit (``text``: the result's JSON) or a fail (``text``: the error) and
    return at once; its answer is read by the connection's next statement. ``wait``:
    read it now, and raise its error here (durable results)."""
    wire = wire_of(conn)
    name, params, seg = result_params(wire, what, session_id, effect_id, text, asynchronous)
    with translated(), wire.lock, conn.lock:
        conn.wait(send_gen(conn, wire, name, params, seg))
        if wait:
            conn.wait(settle_gen(conn, wire))
    if wait and (err := take_unsettled(conn)) is not None:
        raise err
