"""The adapters' round trips and the UndoLog session of a framework run.

Two twins with the same functions: ``undolog.integrations._arun`` for a framework run
that is async (the source, written by hand) and ``undolog.integrations._run`` for a sync
one (generated from it by tools/async_to_sync.py). What the twins do their own way (who
may record a decision on which side) is in the pair ``integrations._acompat`` /
``integrations._compat``; what has no twin (step indexes, refusals, the noted calls) is
in ``integrations._core``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import psycopg

from undolog import aengine
from undolog.aclient import AsyncUndoLog
from undolog.adecorator import settled_before_asking
from undolog.context import ActiveSession, current_session
from undolog.decorator_common import definition_of, registration_key
from undolog.errors import (
    ApprovalRejectedError,
    InvalidStateTransition,
    SessionNotActive,
    UndoLogError,
)
from undolog.integrations import _acompat
from undolog.integrations._core import (
    _RUNNABLE,
    MIXED_RUN,
    Approver,
    Refusal,
    RunBox,
    ShownCall,
    ToolInfo,
    Waiting,
    _answer,
    _call_of,
    _Deferred,
    _deferred,
    _ended,
    _intercept_params,
    _registration,
    _shown,
    _shown_calls,
    _step_of,
    _Suspended,
    refuse_other_call,
    resumed_elsewhere,
    step_for,
)
from undolog.queries import QUERIES

T = TypeVar("T")


def _connection(session: ActiveSession) -> aengine.AsyncConnection:
    conn = session.connection
    if not isinstance(conn, psycopg.AsyncConnection):
        raise UndoLogError(MIXED_RUN)
    return conn


async def waiting(tool: ToolInfo, call_key: str, kwargs: Mapping[str, Any]) -> Waiting | None:
    """For an IRREVERSIBLE call: must a human decide first? None when the call may go
    ahead (approved: it executes, once; committed: it replays; rejected: the decorator
    raises ApprovalRejectedError). An approved call still waits while another request of
    its session is pending. A call without an UndoLog request yet is noted, and
    ``run_in_session`` requests its approval once the run has stopped: requesting it now
    would suspend the session under the other calls the framework runs beside it (one
    model turn's calls run side by side), which the engine would then refuse (UL010)."""
    session = current_session()
    args = tool.bind(kwargs)
    row = await aengine.fetch_optional(
        _connection(session), QUERIES["approval_of_call"], _call_of(session, tool, call_key, args)
    )
    return _answer(tool, call_key, args, row)


async def _request_deferred(session: ActiveSession, deferred: list[_Deferred]) -> None:
    """Intercept the noted IRREVERSIBLE calls in order: the first writes its approval
    request and suspends the session (awaiting_approval); each other one writes its own
    request in the waiting session, so that all of them are asked at once. The session
    goes on once every request is decided. A session that stopped taking calls (a
    refusal ended it meanwhile) leaves the rest unasked. A session that was completed
    when the run resumed it (``session.state``) takes no new call, and no request can
    ever be written for one: the engine's SessionNotActive (UL010: new calls need a new
    session) is raised, rather than a stop nobody can decide; leaving the block with it
    fails nothing (only an active session is failed), so the session stays completed.
    A session that can only fail asks nobody: the error of a result of the run the
    journal refused (unread yet, or taken earlier and caught by the run) is raised
    first, as is a call's unknown outcome (adecorator.settled_before_asking)."""
    conn = _connection(session)
    await settled_before_asking(conn, session)
    for call in deferred:
        key = registration_key(conn, definition_of(_registration(call.tool)))
        if key not in session.registered_tools:
            session.registered_tools[key] = await aengine.register_tool(
                conn, *_registration(call.tool)
            )
        try:
            await aengine.intercept(
                conn, *_intercept_params(session, call.tool, call.call_key, call.args)
            )
        except SessionNotActive:
            if session.state == "completed":
                raise
            return


async def request_approval(tool: ToolInfo, call_key: str, kwargs: Mapping[str, Any]) -> None:
    """Write the approval request of an IRREVERSIBLE call the framework holds as
    interrupted, unless it has one: a framework that does not ask about that call again
    when it resumes (OpenAI Agents keeps it in the RunState) still gets it asked, beside
    any other request of the session that is waiting."""
    session = current_session()
    args = tool.bind(kwargs)
    params = _call_of(session, tool, call_key, args)
    if (
        await aengine.fetch_optional(_connection(session), QUERIES["approval_of_call"], params)
        is None
    ):
        await _request_deferred(session, [_Deferred(tool, call_key, args)])


async def approval_of_step(
    conn: aengine.AsyncConnection, session_id: uuid.UUID, tool_name: str, call_key: str
) -> tuple[uuid.UUID, str] | None:
    """(approval id, state) of the IRREVERSIBLE call ``tool_name`` a framework knows by
    ``call_key``, read on a connection that may see the session (the agent's own)."""
    row = await aengine.fetch_optional(
        conn, QUERIES["approval_of_step"], _step_of(session_id, tool_name, call_key)
    )
    return (uuid.UUID(str(row[0])), str(row[1])) if row is not None else None


async def approval_at_step(
    conn: aengine.AsyncConnection, session_id: uuid.UUID, call_key: str
) -> tuple[uuid.UUID, str, str] | None:
    """(approval id, state, journaled tool name) of the IRREVERSIBLE call a framework
    knows by ``call_key``, whatever its tool: for a call whose tool the run no longer has
    under the name the model called it by."""
    params = {"session_id": session_id, "step_index": step_for(call_key)}
    row = await aengine.fetch_optional(conn, QUERIES["approval_at_step"], params)
    return (uuid.UUID(str(row[0])), str(row[1]), str(row[2])) if row is not None else None


async def refuse_another_session(
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    asked: list[tuple[str, str]],
    what: str,
    recorded: object = None,
) -> None:
    """Refuse, before a session is opened, a run resumed under a session id other than
    the one of the run that stopped: ``asked`` are its waiting IRREVERSIBLE calls (tool,
    call key), and none has an approval request in ``session_id``. Resumed there, each
    would be asked again in a second session while the first waited for ever. ``what``
    names them in the error ("this RunState's interrupted calls"); ``recorded``, the
    session the saved state records for its run (None: none), is the one the error says
    to resume with. UndoLog does not look the calls up in other sessions: call keys
    repeat from run to run, and another login's session is not this one's to name."""
    if not asked:
        return
    async with ul.connection() as conn:
        for name, call_key in asked:
            if await approval_of_step(conn, session_id, name, call_key) is not None:
                return
    raise resumed_elsewhere(session_id, asked, what, recorded)


async def open_session_state(ul: AsyncUndoLog, session_id: uuid.UUID) -> str | None:
    """The state of session ``session_id`` when its run may go on and what its calls did
    stands (active, awaiting approval, completed); None when it failed or was undone, or
    this login cannot see it."""
    async with ul.connection() as conn:
        row = await aengine.fetch_optional(
            conn, QUERIES["session_state"], {"session_id": session_id}
        )
    state = None if row is None else str(row[0])
    return state if state in _RUNNABLE else None


async def refusal_of(
    conn: aengine.AsyncConnection, tool: str, approval_id: uuid.UUID
) -> Refusal | None:
    """The Refusal of a decided approval whose session goes on (None: it was not
    refused, or the refusal ends the session)."""
    decided = await aengine.approval_decision(conn, approval_id)
    if decided is None or decided.decision not in ("rejected", "expired"):
        return None
    if not decided.session_continues or decided.on_reject != "continue":
        return None
    return Refusal(tool, approval_id, decided.decision, decided.decided_by, decided.reason)


async def approval_calls(
    conn: aengine.AsyncConnection, approvals: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[Any, ...]]:
    """(session, step, tool, journaled arguments) of the call each approval request asks
    about, by approval id, as the connection's login may see it (left out: unknown, or not
    its to see): the ``approval_call`` query."""
    found: dict[uuid.UUID, tuple[Any, ...]] = {}
    for approval in approvals:
        row = await aengine.fetch_optional(
            conn, QUERIES["approval_call"], {"approval_id": approval}
        )
        if row is not None:
            found[approval] = row
    return found


async def refuse_unshown(
    reader: AsyncUndoLog | _acompat.OtherClient, approval_id: uuid.UUID, shown: ShownCall
) -> None:
    """Refuse (ValueError, nothing recorded) a decision on ``approval_id`` whose pending
    call is not ``shown``, the call the person was shown, read (the ``approval_call``
    query) with ``reader``'s login: the approver's client, or the client that reads for a
    decision recorder (``_core.approvals_reader``). A client of the other side is for
    ``refuse_unshown_elsewhere`` in the pair ``integrations._acompat`` / ``_compat``."""
    if isinstance(reader, AsyncUndoLog):
        async with reader.connection() as conn:
            calls = await approval_calls(conn, [approval_id])
        refuse_other_call(approval_id, shown, calls.get(approval_id))
    else:
        await _acompat.refuse_unshown_elsewhere(reader, approval_id, shown)


async def record_decision(
    approver: Approver,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None = None,
) -> None:
    """Record a human's decision in UndoLog through the approver; ``args`` are an
    approval's edited arguments. A client of the other side, or a decision recorder, is
    for ``record_elsewhere`` in the pair ``integrations._acompat`` / ``_compat``."""
    if isinstance(approver, AsyncUndoLog):
        if approved:
            await approver.approve(approval_id, by, reason, args=args)
        else:
            await approver.reject(approval_id, by, reason)
    else:
        await _acompat.record_elsewhere(approver, approval_id, approved, by, reason, args)


# --- the UndoLog session of a framework run ---------------------------------------------


@contextlib.asynccontextmanager
async def framework_run(
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: _acompat.Requested[T] | None = None,
) -> AsyncIterator[RunBox[T]]:
    """The UndoLog session ``session_id`` (new or resumed) of a framework run made in the
    block, which puts the run's result in the box it is given.

    The block finishes: the session completes, unless the result stopped for a human
    (``stopped_for_human(result)`` answers the call keys it shows as waiting, in order,
    rather than None): then the session stays awaiting approval, the approvals noted by
    ``waiting`` are requested, and ``requested(result, connection)`` may read their ids;
    but a result of the run the journal refused (sent without waiting) is raised first,
    as if the block had raised it, also when a tool call of the run caught it (or a
    call's outcome is unknown), and nobody is asked; and a session that was completed
    when the run began cannot ask about a call its journal does not have: the engine's
    SessionNotActive (UL010) is raised, and the session stays completed. The block
    raises: the session fails and is rolled back (LIFO; a completed one stays as it
    is), and the error goes on. A session a human ended (a rejected call) is walked and
    raises ApprovalRejectedError instead of running the block."""
    ended: UndoLogError | None = None
    finished = False  # the run ended without stopping for a human
    deferred: list[_Deferred] = []
    token = _deferred.set(deferred)
    try:
        async with ul.session(session_id, agent=agent) as active:
            conn = _connection(active)
            if active.state in _RUNNABLE:
                box: RunBox[T] = RunBox()
                yield box
                shown: Sequence[str] | None = _shown(box, stopped_for_human)
                if shown is not None:
                    # A result of the run refused by the journal (sent without waiting)
                    # is raised by _request_deferred before any approval is requested,
                    # also one a tool node caught: requested, the session would wait
                    # for a person, and its error, then only noted on the suspension,
                    # would be lost; raised, the block fails the session and its walk
                    # compensates the unrecorded call, nobody asked.
                    await _request_deferred(active, _shown_calls(deferred, shown))
                    if requested is not None:
                        await requested(cast(T, box.result), conn)
                    raise _Suspended("the run waits for a human", None, None)
                finished = True
            else:
                row = await aengine.fetch_optional(
                    conn, QUERIES["ending_decision"], {"session_id": session_id}
                )
                ended = _ended(session_id, active.state, row)
    except _Suspended:
        pass
    except InvalidStateTransition:
        # Another process that resumed the same session finished its run first and
        # completed the session: this run ended too, and every call it made was journaled
        # in the session before that (a call made after it is refused, and the run raises).
        if not finished or await open_session_state(ul, session_id) != "completed":
            raise
    except ApprovalRejectedError:  # rejected mid-run: the session is compensating
        await ul.run_walk(session_id)
        raise
    finally:
        _deferred.reset(token)
    if ended is not None:
        await ul.run_walk(session_id)
        raise ended


async def run_in_session(
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    run: _acompat.Run[T],
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: _acompat.Requested[T] | None = None,
) -> T:
    """``run()`` inside ``framework_run``: its result."""
    async with framework_run(ul, session_id, agent, stopped_for_human, requested) as box:
        box.result = result = await run()
    return result
