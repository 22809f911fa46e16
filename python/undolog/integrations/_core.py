"""What the three framework adapters share.

**Step indexes.** The binding numbers a session's journaled calls 0, 1, 2, ... in call
order, which replays a restarted agent that makes the same calls in the same order. A
framework that resumes a run does not make the same calls in the same order: LangGraph
re-runs only the interrupted node, a resumed OpenAI Agents or pydantic-ai run makes only
the calls still outstanding. So a call made by a framework takes its step index from its
*call key* instead: ``step_for(key)`` is 31 bits of BLAKE3 of the key, where the key is

- the tool call id the model gave the call (OpenAI Agents ``call_id``, pydantic-ai
  ``tool_call_id``, LangChain ``ToolCall["id"]``): every framework keeps it in the state
  it resumes from, so the resumed call has the same signature as the interrupted one;
- for a tool a LangGraph node calls directly (no model, no call id): the node task's
  checkpoint namespace and the call's position within that run of the node, since
  LangGraph re-runs an interrupted node from its start.

Same session id + same key + same tool + same arguments = same signature: the call
replays from the journal (or, IRREVERSIBLE, finds its approval) instead of running again.
A call with no key (a tool called by hand inside the run) falls back to the binding's
counter. Two keys whose hashes collide are still told apart by tool name and arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import blake3
import psycopg

from undolog import aengine, engine
from undolog.client import AsyncUndoLog, UndoLog
from undolog.context import ActiveSession, current_session, enter, leave
from undolog.decorator import ToolSpec, _async_wrapper, last_edit, tool_spec
from undolog.errors import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    SessionNotActive,
    UndoLogError,
)
from undolog.queries import QUERIES
from undolog.signature import call_signature
from undolog.tiers import ToolTier

T = TypeVar("T")

# Who records a human's decision in UndoLog: a client logged in as the approver (never the
# agent's login: the engine refuses a login approving its own call, 42501), or a callable
# (approval_id, approved, decided_by, reason) that records it however the app does; an
# approval with edited arguments calls it with them as the keyword ``args`` too.
DecisionRecorder = Callable[[uuid.UUID, bool, str, str | None], Awaitable[object] | object]
Approver = UndoLog | AsyncUndoLog | DecisionRecorder


@dataclasses.dataclass(frozen=True)
class ToolInfo:
    """A tool as a framework needs to see it: the decorated callable, its name, its
    description (the docstring), its signature, its tier."""

    fn: Callable[..., Any]
    name: str
    description: str
    signature: inspect.Signature
    tier: ToolTier
    spec: ToolSpec | None

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def bind(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments as the journal sees them (defaults applied)."""
        if self.spec is None:
            return dict(kwargs)
        return self.spec.bind((), dict(kwargs))


def describe(fn: Callable[..., Any]) -> ToolInfo:
    spec = tool_spec(fn)
    return ToolInfo(
        fn=fn,
        name=spec.name if spec is not None else fn.__name__,
        description=inspect.getdoc(fn) or "",
        signature=inspect.signature(fn),
        tier=spec.tier if spec is not None else ToolTier.SAFE,
        spec=spec,
    )


def awaitable_body(tool: ToolInfo) -> Callable[..., Awaitable[Any]]:
    """The tool as an ``async def`` for a framework whose run is async. A sync journaled
    tool gets its own body run in a worker thread, journaled by the async session (the
    binding refuses a sync journaled call inside an async session); a sync SAFE tool runs
    in a worker thread too, so it does not block the event loop."""
    if tool.is_async:
        return cast(Callable[..., Awaitable[Any]], tool.fn)
    # the decorator's functools.wraps keeps the undecorated body as __wrapped__
    body: Callable[..., Any] = tool.fn if tool.spec is None else tool.fn.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(body)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(body, *args, **kwargs)

    if tool.spec is None:
        return threaded
    journaled = _async_wrapper(tool.spec, threaded)
    journaled.__undolog_tool__ = tool.spec  # type: ignore[attr-defined]
    return cast(Callable[..., Awaitable[Any]], journaled)


def step_for(call_key: str) -> int:
    """The step index of the call whose framework key is ``call_key`` (0 .. 2^31-1)."""
    digest = blake3.blake3(b"undolog-step\x00" + call_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


@contextlib.contextmanager
def pinned_step(call_key: str | None) -> Iterator[None]:
    """Run one tool call with the step index of its key. The decorator takes the next
    step from the current session, so the call sees a copy of the run's session whose
    counter starts at that step; an unknown outcome it records is copied back to the run."""
    if call_key is None:
        yield
        return
    run = current_session()
    call = dataclasses.replace(run, _steps=itertools.count(step_for(call_key)))
    token = enter(call)
    try:
        yield
    finally:
        leave(token)
        if call.unknown_outcome is not None:
            run.unknown_outcome = call.unknown_outcome


def _signature(session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]) -> str:
    return call_signature(session.session_id, step_for(call_key), tool.name, args)


def _intercept_params(
    session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]
) -> tuple[Any, ...]:
    return (
        session.session_id,
        step_for(call_key),
        tool.name,
        tool.tier.value,
        args,
        None,
        _signature(session, tool, call_key, args),
    )


def _registration(tool: ToolInfo) -> tuple[str, str, dict[str, Any] | None, str]:
    """What the engine's registry must hold before a deferred call of ``tool`` is
    intercepted (intercept refuses unregistered tools), as the decorator registers it."""
    compensation = tool.spec.compensation if tool.spec is not None else None
    on_reject = tool.spec.on_reject if tool.spec is not None else "fail_session"
    return (tool.name, tool.tier.value, compensation.to_json() if compensation else None, on_reject)


# --- a person's edit that the agent hears -------------------------------------------------


def edited_reply(tool: ToolInfo, result: Any) -> Any:
    """The model's answer to an IRREVERSIBLE call a person approved with edited
    arguments: the edit first, in words (who, why, what changed), then the result as the
    JSON the journal holds; ``result`` itself for any other call."""
    edit = last_edit() if tool.tier is ToolTier.IRREVERSIBLE else None
    if edit is None:
        return result
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return f"{edit.note}\nResult: {text}"


# --- a person's "no" that the agent hears -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A person's rejection of a call of a tool declared ``on_reject="continue"`` (or
    the expiry of its approval): the session goes on, and the framework hands the model
    ``message`` as the call's answer, with who refused it and why."""

    tool: str
    approval_id: uuid.UUID | None
    decision: str  # rejected | expired
    decided_by: str | None  # None for the engine's own expiry
    reason: str | None

    @property
    def message(self) -> str:
        if self.decision == "expired":
            head = f"The {self.tool} call was not approved in time (its approval expired)"
        else:
            head = f"{self.decided_by or 'A person'} rejected the {self.tool} call"
        why = f": {self.reason}" if self.reason else " (no reason given)"
        return f"{head}{why}. It did not run."

    def as_dict(self) -> dict[str, Any]:
        """What a framework may carry beside the message (a LangGraph artifact)."""
        return {
            "tool": self.tool,
            "approval_id": None if self.approval_id is None else str(self.approval_id),
            "decision": self.decision,
            "decided_by": self.decided_by,
            "reason": self.reason,
        }


def refusal(tool: ToolInfo, error: ApprovalRejectedError) -> Refusal | None:
    """The Refusal behind an ApprovalRejectedError of a call of ``tool`` that leaves the
    session going on (None: the rejection ends the session, the default rule, and the
    error must go on). A session already completed is made again call by call: its
    refused call of an on_reject="continue" tool is a Refusal again, though the session
    takes no new calls."""
    on_reject = tool.spec.on_reject if tool.spec is not None else "fail_session"
    if not error.session_continues and on_reject != "continue":
        return None
    approval = error.approval_id
    return Refusal(
        tool=tool.name,
        approval_id=None if approval is None else uuid.UUID(str(approval)),
        decision=error.decision or "rejected",
        decided_by=error.decided_by,
        reason=error.reason,
    )


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


@dataclasses.dataclass(frozen=True)
class _Deferred:
    tool: ToolInfo
    call_key: str
    args: dict[str, Any]


# The IRREVERSIBLE calls a run asked a human about before UndoLog had a request for them.
_deferred: contextvars.ContextVar[list[_Deferred] | None] = contextvars.ContextVar(
    "undolog_deferred_approvals", default=None
)


@dataclasses.dataclass(frozen=True)
class Waiting:
    """An IRREVERSIBLE call that waits for a human; ``approval_id`` is None until the
    run has stopped and its request is written."""

    approval_id: uuid.UUID | None


def _call_of(
    session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]
) -> dict[str, Any]:
    """The parameters of approval_of_call: the call's session and signature."""
    return {
        "session_id": session.session_id,
        "call_signature": _signature(session, tool, call_key, args),
    }


def _answer(tool: ToolInfo, call_key: str, args: dict[str, Any], row: Any) -> Waiting | None:
    if row is None:
        deferred = _deferred.get()
        if deferred is None:
            raise UndoLogError(f"{tool.name} is IRREVERSIBLE: run it through the adapter's run")
        if all(noted.call_key != call_key for noted in deferred):  # asked again on a resume
            deferred.append(_Deferred(tool, call_key, args))
        return Waiting(None)
    approval_id, state = row
    return Waiting(uuid.UUID(str(approval_id))) if state == "pending" else None


async def waiting(tool: ToolInfo, call_key: str, kwargs: Mapping[str, Any]) -> Waiting | None:
    """For an IRREVERSIBLE call: must a human decide first? None when the call may go
    ahead (approved: it executes, once; committed: it replays; rejected: the decorator
    raises ApprovalRejectedError). An approved call still waits while another request of
    its session is pending. A call without an UndoLog request yet is noted, and
    ``run_in_session`` requests its approval once the run has stopped: requesting it now
    would suspend the session under the other calls the framework runs beside it (one
    model turn's calls run side by side), which the engine would then refuse (UL010)."""
    session = current_session()
    conn = session.connection
    assert isinstance(conn, psycopg.AsyncConnection)
    args = tool.bind(kwargs)
    params = _call_of(session, tool, call_key, args)
    row = await aengine.fetch_optional(conn, QUERIES["approval_of_call"], params)
    return _answer(tool, call_key, args, row)


def waiting_sync(tool: ToolInfo, call_key: str, kwargs: Mapping[str, Any]) -> Waiting | None:
    """``waiting`` in a sync session."""
    session = current_session()
    conn = session.connection
    assert isinstance(conn, psycopg.Connection)
    args = tool.bind(kwargs)
    rows = engine.fetch_all(
        conn, QUERIES["approval_of_call"], _call_of(session, tool, call_key, args)
    )
    return _answer(tool, call_key, args, rows[0] if rows else None)


def _shown_calls(deferred: list[_Deferred], shown: Sequence[str]) -> list[_Deferred]:
    """The noted calls the framework shows the person as waiting, in its order. Only
    they get a request: a call the framework stopped at but does not show (a LangGraph
    node that runs several tool calls surfaces only its first interrupt) stays unasked
    until the resumed run shows it, so that a person is never asked about a call they
    cannot see."""
    rank = {key: i for i, key in enumerate(shown)}
    return sorted(
        (call for call in deferred if call.call_key in rank), key=lambda call: rank[call.call_key]
    )


async def _request_deferred(session: ActiveSession, deferred: list[_Deferred]) -> None:
    """Intercept the noted IRREVERSIBLE calls in order: the first writes its approval
    request and suspends the session (awaiting_approval); each other one writes its own
    request in the waiting session, so that all of them are asked at once. The session
    goes on once every request is decided. A session that stopped taking calls (a
    refusal ended it meanwhile) leaves the rest unasked."""
    conn = session.connection
    assert isinstance(conn, psycopg.AsyncConnection)
    for call in deferred:
        key = (id(conn), call.tool.name)
        if key not in session.registered_tools:
            session.registered_tools[key] = await aengine.register_tool(
                conn, *_registration(call.tool)
            )
        try:
            await aengine.intercept(
                conn, *_intercept_params(session, call.tool, call.call_key, call.args)
            )
        except SessionNotActive:
            return


async def request_approval(tool: ToolInfo, call_key: str, kwargs: Mapping[str, Any]) -> None:
    """Write the approval request of an IRREVERSIBLE call the framework holds as
    interrupted, unless it has one: a framework that does not ask about that call again
    when it resumes (OpenAI Agents keeps it in the RunState) still gets it asked, beside
    any other request of the session that is waiting."""
    session = current_session()
    conn = session.connection
    assert isinstance(conn, psycopg.AsyncConnection)
    args = tool.bind(kwargs)
    params = _call_of(session, tool, call_key, args)
    if await aengine.fetch_optional(conn, QUERIES["approval_of_call"], params) is None:
        await _request_deferred(session, [_Deferred(tool, call_key, args)])


def _step_of(session_id: uuid.UUID, tool_name: str, call_key: str) -> dict[str, Any]:
    """The parameters of approval_of_step: the call's session, step and tool."""
    return {"session_id": session_id, "step_index": step_for(call_key), "tool_name": tool_name}


async def approval_of_step(
    conn: aengine.AsyncConnection, session_id: uuid.UUID, tool_name: str, call_key: str
) -> tuple[uuid.UUID, str] | None:
    """(approval id, state) of the IRREVERSIBLE call ``tool_name`` a framework knows by
    ``call_key``, read on a connection that may see the session (the agent's own)."""
    params = _step_of(session_id, tool_name, call_key)
    row = await aengine.fetch_optional(conn, QUERIES["approval_of_step"], params)
    return (uuid.UUID(str(row[0])), str(row[1])) if row is not None else None


def _request_deferred_sync(session: ActiveSession, deferred: list[_Deferred]) -> None:
    conn = session.connection
    assert isinstance(conn, psycopg.Connection)
    for call in deferred:  # as _request_deferred
        key = (id(conn), call.tool.name)
        if key not in session.registered_tools:
            session.registered_tools[key] = engine.register_tool(conn, *_registration(call.tool))
        try:
            engine.intercept(conn, *_intercept_params(session, call.tool, call.call_key, call.args))
        except SessionNotActive:
            return


def approval_of_step_sync(
    conn: engine.Connection, session_id: uuid.UUID, tool_name: str, call_key: str
) -> tuple[uuid.UUID, str] | None:
    rows = engine.fetch_all(
        conn, QUERIES["approval_of_step"], _step_of(session_id, tool_name, call_key)
    )
    return (uuid.UUID(str(rows[0][0])), str(rows[0][1])) if rows else None


async def approval_state_async(conn: aengine.AsyncConnection, approval_id: uuid.UUID) -> str | None:
    row = await aengine.fetch_optional(
        conn, QUERIES["approval_state"], {"approval_id": approval_id}
    )
    return str(row[0]) if row is not None else None


def _recorded_by(
    approver: DecisionRecorder,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None,
) -> object:
    if args is None:
        return approver(approval_id, approved, by, reason)
    return cast(Callable[..., object], approver)(approval_id, approved, by, reason, args=args)


def record_decision_sync(
    approver: Approver,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None = None,
) -> None:
    """Record a human's decision in UndoLog through the approver (sync callers); ``args``
    are an approval's edited arguments."""
    if isinstance(approver, UndoLog):
        if approved:
            approver.approve(approval_id, by, reason, args=args)
        else:
            approver.reject(approval_id, by, reason)
    elif isinstance(approver, AsyncUndoLog):
        raise TypeError("an AsyncUndoLog approver needs the async decision helper")
    else:
        outcome = _recorded_by(approver, approval_id, approved, by, reason, args)
        if inspect.isawaitable(outcome):
            raise TypeError("an async decision recorder needs the async decision helper")


async def record_decision(
    approver: Approver,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None = None,
) -> None:
    """Record a human's decision in UndoLog through the approver; ``args`` are an
    approval's edited arguments."""
    if isinstance(approver, AsyncUndoLog):
        if approved:
            await approver.approve(approval_id, by, reason, args=args)
        else:
            await approver.reject(approval_id, by, reason)
    elif isinstance(approver, UndoLog):
        if approved:
            await asyncio.to_thread(
                functools.partial(approver.approve, args=args), approval_id, by, reason
            )
        else:
            await asyncio.to_thread(approver.reject, approval_id, by, reason)
    else:
        outcome = _recorded_by(approver, approval_id, approved, by, reason, args)
        if inspect.isawaitable(outcome):
            await outcome


# --- the UndoLog session of a framework run ---------------------------------------------

# The decision that ended a session (a rejection, or an expiry, of a call whose tool
# follows the default rule) is the first (undolog.ending_decision): requests closed with it
# (asked at the same time) were decided a moment later.


# A session a run may go on in: active; waiting for a human (its committed calls replay,
# the waiting call asks again); completed (run again, every call replays; a new one is
# refused, UL010).
_RUNNABLE = frozenset({"active", "awaiting_approval", "completed"})


class _Suspended(AwaitingApprovalError):
    """Raised inside the session block when the framework stopped for a human, so that
    the session is left awaiting approval (no completion, no compensation)."""


def _ended(session_id: uuid.UUID, state: str, row: tuple[Any, ...] | None) -> UndoLogError:
    if row is not None:
        return ApprovalRejectedError(
            f"session {session_id} ended: approval {row[0]} was {row[1]}; "
            "what the run did before it has been undone",
            uuid.UUID(str(row[0])),
            None,
        )
    return SessionNotActive(f"session {session_id} is {state}: the run cannot go on")


@dataclasses.dataclass
class RunBox(Generic[T]):
    """What a framework run inside an UndoLog session answered: the block that runs it
    sets ``result`` (a streamed run sets it before it is consumed)."""

    result: T | None = None


def _shown(box: RunBox[T], stopped_for_human: Callable[[T], Sequence[str] | None]) -> Any:
    if box.result is None:
        raise UndoLogError("the framework run answered nothing: set the run's result")
    return stopped_for_human(box.result)


@contextlib.asynccontextmanager
async def framework_run(
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: Callable[[T, aengine.AsyncConnection], Awaitable[None]] | None = None,
) -> AsyncIterator[RunBox[T]]:
    """The UndoLog session ``session_id`` (new or resumed) of a framework run made in the
    block, which puts the run's result in the box it is given.

    The block finishes: the session completes, unless the result stopped for a human
    (``stopped_for_human(result)`` answers the call keys it shows as waiting, in order,
    rather than None): then the session stays awaiting approval, the approvals noted by
    ``waiting`` are requested, and ``requested(result, connection)`` may read their ids.
    The block raises: the session fails and is rolled back (LIFO), and the error goes on.
    A session a human ended (a rejected call) is walked and raises ApprovalRejectedError
    instead of running the block."""
    ended: UndoLogError | None = None
    deferred: list[_Deferred] = []
    token = _deferred.set(deferred)
    try:
        async with ul.session(session_id, agent=agent) as active:
            conn = active.connection
            assert isinstance(conn, psycopg.AsyncConnection)
            if active.state in _RUNNABLE:
                box: RunBox[T] = RunBox()
                yield box
                shown = _shown(box, stopped_for_human)
                if shown is not None:
                    await _request_deferred(active, _shown_calls(deferred, shown))
                    if requested is not None:
                        await requested(cast(T, box.result), conn)
                    raise _Suspended("the run waits for a human", None, None)
            else:
                row = await aengine.fetch_optional(
                    conn, QUERIES["ending_decision"], {"session_id": session_id}
                )
                ended = _ended(session_id, active.state, row)
    except _Suspended:
        pass
    except ApprovalRejectedError:  # rejected mid-run: the session is compensating
        await ul.run_walk(session_id)
        raise
    finally:
        _deferred.reset(token)
    if ended is not None:
        await ul.run_walk(session_id)
        raise ended


@contextlib.contextmanager
def framework_run_sync(
    ul: UndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: Callable[[T, engine.Connection], None] | None = None,
) -> Iterator[RunBox[T]]:
    """``framework_run`` for a sync run."""
    ended: UndoLogError | None = None
    deferred: list[_Deferred] = []
    token = _deferred.set(deferred)
    try:
        with ul.session(session_id, agent=agent) as active:
            conn = active.connection
            assert isinstance(conn, psycopg.Connection)
            if active.state in _RUNNABLE:
                box: RunBox[T] = RunBox()
                yield box
                shown = _shown(box, stopped_for_human)
                if shown is not None:
                    _request_deferred_sync(active, _shown_calls(deferred, shown))
                    if requested is not None:
                        requested(cast(T, box.result), conn)
                    raise _Suspended("the run waits for a human", None, None)
            else:
                rows = engine.fetch_all(
                    conn, QUERIES["ending_decision"], {"session_id": session_id}
                )
                ended = _ended(session_id, active.state, rows[0] if rows else None)
    except _Suspended:
        pass
    except ApprovalRejectedError:
        ul.run_walk(session_id)
        raise
    finally:
        _deferred.reset(token)
    if ended is not None:
        ul.run_walk(session_id)
        raise ended


async def run_in_session(
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    run: Callable[[], Awaitable[T]],
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: Callable[[T, aengine.AsyncConnection], Awaitable[None]] | None = None,
) -> T:
    """``run()`` inside ``framework_run``: its result."""
    async with framework_run(ul, session_id, agent, stopped_for_human, requested) as box:
        box.result = result = await run()
    return result


def run_in_session_sync(
    ul: UndoLog,
    session_id: uuid.UUID,
    agent: str | None,
    run: Callable[[], T],
    stopped_for_human: Callable[[T], Sequence[str] | None],
    requested: Callable[[T, engine.Connection], None] | None = None,
) -> T:
    """``run()`` inside ``framework_run_sync``: its result."""
    with framework_run_sync(ul, session_id, agent, stopped_for_human, requested) as box:
        box.result = result = run()
    return result
