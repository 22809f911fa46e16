"""``@undolog_tool`` tools as OpenAI Agents SDK tools (extra ``openai-agents``).

    agent = Agent(name="ops", tools=tools(search, create_user, payout))
    result = await run(agent, ul, "pay Ada", session_id=sid)
    if result.interruptions:                                   # an IRREVERSIBLE call
        state = result.to_state()
        await decide(state, result.interruptions[0], ul, sid, approver, "alice", approved=True)
        result = await run(agent, ul, state, session_id=sid)

Each tool is built by the SDK's own ``function_tool``, with its options (a bad JSON or a
bad argument from the model becomes an error message for the model, through
``failure_error_function``, and the run goes on). An IRREVERSIBLE tool gets
``needs_approval``: a callable that answers yes until UndoLog records a human's yes, so
the run stops with ``result.interruptions`` and resumes through ``RunState.approve`` /
``RunState.reject``. The approval request is written when the run has stopped (the calls
of one model turn run side by side, and a waiting session refuses new calls). UndoLog's
record is what counts: ``decide`` records the decision through the approver's login and
then tells the RunState; resuming applies to the RunState what UndoLog holds, so a call
approved elsewhere (CLI, dashboard) runs, and one UndoLog has not decided does not. Each
call is journaled under the step of its ``call_id``, which the RunState keeps, so a
resumed run's calls replay.

An error from a tool body reaches the model as the SDK's tool error message (the body's
journal step is marked failed; it never took effect). UndoLog's own errors (a waiting or
ended session, an unknown outcome) are never turned into text: they end the run, and
with it the session.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import json
import typing
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg
from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    UserError,
    default_tool_error_function,
    function_tool,
)
from agents.function_schema import FuncSchema, function_schema
from agents.items import ToolApprovalItem, ToolCallItem, TResponseInputItem
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall

from undolog.client import AsyncUndoLog
from undolog.context import current_session
from undolog.decorator import last_edit
from undolog.errors import ApprovalRejectedError, AwaitingApprovalError, UndoLogError
from undolog.integrations import _arun, _core
from undolog.integrations._core import ResumedInAnotherSession as ResumedInAnotherSession
from undolog.tiers import ToolTier

_CONTEXT_PARAMETER = "undolog_tool_context"
_UNSET: Any = object()
# function_tool options the adapter sets itself.
_OWN_OPTIONS = ("needs_approval",)


@dataclasses.dataclass(frozen=True)
class _Adapted:
    """What ``run`` needs to ask UndoLog about an interrupted call of a tool: the
    ``@undolog_tool`` behind it, and ``arguments(raw)``, the call's arguments (None when
    the model's arguments are not valid for the tool)."""

    tool: _core.ToolInfo
    arguments: Callable[[Any], dict[str, Any] | None]


_ADAPTED = "_undolog_adapted"  # the attribute of a FunctionTool built here


def _keeping_undolog_errors(chosen: Any) -> Any:
    """The failure_error_function of a journaled tool: the chosen one (the SDK's default
    when none was chosen) for the model's and the body's errors, but UndoLog's own errors
    raise, so that a waiting or ended session is never reported to the model as text."""
    if chosen is None:
        return None  # the caller wants every error raised
    formatter = default_tool_error_function if chosen is _UNSET else chosen

    def on_failure(ctx: RunContextWrapper[Any], error: Exception) -> Any:
        if isinstance(error, UndoLogError):
            raise error
        return formatter(ctx, error)

    return on_failure


def _with_context(
    info: _core.ToolInfo, body: Callable[..., Awaitable[Any]], as_json: bool
) -> Callable[..., Awaitable[Any]]:
    """``body`` with a first ToolContext parameter, as function_tool passes one: each call
    is journaled under the step of its ``call_id``. Its name, docstring and parameters
    are the tool's, so the SDK derives the same schema and description as for ``fn``.
    ``as_json``: a result that is not a string reaches the model as the JSON the journal
    holds (the SDK would send its Python ``str``)."""

    async def call(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            with _core.pinned_step(ctx.tool_call_id):
                result = await body(*args, **kwargs)
        except ApprovalRejectedError as error:
            refused = _core.refusal(info, error)
            if refused is None:
                raise
            return refused.message  # the session goes on: the model hears the "no"
        told = _core.edited_reply(info, result)  # a person's edit: the model hears it
        if told is not result:
            _record_edit(ctx)
            return told
        return json.dumps(result) if as_json and not isinstance(result, str) else result

    hints = typing.get_type_hints(info.fn, include_extras=True)
    parameters = [
        inspect.Parameter(
            _CONTEXT_PARAMETER, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext[Any]
        ),
        *(
            p.replace(annotation=hints.get(n, p.annotation))
            for n, p in info.signature.parameters.items()
        ),
    ]
    call.__signature__ = info.signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    call.__annotations__ = {_CONTEXT_PARAMETER: ToolContext[Any], **hints}
    call.__name__ = call.__qualname__ = info.name
    call.__doc__ = info.fn.__doc__
    call.__module__ = info.fn.__module__
    return call


# The arguments each call a person approved with edited arguments ran with, by call id,
# in this run (set by run / run_streamed; the SDK runs each tool call in its own task).
_edited: contextvars.ContextVar[dict[str, dict[str, Any]] | None] = contextvars.ContextVar(
    "undolog_openai_agents_edited", default=None
)


def _record_edit(ctx: ToolContext[Any]) -> None:
    """Note the arguments a call a person approved with edited arguments ran with (the
    requested ones, the person's in their place), for ``_edited_items``."""
    edit, noted = last_edit(), _edited.get()
    if edit is None or noted is None:
        return
    try:
        requested = json.loads(ctx.tool_arguments or "{}")
    except ValueError:
        requested = {}
    noted[ctx.tool_call_id] = _core.ran_with(requested if isinstance(requested, dict) else {}, edit)


@contextlib.contextmanager
def _noting_edits() -> Iterator[dict[str, dict[str, Any]]]:
    noted: dict[str, dict[str, Any]] = {}
    token = _edited.set(noted)
    try:
        yield noted
    finally:
        _edited.reset(token)


def _edited_items(result: RunResult | RunResultStreaming, noted: dict[str, dict[str, Any]]) -> None:
    """The run's record of the calls a person approved with edited arguments: each one's
    ToolCallItem (its function call's ``arguments``, which ``to_state()`` keeps and a
    later run sends the model) holds the arguments it ran with. The SDK hands a tool a
    copy of the call, so the items are set once the run has answered; within the run,
    the model heard the edit from the call's output (its note)."""
    if not noted:
        return
    replaced: dict[int, ToolCallItem] = {}  # id(the shared item) -> this result's own
    for item in result.new_items:
        raw = getattr(item, "raw_item", None)
        if not isinstance(item, ToolCallItem) or not isinstance(raw, ResponseFunctionToolCall):
            continue
        if raw.call_id in noted:
            arguments = json.dumps(noted[raw.call_id], ensure_ascii=False)
            own = raw.model_copy(update={"arguments": arguments})
            replaced[id(item)] = dataclasses.replace(item, raw_item=own)
    if not replaced:
        return
    # A new item in this result's lists, never the item itself: a resumed run shares its
    # items with the result it was resumed from (the caller's first result, its
    # interruptions), which keep the model's arguments. Every list of the result that
    # holds the item gets the same new one (the SDK matches its lists by identity), in a
    # new list: a list may be shared too.
    for name in ("new_items", "_model_input_items"):
        items = getattr(result, name, None)
        if isinstance(items, list):
            setattr(result, name, [replaced.get(id(i), i) for i in items])


def _arguments(info: _core.ToolInfo, schema: FuncSchema) -> Callable[[Any], dict[str, Any] | None]:
    """The call's arguments as the journal binds them, validated as function_tool
    validates them (None: the model's arguments are not valid for the tool)."""

    def parse(raw: Any) -> dict[str, Any] | None:
        try:
            data = raw if isinstance(raw, dict) else json.loads(raw or "{}")
            if not isinstance(data, dict):
                return None
            args, kwargs = schema.to_call_args(schema.params_pydantic_model(**data))
            return dict(info.signature.bind(*args, **kwargs).arguments)
        except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
            return None

    return parse


def tool(fn: Callable[..., Any], **options: Any) -> FunctionTool:
    """The SDK tool of a ``@undolog_tool``, built by ``agents.function_tool(fn,
    **options)``: the same name (``name_override`` defaults to the tool's UndoLog name),
    docstring, argument schema and options (``failure_error_function``,
    ``description_override``, ``timeout``, ``tool_input_guardrails``,
    ``tool_output_guardrails``, ``is_enabled``, ``strict_mode`` ...). An IRREVERSIBLE one
    asks for approval through ``needs_approval``, which the adapter sets. Sync journaled
    tools run in a worker thread, journaled by the run's async session."""
    info = _core.describe(fn)
    for option in _OWN_OPTIONS:
        if option in options:
            raise TypeError(
                f"{info.name}: {option} is set by the adapter from the tool's tier "
                "(an IRREVERSIBLE tool asks a person); remove it"
            )
    options.setdefault("name_override", info.name)
    if info.tier is ToolTier.SAFE:
        return function_tool(fn, **options)
    structured = any(k in options for k in ("output_type", "output_json_schema", "allowed_callers"))
    call = _with_context(info, _core.awaitable_body(info), as_json=not structured)
    options["failure_error_function"] = _keeping_undolog_errors(
        options.get("failure_error_function", _UNSET)
    )
    arguments = _arguments(
        info,
        function_schema(
            call,
            name_override=options["name_override"],
            docstring_style=options.get("docstring_style"),
            use_docstring_info=options.get("use_docstring_info", True),
            strict_json_schema=options.get("strict_mode", True),
        ),
    )

    async def needs_approval(
        _: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        bound = arguments(params)
        if bound is None:
            return True  # run stops; the malformed call is handed back to the SDK there
        return await _arun.waiting(info, call_id, bound) is not None

    built = function_tool(
        call,
        needs_approval=needs_approval if info.tier is ToolTier.IRREVERSIBLE else False,
        **options,
    )
    setattr(built, _ADAPTED, _Adapted(info, arguments))
    return built


def tools(*fns: Callable[..., Any], **options: Any) -> list[FunctionTool]:
    """``tool(fn, **options)`` of each function."""
    return [tool(fn, **options) for fn in fns]


def _adapted(agent: Agent[Any] | None, item: ToolApprovalItem) -> _Adapted | None:
    owner = getattr(item, "agent", None) or agent
    for candidate in owner.tools if owner is not None else ():
        adapted = getattr(candidate, _ADAPTED, None)
        if isinstance(adapted, _Adapted) and getattr(candidate, "name", None) == item.name:
            return adapted
    return None


def _journal_name(item: ToolApprovalItem, agent: Agent[Any] | None = None) -> str | None:
    """The name UndoLog journals an interrupted call under: its ``@undolog_tool``'s, which
    ``name_override`` does not change (the SDK's item carries the name the model called)."""
    adapted = _adapted(agent, item)
    return adapted.tool.name if adapted is not None else item.name


def _malformed_answered(
    agent: Agent[Any], result: RunResult | RunResultStreaming
) -> RunState[Any] | None:
    """The run's state with its interrupted IRREVERSIBLE calls whose arguments are not
    valid for their tool approved, or None when there is none: the SDK asks approval
    before it validates them. No person is asked: resumed from this state, the SDK's own
    handling answers the model with the error."""
    bad = []
    for item in result.interruptions:
        adapted = _adapted(agent, item)
        if adapted is not None and adapted.arguments(item.arguments or "{}") is None:
            bad.append(item)
    if not bad:
        return None
    state = result.to_state()
    for item in bad:
        state.approve(item)
    return state


def _waiting_calls(result: RunResult | RunResultStreaming) -> list[str] | None:
    return [i.call_id or "" for i in result.interruptions] or None


def _ask_the_rest(agent: Agent[Any]) -> Callable[[Any, Any], Awaitable[None]]:
    async def ask(result: RunResult | RunResultStreaming, _: Any) -> None:
        for item in result.interruptions:
            adapted = _adapted(agent, item)
            if adapted is None or item.call_id is None:
                continue
            kwargs = adapted.arguments(item.arguments or "{}")
            if adapted.tool.tier is ToolTier.IRREVERSIBLE and kwargs is not None:
                await _arun.request_approval(adapted.tool, item.call_id, kwargs)

    return ask


async def _resumed_state_checked(
    agent: Agent[Any], ul: AsyncUndoLog, input: object, session_id: uuid.UUID
) -> None:
    """Refuse, before a session is opened, a resumed RunState whose interrupted calls
    are not the calls UndoLog asked about, in one connection:

    - resumed under a session id other than its run's (none of its IRREVERSIBLE calls
      has a request in ``session_id``): resumed there, an approved call would be asked
      again, and the run's own session would wait for ever;
    - one that UndoLog approved with other arguments than the state's: its saved text
      edited between the stop and the resume. ``_apply_decisions`` finds a decision by
      the call's step (its call id), so it would hand the SDK the person's yes for a
      call they were never shown; the SDK's own record of the call (an unkeyed hash in
      the same text) may be edited too, and the edited call would then reach the engine
      and ask a person anew;
    - one whose call is the approved one, but whose tool (built again by this process)
      is not as it was when the call was journaled: it completes the call with other
      defaults (a parameter added with a default, one removed, a default changed), so
      that its signature is not the approved call's and the engine would ask about it
      anew at the same step; it requires a parameter the call does not name, or refuses
      a named argument's type (the SDK would answer the model with its argument error,
      and the run go on with the approval spent); it is no longer IRREVERSIBLE (the
      engine refuses the tool's new tier mid-run, and a SAFE one would run unjournaled);
      or the agent has no such tool (the SDK fails the run). The error says what changed
      (``_core.tool_differences``), and what to do.

    Every interrupted call with a call id is looked up, whatever the tool this process
    built for it, since only the journal knows whether UndoLog asked about it."""
    if not isinstance(input, RunState):
        return
    interrupted = [item for item in input.get_interruptions() if item.call_id is not None]
    if not interrupted:
        return
    # by approval: every item of the state that names its call (a state may hold one
    # interruption twice, and each must be the call approved)
    approved: dict[uuid.UUID, list[ToolApprovalItem]] = {}
    requested = False
    async with ul.connection() as conn:
        for item in interrupted:
            name = str(_journal_name(item, agent))
            found = await _arun.approval_of_step(conn, session_id, name, str(item.call_id))
            requested = requested or found is not None
            if found is not None and found[1] == "approved":
                approved.setdefault(found[0], []).append(item)
        calls = await _arun.approval_calls(conn, list(approved))
    asked = [
        (adapted.tool.name, str(item.call_id))
        for item in interrupted
        if (adapted := _adapted(agent, item)) is not None
        and adapted.tool.tier is ToolTier.IRREVERSIBLE
        and adapted.arguments(item.arguments or "{}") is not None
    ]
    if asked and not requested:
        raise _core.resumed_elsewhere(session_id, asked, "this RunState's interrupted calls")
    for approval, item in ((a, i) for a, items in approved.items() for i in items):
        row = calls.get(approval)
        if row is None:
            continue
        shown = _shown_call(session_id, item)
        changed = _core.tool_differences(shown, row)
        if changed is not None:
            raise ValueError(
                f"this RunState's {item.name} call, approved (approval {approval}): "
                + _core.tool_changed(shown, changed, "nothing was run")
            )
        differs = _core.call_differences(shown, row)
        if differs:
            raise ValueError(
                f"this RunState's {item.name} call {item.call_id} is not the call UndoLog "
                f"holds at its step ({'; '.join(differs)}): nothing was run. A person "
                f"approved that call (approval {approval}), not this one: the RunState was "
                "changed after the run stopped. Resume from the state the stopped run "
                "saved (result.to_state(), or its to_string() as it was written)"
            )


_PROBE = "undolog-probe-no-such-call"  # a call id no model gives: only a sticky decision


def _approved_for_the_run(agent: Agent[Any], input: object) -> None:
    """Refuse, before a session is opened, a RunState in which an IRREVERSIBLE tool was
    approved for the rest of the run (``RunState.approve(item, always_approve=True)``):
    the SDK would then run the tool's later calls without asking ``needs_approval``,
    while UndoLog runs an IRREVERSIBLE call only once a person has approved that very
    call (its approval covers its arguments), so each such call would end the run
    waiting, with no interruption to decide. One approval per call is UndoLog's rule:
    the caller is told so, and how to resume, before anything runs."""
    if not isinstance(input, RunState):
        return
    context = getattr(input, "_context", None)  # the SDK keeps the decisions there
    if context is None:
        return
    owners = [agent, *(getattr(i, "agent", None) for i in input.get_interruptions())]
    for owner in {id(o): o for o in owners if o is not None}.values():
        for candidate in getattr(owner, "tools", ()):
            adapted = getattr(candidate, _ADAPTED, None)
            if not isinstance(adapted, _Adapted) or adapted.tool.tier is not ToolTier.IRREVERSIBLE:
                continue
            try:
                sticky = context.is_tool_approved(candidate.name, _PROBE)
            except Exception:  # a decision the SDK cannot name by the tool alone
                continue
            if sticky is True:
                raise ValueError(
                    f"{candidate.name} was approved for the rest of the run "
                    "(always_approve=True) in this RunState, and nothing was run: UndoLog "
                    "runs an IRREVERSIBLE call only once a person has approved that very "
                    f"call, so it cannot approve {candidate.name}'s later calls in advance. "
                    "Take the stopped run's result.to_state() again, decide each waiting "
                    "call alone (decide(...), which approves that call only, or "
                    "state.approve(item) without always_approve), and resume: each later "
                    f"{candidate.name} call stops the run for its own approval"
                )


def _undolog_error(exc: UserError) -> BaseException:
    """The SDK reports a tool's exception as UserError("Error running tool ..."): answer
    UndoLog's own error behind it, which says what to do next."""
    cause = exc.__cause__
    return cause if isinstance(cause, UndoLogError) else exc


async def run(
    agent: Agent[Any],
    ul: AsyncUndoLog,
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **run_kwargs: Any,
) -> RunResult:
    """``Runner.run(agent, input, **run_kwargs)`` inside UndoLog session ``session_id``
    (begun, or resumed with the same id; ``input`` is a RunState to resume). A run that
    finishes completes the session; one that raises fails it and its compensations run
    last-first; one that stops with interruptions leaves it awaiting approval.

    Resuming a RunState, UndoLog's record is what counts: a call decided in UndoLog
    (through ``decide``, or elsewhere: CLI, dashboard, SQL) is approved or rejected in the
    RunState; one UndoLog has not decided raises AwaitingApprovalError and nothing runs,
    whatever the RunState says. A RunState resumed under a session id other than its
    run's raises ResumedInAnotherSession (a LookupError), and one in which an
    IRREVERSIBLE tool was approved with ``always_approve=True`` ValueError (UndoLog
    approves each call on its own), as does one whose interrupted call UndoLog approved
    with other arguments (a saved RunState's text edited), or whose tool changed since
    the stop so that it would not make the approved call (its parameters, their
    defaults or types, its tier, or the tool gone from the agent), before anything runs.
    Resuming a session whose call a human rejected undoes what came before and raises
    ApprovalRejectedError. A call a person approved with edited arguments runs with
    them, and the result's ToolCallItem holds them."""

    async def go() -> RunResult:
        if isinstance(input, RunState):
            await _apply_decisions(input, session_id)
        try:
            with _noting_edits() as noted:
                result = await Runner.run(agent, input, **run_kwargs)
                while (state := _malformed_answered(agent, result)) is not None:
                    result = await Runner.run(agent, state, **run_kwargs)
        except UserError as exc:
            raise _undolog_error(exc) from exc
        _edited_items(result, noted)
        return result

    _approved_for_the_run(agent, input)
    await _resumed_state_checked(agent, ul, input, session_id)
    return await _arun.run_in_session(
        ul, session_id, agent_name or agent.name, go, _waiting_calls, _ask_the_rest(agent)
    )


class StreamedRun:
    """A streamed run inside an UndoLog session: the SDK's ``RunResultStreaming`` (its
    attributes are this object's: ``interruptions``, ``final_output``, ``to_state()``,
    ``cancel()`` ...), except that ``stream_events()`` goes on through the follow-up run
    that answers a malformed IRREVERSIBLE call with the SDK's error (see ``run``).
    ``result`` is the current ``RunResultStreaming``."""

    def __init__(
        self, agent: Agent[Any], result: RunResultStreaming, run_kwargs: dict[str, Any]
    ) -> None:
        self.result = result
        self._agent = agent
        self._run_kwargs = run_kwargs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    async def stream_events(self) -> AsyncIterator[Any]:
        while True:
            async for event in self.result.stream_events():
                yield event
            state = _malformed_answered(self._agent, self.result)
            if state is None:
                return
            self.result = Runner.run_streamed(self._agent, state, **self._run_kwargs)


@contextlib.asynccontextmanager
async def run_streamed(
    agent: Agent[Any],
    ul: AsyncUndoLog,
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **run_kwargs: Any,
) -> AsyncIterator[StreamedRun]:
    """``Runner.run_streamed`` inside UndoLog session ``session_id``, as a block:

        async with run_streamed(agent, ul, input, session_id=sid) as result:
            async for event in result.stream_events():
                ...
        if result.interruptions: ...                   # as after ``run``

    The session is finished when the block ends (the events not read are drained
    first): completed, awaiting approval, or failed and undone, as with ``run``."""
    _approved_for_the_run(agent, input)
    await _resumed_state_checked(agent, ul, input, session_id)
    async with _arun.framework_run(
        ul, session_id, agent_name or agent.name, _waiting_calls, _ask_the_rest(agent)
    ) as box:
        if isinstance(input, RunState):
            await _apply_decisions(input, session_id)
        with _noting_edits() as noted:
            streamed = StreamedRun(
                agent, Runner.run_streamed(agent, input, **run_kwargs), run_kwargs
            )
            try:
                yield streamed
                async for _ in streamed.stream_events():
                    pass  # what the block did not read
            except UserError as exc:
                raise _undolog_error(exc) from exc
        _edited_items(streamed.result, noted)
        box.result = streamed.result


async def _approval_of(
    ul: AsyncUndoLog, session_id: uuid.UUID, item: ToolApprovalItem
) -> tuple[uuid.UUID, str]:
    name = _journal_name(item)
    if name is None or item.call_id is None:
        raise LookupError(f"approval item {item!r} names no function call")
    async with ul.connection() as conn:
        found = await _arun.approval_of_step(conn, session_id, name, item.call_id)
    if found is None:
        raise LookupError(f"{item.name} call {item.call_id} has no UndoLog approval request")
    return found


def _sent(item: ToolApprovalItem) -> Any:
    """The arguments of an interrupted call as the model sent them: their JSON (their text
    when it is not JSON)."""
    raw = item.arguments or "{}"
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def _shown_call(session_id: uuid.UUID, item: ToolApprovalItem) -> _core.ShownCall:
    """The call an interrupted item shows a person: its tool, call id and arguments as
    the journal holds them, bound by the tool as this process built it (``named``: those
    the model sent), with the tool's tier; as far as the tool takes them when its
    parameters refuse them (``ToolInfo.fit``); the model's JSON as it is for a tool the
    adapter did not build (no tier: ``_core.tool_differences`` says so when UndoLog
    journaled the call); their text when they are not a JSON object."""
    adapted = _adapted(None, item)
    name, call_id, sent = str(_journal_name(item)), str(item.call_id), _sent(item)
    named = sent if isinstance(sent, dict) else None
    if adapted is None:
        return _core.ShownCall(session_id, name, call_id, sent, named, tier=None)
    tool = adapted.tool
    kwargs = adapted.arguments(item.arguments or "{}")
    if kwargs is not None:
        return _core.ShownCall(session_id, name, call_id, tool.bind(kwargs), named, tool.tier)
    if named is None:
        return _core.ShownCall(session_id, name, call_id, item.arguments or "{}")
    args, required = tool.fit(named)
    return _core.ShownCall(
        session_id, name, call_id, args, named, tool.tier, fits=False, required=required
    )


async def approval_id(ul: AsyncUndoLog, session_id: uuid.UUID, item: ToolApprovalItem) -> uuid.UUID:
    """UndoLog's approval id of an interrupted call (read with the agent's client)."""
    return (await _approval_of(ul, session_id, item))[0]


async def decide(
    state: RunState[Any],
    item: ToolApprovalItem,
    ul: AsyncUndoLog,
    session_id: uuid.UUID,
    approver: _core.Approver,
    decided_by: str,
    *,
    approved: bool,
    reason: str | None = None,
) -> None:
    """Record a human's decision on an interrupted call in UndoLog through the approver's
    login, then ``state.approve(item)`` / ``state.reject(item)``. The approval is found by
    the item's session, tool and call id, and its pending call, read with the approver's
    login, must have the item's arguments (the journal's JSON form): else ValueError, and
    nothing is recorded. A decision recorder (an approver that is a callable, handed the
    approval id only) has the call read with ``ul``."""
    approval, _ = await _approval_of(ul, session_id, item)
    # the item comes from the agent's run: the call UndoLog asks about must be its call
    reader = _core.approvals_reader(approver, ul)
    await _arun.refuse_unshown(reader, approval, _shown_call(session_id, item))
    await _arun.record_decision(approver, approval, approved, decided_by, reason)
    if approved:
        state.approve(item)
    else:
        state.reject(item, rejection_message=reason)


async def _apply_decisions(state: RunState[Any], session_id: uuid.UUID) -> None:
    conn = current_session().connection
    assert isinstance(conn, psycopg.AsyncConnection)
    for item in state.get_interruptions():
        name = _journal_name(item)
        if name is None or item.call_id is None:
            continue
        found = await _arun.approval_of_step(conn, session_id, name, item.call_id)
        if found is None:
            continue  # not an UndoLog call: the RunState's own decision stands
        approval, decision = found
        if decision == "approved":
            state.approve(item)
        elif decision == "pending":
            raise AwaitingApprovalError(
                f"{item.name} call {item.call_id} waits for approval {approval} in UndoLog",
                approval,
                None,
            )
        else:  # the session goes on only for an on_reject="continue" tool
            refused = await _arun.refusal_of(conn, name, approval)
            state.reject(item, rejection_message=None if refused is None else refused.message)


__all__ = [
    "ResumedInAnotherSession",
    "StreamedRun",
    "approval_id",
    "decide",
    "run",
    "run_streamed",
    "tool",
    "tools",
]
