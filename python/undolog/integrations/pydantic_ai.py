"""``@undolog_tool`` tools as pydantic-ai tools (extra ``pydantic-ai``).

    agent = Agent(model, output_type=[str, DeferredToolRequests], tools=tools(a, b, c))
    result = await run(agent, ul, session_id=sid, user_prompt="...")
    if isinstance(result.output, DeferredToolRequests):          # an IRREVERSIBLE call
        answers = await decide(result.output, approver, "alice", {call_id: True}, agent=agent)
        result = await run(agent, ul, session_id=sid, message_history=result.all_messages(),
                           deferred_tool_results=answers)

An IRREVERSIBLE call goes through pydantic-ai's own approval path: the tool raises
``ApprovalRequired`` until UndoLog records a human's yes, so the run ends with
``DeferredToolRequests``; the answers come back as ``DeferredToolResults``. The approval
request is written when the run has stopped (a model turn's calls run side by side, and a
waiting session refuses new calls); ``run`` then names it in
``DeferredToolRequests.metadata[tool_call_id]["undolog_approval_id"]``. UndoLog's
record is what counts: a call approved in pydantic-ai but not in UndoLog is deferred
again; one approved in UndoLog by someone else (CLI, dashboard) runs when the run resumes
(``decisions`` reads the answers UndoLog holds). A rejection of a tool declared
``on_reject="continue"`` reaches the model as ``ToolDenied`` with who refused and why.
``run_stream`` and ``iter`` wrap pydantic-ai's streamed and node-by-node runs. Sync
journaled tools run in a worker thread, journaled by the run's async session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from pydantic import ValidationError
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext, Tool
from pydantic_ai._function_schema import FunctionSchema, function_schema
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRun, AgentRunResult
from pydantic_ai.tools import GenerateToolJsonSchema, ToolApproved, ToolDenied
from pydantic_ai.toolsets import (
    AbstractToolset,
    CombinedToolset,
    FunctionToolset,
    PrefixedToolset,
    RenamedToolset,
    WrapperToolset,
)

from undolog import aapprovals, aengine
from undolog.client import AsyncUndoLog, UndoLog
from undolog.decorator import last_edit
from undolog.errors import ApprovalRejectedError
from undolog.integrations import _arun, _core, _run
from undolog.integrations._core import SESSION_KEY, ResumedInAnotherSession
from undolog.tiers import ToolTier

APPROVAL_KEY = "undolog_approval_id"
"""The key of ``DeferredToolRequests.metadata[tool_call_id]`` naming UndoLog's approval."""
TOOL_KEY = "undolog_tool"
"""The key of ``DeferredToolRequests.metadata[tool_call_id]`` naming the UndoLog tool the
call was made to (the name the journal holds: a tool in a prefixed or renamed toolset is
called by another name)."""
EDIT_KEY = "undolog_edit"
"""The key of an edited call's ``ToolReturnPart.metadata`` holding the edit."""
_UNDOLOG_TOOL = "_undolog_tool"  # the attribute of a journaled tool's function built here


def tool(fn: Callable[..., Any]) -> Tool[Any]:
    """The pydantic-ai tool of a ``@undolog_tool`` (name, docstring and argument schema
    from the function; each call journaled under the step of its ``tool_call_id``)."""
    info = _core.describe(fn)
    if info.tier is ToolTier.SAFE:
        return Tool(fn, takes_ctx=False, name=info.name, description=info.description)
    schema = function_schema(fn, GenerateToolJsonSchema, tool_name=info.name, takes_ctx=False)
    single = schema.single_arg_name  # a tool of one model-like parameter: its fields
    # pydantic-ai validates the model's arguments into the tool's types: the call is
    # journaled (and signed) with their JSON form, its body gets the typed objects (a
    # sync journaled tool's in a worker thread)
    body = _core.awaitable_body(info)

    async def call(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
        bound = info.signature.bind(*args, **kwargs).arguments
        key = ctx.tool_call_id
        # UndoLog has no yes yet, whatever the run was told: ask (again)
        if (
            info.tier is ToolTier.IRREVERSIBLE
            and key is not None
            and await _arun.waiting(info, key, bound) is not None
        ):
            raise ApprovalRequired()
        try:
            with _core.pinned_step(key):
                result = await body(*args, **kwargs)
        except ApprovalRejectedError as error:
            refused = _core.refusal(info, error)
            if refused is None:
                raise
            return refused.message  # the session goes on: the model hears the "no"
        told = _core.edited_reply(info, result)  # a person's edit: the model hears it
        if told is result:
            return result
        return _edited_record(ctx, told, single)

    setattr(call, _UNDOLOG_TOOL, info)  # how a resume finds the run's UndoLog tools
    schema = dataclasses.replace(schema, function=call, takes_ctx=True, is_async=True)
    return Tool(
        call,
        takes_ctx=True,
        name=info.name,
        description=info.description,
        function_schema=schema,
    )


def _edited_record(ctx: RunContext[Any], told: Any, single: str | None = None) -> ToolReturn:
    """The history's record of a call a person approved with edited arguments: its
    ToolCallPart's args become the ones it ran with (what the model sees on its next
    turn, and what a saved history holds), and its ToolReturnPart carries the edit
    (requested and approved args, who, why) as metadata, which the model does not see.
    For a tool of one model-like parameter (``single``) the model's args are that
    model's fields, and the journal's are ``{single: fields}``: the part gets the fields."""
    edit = last_edit()
    assert edit is not None  # edited_reply answered a note
    for message in reversed(ctx.messages):
        if not isinstance(message, ModelResponse) or not isinstance(message.parts, list):
            continue
        for i, part in enumerate(message.parts):
            if isinstance(part, ToolCallPart) and part.tool_call_id == ctx.tool_call_id:
                # a new part in the run's own copy of the response (_own_copy): the part
                # the caller holds (the stopped run's DeferredToolRequests, all_messages()
                # and the history passed in) keeps the model's arguments
                approved = edit.approved_args.get(single) if single is not None else None
                if isinstance(approved, Mapping):
                    ran = dict(approved)
                else:
                    ran = _core.ran_with(part.args_as_dict(), edit)
                message.parts[i] = dataclasses.replace(part, args=ran)
                break
        else:
            continue
        break
    return ToolReturn(return_value=told, metadata={EDIT_KEY: edit.as_dict()})


def _own_copy(history: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The message history a run is given: each ModelResponse rebuilt with a list of
    parts of its own, so that what the run writes into it (an edited call's args,
    ``_edited_record``) is not written into the objects the caller still holds."""
    return [
        dataclasses.replace(m, parts=list(m.parts)) if isinstance(m, ModelResponse) else m
        for m in history
    ]


def tools(*fns: Callable[..., Any]) -> list[Tool[Any]]:
    return [tool(fn) for fn in fns]


def _waiting_calls(result: AgentRunResult[Any]) -> list[str] | None:
    if not isinstance(result.output, DeferredToolRequests):
        return None
    return [part.tool_call_id for part in result.output.approvals]


def _answered(history: Sequence[ModelMessage]) -> set[str]:
    """The tool call ids that ``history`` holds an answer to (a return or a retry)."""
    return {
        part.tool_call_id
        for message in history
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    }


def _mid_turn(history: Sequence[ModelMessage]) -> ModelResponse | None:
    """The last model response of ``history`` when some of its tool calls have no
    answer yet (the run stopped in the middle of that turn: its deferred calls wait)."""
    answered = _answered(history)
    for message in reversed(history):
        if isinstance(message, ModelResponse):
            waiting = any(call.tool_call_id not in answered for call in message.tool_calls)
            return message if waiting else None
    return None


def _record_session(result: AgentRunResult[Any], session_id: uuid.UUID) -> None:
    """Record the run's session in the metadata of the model response it stopped in
    (pydantic-ai keeps it in ``all_messages()`` and its JSON; the model never sees it)."""
    stopped = _mid_turn(result.all_messages())
    if stopped is not None:
        stopped.metadata = {**(stopped.metadata or {}), SESSION_KEY: str(session_id)}


def _recorded_session(run_kwargs: Mapping[str, Any]) -> object:
    """The session a mid-turn message history records for the run that stopped (None:
    not mid-turn, or no record)."""
    stopped = _mid_turn(list(run_kwargs.get("message_history") or ()))
    return None if stopped is None else (stopped.metadata or {}).get(SESSION_KEY)


def _own_session(run_kwargs: Mapping[str, Any], session_id: uuid.UUID) -> None:
    """Refuse a message history that stopped mid-turn in a run of another session (the
    session its model response records), naming the session to resume with."""
    _core.refuse_recorded_session(
        _recorded_session(run_kwargs),
        session_id,
        "this message history stopped in the middle of a model turn in a run",
    )


def _unanswered_calls(
    agent: Agent[Any, Any], run_kwargs: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """(UndoLog tool name, tool call id) of each IRREVERSIBLE call of a mid-turn
    history's last model response that has no answer yet: the calls its run deferred,
    which UndoLog asked about in that run's session."""
    history = list(run_kwargs.get("message_history") or ())
    stopped = _mid_turn(history)
    if stopped is None:
        return []
    answered = _answered(history)
    tools = _irreversible_tools(agent, run_kwargs)
    return [
        (tools[call.tool_name].name, call.tool_call_id)
        for call in stopped.tool_calls
        if call.tool_call_id not in answered and call.tool_name in tools
    ]


def _name_approvals(
    session_id: uuid.UUID, names: Mapping[str, str]
) -> Callable[[AgentRunResult[Any], aengine.AsyncConnection], Awaitable[None]]:
    """What names, in the stopped run's ``DeferredToolRequests.metadata``, the approval
    of each deferred call of an UndoLog tool (``APPROVAL_KEY``) and that tool's name
    (``TOOL_KEY``). ``names`` maps the name a tool is called by to its UndoLog name (a
    tool of a prefixed or renamed toolset); a name not there is taken as it is."""

    async def name(result: AgentRunResult[Any], conn: aengine.AsyncConnection) -> None:
        _record_session(result, session_id)
        requests = result.output
        for part in requests.approvals:
            tool_name = names.get(part.tool_name, part.tool_name)
            found = await _arun.approval_of_step(conn, session_id, tool_name, part.tool_call_id)
            if found is not None:
                meta = requests.metadata.setdefault(part.tool_call_id, {})
                meta[APPROVAL_KEY] = str(found[0])
                meta[TOOL_KEY] = tool_name

    return name


def _leaves(
    toolset: AbstractToolset[Any], rename: Callable[[str], str]
) -> Iterator[tuple[AbstractToolset[Any], Callable[[str], str]]]:
    """Each toolset that ``toolset`` wraps or combines, through the wrappers, with what
    they do to a name: a ``PrefixedToolset`` calls ``payout`` ``bank_payout``, a
    ``RenamedToolset`` by its map; another wrapper (filtered, prepared: pydantic-ai
    refuses a rename there) keeps the names. ``rename`` is what the wrappers outside
    ``toolset`` do to a name."""
    if isinstance(toolset, PrefixedToolset):
        prefix = toolset.prefix
        yield from _leaves(toolset.wrapped, lambda name: rename(f"{prefix}_{name}"))
    elif isinstance(toolset, RenamedToolset):
        new_name = {original: new for new, original in toolset.name_map.items()}
        yield from _leaves(toolset.wrapped, lambda name: rename(new_name.get(name, name)))
    elif isinstance(toolset, WrapperToolset):
        yield from _leaves(toolset.wrapped, rename)
    elif isinstance(toolset, CombinedToolset):
        for member in toolset.toolsets:
            yield from _leaves(member, rename)
    else:
        yield toolset, rename


def _called(
    toolset: AbstractToolset[Any], rename: Callable[[str], str]
) -> list[tuple[str, Tool[Any]]]:
    """(the name it is called by, the tool) of each tool of ``toolset`` that lists its
    tools (a ``FunctionToolset``), through the toolsets that wrap or combine it
    (``_leaves``)."""
    return [
        (named(made.name), made)
        for leaf, named in _leaves(toolset, rename)
        for made in getattr(leaf, "tools", {}).values()
    ]


def _every_tool_listed(
    agent: Agent[Any, Any] | None, toolsets: Sequence[AbstractToolset[Any]]
) -> bool:
    """Whether every toolset of the agent and of ``toolsets`` lists its tools before the
    run (a ``FunctionToolset``), so that a tool ``_journaled`` does not find is not the
    run's. A ``DynamicToolset`` (a toolset function) builds its tools in the run, an
    MCP server asks its server for them: a tool not found may be one of theirs."""
    return all(
        isinstance(leaf, FunctionToolset)
        for toolset in [*(agent.toolsets if agent is not None else ()), *toolsets]
        for leaf, _ in _leaves(toolset, lambda name: name)
    )


def _journaled(
    agent: Agent[Any, Any] | None, toolsets: Sequence[AbstractToolset[Any]]
) -> dict[str, tuple[Tool[Any], _core.ToolInfo]]:
    """The journaled ``@undolog_tool`` tools (built by ``tool``: COMPENSABLE and
    IRREVERSIBLE) of the agent and of ``toolsets`` (those given to the run), by the name
    the model calls them by (their own, or the one a prefixed or renamed toolset gives
    them): the pydantic-ai tool and its UndoLog description."""
    found: dict[str, tuple[Tool[Any], _core.ToolInfo]] = {}
    for toolset in [*(agent.toolsets if agent is not None else ()), *toolsets]:
        for name, made in _called(toolset, lambda name: name):
            info = getattr(getattr(made, "function", None), _UNDOLOG_TOOL, None)
            if isinstance(info, _core.ToolInfo):
                found[name] = (made, info)
    return found


def _irreversible(
    agent: Agent[Any, Any] | None, toolsets: Sequence[AbstractToolset[Any]]
) -> dict[str, tuple[Tool[Any], _core.ToolInfo]]:
    """The IRREVERSIBLE ones of ``_journaled``."""
    return {
        name: (made, info)
        for name, (made, info) in _journaled(agent, toolsets).items()
        if info.tier is ToolTier.IRREVERSIBLE
    }


def _run_tools(
    agent: Agent[Any, Any] | None, toolsets: Sequence[AbstractToolset[Any]]
) -> dict[str, tuple[Tool[Any], _core.ToolInfo]] | None:
    """The journaled tools of the run ``decide`` or ``decisions`` is given (None: neither
    its agent nor its toolsets, so its tools are not known)."""
    return _journaled(agent, toolsets) if agent is not None or toolsets else None


def _irreversible_tools(
    agent: Agent[Any, Any], run_kwargs: Mapping[str, Any]
) -> dict[str, _core.ToolInfo]:
    """The IRREVERSIBLE ``@undolog_tool`` tools (built by ``tool``) of the agent and of
    the run's own toolsets, by name."""
    found = _irreversible(agent, run_kwargs.get("toolsets") or ())
    return {name: info for name, (_, info) in found.items()}


def _deferred_calls(agent: Agent[Any, Any], run_kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(UndoLog tool name, tool call id) of each IRREVERSIBLE call that a resumed run's
    ``deferred_tool_results`` answers (none: the run resumes nothing)."""
    answers = run_kwargs.get("deferred_tool_results")
    if not isinstance(answers, DeferredToolResults) or not answers.approvals:
        return []
    tools = _irreversible_tools(agent, run_kwargs)
    return [
        (tools[part.tool_name].name, part.tool_call_id)
        for message in run_kwargs.get("message_history") or ()
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolCallPart)
        and part.tool_call_id in answers.approvals
        and part.tool_name in tools
    ]


def _answers_the_last_calls(run_kwargs: Mapping[str, Any], session_id: uuid.UUID) -> None:
    """Refuse, before a session is opened, ``deferred_tool_results`` that answer a call
    the message history's last model response did not make (a stale or edited answer, or
    the history of another run). pydantic-ai refuses it too, but from inside the run: the
    session, waiting for a person, would then fail, and what it did would be undone,
    although nothing of the resume ran."""
    answers = run_kwargs.get("deferred_tool_results")
    if not isinstance(answers, DeferredToolResults):
        return
    answered = [*answers.approvals, *answers.calls]
    if not answered:
        return
    made: set[str] = set()
    for message in reversed(list(run_kwargs.get("message_history") or ())):
        if isinstance(message, ModelResponse):
            made = {part.tool_call_id for part in message.tool_calls}
            break
    unknown = [call_id for call_id in answered if call_id not in made]
    if unknown:
        raise LookupError(
            f"deferred_tool_results answers calls ({', '.join(unknown)}) that the last model "
            "response of message_history did not make, and nothing was run: session "
            f"{session_id} is as it was. Resume with the all_messages() of the run that "
            "stopped, answering the calls of its DeferredToolRequests"
        )
    history = list(run_kwargs.get("message_history") or ())
    stopped = _mid_turn(history)
    done = _answered(history)
    unanswered = [
        call.tool_call_id
        for call in (stopped.tool_calls if stopped is not None else ())
        if call.tool_call_id not in done and call.tool_call_id not in answered
    ]
    if unanswered:  # a deferred call that is not UndoLog's, which decide leaves out
        raise LookupError(
            f"deferred_tool_results does not answer the deferred calls {', '.join(unanswered)}, "
            f"and nothing was run: session {session_id} is as it was. pydantic-ai wants an "
            "answer for each; decide and decisions answer only UndoLog's calls: answer the "
            "others (a tool declared requires_approval) in the DeferredToolResults"
        )


async def _same_session(
    agent: Agent[Any, Any],
    ul: AsyncUndoLog,
    run_kwargs: Mapping[str, Any],
    session_id: uuid.UUID,
) -> dict[str, Any]:
    """Refuse, before a session is opened, a run resumed (``deferred_tool_results``, or
    a message history that stopped mid-turn, whose model response records its run's
    session) under a session id other than the one of the run that deferred its calls: their
    IRREVERSIBLE calls were asked in their own session, and none of them has a request
    in ``session_id``. Resumed there, each would be asked again, in a second session,
    and the first session would wait for ever.

    Answers the run's keyword arguments, whose ``DeferredToolResults`` UndoLog's record
    decides: a "no" (``False``, ``ToolDenied``) to a call that UndoLog approved, or has
    not decided, goes to the call's tool as a yes, and the tool asks UndoLog (the
    approved call runs, once; the undecided one is deferred again). Told no by the run
    alone, the approved call never ran while UndoLog said it was approved, and the
    undecided one left the session waiting for ever after the run had ended."""
    _answers_the_last_calls(run_kwargs, session_id)
    asked = _deferred_calls(agent, run_kwargs)
    # a mid-turn history resumed with no answers (its record stripped, or never kept):
    # its unanswered IRREVERSIBLE calls were asked in the session of the run that stopped
    waiting = asked or _unanswered_calls(agent, run_kwargs)
    what = "this run's deferred calls" if asked else "this message history's unanswered calls"
    # the history's record names the session to resume with, whichever check refuses
    recorded = _recorded_session(run_kwargs)
    named = None if recorded is None or str(recorded) == str(session_id) else recorded
    await _arun.refuse_another_session(ul, session_id, waiting, what, named)
    _own_session(run_kwargs, session_id)  # refused by the record alone, whatever its answers
    await _tools_unchanged(agent, ul, run_kwargs, session_id)
    run_kwargs = _with_own_history(run_kwargs)
    answers: DeferredToolResults | None = run_kwargs.get("deferred_tool_results")
    said_no = [
        (name, call_id)
        for name, call_id in asked
        if answers is not None
        and (
            answers.approvals[call_id] is False
            or isinstance(answers.approvals[call_id], ToolDenied)
        )
    ]
    if answers is None or not said_no:
        return dict(run_kwargs)
    approvals = dict(answers.approvals)
    async with ul.connection() as conn:
        for name, call_id in said_no:  # the tool asks UndoLog: its record decides
            found = await _arun.approval_of_step(conn, session_id, name, call_id)
            if found is not None and found[1] in ("approved", "pending"):
                approvals[call_id] = True
    return {
        **run_kwargs,
        "deferred_tool_results": dataclasses.replace(answers, approvals=approvals),
    }


async def _tools_unchanged(
    agent: Agent[Any, Any],
    ul: AsyncUndoLog,
    run_kwargs: Mapping[str, Any],
    session_id: uuid.UUID,
) -> None:
    """Refuse, before a session is opened, a resume whose deferred call UndoLog approved
    when the call's tool, as this process built the run's tools, is not as it was when
    the call was journaled (``_core.tool_differences``): a parameter added with a
    default, or a default changed, makes the call another one, which the engine would
    ask about anew at the same step; a parameter added without a default, one removed or
    renamed, or a type changed, and pydantic-ai would answer the model with its argument
    error, the run going on without the approved call; a tool gone from the agent (or
    made SAFE), and with its unknown-tool error; made COMPENSABLE, and the engine would
    refuse its new tier mid-run (UL018), failing and undoing the session. The error says
    what changed, and what to do.

    Every unanswered call of the history's last model response is looked up, whatever
    its tool now, since only the journal knows whether UndoLog asked about it (by the
    UndoLog name of its journaled tool, else the name the model called)."""
    history = list(run_kwargs.get("message_history") or ())
    stopped = _mid_turn(history)
    if stopped is None:
        return
    answered = _answered(history)
    toolsets = run_kwargs.get("toolsets") or ()
    tools, listed = _journaled(agent, toolsets), _every_tool_listed(agent, toolsets)
    waiting = [call for call in stopped.tool_calls if call.tool_call_id not in answered]
    async with ul.connection() as conn:
        for part in waiting:
            made = tools.get(part.tool_name)
            shown = _shown_call(session_id, part, tools, listed)
            if made is None and listed:
                # no tool of the model's name now: the journal's at the call's step, since
                # a prefixed or renamed toolset's call (bank_payout) is journaled under its
                # tool's own name (payout)
                at = await _arun.approval_at_step(conn, session_id, part.tool_call_id)
                found = None if at is None else (at[0], at[1])
                if at is not None:
                    shown = dataclasses.replace(shown, tool_name=at[2])
            else:
                name = made[1].name if made is not None else part.tool_name
                found = await _arun.approval_of_step(conn, session_id, name, part.tool_call_id)
            if found is None or found[1] != "approved":
                continue
            row = (await _arun.approval_calls(conn, [found[0]])).get(found[0])
            changed = None if row is None else _core.tool_differences(shown, row)
            if changed is not None:
                raise ValueError(
                    f"this message history's {part.tool_name} call, approved (approval "
                    f"{found[0]}): " + _core.tool_changed(shown, changed, "nothing was run")
                )


def _with_own_history(run_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The run's keyword arguments, its message_history (if any) the run's own copy."""
    history = run_kwargs.get("message_history")
    if history is None:
        return dict(run_kwargs)
    return {**run_kwargs, "message_history": _own_copy(history)}


def _session(
    session_id: uuid.UUID,
    agent_name: str | None,
    ul: AsyncUndoLog,
    agent: Agent[Any, Any],
    run_kwargs: Mapping[str, Any],
) -> contextlib.AbstractAsyncContextManager[_core.RunBox[AgentRunResult[Any]]]:
    names = {name: info.name for name, info in _irreversible_tools(agent, run_kwargs).items()}
    return _arun.framework_run(
        ul, session_id, agent_name, _waiting_calls, _name_approvals(session_id, names)
    )


async def run(
    agent: Agent[Any, Any],
    ul: AsyncUndoLog,
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **run_kwargs: Any,
) -> AgentRunResult[Any]:
    """``agent.run(**run_kwargs)`` inside UndoLog session ``session_id`` (begun, or
    resumed with the same id). A run that finishes completes the session; one that raises
    fails it and its compensations run last-first; one that ends with
    ``DeferredToolRequests`` leaves it awaiting approval. Resuming a session whose call a
    human rejected undoes what came before and raises ApprovalRejectedError. A run resumed
    under a session id other than the one of the run that deferred its calls raises
    ResumedInAnotherSession (a LookupError) before anything runs: the run that stops
    records its session in the metadata of the model response it stopped in
    (``SESSION_KEY``), and its deferred calls' requests are UndoLog's. A resume whose
    approved call's tool changed since the stop so that it would not make that call (its
    parameters, their defaults or types, its tier, or the tool gone from the agent)
    raises ValueError before anything runs. A call a person
    approved with edited arguments ran with them, and the history says so: its
    ToolCallPart's args are those, its ToolReturnPart's metadata the edit (``EDIT_KEY``)."""
    run_kwargs = await _same_session(agent, ul, run_kwargs, session_id)
    async with _session(session_id, agent_name, ul, agent, run_kwargs) as box:
        box.result = result = await agent.run(**run_kwargs)
    return result


@contextlib.asynccontextmanager
async def run_stream(
    agent: Agent[Any, Any],
    ul: AsyncUndoLog,
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **run_kwargs: Any,
) -> AsyncIterator[StreamedRunResult[Any, Any]]:
    """``agent.run_stream(**run_kwargs)`` inside UndoLog session ``session_id``, as a
    block; the session is finished when the block ends (the stream is read to its end
    first), as with ``run``. After the block, ``streamed.result`` is the run's
    ``AgentRunResult``, whose ``DeferredToolRequests`` names UndoLog's approvals."""
    run_kwargs = await _same_session(agent, ul, run_kwargs, session_id)
    async with _session(session_id, agent_name, ul, agent, run_kwargs) as box:
        async with agent.run_stream(**run_kwargs) as streamed:
            yield streamed
            if not streamed.is_complete:
                await streamed.get_output()
        box.result = streamed.result


@contextlib.asynccontextmanager
async def iter(  # the name of the pydantic-ai call it wraps
    agent: Agent[Any, Any],
    ul: AsyncUndoLog,
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **run_kwargs: Any,
) -> AsyncIterator[AgentRun[Any, Any]]:
    """``agent.iter(**run_kwargs)`` inside UndoLog session ``session_id``, as a block
    that walks the run's nodes; the session is finished when the block ends (the nodes
    not walked are run first), as with ``run``. After the block, ``agent_run.result`` is
    the run's ``AgentRunResult``."""
    run_kwargs = await _same_session(agent, ul, run_kwargs, session_id)
    async with _session(session_id, agent_name, ul, agent, run_kwargs) as box:
        async with agent.iter(**run_kwargs) as agent_run:
            yield agent_run
            if agent_run.result is None:
                async for _ in agent_run:
                    pass
        box.result = agent_run.result


def approval_id(requests: DeferredToolRequests, tool_call_id: str) -> uuid.UUID:
    """UndoLog's approval id of a deferred call."""
    return uuid.UUID(str(requests.metadata[tool_call_id][APPROVAL_KEY]))


Reader = AsyncUndoLog | UndoLog | aengine.AsyncConnection
"""What reads UndoLog's approval requests: a client (the approver's, or the agent's), or
a connection of one already open."""


async def _approval_calls(
    reader: Reader, approvals: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[Any, ...]]:
    """``_arun.approval_calls`` on the connection given, or on one of either client (a
    sync one's in a worker thread)."""
    if isinstance(reader, psycopg.AsyncConnection):
        return await _arun.approval_calls(reader, approvals)
    if isinstance(reader, AsyncUndoLog):
        async with reader.connection() as conn:
            return await _arun.approval_calls(conn, approvals)

    def read() -> dict[uuid.UUID, tuple[Any, ...]]:
        with reader.connection() as conn:
            return _run.approval_calls(conn, approvals)

    return await asyncio.to_thread(read)


def _bound(part: ToolCallPart, made: tuple[Tool[Any], _core.ToolInfo]) -> dict[str, Any] | None:
    """The arguments of ``part`` as the journal would hold them, made by ``made`` (the
    pydantic-ai tool and its UndoLog description): read as pydantic-ai reads the model's,
    bound with the tool's defaults, in their JSON form, as the adapter journals them.
    None: the tool does not take them."""
    tool, info = made
    try:
        validated = tool.function_schema.validator.validate_python(part.args_as_dict())
        return info.bind(info.signature.bind(**validated).arguments)
    except Exception:  # arguments the tool does not take: not a call it makes
        return None


def _same_args(
    part: ToolCallPart, journaled: Any, made: tuple[Tool[Any], _core.ToolInfo] | None
) -> bool:
    """Whether the arguments the journal holds for a call are those of ``part`` (what the
    person is shown). With the tool (``made``), the model's arguments are read as
    pydantic-ai reads them and journaled as the adapter journals them (``_bound``);
    without it, the arguments the model sent must be the journal's exactly (the
    same keys, the same values; the fields of a tool of one model-like parameter: that
    parameter's): a call shown with fewer arguments is not the call."""
    if not isinstance(journaled, Mapping):
        return False
    if made is not None:
        bound = _bound(part, made)
        return bound is not None and _core.same_json(bound, journaled)
    sent = part.args_as_dict()
    if _core.same_json(sent, journaled):
        return True
    only = None
    if len(journaled) == 1:
        (only,) = journaled.values()
    return isinstance(only, Mapping) and _core.same_json(sent, only)


def _shown_call(
    session_id: uuid.UUID,
    part: ToolCallPart,
    tools: Mapping[str, tuple[Tool[Any], _core.ToolInfo]],
    every_tool_listed: bool,
) -> _core.ShownCall:
    """The deferred call ``part`` as the run's journaled tools (``_journaled``, as this
    process built them) would make it, for ``_core.tool_differences``: its arguments
    bound by its tool (``_bound``; ``named``: those the model sent, a tool of one
    model-like parameter's under that parameter, as the journal holds them), with the
    tool's tier; as far as the tool takes them when its parameters refuse them
    (``ToolInfo.fit``); the model's as they are, with no tier, when the run has no
    journaled tool of its name (removed, made SAFE); not compared (no ``named``) when
    the tool may be one that a toolset builds in the run (``every_tool_listed`` false:
    ``_every_tool_listed``)."""
    sent = part.args_as_dict()
    made = tools.get(part.tool_name)
    if made is None and not every_tool_listed:
        return _core.ShownCall(session_id, part.tool_name, part.tool_call_id, sent)
    if made is None:
        return _core.ShownCall(session_id, part.tool_name, part.tool_call_id, sent, sent, tier=None)
    tool, info = made
    single = tool.function_schema.single_arg_name
    named = {single: sent} if single is not None and set(sent) != {single} else sent
    bound = _bound(part, made)
    if bound is not None:
        return _core.ShownCall(session_id, info.name, part.tool_call_id, bound, named, info.tier)
    args, required = info.fit(named)
    return _core.ShownCall(
        session_id,
        info.name,
        part.tool_call_id,
        args,
        named,
        info.tier,
        fits=False,
        required=required,
    )


def _named_approval(requests: DeferredToolRequests, part: ToolCallPart) -> uuid.UUID | None:
    """The approval the requests' metadata names for ``part`` (None: none)."""
    meta = requests.metadata.get(part.tool_call_id)
    named = meta.get(APPROVAL_KEY) if isinstance(meta, Mapping) else None
    if named is None:
        return None
    try:
        return uuid.UUID(str(named))
    except ValueError:
        raise ValueError(
            f"the metadata of call {part.tool_call_id} names {named!r}, not an approval id, "
            "and nothing was recorded: take the DeferredToolRequests of the run that stopped"
        ) from None


async def _undolog_calls(
    reader: Reader | None,
    requests: DeferredToolRequests,
    tools: Mapping[str, tuple[Tool[Any], _core.ToolInfo]] | None,
    every_tool_listed: bool = True,
) -> dict[str, uuid.UUID]:
    """UndoLog's approval of each deferred call whose metadata names one, by tool call
    id, each checked against the journal first: the request the id names must be about
    that call (the tool the part names, by its UndoLog name among the run's IRREVERSIBLE
    ``tools``, else as it is, never the metadata's ``TOOL_KEY``; the step of its
    ``tool_call_id``; its arguments), else ValueError. The metadata comes from the
    agent's process: a request that names the approval of another call (of another
    amount, another session) would otherwise have a person's yes land on what they were
    never shown. A call whose metadata names no approval is not UndoLog's to decide (a
    pydantic-ai tool of the agent's own declared ``requires_approval``, say).

    ``tools`` are the run's journaled tools (``_journaled``; None: not given). A call
    whose tool among them is not as it was when the call was journaled (its parameters,
    their defaults or types, its tier, or no such tool, when ``every_tool_listed``:
    ``_every_tool_listed``) is refused saying so (``_core.tool_differences``): that tool
    would not make the call asked about."""
    own = {
        name: made for name, made in (tools or {}).items() if made[1].tier is ToolTier.IRREVERSIBLE
    }
    named: dict[str, tuple[ToolCallPart, uuid.UUID]] = {}
    for part in requests.approvals:
        approval = _named_approval(requests, part)
        if approval is not None:
            named[part.tool_call_id] = (part, approval)
    if not named:
        return {}
    if reader is None:
        raise _core.unchecked_decision()
    calls = await _approval_calls(reader, [approval for _, approval in named.values()])
    for call_id, (part, approval) in named.items():
        made = own.get(part.tool_name)
        # the tool the person was shown: the part's name (the run's tools map a prefixed
        # or renamed one to its UndoLog name), never the metadata's TOOL_KEY, which the
        # agent's process wrote and would be compared with itself
        tool_name = made[1].name if made is not None else part.tool_name
        row = calls.get(approval)
        if row is None:
            raise ValueError(
                f"call {call_id} ({part.tool_name}) names approval {approval}, which this "
                "login cannot read (unknown, or of a session it may not see), and nothing "
                "was recorded: take the DeferredToolRequests of the run that stopped"
            )
        session, step, journal_tool, journaled = row
        if tools is not None:
            shown = _shown_call(uuid.UUID(str(session)), part, tools, every_tool_listed)
            changed = _core.tool_differences(shown, row)
            if changed is not None:
                raise ValueError(
                    f"approval {approval}: "
                    + _core.tool_changed(shown, changed, "nothing was recorded")
                )
        wrong = [
            what
            for what, same in (
                (f"the tool ({journal_tool}, not {tool_name})", journal_tool == tool_name),
                ("the step", step == _core.step_for(call_id)),
                ("the arguments", _same_args(part, journaled, made)),
            )
            if not same
        ]
        if wrong:
            raise ValueError(
                f"call {call_id} ({part.tool_name} {part.args_as_json_str()}) names approval "
                f"{approval}, which asks about another call of session {session} "
                f"({' and '.join(wrong)} differ), and nothing was recorded: a decision goes "
                "to the call the person was shown or to none. Take the DeferredToolRequests "
                "of the run that stopped"
                + (
                    ""
                    if made is not None
                    else ". Without the run's tools the shown call must be the journal's "
                    "as it is (its tool's UndoLog name, every argument the journal holds): "
                    "a tool of a prefixed or renamed toolset, or arguments the journal "
                    "completes with defaults, need decide's agent= (and the run's toolsets=)"
                )
            )
    return {call_id: approval for call_id, (_, approval) in named.items()}


def _reader(approver: _core.Approver, ul: Reader | None) -> Reader | None:
    return approver if isinstance(approver, AsyncUndoLog | UndoLog) else ul


Answer = bool | ToolApproved | ToolDenied
"""A person's answer to a deferred call: approved or not, or pydantic-ai's own."""


def _checked_edit(
    part: ToolCallPart, args: Mapping[str, Any] | None, schema: FunctionSchema | None
) -> dict[str, Any] | None:
    """A person's override_args validated by the tool's argument schema over the call's
    own arguments, as pydantic-ai validates the model's ("50" for an int is 50): the
    call's arguments as they will run, in the JSON form the journal holds (a date as ISO
    text ...), which the body gets read into its types. Arguments that do not fit, and a
    key the tool does not take (a validator would ignore it, and the call run unedited),
    raise ValueError, and nothing is recorded. A tool of one model-like parameter takes
    its model's fields, or (the journal's shape, which the person is shown) that one
    parameter's name, whose fields go over the call's. ``schema`` is the argument schema
    of the tool the call was made to, the run's own (``decide`` finds it among the tools
    of the agent it is given); None, that tool is not known here: its edit goes as it
    is."""
    if args is None:
        return None
    if not isinstance(args, Mapping):
        raise ValueError(
            f"the edited {part.tool_name} arguments are {type(args).__name__}, not a mapping "
            "of argument names to values"
        )
    if schema is None:
        return dict(args)
    asked = part.args_as_dict()
    single = schema.single_arg_name
    edit: Mapping[str, Any] = args
    if single is not None:
        if set(asked) == {single} and isinstance(asked[single], Mapping):
            asked = dict(asked[single])  # the model sent the wrapped shape
        if set(args) == {single}:
            if not isinstance(args[single], Mapping):
                raise ValueError(
                    f"the edited {part.tool_name} argument {single!r} is "
                    f"{type(args[single]).__name__}, not the fields of its model"
                )
            edit = args[single]
    properties = schema.json_schema.get("properties", {})
    if schema.json_schema.get("additionalProperties") is not True:
        unknown = sorted(str(key) for key in edit if key not in properties)
        if unknown:
            raise ValueError(
                f"the edited {part.tool_name} arguments name what the tool does not take: "
                f"{', '.join(unknown)} (it takes {', '.join(sorted(properties))})"
            )
    try:
        validated = schema.validator.validate_python({**asked, **edit})
    except ValidationError as error:
        raise ValueError(
            f"the edited {part.tool_name} arguments do not fit the tool: {error}"
        ) from error
    # the whole call as it would run, by parameter: an edit names the call's arguments
    # (the engine's rule), and a model-like single parameter's fields are its own
    return {name: _core.json_form(value) for name, value in validated.items()}


def _answer(answer: Answer, reason: str | None) -> tuple[bool, str | None, dict[str, Any] | None]:
    """(approved, reason, edited args) of an answer. ``ToolDenied(message)`` rejects, its
    message the reason when none is given; ``ToolApproved(override_args=...)`` approves
    with the person's arguments (the engine runs the call with them: edit, then approve)."""
    if isinstance(answer, bool):
        return answer, reason, None
    if isinstance(answer, ToolDenied):
        return False, reason if reason is not None else answer.message, None
    if isinstance(answer, ToolApproved):
        return True, reason, answer.override_args
    raise TypeError(f"{answer!r} is not an answer: True, False, ToolApproved or ToolDenied")


async def decide(
    requests: DeferredToolRequests,
    approver: _core.Approver,
    decided_by: str,
    approvals: Mapping[str, Answer],
    reason: str | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    toolsets: Sequence[AbstractToolset[Any]] = (),
    ul: Reader | None = None,
) -> DeferredToolResults:
    """Record a human's answers (``tool_call_id`` -> True, False, or pydantic-ai's own
    ``ToolApproved(override_args=...)`` / ``ToolDenied(message)``) in UndoLog through the
    approver's login, and answer the ``DeferredToolResults`` to resume with. An approval
    with ``override_args`` is recorded with them (``undolog.approve_edited``): the call
    runs once with the person's arguments, and the model is told. A call of an UndoLog
    tool not answered here goes back to its tool, which asks UndoLog again.

    Nothing is recorded unless every answer is sound: an answer for a call the requests
    do not ask about, or an approval named in their metadata that is not the call shown
    (its tool, the step of its ``tool_call_id``, its arguments, read from the journal
    through the approver's client, or ``ul`` when the approver is a callable), raises
    ValueError first. Without the run's tools (``agent``), the call shown must be the
    journal's as it is: the tool's UndoLog name, the journal's arguments exactly. A
    deferred call that is not UndoLog's (a pydantic-ai tool declared
    ``requires_approval``: its metadata names no UndoLog approval) is never recorded in
    UndoLog: its answer, when given, goes to pydantic-ai as it is, and only with
    ``agent`` (or ``toolsets``) given, whose tools tell it from an UndoLog call whose
    metadata lost its approval id (without them, ValueError); unanswered, it is left
    out, and pydantic-ai refuses to resume until the app answers it.

    ``agent`` (and the ``toolsets`` given to the run, if any) is the run's: the
    ``override_args`` of a call are validated by the argument schema of the tool of that
    name among its tools, as pydantic-ai validates the model's, and arguments that do not
    fit raise ValueError before any answer is recorded; the call's own arguments are read
    so too before they are compared with the journal's, and a call whose tool there is
    not as it was when the call was journaled (its parameters, their defaults or types,
    its tier, or no such tool: the resume would not make the call asked about) raises
    ValueError saying what changed. The edit of a call whose tool is
    not among them (no agent given: a process that decides without building the agent)
    goes as it is, unchecked: the engine still refuses an argument the call does not
    have, but a value that does not fit the tool is found only when the call runs."""
    parts = {part.tool_call_id: part for part in requests.approvals}
    not_asked = [str(call_id) for call_id in approvals if call_id not in parts]
    if not_asked:
        raise ValueError(
            f"answers for calls the requests do not ask about ({', '.join(not_asked)}), and "
            f"nothing was recorded: the calls asked are {', '.join(parts) or 'none'}"
        )
    own = _irreversible(agent, toolsets)  # the run's tools: their schemas check an edit
    ours = await _undolog_calls(
        _reader(approver, ul),
        requests,
        _run_tools(agent, toolsets),
        _every_tool_listed(agent, toolsets),
    )
    answers: dict[str, Answer] = {call_id: True for call_id in ours if call_id not in approvals}
    decided = []
    for call_id, answer in approvals.items():  # every answer checked before one is recorded
        approved, why, args = _answer(answer, reason)
        part = parts[call_id]
        if call_id not in ours:
            if part.tool_name in own:
                raise ValueError(
                    f"call {call_id} of UndoLog tool {part.tool_name} names no UndoLog approval "
                    "in the requests' metadata, and nothing was recorded: take the "
                    "DeferredToolRequests of the run that stopped"
                )
            if agent is None and not toolsets:
                # the metadata (the agent's process's) may have dropped UndoLog's approval
                # id: only the run's tools tell a call of the agent's own from UndoLog's
                raise ValueError(
                    f"call {call_id} ({part.tool_name}) names no UndoLog approval in the "
                    "requests' metadata, and without the run's tools decide cannot tell "
                    "whether it is UndoLog's (its request would stay pending, the answer "
                    "lost): nothing was recorded. Give decide the run's agent= (and "
                    "toolsets=) to answer a requires_approval tool of the agent's own"
                )
            answers[call_id] = answer  # not UndoLog's: pydantic-ai's own approval
            continue
        if args is not None:
            made = own.get(part.tool_name)
            args = _checked_edit(part, args, None if made is None else made[0].function_schema)
        decided.append((call_id, approved, why, args))
    for call_id, approved, why, args in decided:
        approval = ours[call_id]
        await _arun.record_decision(approver, approval, approved, decided_by, why, args)
        if approved:  # edited or not: the call runs with what UndoLog approved
            answers[call_id] = True
        else:  # heard by the model when the session goes on (an on_reject="continue" tool)
            tool_name = parts[call_id].tool_name
            refused = _core.Refusal(tool_name, approval, "rejected", decided_by, why)
            answers[call_id] = ToolDenied(refused.message)
    return DeferredToolResults(approvals=answers)


async def decisions(
    ul: AsyncUndoLog,
    requests: DeferredToolRequests,
    *,
    agent: Agent[Any, Any] | None = None,
    toolsets: Sequence[AbstractToolset[Any]] = (),
) -> DeferredToolResults:
    """The ``DeferredToolResults`` of what UndoLog holds for the deferred calls of its
    tools (decided elsewhere: CLI, dashboard, SQL); a call not decided there goes back
    to its tool, which asks UndoLog again. Each approval the metadata names is checked
    against the journal first, as ``decide`` checks it (``agent`` and ``toolsets`` as
    there). A deferred call that is not UndoLog's (a pydantic-ai tool declared
    ``requires_approval``) is left out: the app answers it itself."""
    async with ul.connection() as conn:  # one, for the check and the decisions
        ours = await _undolog_calls(
            conn, requests, _run_tools(agent, toolsets), _every_tool_listed(agent, toolsets)
        )
        answers: dict[str, Answer] = {call_id: True for call_id in ours}
        for part in requests.approvals:
            approval = ours.get(part.tool_call_id)
            if approval is None:
                continue
            state = await aapprovals.approval_state(conn, approval)
            if state in ("rejected", "expired"):
                refused = await _arun.refusal_of(conn, part.tool_name, approval)
                answers[part.tool_call_id] = (
                    False if refused is None else ToolDenied(refused.message)
                )
    return DeferredToolResults(approvals=answers)


__all__ = [
    "APPROVAL_KEY",
    "EDIT_KEY",
    "SESSION_KEY",
    "TOOL_KEY",
    "Answer",
    "ResumedInAnotherSession",
    "approval_id",
    "decide",
    "decisions",
    "iter",
    "run",
    "run_stream",
    "tool",
    "tools",
]
