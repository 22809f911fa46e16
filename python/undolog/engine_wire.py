"""The hot path's wire protocol, shared by undolog.aengine and its generated sync twin
undolog.engine (which send with it: intercept_hot, send_result, settle).

A journaled call's statements are sent on the connection's libpq handle (conn.pgconn) in
pipeline mode, as named prepared statements with text parameters, each followed by its
own Sync, so that the server runs and commits each as soon as it arrives. A result
(commit or fail) is sent without waiting for its answer: the answer is read by the
connection's next statement (the next intercept, sent behind it in the same pipeline, a
heartbeat, anything through fetch_one, or settle()), and an error in it is kept for the
session to raise (take_unsettled) rather than lost. The generators here only say what to
send and read; each engine module runs them (``conn.wait``) under its own locks.
"""

from __future__ import annotations

import json
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq

from undolog.engine_common import Interception, check_late
from undolog.errors import LateResult, translate
from undolog.queries import QUERIES

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
class Segment:
    """One statement sent and not yet read: what it was, and how many results (a PREPARE
    sent first adds one) come before its Sync."""

    what: str  # intercept | commit | fail
    commands: int
    effect_id: uuid.UUID | None = None


@dataclass
class Wire:
    """A connection's hot-path state."""

    encoding: str
    prepared: set[bytes] = field(default_factory=set)
    unread: deque[Segment] = field(default_factory=deque)
    # Errors of results already read (commit, fail), not yet raised to the session.
    errors: list[Exception] = field(default_factory=list)
    # An async connection's reader of an unread result (undolog._acompat.read_later).
    reader: Any = None
    # A sync connection's: held (before conn.lock) by whatever sends on the hot path and
    # by fetch_optional/fetch_all from their settle() to their own statement
    # (undolog._compat.exclusive).
    lock: threading.RLock = field(default_factory=threading.RLock)


_wires: weakref.WeakKeyDictionary[Any, Wire] = weakref.WeakKeyDictionary()


def wire_of(conn: Any) -> Wire:
    wire = _wires.get(conn)
    if wire is None:
        wire = _wires[conn] = Wire(conn.info.encoding)
    return wire


def wire_if_any(conn: Any) -> Wire | None:
    """The connection's hot-path state, None when it has none yet (nothing to read)."""
    return _wires.get(conn)


def _text(value: str, wire: Wire) -> bytes:
    return value.encode(wire.encoding)


def queue(conn: Any, wire: Wire, name: bytes, params: list[bytes | None], seg: Segment) -> None:
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


def read_gen(conn: Any, wire: Wire) -> PQGen:
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


def _result_error(seg: Segment, answer: Any, error: psycopg.Error | None) -> Exception | None:
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


def _lost(wire: Wire, exc: psycopg.Error) -> None:
    """The connection failed while answers were unread: each unread result's outcome is
    unknown (it may or may not have been committed). One error says so for all of them,
    an object of its own: ``exc`` itself is raised to the caller, which raises this one
    from it (a connection's error is not ours, and translate answers it unchanged)."""
    lost = [seg for seg in wire.unread if seg.what != "intercept"]
    wire.unread.clear()
    if not lost:
        return
    err = translate(exc)
    if err is exc:
        err = type(exc)(str(exc))
        err.__cause__ = exc
    for seg in lost:
        err.add_note(
            f"the answer to the {seg.what} of effect {seg.effect_id} was lost with the "
            "connection: whether it was recorded is unknown"
        )
    wire.errors.append(err)


def settle_gen(conn: Any, wire: Wire, keep: int = 0) -> PQGen:
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


def take_unsettled(conn: Any) -> Exception | None:
    """The first error of a result sent without waiting (the others as notes on it), or
    None; each error is answered once. Reads nothing: settle() first."""
    wire = _wires.get(conn)
    if wire is None or not wire.errors:
        return None
    # Taken one at a time (list.pop is atomic): a thread of the same session that adds
    # an error meanwhile (it reads an answer under the connection's lock, which this
    # does not hold) neither loses it to a clear() nor has it taken twice.
    taken: list[Exception] = []
    while True:
        try:
            taken.append(wire.errors.pop(0))
        except IndexError:
            break
    if not taken:
        return None
    first, *rest = taken
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

    def params(self, wire: Wire) -> list[bytes | None]:
        # In HOT_INTERCEPT_PARAMS' order.
        return [
            str(self.session_id).encode(),
            str(self.tool_id).encode(),
            str(self.step_index).encode(),
            _text(self.args_json, wire),
            self.call_signature.encode(),
        ]


def intercept_gen(conn: Any, wire: Wire, call: HotCall) -> PQGen:
    """intercept_tool, sent behind whatever result is still unread, then read in order."""
    name = b"undolog_hot_intercept_tool"
    queue(conn, wire, name, call.params(wire), Segment("intercept", 1))
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


def result_params(
    wire: Wire, what: str, session_id: uuid.UUID, effect_id: uuid.UUID, text: str, asyn: bool
) -> tuple[bytes, list[bytes | None], Segment]:
    name = b"undolog_hot_commit" if what == "commit" else b"undolog_hot_fail"
    params: list[bytes | None] = [  # in HOT_COMMIT_PARAMS' (HOT_FAIL_PARAMS') order
        str(session_id).encode(),
        str(effect_id).encode(),
        _text(text, wire),
        b"true" if asyn else b"false",
    ]
    return name, params, Segment(what, 1, effect_id)


def send_gen(conn: Any, wire: Wire, name: bytes, params: list[bytes | None], seg: Segment) -> PQGen:
    queue(conn, wire, name, params, seg)
    yield from generators.send(conn.pgconn)
