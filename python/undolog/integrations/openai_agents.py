"""``@undolog_tool`` tools as OpenAI Agents SDK tools (extra ``openai-agents``).

    agent = Agent(name="ops", tools=tools(search, create_user, payout))
    result = await run(agent, ul, "pay Ada", session_id=sid)
    if result.interruptions:                                   # an IRREVERSIBLE call
        state = result.to_state()
        await decide(state, result.interruptions[0], ul, sid, approver, "alice", approved=True)
        result = await run(agent, ul, state, session_id=sid)

An IRREVERSIBLE tool gets ``needs_approval``: a callable that answers yes until UndoLog
records a human's yes, so the run stops with ``result.interruptions`` and resumes through
``RunState.approve`` / ``RunState.reject``. The approval request is written when the run
has stopped (the calls of one model turn run side by side, and a waiting session refuses
new calls). UndoLog's record is what counts: ``decide`` records the decision through the
approver's login and then tells the RunState; resuming applies to the RunState what
UndoLog holds, so a call approved elsewhere (CLI, dashboard) runs, and one UndoLog has
not decided does not. Each call is journaled under the step of its ``call_id``, which
the RunState keeps, so a resumed run's calls replay.

A tool error fails the run (the SDK raises it), and with it the session: its calls are
undone last-first. Journaled tools must be ``async def``; SAFE ones may be sync.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, RunState
from agents.function_schema import function_schema
from agents.items import ToolApprovalItem, TResponseInputItem
from agents.tool_context import ToolContext

from undolog.client import AsyncUndoLog
from undolog.context import current_session
from undolog.errors import AwaitingApprovalError
from undolog.integrations import _core
from undolog.tiers import ToolTier


@dataclasses.dataclass
class UndoLogFunctionTool(FunctionTool):
    """A FunctionTool that remembers the ``@undolog_tool`` behind it, so that ``run`` can
    ask UndoLog about an interrupted call of it."""

    undolog_tool: _core.ToolInfo | None = dataclasses.field(default=None, kw_only=True)
    undolog_arguments: Callable[[str], dict[str, Any]] | None = dataclasses.field(
        default=None, kw_only=True, repr=False
    )


def tool(fn: Callable[..., Any]) -> FunctionTool:
    """The SDK tool of a ``@undolog_tool`` (name, docstring and argument schema from the
    function); an IRREVERSIBLE one asks for approval through ``needs_approval``."""
    info = _core.describe(fn)
    if info.tier is not ToolTier.SAFE and not info.is_async:
        raise TypeError(f"{info.name}: a journaled tool under OpenAI Agents must be async def")
    schema = function_schema(fn, name_override=info.name, description_override=info.description)

    def arguments(raw: str | dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        model = schema.params_pydantic_model
        parsed = (
            model.model_validate(raw)
            if isinstance(raw, dict)
            else model.model_validate_json(raw or "{}")
        )
        return schema.to_call_args(parsed)

    async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
        args, kwargs = arguments(raw)
        key = ctx.tool_call_id if info.tier is not ToolTier.SAFE else None
        with _core.pinned_step(key):
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return result if isinstance(result, str) else json.dumps(result)

    async def needs_approval(
        _: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        args, kwargs = arguments(params)
        bound = info.signature.bind(*args, **kwargs).arguments
        return await _core.waiting(info, call_id, bound) is not None

    def bound(raw: str) -> dict[str, Any]:
        args, kwargs = arguments(raw)
        return dict(info.signature.bind(*args, **kwargs).arguments)

    return UndoLogFunctionTool(
        undolog_tool=info,
        undolog_arguments=bound,
        name=info.name,
        description=info.description,
        params_json_schema=schema.params_json_schema,
        on_invoke_tool=invoke,
        strict_json_schema=schema.strict_json_schema,
        needs_approval=needs_approval if info.tier is ToolTier.IRREVERSIBLE else False,
    )


def tools(*fns: Callable[..., Any]) -> list[FunctionTool]:
    return [tool(fn) for fn in fns]


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
    whatever the RunState says. Resuming a session whose call a human rejected undoes
    what came before and raises ApprovalRejectedError."""

    async def go() -> RunResult:
        if isinstance(input, RunState):
            await _apply_decisions(input, session_id)
        return await Runner.run(agent, input, **run_kwargs)

    async def ask_the_rest(result: RunResult, _: Any) -> None:
        for item in result.interruptions:
            owner = getattr(item, "agent", None) or agent
            known = [t for t in owner.tools if isinstance(t, UndoLogFunctionTool)]
            found = [t for t in known if t.name == item.name]
            if not found or item.call_id is None:
                continue
            adapted = found[0]
            assert adapted.undolog_tool is not None and adapted.undolog_arguments is not None
            if adapted.undolog_tool.tier is ToolTier.IRREVERSIBLE:
                kwargs = adapted.undolog_arguments(item.arguments or "{}")
                await _core.request_approval(adapted.undolog_tool, item.call_id, kwargs)

    return await _core.run_in_session(
        ul,
        session_id,
        agent_name or agent.name,
        go,
        lambda result: [i.call_id or "" for i in result.interruptions] or None,
        ask_the_rest,
    )


async def _approval_of(
    ul: AsyncUndoLog, session_id: uuid.UUID, item: ToolApprovalItem
) -> tuple[uuid.UUID, str]:
    if item.name is None or item.call_id is None:
        raise LookupError(f"approval item {item!r} names no function call")
    async with ul.connection() as conn:
        found = await _core.approval_of_step(conn, session_id, item.name, item.call_id)
    if found is None:
        raise LookupError(f"{item.name} call {item.call_id} has no UndoLog approval request")
    return found


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
    login, then ``state.approve(item)`` / ``state.reject(item)``."""
    approval, _ = await _approval_of(ul, session_id, item)
    await _core.record_decision(approver, approval, approved, decided_by, reason)
    if approved:
        state.approve(item)
    else:
        state.reject(item, rejection_message=reason)


async def _apply_decisions(state: RunState[Any], session_id: uuid.UUID) -> None:
    conn = current_session().connection
    assert isinstance(conn, psycopg.AsyncConnection)
    for item in state.get_interruptions():
        if item.name is None or item.call_id is None:
            continue
        found = await _core.approval_of_step(conn, session_id, item.name, item.call_id)
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
        else:
            state.reject(item)
