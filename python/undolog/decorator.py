"""``@undolog_tool``: the tier of a tool, declared by its author.

SAFE tools are returned as they are: calling one is calling the function, no database
work at all. COMPENSABLE and IRREVERSIBLE tools are wrapped (signature and docstring
kept): each call binds its arguments (defaults applied), takes the session and the next
step index from the current session, computes the signature, and intercepts. The body
runs only on 'execute'; its result is committed (it must be JSON) or its exception
recorded with fail(); 'replay' returns the cached result without running the body;
'await_approval' raises AwaitingApprovalError; 'rejected' raises ApprovalRejectedError,
carrying the decision (reason, who, when; undolog.approval_decision) and whether the
session goes on (a tool declared ``on_reject="continue"``).
'in_progress' (an earlier run of the session started this call and never reported its
outcome) is logged at once and asked again for the session's ``in_progress_wait``
seconds, then raises CallInProgress.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, overload

import psycopg

from undolog import engine, tracing
from undolog.context import ActiveSession, current_session
from undolog.errors import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    CallInProgress,
    InvalidArgument,
    LeaseLapsed,
    PermissionDenied,
    ResultNotJSON,
    SessionNotActive,
    UndoLogError,
    UnknownSession,
    UnknownTool,
)
from undolog.signature import check_storable, signed_call
from undolog.tiers import CompensationDescriptor, OnReject, ToolTier, check_on_reject

if TYPE_CHECKING:
    from undolog import aengine

P = ParamSpec("P")
R = TypeVar("R")

# A call answered 'in_progress' is asked again for the session's in_progress_wait
# seconds; the first pause between asks (doubling, capped at 1 s).
IN_PROGRESS_FIRST_PAUSE = 0.01
log = logging.getLogger("undolog")

# The edit behind the IRREVERSIBLE call made last in this context (see last_edit).
_last_edit: contextvars.ContextVar[engine.ApprovalEdit | None] = contextvars.ContextVar(
    "undolog_last_edit", default=None
)


def last_edit() -> engine.ApprovalEdit | None:
    """The arguments a person approved the IRREVERSIBLE call made last in this context
    (thread, task) with instead of the requested ones; None when it was approved as asked
    (or the last journaled call was not IRREVERSIBLE). Its body ran with
    ``approved_args``, and its result (returned, or replayed) is theirs: ``note`` says so
    in words for a model. Each IRREVERSIBLE call sets it again."""
    return _last_edit.get()


class _EditRefused(UndoLogError):
    """The body of an edited call could not be given its approved args."""


def _edited_call(
    spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any], edit: engine.ApprovalEdit
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The body's positional and keyword arguments with the approved args in place of
    the requested ones (an instance or class of a method stays as it was called)."""
    bound = spec.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    for name, value in edit.approved_args.items():
        if name not in spec.signature.parameters:
            raise _EditRefused(f"{spec.name} has no parameter {name!r}")
        kind = spec.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            value = tuple(value) if isinstance(value, list) else value
        bound.arguments[name] = value
    return bound.args, bound.kwargs


def _edit_refused(spec: ToolSpec, call: PreparedCall, got: engine.Interception, why: str) -> str:
    return (
        f"{spec.name} step {call.step_index} was approved with edited args (approval "
        f"{got.approval_id}), but {why}: the body was not run, with either the requested or "
        "the approved args; the call is back to approved, for the same call made again"
    )


def _noted(
    spec: ToolSpec, call: PreparedCall, edit: engine.ApprovalEdit | None, *, replayed: bool = False
) -> None:
    _last_edit.set(edit)
    if edit is not None:  # said once, when the body ran; a replay only at INFO
        log.log(
            logging.INFO if replayed else logging.WARNING,
            "%s step %s: %s (approval %s)",
            spec.name,
            call.step_index,
            edit.note,
            edit.approval_id,
        )


@dataclass(frozen=True)
class ToolSpec:
    name: str
    tier: ToolTier
    compensation: CompensationDescriptor | None
    signature: inspect.Signature
    on_reject: OnReject = "fail_session"

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        first = next(iter(self.signature.parameters), None)
        if first in ("self", "cls"):  # a method: the instance is not part of the call
            arguments.pop(first)
        return arguments


@dataclass(frozen=True)
class PreparedCall:
    step_index: int
    args: dict[str, Any]
    signature: str
    args_json: str  # the canonical JSON the signature was computed over

    def hot(self, session: ActiveSession, tool_id: uuid.UUID) -> engine.HotCall:
        """The call as intercept_tool sends it, for the tool's registration ``tool_id``."""
        return engine.HotCall(
            session.session_id, tool_id, self.step_index, self.args_json, self.signature
        )


def _prepare(
    spec: ToolSpec, session: ActiveSession, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> PreparedCall:
    arguments = spec.bind(args, kwargs)
    step = session.next_step()
    if step > engine.MAX_STEP_INDEX:
        raise InvalidArgument(f"step_index must be an integer in 0..{engine.MAX_STEP_INDEX}")
    signature, args_json = signed_call(session.session_id, step, spec.name, arguments)
    check_storable(arguments)  # what can be signed but not stored: refused before sending
    return PreparedCall(step, arguments, signature, args_json)


def _registration_key(spec: ToolSpec, session: ActiveSession) -> tuple[int, str]:
    return (id(session.connection), spec.name)


def _registration(spec: ToolSpec) -> tuple[str, str, dict[str, Any] | None, str]:
    return (
        spec.name,
        spec.tier.value,
        spec.compensation.to_json() if spec.compensation else None,
        spec.on_reject,
    )


# The engine admits a call only for a tool registered for the session's owner, and takes
# its tier and compensation from the registration: a tool's first call on a connection
# registers it (idempotent; a different definition raises ToolRegistrationMismatch), and
# the tool_id it answers is cached; every call then names the tool by that id
# (intercept_tool), so that the engine checks the tool once, not on every call. A cached
# id that the engine no longer admits (UnknownTool: the tool was retired, or the
# connection's id was reused by another login's connection) is registered again once.
def _register(spec: ToolSpec, session: ActiveSession, *, again: bool = False) -> uuid.UUID:
    key = _registration_key(spec, session)
    tool_id = None if again else session.registered_tools.get(key)
    if tool_id is None:
        conn = cast(engine.Connection, session.connection)
        tool_id = session.registered_tools[key] = engine.register_tool(conn, *_registration(spec))
    return tool_id


async def _aregister(spec: ToolSpec, session: ActiveSession, *, again: bool = False) -> uuid.UUID:
    from undolog import aengine

    key = _registration_key(spec, session)
    tool_id = None if again else session.registered_tools.get(key)
    if tool_id is None:
        conn = cast(aengine.AsyncConnection, session.connection)
        tool_id = await aengine.register_tool(conn, *_registration(spec))
        session.registered_tools[key] = tool_id
    return tool_id


def _intercept(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> engine.Interception:
    """intercept, in one round trip with the answer to the previous call's result (sent
    without waiting). An error in that answer is raised here, before this call runs."""
    conn = cast(engine.Connection, session.connection)
    try:
        tool_id = _register(spec, session)
        try:
            got = engine.intercept_hot(conn, call.hot(session, tool_id))
        except UnknownTool:
            tool_id = _register(spec, session, again=True)
            got = engine.intercept_hot(conn, call.hot(session, tool_id))
    except BaseException as exc:
        if (earlier := engine.take_unsettled(conn)) is not None:
            raise earlier from exc
        raise
    if (earlier := engine.take_unsettled(conn)) is not None:
        if got.action == "execute" and got.effect_id is not None:
            # Journaled but not run: recorded as failed, so that nothing compensates it.
            engine.send_result(
                conn,
                "fail",
                session.session_id,
                got.effect_id,
                _not_run(earlier),
                asynchronous=False,
                wait=True,
            )
        raise earlier
    return got


async def _aintercept(
    spec: ToolSpec, session: ActiveSession, call: PreparedCall
) -> engine.Interception:
    """As _intercept, awaited."""
    from undolog import aengine

    conn = cast(aengine.AsyncConnection, session.connection)
    try:
        tool_id = await _aregister(spec, session)
        try:
            got = await aengine.intercept_hot(conn, call.hot(session, tool_id))
        except UnknownTool:
            tool_id = await _aregister(spec, session, again=True)
            got = await aengine.intercept_hot(conn, call.hot(session, tool_id))
    except BaseException as exc:
        if (earlier := engine.take_unsettled(conn)) is not None:
            raise earlier from exc
        raise
    if (earlier := engine.take_unsettled(conn)) is not None:
        if got.action == "execute" and got.effect_id is not None:
            await aengine.send_result(
                conn,
                "fail",
                session.session_id,
                got.effect_id,
                _not_run(earlier),
                asynchronous=False,
                wait=True,
            )
        raise earlier
    return got


def _not_run(earlier: Exception) -> str:
    return (
        "not run: the result of the session's previous journaled call could not be "
        f"recorded ({type(earlier).__name__}: {earlier})"
    )


def _result_json(spec: ToolSpec, session: ActiveSession, call: PreparedCall, result: Any) -> str:
    """The result as the JSON text commit stores (ResultNotJSON when JSON cannot carry it
    exactly: the call is then left executing, outcome unknown)."""
    try:
        return json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        session.unknown_outcome = f"{spec.name} step {call.step_index}"
        raise ResultNotJSON(
            f"{spec.name} returned {type(result).__name__}, which JSON cannot carry "
            f"exactly ({exc}); the call is left executing, and the session will fail so "
            "that the undo walk compensates it"
        ) from exc


def _refuse_unless_executable(
    spec: ToolSpec, session: ActiveSession, got: engine.Interception
) -> None:
    if got.action == "await_approval":
        raise AwaitingApprovalError(
            f"{spec.name} is IRREVERSIBLE and waits for approval {got.approval_id}",
            got.approval_id,
            got.effect_id,
            session.session_id,
        )
    if got.action != "execute":
        raise UndoLogError(f"unexpected intercept action {got.action!r}")


def _rejected(
    spec: ToolSpec,
    session: ActiveSession,
    call: PreparedCall,
    got: engine.Interception,
    decision: engine.ApprovalDecision | None,
) -> ApprovalRejectedError:
    """The error for a call intercept answered 'rejected', with the decision on it."""
    if decision is None:  # not readable by this login: what intercept said is all there is
        return ApprovalRejectedError(
            f"{spec.name} step {call.step_index} was rejected (approval {got.approval_id}) "
            "and will never run",
            got.approval_id,
            got.effect_id,
            session.session_id,
        )
    if decision.decision == "expired":
        what = f"its approval expired at {decision.decided_at}" + (
            f" (closed by {decision.decided_by})" if decision.decided_by else ""
        )
    else:
        what = f"{decision.decided_by} rejected it at {decision.decided_at}"
    what += f": {decision.reason}" if decision.reason else " (no reason given)"
    if got.state == "rejected":
        head = f"{spec.name} step {call.step_index} will never run: {what}"
    else:  # a call the undo walk took after another call's rejection ended the session
        head = (
            f"{spec.name} step {call.step_index} cannot run: session {session.session_id} "
            f"was undone because a human refused {decision.tool_name or 'a call'} "
            f"(approval {decision.approval_id}): {what}"
        )
    if decision.session_continues:
        nxt = (
            "the session goes on (the tool is on_reject='continue'): catch "
            "ApprovalRejectedError to make other calls; uncaught, it fails the session"
        )
    else:
        nxt = "the session's calls are undone by its walk; start a new session to go on"
    return ApprovalRejectedError(
        f"{head}; {nxt}",
        decision.approval_id,
        got.effect_id,
        session.session_id,
        reason=decision.reason,
        decided_by=decision.decided_by,
        decided_at=decision.decided_at,
        session_continues=decision.session_continues,
        decision=decision.decision,
    )


def _decision(conn: engine.Connection, got: engine.Interception) -> engine.ApprovalDecision | None:
    if got.approval_id is None:
        return None
    try:
        return engine.approval_decision(conn, got.approval_id)
    except (UndoLogError, psycopg.Error):  # never hide the rejection behind this read
        log.warning("approval %s: reading its decision failed", got.approval_id, exc_info=True)
        return None


async def _adecision(
    conn: aengine.AsyncConnection, got: engine.Interception
) -> engine.ApprovalDecision | None:
    from undolog import aengine

    if got.approval_id is None:
        return None
    try:
        return await aengine.approval_decision(conn, got.approval_id)
    except (UndoLogError, psycopg.Error):  # never hide the rejection behind this read
        log.warning("approval %s: reading its decision failed", got.approval_id, exc_info=True)
        return None


def _replayed_edit(
    conn: engine.Connection, session: ActiveSession, got: engine.Interception
) -> engine.ApprovalEdit | None:
    """The edit behind a replayed IRREVERSIBLE call: its result is the edited call's."""
    assert got.effect_id is not None
    try:
        return engine.approval_edit(conn, session.session_id, got.effect_id)
    except (UndoLogError, psycopg.Error):  # never hide the replayed result behind this read
        log.warning("effect %s: reading its approval's edit failed", got.effect_id, exc_info=True)
        return None


async def _areplayed_edit(
    conn: aengine.AsyncConnection, session: ActiveSession, got: engine.Interception
) -> engine.ApprovalEdit | None:
    from undolog import aengine

    assert got.effect_id is not None
    try:
        return await aengine.approval_edit(conn, session.session_id, got.effect_id)
    except (UndoLogError, psycopg.Error):
        log.warning("effect %s: reading its approval's edit failed", got.effect_id, exc_info=True)
        return None


# A body does not start on a lease that may have lapsed: with less than this share of the
# lease left (heartbeats renew it every third, so at least two thirds are normally left),
# the lease is renewed first, and if that fails the body is not run.
LEASE_SAFETY = 0.5


def _lease_is_short(session: ActiveSession) -> bool:
    deadline = session.lease_deadline
    return deadline is not None and (
        time.monotonic() >= deadline - session.lease_seconds * LEASE_SAFETY
    )


def _lease_lapsed(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> LeaseLapsed:
    return LeaseLapsed(
        f"{spec.name} step {call.step_index} was not run: the lease of session "
        f"{session.session_id} may have lapsed before its body started (the agent was "
        "paused, or heartbeats were late) and it could not be renewed; recovery may "
        "already have failed the session and compensated the call"
    )


def _renewed(session: ActiveSession, sent: float) -> None:
    session.lease_deadline = sent + session.lease_seconds


def _ensure_lease(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> None:
    if not _lease_is_short(session):
        return
    sent = time.monotonic()
    try:
        engine.heartbeat(cast(engine.Connection, session.connection), session.session_id)
    except (SessionNotActive, UnknownSession, PermissionDenied) as exc:
        raise _lease_lapsed(spec, session, call) from exc
    _renewed(session, sent)


async def _aensure_lease(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> None:
    from undolog import aengine

    if not _lease_is_short(session):
        return
    sent = time.monotonic()
    try:
        await aengine.heartbeat(
            cast(aengine.AsyncConnection, session.connection), session.session_id
        )
    except (SessionNotActive, UnknownSession, PermissionDenied) as exc:
        raise _lease_lapsed(spec, session, call) from exc
    _renewed(session, sent)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _in_progress_pauses(
    spec: ToolSpec, session: ActiveSession, call: PreparedCall, got: engine.Interception
) -> Iterator[float]:
    """The pauses between asking again about a call that is still executing, for the
    session's in_progress_wait seconds; says at once what it waits for and why."""
    wait = session.in_progress_wait
    log.warning(
        "%s step %s of session %s is journaled as executing (effect %s): an earlier run "
        "of this session started it and never reported its outcome (a crashed agent, or "
        "the same call still running elsewhere). %s",
        spec.name,
        call.step_index,
        session.session_id,
        got.effect_id,
        f"Waiting up to {wait:g} s for its outcome (in_progress_wait), then CallInProgress."
        if wait > 0
        else "in_progress_wait=0: CallInProgress now.",
    )
    pause, deadline = IN_PROGRESS_FIRST_PAUSE, time.monotonic() + wait
    while (remaining := deadline - time.monotonic()) > 0:
        yield min(pause, remaining)
        pause = min(pause * 2, 1.0)


def _still_in_progress(
    spec: ToolSpec, session: ActiveSession, call: PreparedCall, got: engine.Interception
) -> CallInProgress:
    return CallInProgress(
        f"{spec.name} step {call.step_index} is still executing (effect {got.effect_id}, "
        f"after waiting {session.in_progress_wait:g} s): its outcome is unknown; leaving "
        "the session with this error fails it, so that the undo walk compensates the call",
        session_id=session.session_id,
        effect_id=got.effect_id,
        tool_name=spec.name,
        step_index=call.step_index,
    )


def _sync_wrapper(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracing.tool_call(spec.name, spec.tier):  # a span, when OpenTelemetry is there
            return journaled(*args, **kwargs)

    def journaled(*args: Any, **kwargs: Any) -> Any:
        session = current_session()
        if session.is_async:
            raise UndoLogError(
                f"{spec.name} is a sync journaled tool inside an async session: "
                "make the tool async, or use a sync UndoLog"
            )
        conn = cast(engine.Connection, session.connection)
        if spec.tier is ToolTier.IRREVERSIBLE:
            _last_edit.set(None)
        call = _prepare(spec, session, args, kwargs)
        got = _intercept(spec, session, call)
        if got.action == "in_progress":
            for pause in _in_progress_pauses(spec, session, call, got):
                time.sleep(pause)
                got = _intercept(spec, session, call)
                if got.action != "in_progress":
                    break
            else:
                raise _still_in_progress(spec, session, call, got)
        tracing.called(got.effect_id, got.action, session.session_id, got.approval_id)
        if got.action == "replay":
            if spec.tier is ToolTier.IRREVERSIBLE:
                _noted(spec, call, _replayed_edit(conn, session, got), replayed=True)
            return got.result_snapshot
        if got.action == "rejected":
            raise _rejected(spec, session, call, got, _decision(conn, got))
        _refuse_unless_executable(spec, session, got)
        assert got.effect_id is not None
        edit = None
        if got.approval_id is not None:  # a person edited the args: run it with theirs
            try:
                edit = engine.approval_edit(conn, session.session_id, got.effect_id)
                if edit is None:
                    raise _EditRefused("its edit cannot be read by this login")
                args, kwargs = _edited_call(spec, args, kwargs, edit)
            except (UndoLogError, psycopg.Error, TypeError) as exc:
                why = _edit_refused(spec, call, got, _describe(exc))
                engine.fail(conn, got.effect_id, why)
                raise UndoLogError(why) from exc
        _ensure_lease(spec, session, call)
        # The result is sent and not waited for (unless durable_results): its answer is
        # read with the session's next statement, and its error raised there.
        durable = session.durable_results
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # the tool reported failure: it never took effect
            engine.send_result(
                conn,
                "fail",
                session.session_id,
                got.effect_id,
                _describe(exc),
                asynchronous=not durable,
                wait=durable,
            )
            raise
        except BaseException:  # cancelled or interrupted: it may have acted
            session.unknown_outcome = f"{spec.name} step {call.step_index}"
            raise
        engine.send_result(
            conn,
            "commit",
            session.session_id,
            got.effect_id,
            _result_json(spec, session, call, result),
            asynchronous=not durable,
            wait=durable,
        )
        if spec.tier is ToolTier.IRREVERSIBLE:
            _noted(spec, call, edit)
        return result

    return wrapper


def _async_wrapper(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    from undolog import aengine

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracing.tool_call(spec.name, spec.tier):  # a span, when OpenTelemetry is there
            return await journaled(*args, **kwargs)

    async def journaled(*args: Any, **kwargs: Any) -> Any:
        session = current_session()
        if not session.is_async:
            raise UndoLogError(
                f"{spec.name} is an async journaled tool inside a sync session: use AsyncUndoLog"
            )
        conn = cast(aengine.AsyncConnection, session.connection)
        if spec.tier is ToolTier.IRREVERSIBLE:
            _last_edit.set(None)
        call = _prepare(spec, session, args, kwargs)
        got = await _aintercept(spec, session, call)
        if got.action == "in_progress":
            for pause in _in_progress_pauses(spec, session, call, got):
                await asyncio.sleep(pause)
                got = await _aintercept(spec, session, call)
                if got.action != "in_progress":
                    break
            else:
                raise _still_in_progress(spec, session, call, got)
        tracing.called(got.effect_id, got.action, session.session_id, got.approval_id)
        if got.action == "replay":
            if spec.tier is ToolTier.IRREVERSIBLE:
                _noted(spec, call, await _areplayed_edit(conn, session, got), replayed=True)
            return got.result_snapshot
        if got.action == "rejected":
            raise _rejected(spec, session, call, got, await _adecision(conn, got))
        _refuse_unless_executable(spec, session, got)
        assert got.effect_id is not None
        edit = None
        if got.approval_id is not None:  # a person edited the args: run it with theirs
            try:
                edit = await aengine.approval_edit(conn, session.session_id, got.effect_id)
                if edit is None:
                    raise _EditRefused("its edit cannot be read by this login")
                args, kwargs = _edited_call(spec, args, kwargs, edit)
            except (UndoLogError, psycopg.Error, TypeError) as exc:
                why = _edit_refused(spec, call, got, _describe(exc))
                await aengine.fail(conn, got.effect_id, why)
                raise UndoLogError(why) from exc
        await _aensure_lease(spec, session, call)
        durable = session.durable_results  # as the sync wrapper: unwaited unless durable
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:  # the tool reported failure: it never took effect
            await aengine.send_result(
                conn,
                "fail",
                session.session_id,
                got.effect_id,
                _describe(exc),
                asynchronous=not durable,
                wait=durable,
            )
            raise
        except BaseException:  # cancelled or interrupted: it may have acted
            session.unknown_outcome = f"{spec.name} step {call.step_index}"
            raise
        await aengine.send_result(
            conn,
            "commit",
            session.session_id,
            got.effect_id,
            _result_json(spec, session, call, result),
            asynchronous=not durable,
            wait=durable,
        )
        if spec.tier is ToolTier.IRREVERSIBLE:
            _noted(spec, call, edit)
        return result

    return wrapper


@overload
def undolog_tool(
    *,
    tier: ToolTier,
    compensation: CompensationDescriptor | None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
@overload
def undolog_tool(
    fn: Callable[P, R],
    /,
    *,
    tier: ToolTier = ...,
    compensation: None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Callable[P, R]: ...
def undolog_tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    tier: ToolTier = ToolTier.SAFE,
    compensation: CompensationDescriptor | None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Any:
    """Declare a tool's tier (and, for COMPENSABLE, its compensation).

    ``on_reject`` (IRREVERSIBLE only) is what a human's rejection of a call does:
    "fail_session" (the default) fails the session and undoes its calls; "continue"
    keeps the session active, and the call raises ApprovalRejectedError with the
    person's reason (``session_continues`` True) for the caller to handle.
    """
    if not isinstance(tier, ToolTier):
        raise TypeError(f"tier must be a ToolTier, not {tier!r}")
    if tier is ToolTier.COMPENSABLE and compensation is None:
        raise ValueError("a COMPENSABLE tool needs compensation=CompensationDescriptor.new(...)")
    if tier is not ToolTier.COMPENSABLE and compensation is not None:
        raise ValueError(f"a {tier.name} tool cannot carry a compensation")
    checked_on_reject = check_on_reject(on_reject, tier)

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        if tier is ToolTier.SAFE:
            return func  # called directly: no wrapper, no database, no overhead
        spec = ToolSpec(
            name or func.__name__,
            tier,
            compensation,
            inspect.signature(func),
            checked_on_reject,
        )
        wrap = _async_wrapper if inspect.iscoroutinefunction(func) else _sync_wrapper
        wrapped = wrap(spec, func)
        wrapped.__undolog_tool__ = spec  # type: ignore[attr-defined]
        return cast(Callable[P, R], wrapped)

    return decorate(fn) if fn is not None else decorate


def tool_spec(fn: Callable[..., Any]) -> ToolSpec | None:
    """The declaration behind a journaled tool (None for SAFE and plain functions)."""
    spec: ToolSpec | None = getattr(fn, "__undolog_tool__", None)
    return spec
