"""What the journaled tools' wrappers share (undolog.adecorator's async ones and the sync
twins generated from them in undolog.decorator_sync): the tool's declaration, the call
prepared for intercept, and the errors and log lines of the call's outcomes. The
decorator itself is undolog.decorator.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from undolog import engine
from undolog.context import ActiveSession, RegistrationKey
from undolog.engine_common import check_step_index
from undolog.errors import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    CallInProgress,
    InvalidStateTransition,
    LeaseLapsed,
    ResultNotJSON,
    SignatureError,
    UndoLogError,
)
from undolog.signature import canonical_json, check_storable, signed_call
from undolog.tiers import CompensationDescriptor, OnReject, ToolTier

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
    # The tool is a method, decided when it was declared (undolog.decorator): its first
    # parameter, its instance or class, is left out of the journaled call.
    method: bool = False

    @functools.cached_property
    def definition(self) -> Definition:
        """What its registration holds, hashable (computed once: it is on the hot path)."""
        return definition_of(_registration(self))

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if self.method:  # its instance or class is not part of the call
            arguments.pop(next(iter(self.signature.parameters)))
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
    check_step_index(step)
    try:
        signature, args_json = signed_call(session.session_id, step, spec.name, arguments)
    except SignatureError as exc:
        raise _unsigned(spec, arguments, exc) from exc
    check_storable(arguments)  # what can be signed but not stored: refused before sending
    return PreparedCall(step, arguments, signature, args_json)


def _unsigned(spec: ToolSpec, arguments: dict[str, Any], exc: SignatureError) -> SignatureError:
    """The SignatureError of a call whose arguments cannot be signed; when its first
    argument, named ``self`` or ``cls``, is what cannot be (an instance, a class), it
    says that the tool was not taken for a method, and how to declare it one."""
    first = next(iter(spec.signature.parameters), None)
    if spec.method or first not in ("self", "cls") or first not in arguments:
        return exc
    try:
        canonical_json(arguments[first])
    except SignatureError:
        return SignatureError(
            f"{spec.name}: its first parameter, {first!r}, is part of its journaled call "
            f"(it is not declared in a class body, so it was not taken for a method), and "
            f"its value, {type(arguments[first]).__name__}, cannot be signed ({exc}). A "
            f"method made elsewhere: declare it with @undolog_tool(..., method=True), so "
            f"that its instance or class is left out of the call"
        )
    return exc


# A registration's (name, tier, compensation as canonical JSON, on_reject).
Definition = tuple[str, str, str | None, str]


def definition_of(registration: tuple[str, str, dict[str, Any] | None, str]) -> Definition:
    name, tier, compensation, on_reject = registration
    canonical = None if compensation is None else json.dumps(compensation, sort_keys=True)
    return (name, tier, canonical, on_reject)


def registration_key(conn: object, definition: Definition) -> RegistrationKey:
    """The registered_tools key of a tool's definition on ``conn``. By the connection's
    id: a new connection that reuses a closed one's id finds a tool_id of the same
    client's login (or, another login's, is told UnknownTool and registers again); by the
    whole definition: another definition under the same name registers, and is refused."""
    return (id(conn), *definition)


def _registration_key(spec: ToolSpec, session: ActiveSession) -> RegistrationKey:
    return registration_key(session.connection, spec.definition)


def _registration(spec: ToolSpec) -> tuple[str, str, dict[str, Any] | None, str]:
    return (
        spec.name,
        spec.tier.value,
        spec.compensation.to_json() if spec.compensation else None,
        spec.on_reject,
    )


def _not_run(earlier: Exception) -> str:
    return (
        "not run: the result of the session's previous journaled call could not be "
        f"recorded ({type(earlier).__name__}: {earlier})"
    )


def _taken(conn: object, session: ActiveSession) -> Exception | None:
    """engine.take_unsettled: the error of a result sent without waiting, also kept on
    the session (ActiveSession.refused) for its later IRREVERSIBLE calls and its exit to
    raise again, when the agent catches it here and carries on."""
    earlier = engine.take_unsettled(conn)
    if earlier is not None:
        session.keep_refused(earlier)
    return earlier


def _cannot_complete(session: ActiveSession) -> InvalidStateTransition:
    """An IRREVERSIBLE call in a session whose call's outcome is unknown: it is not
    asked about (the session can only fail)."""
    return InvalidStateTransition(
        f"session {session.session_id} cannot complete: the outcome of "
        f"{session.unknown_outcome} is unknown (it may have acted), so no IRREVERSIBLE "
        "call is asked about in it; leaving the block fails the session, and the undo "
        "walk compensates that call"
    )


def _result_json(spec: ToolSpec, session: ActiveSession, call: PreparedCall, result: Any) -> str:
    """The result as the JSON text commit stores (ResultNotJSON when JSON cannot carry it
    exactly: the call is then left executing, outcome unknown)."""
    try:
        return json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
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


def _wrong_session(spec: ToolSpec, session: ActiveSession) -> UndoLogError:
    """A sync tool called in an async session, or an async one in a sync session."""
    if session.is_async:
        return UndoLogError(
            f"{spec.name} is a sync journaled tool inside an async session: "
            "make the tool async, or use a sync UndoLog"
        )
    return UndoLogError(
        f"{spec.name} is an async journaled tool inside a sync session: use AsyncUndoLog"
    )
