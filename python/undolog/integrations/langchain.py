"""``@undolog_tool`` tools as LangChain tools, for LangGraph graphs (extra ``langgraph``).

    lc_tools = tools(search, create_user, payout)          # BaseTools: ToolNode, bind_tools
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    out = run(graph, ul, {"messages": [...]}, config, session_id=sid)
    if INTERRUPT in out:                                     # an IRREVERSIBLE call
        command = decide(out[INTERRUPT][0].value, approver, "alice", approved=True)
        out = run(graph, ul, command, config, session_id=sid)

An IRREVERSIBLE call goes through LangGraph's own ``interrupt()``, with the value
``{"undolog_approval_id": ..., "tool": ..., "args": ..., "call_key": ...}``, until UndoLog
records a yes. The approval request is written when the graph has stopped (ToolNode runs
a message's calls side by side, and a waiting session refuses new calls), and ``run``
fills its id into the interrupts of the output it answers. ``decide`` records the
decision through the approver's login and answers the ``Command(resume=...)`` to go on
with; a call approved elsewhere (CLI, dashboard) runs when the graph is resumed with any
resume value, and one UndoLog has not decided interrupts again, whatever the resume
value says. UndoLog's record is what counts.

LangGraph re-runs an interrupted node from its start; every journaled call the node
made before comes back from the journal. A call made by a model carries its tool call id
(its step key); a call made by the node itself, ``lc_tool.invoke({...})``, is keyed by
the node task's checkpoint namespace and its position in that run of the node (so call
the adapted tool, not the bare function, inside a node). ``run`` (sync graph, ``UndoLog``,
sync or async SAFE tools, sync journaled tools) and ``arun`` (``ainvoke``,
``AsyncUndoLog``, async journaled tools) open the run's UndoLog session.
"""

from __future__ import annotations

import contextvars
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config
from langgraph.types import Command, interrupt

from undolog import engine
from undolog.client import AsyncUndoLog, UndoLog
from undolog.integrations import _core
from undolog.tiers import ToolTier

INTERRUPT = "__interrupt__"
"""The key of a graph's output that holds its interrupts."""

APPROVAL_KEY = "undolog_approval_id"
"""The key of an UndoLog interrupt's value naming the approval."""

# The tool call id of the call being run (set by UndoLogTool.run/arun).
_tool_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "undolog_langchain_tool_call_id", default=None
)
# Keyless calls so far in each node task of this graph run: a resumed run starts again at
# 0, as LangGraph starts the interrupted node again from its beginning.
_node_calls: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar(
    "undolog_langchain_node_calls", default=None
)


def _call_key() -> str | None:
    call_id = _tool_call_id.get()
    if call_id is not None:
        return call_id
    counts = _node_calls.get()
    try:
        namespace = get_config().get("configurable", {}).get("checkpoint_ns")
    except RuntimeError:  # not inside a graph node
        namespace = None
    if counts is None or not namespace:
        return None  # outside a graph run: the binding's own counter
    position = counts[namespace]
    counts[namespace] += 1
    return f"{namespace}#{position}"


def _approval_request(
    wait: _core.Waiting, tool: _core.ToolInfo, call_key: str, kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """An interrupt's value. A call asked about for the first time has no approval id
    yet: ``run`` writes its request once the graph has stopped and fills it in."""
    return {
        APPROVAL_KEY: None if wait.approval_id is None else str(wait.approval_id),
        "tool": tool.name,
        "args": tool.bind(kwargs),
        "call_key": call_key,
    }


def _name_approvals(session_id: uuid.UUID) -> Callable[[Any, engine.Connection], None]:
    def fill(out: Any, conn: engine.Connection) -> None:
        for pending in out.get(INTERRUPT, ()):
            request = pending.value
            if isinstance(request, dict) and request.get(APPROVAL_KEY, "") is None:
                found = _core.approval_of_step_sync(
                    conn, session_id, request["tool"], request["call_key"]
                )
                if found is not None:
                    request[APPROVAL_KEY] = str(found[0])

    return fill


def _aname_approvals(session_id: uuid.UUID) -> Callable[[Any, Any], Awaitable[None]]:
    async def fill(out: Any, conn: Any) -> None:
        for pending in out.get(INTERRUPT, ()):
            request = pending.value
            if isinstance(request, dict) and request.get(APPROVAL_KEY, "") is None:
                found = await _core.approval_of_step(
                    conn, session_id, request["tool"], request["call_key"]
                )
                if found is not None:
                    request[APPROVAL_KEY] = str(found[0])

    return fill


class UndoLogTool(StructuredTool):
    """A StructuredTool that hands the tool call id of each call to its journaled body."""

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _tool_call_id.set(kwargs.get("tool_call_id"))
        try:
            return super().run(tool_input, *args, **kwargs)
        finally:
            _tool_call_id.reset(token)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _tool_call_id.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _tool_call_id.reset(token)


def tool(fn: Callable[..., Any]) -> BaseTool:
    """The LangChain tool of a ``@undolog_tool`` (name, docstring and argument schema
    from the function); an IRREVERSIBLE one asks for a human through ``interrupt()``."""
    info = _core.describe(fn)
    if info.tier is ToolTier.SAFE:
        if info.is_async:
            return StructuredTool.from_function(
                coroutine=fn, name=info.name, description=info.description
            )
        return StructuredTool.from_function(func=fn, name=info.name, description=info.description)

    def call(**kwargs: Any) -> Any:
        key = _call_key()
        if info.tier is ToolTier.IRREVERSIBLE and key is not None:
            # each resume asks UndoLog again: its record is what counts
            while (wait := _core.waiting_sync(info, key, kwargs)) is not None:
                interrupt(_approval_request(wait, info, key, kwargs))
        with _core.pinned_step(key):
            return fn(**kwargs)

    async def acall(**kwargs: Any) -> Any:
        key = _call_key()
        if info.tier is ToolTier.IRREVERSIBLE and key is not None:
            while (wait := await _core.waiting(info, key, kwargs)) is not None:
                interrupt(_approval_request(wait, info, key, kwargs))
        with _core.pinned_step(key):
            return await fn(**kwargs)

    schema = StructuredTool.from_function(
        func=fn, name=info.name, description=info.description
    ).args_schema
    return UndoLogTool(
        name=info.name,
        description=info.description,
        args_schema=schema,
        func=None if info.is_async else call,
        coroutine=acall if info.is_async else None,
    )


def tools(*fns: Callable[..., Any]) -> list[BaseTool]:
    return [tool(fn) for fn in fns]


@contextmanager
def _graph_run() -> Iterator[None]:
    token = _node_calls.set(Counter())
    try:
        yield
    finally:
        _node_calls.reset(token)


def _interrupted(out: Any) -> list[str] | None:
    """The call keys of the UndoLog interrupts the graph stopped at (None: it did not)."""
    if not isinstance(out, Mapping) or not out.get(INTERRUPT):
        return None
    values = [pending.value for pending in out[INTERRUPT]]
    return [str(v["call_key"]) for v in values if isinstance(v, Mapping) and "call_key" in v]


def run(
    graph: Any,
    ul: UndoLog,
    input: Any,
    config: Mapping[str, Any],
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **invoke_kwargs: Any,
) -> Any:
    """``graph.invoke(input, config)`` inside UndoLog session ``session_id`` (begun, or
    resumed with the same id; ``input`` is a ``Command(resume=...)`` to resume). A run
    that finishes completes the session; one that raises fails it and its compensations
    run last-first; one that stops at an interrupt leaves it awaiting approval. Resuming
    a session whose call a human rejected undoes what came before and raises
    ApprovalRejectedError."""

    def go() -> Any:
        with _graph_run():
            return graph.invoke(input, dict(config), **invoke_kwargs)

    return _core.run_in_session_sync(
        ul, session_id, agent_name, go, _interrupted, _name_approvals(session_id)
    )


async def arun(
    graph: Any,
    ul: AsyncUndoLog,
    input: Any,
    config: Mapping[str, Any],
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **invoke_kwargs: Any,
) -> Any:
    """``run`` for ``graph.ainvoke`` and an ``AsyncUndoLog``."""

    async def go() -> Any:
        with _graph_run():
            return await graph.ainvoke(input, dict(config), **invoke_kwargs)

    return await _core.run_in_session(
        ul, session_id, agent_name, go, _interrupted, _aname_approvals(session_id)
    )


def approval_id(request: Mapping[str, Any]) -> uuid.UUID:
    """UndoLog's approval id of an interrupt's value."""
    return uuid.UUID(str(request[APPROVAL_KEY]))


def decide(
    request: Mapping[str, Any],
    approver: _core.Approver,
    decided_by: str,
    *,
    approved: bool,
    reason: str | None = None,
) -> Command[Any]:
    """Record a human's decision on an interrupted call in UndoLog through the approver's
    login; answers the ``Command`` to resume the graph with."""
    _core.record_decision_sync(approver, approval_id(request), approved, decided_by, reason)
    return Command(resume={"approved": approved, "decided_by": decided_by})


async def adecide(
    request: Mapping[str, Any],
    approver: _core.Approver,
    decided_by: str,
    *,
    approved: bool,
    reason: str | None = None,
) -> Command[Any]:
    """``decide`` for an async approver."""
    await _core.record_decision(approver, approval_id(request), approved, decided_by, reason)
    return Command(resume={"approved": approved, "decided_by": decided_by})
