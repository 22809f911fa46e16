"""The wrapper of an async journaled tool (:func:`wrap`) and the round trips it makes.

This module is the source, written by hand; undolog.decorator_sync, the wrapper of a
sync tool, is generated from it by tools/async_to_sync.py. What both share without a twin
is in undolog.decorator_common; ``@undolog_tool`` (undolog.decorator) picks the wrapper.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import psycopg

from undolog import _acompat, aengine, tracing
from undolog.context import ActiveSession, current_session
from undolog.decorator_common import (
    PreparedCall,
    ToolSpec,
    _cannot_complete,
    _describe,
    _edit_refused,
    _edited_call,
    _EditRefused,
    _in_progress_pauses,
    _last_edit,
    _lease_is_short,
    _lease_lapsed,
    _not_run,
    _noted,
    _prepare,
    _refuse_unless_executable,
    _registration,
    _registration_key,
    _rejected,
    _renewed,
    _result_json,
    _still_in_progress,
    _taken,
    _wrong_session,
    log,
)
from undolog.engine import ApprovalDecision, ApprovalEdit, Interception
from undolog.errors import (
    PermissionDenied,
    SessionNotActive,
    UndoLogError,
    UnknownSession,
    UnknownTool,
)
from undolog.tiers import ToolTier


# The engine admits a call only for a tool registered for the session's owner, and takes
# its tier and compensation from the registration: a tool's first call on a connection
# registers it (idempotent; a different definition raises ToolRegistrationMismatch), and
# the tool_id it answers is cached; every call then names the tool by that id
# (intercept_tool), so that the engine checks the tool once, not on every call. A cached
# id that the engine no longer admits (UnknownTool: the tool was retired, or the
# connection's id was reused by another login's connection) is registered again once.
async def register(spec: ToolSpec, session: ActiveSession, *, again: bool = False) -> uuid.UUID:
    key = _registration_key(spec, session)
    tool_id = None if again else session.registered_tools.get(key)
    if tool_id is None:
        conn = cast(aengine.AsyncConnection, session.connection)
        tool_id = await aengine.register_tool(conn, *_registration(spec))
        session.registered_tools[key] = tool_id
    return tool_id


async def settled_before_asking(conn: aengine.AsyncConnection, session: ActiveSession) -> None:
    """Raise the error of a result sent without waiting before an IRREVERSIBLE call is
    intercepted (or a framework run's held calls are asked about). Its intercept may
    write an approval request, which suspends the session (awaiting_approval); raised
    only after that, the error would leave the block with the session suspended, which
    leaving fails only when it is active: the unrecorded call would not be compensated,
    and a person would be asked to approve a call of a doomed run. A round trip of its
    own only when an answer is unread, for a call that may wait for a person anyway.
    The error taken by an earlier statement (and caught by the agent) is kept on the
    session and raised again here; so is a call whose outcome is unknown (the session
    cannot complete either): nobody is asked in a session that can only fail."""
    # Once the block was left, what is unsettled is its exit's to raise (and the
    # connection may already serve another session): checked before and after reading.
    session.check_in_block()
    await aengine.settle(conn)
    session.check_in_block()
    _taken(conn, session)
    if (refused := session.refused) is not None:
        raise refused
    if session.unknown_outcome is not None:
        raise _cannot_complete(session)


async def intercept(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> Interception:
    """intercept, in one round trip with the answer to the previous call's result (sent
    without waiting). An error in that answer is raised here, before this call runs."""
    conn = cast(aengine.AsyncConnection, session.connection)
    guard = session.check_in_block
    if spec.tier is ToolTier.IRREVERSIBLE:
        await settled_before_asking(conn, session)
    try:
        tool_id = await register(spec, session)
        try:
            got = await aengine.intercept_hot(conn, call.hot(session, tool_id), guard=guard)
        except UnknownTool:
            tool_id = await register(spec, session, again=True)
            got = await aengine.intercept_hot(conn, call.hot(session, tool_id), guard=guard)
    except BaseException as exc:
        # Once the block was left, what is unsettled is its exit's to raise (the
        # connection may already serve another session). A cancellation or an interrupt
        # goes on as it is, the earlier error left for the exit, which notes it on it:
        # raised in its place, an agent that catches Exception would swallow it.
        if (
            isinstance(exc, Exception)
            and not session.left
            and (earlier := _taken(conn, session)) is not None
        ):
            raise earlier from exc
        raise
    if (earlier := _taken(conn, session)) is not None:
        if got.action == "execute" and got.effect_id is not None:
            # Journaled but not run: recorded as failed, so that nothing compensates it.
            try:
                await aengine.send_result(
                    conn,
                    "fail",
                    session.session_id,
                    got.effect_id,
                    _not_run(earlier),
                    asynchronous=False,
                    wait=True,
                    guard=guard,
                )
            except Exception as exc:  # not recorded: still the earlier error raised
                raise earlier from exc
            except BaseException as exc:  # a cancellation, an interrupt: it goes on
                exc.add_note(f"also, the session's last result was not recorded: {earlier!r}")
                raise
        raise earlier
    return got


async def decision(conn: aengine.AsyncConnection, got: Interception) -> ApprovalDecision | None:
    if got.approval_id is None:
        return None
    try:
        return await aengine.approval_decision(conn, got.approval_id)
    except (UndoLogError, psycopg.Error):  # never hide the rejection behind this read
        log.warning("approval %s: reading its decision failed", got.approval_id, exc_info=True)
        return None


async def replayed_edit(
    conn: aengine.AsyncConnection, session: ActiveSession, got: Interception
) -> ApprovalEdit | None:
    """The edit behind a replayed IRREVERSIBLE call: its result is the edited call's."""
    assert got.effect_id is not None
    try:
        return await aengine.approval_edit(conn, session.session_id, got.effect_id)
    except (UndoLogError, psycopg.Error):  # never hide the replayed result behind this read
        log.warning("effect %s: reading its approval's edit failed", got.effect_id, exc_info=True)
        return None


async def ensure_lease(spec: ToolSpec, session: ActiveSession, call: PreparedCall) -> None:
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


async def send_outcome(
    spec: ToolSpec,
    session: ActiveSession,
    call: PreparedCall,
    effect_id: uuid.UUID,
    what: str,
    text: str,
) -> None:
    """Send the body's outcome (commit or fail; waited for, and its error raised, when
    durable_results). When it is not sent (cancelled or interrupted while the connection
    was busy with a heartbeat or a query of the agent's, the connection lost) or, waited
    for, not recorded (PayloadTooLarge ...), the call stays executing: its outcome is
    unknown, and the session must fail rather than complete, also when the agent catches
    the error and carries on."""
    durable = session.durable_results
    conn = cast(aengine.AsyncConnection, session.connection)
    try:
        await aengine.send_result(
            conn,
            what,
            session.session_id,
            effect_id,
            text,
            asynchronous=not durable,
            wait=durable,
            guard=session.check_in_block,
        )
    except BaseException:  # not sent, or (durable) refused: the call is left executing
        session.unknown_outcome = f"{spec.name} step {call.step_index}"
        raise


def wrap(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The journaled wrapper of the tool ``fn`` (signature and docstring kept)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracing.tool_call(spec.name, spec.tier):  # a span, when OpenTelemetry is there
            return await journaled(*args, **kwargs)

    async def journaled(*args: Any, **kwargs: Any) -> Any:
        session = current_session()
        if session.is_async != _acompat.ASYNC:
            raise _wrong_session(spec, session)
        session.check_in_block()  # a task or thread that outlived the session's block
        conn = cast(aengine.AsyncConnection, session.connection)
        if spec.tier is ToolTier.IRREVERSIBLE:
            _last_edit.set(None)
        call = _prepare(spec, session, args, kwargs)
        got = await intercept(spec, session, call)
        if got.action == "in_progress":
            for pause in _in_progress_pauses(spec, session, call, got):
                await _acompat.sleep(pause)
                got = await intercept(spec, session, call)
                if got.action != "in_progress":
                    break
            else:
                raise _still_in_progress(spec, session, call, got)
        tracing.called(
            got.effect_id, got.action, session.session_id, got.approval_id, call.step_index
        )
        if got.action == "replay":
            if spec.tier is ToolTier.IRREVERSIBLE:
                _noted(spec, call, await replayed_edit(conn, session, got), replayed=True)
            return got.result_snapshot
        if got.action == "rejected":
            raise _rejected(spec, session, call, got, await decision(conn, got))
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
        await ensure_lease(spec, session, call)
        # The result is sent and not waited for (unless durable_results): its answer is
        # read with the session's next statement, and its error raised there.
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:  # the tool reported failure: it never took effect
            await send_outcome(spec, session, call, got.effect_id, "fail", _describe(exc))
            raise
        except BaseException:  # cancelled or interrupted: it may have acted
            session.unknown_outcome = f"{spec.name} step {call.step_index}"
            raise
        text = _result_json(spec, session, call, result)
        await send_outcome(spec, session, call, got.effect_id, "commit", text)
        if spec.tier is ToolTier.IRREVERSIBLE:
            _noted(spec, call, edit)
        return result

    return wrapper
