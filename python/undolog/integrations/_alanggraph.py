"""The LangChain adapter's graph runs and decisions, as twins with the same functions:
``undolog.integrations._alanggraph`` (``arun``, ``astream``, ``aapproval_id``,
``adecide``, ``arespond``: ``ainvoke``/``astream`` and an ``AsyncUndoLog``; the source,
written by hand) and ``undolog.integrations._langgraph`` (``run``, ``stream``, ...:
``invoke``/``stream`` and an ``UndoLog``; generated from it by tools/async_to_sync.py).
undolog.integrations.langchain is the public module; what the twins share is in
undolog.integrations._langchain_common."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.types import Command

from undolog.aclient import AsyncUndoLog
from undolog.integrations import _acompat, _arun, _core
from undolog.integrations._core import Approver, approvals_reader
from undolog.integrations._langchain_common import (
    APPROVAL_KEY,
    _answer,
    _checked_edit,
    _decision,
    _edit_is_an_approval,
    _fill,
    _graph_run,
    _interrupted,
    _interrupts_in,
    _lookup_client,
    _lookup_target,
    _not_requested,
    _one_response,
    _request,
    _shown_call,
    _streamed_out,
    _thread_session,
    _tool_node_calls,
    _unfinished_elsewhere,
    _unfinished_run,
    _unnamed,
    _with_session,
)


async def _same_session(
    graph: Any, ul: AsyncUndoLog, config: Mapping[str, Any], session_id: uuid.UUID
) -> None:
    """Refuse, before a session is opened, a run of a thread that waits on an UndoLog
    interrupt of another session, or that stopped midway in a run of another session
    still open (the process died, or the run raised and its session was not ended): the
    node LangGraph runs again would make that session's committed calls again."""
    try:
        snapshot = await graph.aget_state(dict(config))
    except ValueError:  # no checkpointer: no interrupt to resume either
        return
    _thread_session(snapshot, session_id)
    other = _unfinished_run(snapshot, session_id)
    if other is not None:
        state = await _arun.open_session_state(ul, other)
        if state is not None:
            raise _unfinished_elsewhere(other, state, session_id)
    await _tools_unchanged(graph, ul, snapshot, session_id)


async def _tools_unchanged(
    graph: Any, ul: AsyncUndoLog, snapshot: Any, session_id: uuid.UUID
) -> None:
    """Refuse, before a session is opened, a resume of a thread whose model call UndoLog
    approved when the ToolNode's tool of that call, as the graph was built again, is not
    as it was when the call was journaled (``_core.tool_differences``): a parameter
    added with a default, or a default changed, makes the call another one, which the
    engine would ask about anew at the same step; a parameter added without a default,
    one removed or renamed, or a type changed, and the ToolNode would answer the model
    with its argument error, the run going on without the approved call; a tool gone
    from the ToolNode (or made SAFE), and with its unknown-tool error; made COMPENSABLE,
    and the engine would refuse its new tier mid-run (UL018), failing and undoing the
    session. The error says what changed, and what to do. Which calls are read:
    ``_tool_node_calls``."""
    shown = _tool_node_calls(graph, snapshot)
    if not shown:
        return
    async with ul.connection() as conn:
        for call in shown:
            found = await _arun.approval_of_step(conn, session_id, call.tool_name, call.call_key)
            if found is None or found[1] != "approved":
                continue
            row = (await _arun.approval_calls(conn, [found[0]])).get(found[0])
            changed = None if row is None else _core.tool_differences(call, row)
            if changed is not None:
                raise ValueError(
                    f"this thread's {call.tool_name} call, approved (approval {found[0]}): "
                    + _core.tool_changed(call, changed, "nothing was run")
                )


def _name_approvals(session_id: uuid.UUID) -> _acompat.Requested[Any]:
    """What fills the approval ids into the interrupts of a run that stopped."""

    async def fill(out: Any, conn: Any) -> None:
        for request in _unnamed(out):
            action = request["action_request"]["action"]
            _fill(
                request, await _arun.approval_of_step(conn, session_id, action, request["call_key"])
            )

    return fill


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
    """``graph.invoke(input, config)`` (``arun``: ``graph.ainvoke``, with an
    ``AsyncUndoLog``) inside UndoLog session ``session_id`` (begun, or resumed with the
    same id; ``input`` is a ``Command(resume=...)`` to resume). A run that finishes
    completes the session; one that raises fails it and its compensations run last-first;
    one that stops at an interrupt leaves it awaiting approval. Resuming a session whose
    call a human rejected undoes what came before and raises ApprovalRejectedError. A
    thread that waits on an UndoLog interrupt of another session raises
    ResumedInAnotherSession (a ValueError), and nothing runs. A run of a session that
    had completed, stopped at an IRREVERSIBLE call new to it (a node's own call in a
    task of the thread invoked again, or replayed), raises SessionNotActive (UL010):
    nobody can be asked, and the session stays completed."""

    async def go() -> Any:
        with _graph_run():
            return await graph.ainvoke(input, _with_session(config, session_id), **invoke_kwargs)

    await _same_session(graph, ul, config, session_id)
    return await _arun.run_in_session(
        ul, session_id, agent_name, go, _interrupted, _name_approvals(session_id)
    )


async def astream(
    graph: Any,
    ul: AsyncUndoLog,
    input: Any,
    config: Mapping[str, Any],
    *,
    session_id: uuid.UUID,
    agent_name: str | None = None,
    **stream_kwargs: Any,
) -> AsyncIterator[Any]:
    """``graph.stream(input, config, **stream_kwargs)`` (``astream``: ``graph.astream``,
    with an ``AsyncUndoLog``) inside UndoLog session ``session_id``: the chunks, as
    LangGraph yields them. Read it to the end: the session is finished then, as with
    ``run`` (completed, awaiting approval, or failed and undone). An IRREVERSIBLE call
    shows as an ``__interrupt__`` chunk whose approval id is filled in once the stream has
    ended; resume with ``stream(graph, ul, decide(...), config, ...)``."""
    seen: list[Any] = []
    await _same_session(graph, ul, config, session_id)
    async with _arun.framework_run(
        ul, session_id, agent_name, _interrupted, _name_approvals(session_id)
    ) as box:
        with _graph_run():
            async for chunk in graph.astream(
                input, _with_session(config, session_id), **stream_kwargs
            ):
                seen.extend(_interrupts_in(chunk))
                yield chunk
        box.result = _streamed_out(seen, await graph.aget_state(dict(config)))


async def aapproval_id(request: Any, ul: AsyncUndoLog | None = None) -> uuid.UUID:
    """UndoLog's approval id of an interrupt (its value, or its HumanInterrupt). A value
    read before ``run``/``stream`` filled the id in is looked up with ``ul``."""
    found = _request(request)
    if found.get(APPROVAL_KEY) is not None:
        return uuid.UUID(str(found[APPROVAL_KEY]))
    if ul is None:
        raise _not_requested(found)
    async with ul.connection() as conn:
        step = await _arun.approval_of_step(conn, *_lookup_target(found))
    if step is None:
        raise _not_requested(found)
    return step[0]


async def adecide(
    request: Any,
    approver: Approver,
    decided_by: str,
    *,
    approved: bool,
    reason: str | None = None,
    ul: AsyncUndoLog | None = None,
    args: Mapping[str, Any] | None = None,
    tools: Iterable[BaseTool | Callable[..., Any]] | None = None,
) -> Command[Any]:
    """Record a human's decision on an interrupted call in UndoLog through the approver's
    login (``adecide``: an async approver); answers the ``Command`` to resume the graph
    with (its resume value is the Agent Inbox HumanResponse of the decision). ``request``
    is the interrupt, its value or its HumanInterrupt; one whose approval id is not filled
    in yet is looked up with ``ul`` (or the approver, when it is a client of the same
    side). ``args`` (an approval only): the call runs with these arguments instead of the
    requested ones (edit, then approve), read as the model's are by the argument schema
    of the call's tool among ``tools``, the graph's own (its ToolNode's: ``tools(...)``,
    or ``node.tools_by_name.values()``): ValueError, and nothing recorded, when they do
    not fit. The edit of a call whose tool is not among them (no tools given: a process
    that decides without building the graph's tools) goes as it is, unchecked: the
    engine still refuses an argument the call does not have, but a value that does not
    fit the tool is found only when the call runs. ``tools`` may hold plain callables, as
    a ToolNode's list does. Before anything is recorded, the approval's pending call is
    read with the approver's login (with ``ul`` when the approver is a decision recorder,
    which is handed the approval id only: without ``ul``, ValueError) and must be the
    call the request shows (its session, tool, call key and arguments): the request comes
    from the agent's run, and a changed one raises ValueError."""
    _edit_is_an_approval(approved, args)
    # what reads the call decided on: the approver's client, or ul for a decision recorder
    reader = approvals_reader(approver, ul)
    asked = _request(request)
    args = _checked_edit(asked, args, tools)
    client = _lookup_client(ul, approver)
    approval = await aapproval_id(request, client if isinstance(client, AsyncUndoLog) else None)
    # the request comes from the agent's run: its approval id must be the call it shows
    await _arun.refuse_unshown(reader, approval, _shown_call(asked))
    await _arun.record_decision(approver, approval, approved, decided_by, reason, args)
    return _answer(approved, reason, args, asked["action_request"]["action"])


async def arespond(
    request: Any,
    response: Any,
    approver: Approver,
    decided_by: str,
    *,
    ul: AsyncUndoLog | None = None,
    tools: Iterable[BaseTool | Callable[..., Any]] | None = None,
) -> Command[Any]:
    """``decide`` from an Agent Inbox HumanResponse (or the list of one the Inbox sends):
    accept approves; edit approves with the ActionRequest's args instead of the requested
    ones (its action must be the call's tool, else ValueError before anything is recorded;
    the reason recorded is EDIT_REASON; read by the call's tool among ``tools``, as
    ``decide`` reads them); ignore rejects; response rejects with its text as the
    reason."""
    approved, reason, args = _decision(_one_response(response), _request(request))
    return await adecide(
        request,
        approver,
        decided_by,
        approved=approved,
        reason=reason,
        ul=ul,
        args=args,
        tools=tools,
    )
