"""What the LangChain adapter's sync and async twins share (undolog.integrations.langchain
is the public module; its runs and decisions are the twins undolog.integrations._alanggraph,
the source, and _langgraph, generated from it): the tools, the Agent Inbox's request and
response shapes, and how an UndoLog interrupt is read."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as create_tool
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Interrupt, interrupt
from pydantic import BaseModel, ValidationError

from undolog.client import AsyncUndoLog, UndoLog
from undolog.context import current_session
from undolog.decorator import last_edit
from undolog.errors import ApprovalRejectedError
from undolog.integrations import _arun, _core, _run
from undolog.tiers import ToolTier

log = logging.getLogger(__name__)

INTERRUPT = "__interrupt__"
"""The key of a graph's output that holds its interrupts."""

APPROVAL_KEY = "undolog_approval_id"
"""The key of an UndoLog HumanInterrupt naming the approval."""

SESSION_KEY = _core.SESSION_KEY
"""The key of an UndoLog HumanInterrupt naming the session of the call."""

_UNDOLOG_TOOL = "_undolog_tool"  # the attribute of a journaled tool's coroutine built here

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


def _next_interrupt() -> tuple[int, bool] | None:
    """The index of the running task's next ``interrupt()`` and whether LangGraph holds
    an answer for it (a resume value stored for that index, a resume value by interrupt
    id, or the run's Command(resume=...) not taken yet); None: this LangGraph does not
    say. ``interrupt()`` counts the task's calls to it and answers the value held for
    its index; this reads the same, from the task's scratchpad, which LangGraph keeps in
    the config it runs the node with (``interrupt()`` reads it there too), without
    counting a call. That is LangGraph's internals (langgraph.types.interrupt): read
    defensively, and anything unexpected answers None."""
    try:
        from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD

        scratchpad = get_config()["configurable"][CONFIG_KEY_SCRATCHPAD]
        counter = scratchpad.interrupt_counter
        if type(counter).__name__ != "LazyAtomicCounter":
            return None
        step = getattr(counter, "_counter", None)  # None: no interrupt() yet
        if step is None:
            index = 0
        else:  # an itertools.count's __next__: "count(N)", N the next index
            found = re.fullmatch(r"count\((\d+)\)", repr(getattr(step, "__self__", None)))
            if found is None:
                return None
            index = int(found.group(1))
        held = index < len(scratchpad.resume) or scratchpad.get_null_resume(False) is not None
        return index, bool(held)
    except Exception:  # LangGraph changed: say nothing
        return None


_unreadable_said = False


def _say_unreadable() -> None:
    """Log, once a process, that this LangGraph's interrupt bookkeeping could not be read
    (``_next_interrupt``): a node's own ``interrupt()`` after an approved UndoLog call may
    then be handed that call's answer, as before UndoLog kept its slot."""
    global _unreadable_said
    if not _unreadable_said:
        _unreadable_said = True
        log.warning(
            "UndoLog cannot read this LangGraph's interrupt bookkeeping (its internals "
            "changed): a node that calls interrupt() after an UndoLog IRREVERSIBLE call may "
            "be handed that call's answer. Ask your own questions in a node of their own, "
            "or use a LangGraph version the undolog package was tested with (1.2)"
        )


def _interrupt_again(request: Any, index: int) -> None:
    """Stop the graph at the interrupt ``index`` of the task, where the call stopped
    before, leaving the answer LangGraph holds for it untaken: UndoLog recorded no
    decision, and the call keeps one interrupt, whose answer it takes once UndoLog has
    one (``_asked``). The interrupt is the one ``interrupt()`` raises at that index, its
    id made as LangGraph makes it (its internals: when they are not there,
    ``interrupt()`` takes the answer and the call asks at the next index)."""
    try:
        from langgraph._internal._constants import CONFIG_KEY_CHECKPOINT_NS
        from langgraph.types import _interrupt_id

        made = _interrupt_id(get_config()["configurable"][CONFIG_KEY_CHECKPOINT_NS], index)
    except Exception:  # LangGraph changed
        interrupt(request)
        return
    raise GraphInterrupt((Interrupt(value=request, id=made),))


def _asking(
    tool: _core.ToolInfo, call_key: str, kwargs: Mapping[str, Any]
) -> Callable[[_core.Waiting], list[dict[str, Any]]]:
    """The interrupt's value of the call, as UndoLog's answer names its approval."""
    return lambda wait: _approval_request(wait, tool, call_key, kwargs)


def _asked(
    wait: _core.Waiting | None, request: Callable[[_core.Waiting], list[dict[str, Any]]]
) -> bool:
    """What an IRREVERSIBLE call does with LangGraph's ``interrupt()``, UndoLog having
    answered ``wait`` (None: the call may go ahead); True: ask UndoLog again.

    LangGraph hands the answers of a task's ``interrupt()`` calls to them by their order
    each time it runs the task again, so a call keeps its interrupt on every run of its
    node (else the node's next ``interrupt()``, its own question or another journaled
    call's, would be handed this call's answer). Whether LangGraph holds an answer for
    the next interrupt says which run this is (``_next_interrupt``):

    - the call may go ahead and an answer is held: it stopped there on an earlier run of
      the task, and takes its answer (``interrupt()`` answers it at once), which UndoLog's
      record has already settled;
    - the call may go ahead and no answer is held: it was decided before it ran in this
      task (a crash recovery in a new thread, a replay): nobody is asked;
    - UndoLog waits, an answer is held (resumed before a decision was recorded): the call
      stops again at the same interrupt (``_interrupt_again``);
    - UndoLog waits, no answer held: ``interrupt()`` stops the graph (a call with no
      request yet, an answer held: ``interrupt()`` takes it, and the call asks again).

    A model's call (keyed by its tool call id) decided in another thread, run in a task
    that another ``interrupt()`` of the same task stopped at before it, is the case this
    cannot tell from the first: it would take that answer. LangGraph's internals
    unreadable (``_next_interrupt`` None): the call interrupts only while UndoLog
    waits."""
    next_interrupt = _next_interrupt()
    if next_interrupt is None:
        _say_unreadable()
    held = None if next_interrupt is None else next_interrupt[1]
    if wait is None:
        if held:
            interrupt(request(_core.Waiting(None)))
        return False
    if next_interrupt is not None and held and wait.approval_id is not None:
        _interrupt_again(request(wait), next_interrupt[0])
    interrupt(request(wait))
    return True


ALLOWED = {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": True}
"""What a person may answer an UndoLog interrupt with (Agent Inbox's HumanInterruptConfig):
accept (approve), edit (approve with the person's arguments: undolog.approve_edited),
ignore (reject), respond (reject, with the text as the reason)."""


def _approval_request(
    wait: _core.Waiting, tool: _core.ToolInfo, call_key: str, kwargs: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """An interrupt's value: one HumanInterrupt in a list, as LangGraph's Agent Inbox
    reads it, with UndoLog's extra keys. A call asked about for the first time has no
    approval id yet: ``run`` writes its request once the graph has stopped and fills it
    in (``decide`` finds it by session and call key when it is still None)."""
    return [
        {
            "action_request": {"action": tool.name, "args": tool.bind(kwargs)},
            "config": dict(ALLOWED),
            "description": (
                f"{tool.name} is IRREVERSIBLE: UndoLog runs it only once a person approves. "
                "Accept to approve, or edit its arguments to approve it with yours; "
                "ignore, or respond with a reason, to reject."
            ),
            APPROVAL_KEY: None if wait.approval_id is None else str(wait.approval_id),
            SESSION_KEY: str(current_session().session_id),
            "call_key": call_key,
        }
    ]


def _requests(value: Any) -> list[dict[str, Any]]:
    """The UndoLog HumanInterrupts in an interrupt's value."""
    items = value if isinstance(value, list) else [value]
    return [i for i in items if isinstance(i, dict) and "call_key" in i and SESSION_KEY in i]


def _fill(request: dict[str, Any], found: tuple[uuid.UUID, str] | None) -> None:
    if found is not None:
        request[APPROVAL_KEY] = str(found[0])


def _unnamed(out: Any) -> Iterator[dict[str, Any]]:
    for pending in out.get(INTERRUPT, ()):
        for request in _requests(pending.value):
            if request.get(APPROVAL_KEY) is None:
                yield request


def _refused(tool: _core.ToolInfo, error: ApprovalRejectedError) -> Any:
    """A person's "no" to a call whose session goes on (an on_reject="continue" tool), as
    the tool's reply: a ToolMessage for a model's call (status "error", the refusal as
    its artifact), the message itself for a call a node made. Any other rejection ends
    the session: the error goes on."""
    refused = _core.refusal(tool, error)
    if refused is None:
        raise error
    call_id = _tool_call_id.get()
    if call_id is None:
        return refused.message
    return ToolMessage(
        content=refused.message,
        tool_call_id=call_id,
        name=tool.name,
        status="error",
        artifact={"undolog_refusal": refused.as_dict()},
    )


def _with_edit(result: Any) -> Any:
    """The reply of a model's IRREVERSIBLE call a person approved with edited arguments:
    a ToolMessage whose text says so first (who, why, what changed), then the result, with
    the edit and the result as its artifact. A call a node made, or one approved as
    asked, answers its result as it is (the node reads undolog.last_edit())."""
    edit, call_id = last_edit(), _tool_call_id.get()
    if edit is None or call_id is None:
        return result
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return ToolMessage(
        content=f"{edit.note}\nResult: {text}",
        tool_call_id=call_id,
        name=edit.tool_name,
        artifact={"undolog_edit": edit.as_dict(), "result": result},
    )


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
    from the function); an IRREVERSIBLE one asks for a human through ``interrupt()``. A
    sync journaled tool works in a sync graph run and in an async one (``arun``,
    ``astream``: its body runs in a worker thread, journaled by the async session); an
    ``async def`` one only in an async run."""
    info = _core.describe(fn)
    if info.tier is ToolTier.SAFE:
        if info.is_async:
            return StructuredTool.from_function(
                coroutine=fn, name=info.name, description=info.description
            )
        return StructuredTool.from_function(func=fn, name=info.name, description=info.description)

    # LangChain validates the model's arguments into the tool's types: journaled (and
    # signed) as their JSON form, the body getting the typed objects
    journaled = _core.callable_body(info)

    def call(**kwargs: Any) -> Any:
        key = _call_key()
        if info.tier is ToolTier.IRREVERSIBLE and key is not None:
            # each resume asks UndoLog again: its record is what counts
            while _asked(_run.waiting(info, key, kwargs), _asking(info, key, kwargs)):
                pass
        try:
            with _core.pinned_step(key):
                result = journaled(**kwargs)
        except ApprovalRejectedError as error:
            return _refused(info, error)
        return _with_edit(result) if info.tier is ToolTier.IRREVERSIBLE else result

    body = _core.awaitable_body(info)  # a sync journaled tool: its body in a worker thread

    async def acall(**kwargs: Any) -> Any:
        key = _call_key()
        if info.tier is ToolTier.IRREVERSIBLE and key is not None:
            while _asked(await _arun.waiting(info, key, kwargs), _asking(info, key, kwargs)):
                pass
        try:
            with _core.pinned_step(key):
                result = await body(**kwargs)
        except ApprovalRejectedError as error:
            return _refused(info, error)
        return _with_edit(result) if info.tier is ToolTier.IRREVERSIBLE else result

    setattr(acall, _UNDOLOG_TOOL, info)  # how a resume finds the graph's UndoLog tools
    schema = StructuredTool.from_function(
        func=fn, name=info.name, description=info.description
    ).args_schema
    return UndoLogTool(
        name=info.name,
        description=info.description,
        args_schema=schema,
        func=None if info.is_async else call,
        coroutine=acall,
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
    return [str(r["call_key"]) for p in out[INTERRUPT] for r in _requests(p.value)]


def _streamed_out(chunks_interrupts: list[Any], snapshot: Any) -> dict[str, Any]:
    """What ``run`` would have answered about a streamed graph's stop: the interrupts
    seen in the stream (so that their approval ids are filled in the objects the caller
    holds), else those of the thread's state."""
    interrupts = chunks_interrupts or list(getattr(snapshot, "interrupts", ()) or ())
    return {INTERRUPT: tuple(interrupts)} if interrupts else {}


def _interrupts_in(chunk: Any) -> list[Any]:
    """The interrupts a stream chunk carries (any stream_mode; with subgraphs=True or
    several modes a chunk is a tuple whose last item is the payload)."""
    payload = chunk[-1] if isinstance(chunk, tuple) and chunk else chunk
    if isinstance(payload, Mapping) and payload.get(INTERRUPT):
        return list(payload[INTERRUPT])
    return []


def _thread_session(snapshot: Any, session_id: uuid.UUID) -> None:
    """Refuse a run of a thread that waits on an UndoLog interrupt of another session:
    LangGraph would re-run the interrupted node, whose committed calls the other
    session's journal does not hold (they would act again), and ask its call again."""
    for pending in getattr(snapshot, "interrupts", ()) or ():
        for request in _requests(pending.value):
            _core.refuse_recorded_session(
                request[SESSION_KEY],
                session_id,
                "this thread waits on an UndoLog interrupt",
                " (or run in a new thread)",
            )


def _with_session(config: Mapping[str, Any], session_id: uuid.UUID) -> dict[str, Any]:
    """The run's config, its session id added to its metadata: LangGraph keeps that
    metadata in each checkpoint the run writes, so that a run of the thread made later
    knows which session the thread's unfinished run belongs to."""
    metadata = {**(config.get("metadata") or {}), SESSION_KEY: str(session_id)}
    return {**config, "metadata": metadata}


def _unfinished_run(snapshot: Any, session_id: uuid.UUID) -> uuid.UUID | None:
    """The session of the run that stopped midway in this thread (its checkpoint still has
    tasks to run: the process died, or the run raised) when it is not ``session_id``."""
    if not getattr(snapshot, "next", ()):
        return None
    recorded = (getattr(snapshot, "metadata", None) or {}).get(SESSION_KEY)
    if recorded is None or str(recorded) == str(session_id):
        return None
    try:
        return uuid.UUID(str(recorded))
    except ValueError:
        return None


def _unfinished_elsewhere(
    other: uuid.UUID, state: str, session_id: uuid.UUID
) -> _core.ResumedInAnotherSession:
    return _core.ResumedInAnotherSession(
        f"this thread stopped in the middle of a run of UndoLog session {other} (now "
        f"{state}), not {session_id}: LangGraph would run its unfinished node again, and "
        "that node's calls already made in the other session would act again. Resume it "
        f"with session_id={other} (or run in a new thread)"
    )


def _request(request: Any) -> Mapping[str, Any]:
    """The UndoLog HumanInterrupt of an interrupt, its value, or the request itself."""
    found = _requests(getattr(request, "value", request))
    if len(found) != 1:
        raise ValueError(
            f"{request!r} is not one UndoLog approval request: pass the interrupt's "
            "value (a list of one HumanInterrupt) or that HumanInterrupt"
        )
    return found[0]


def _lookup_target(request: Mapping[str, Any]) -> tuple[uuid.UUID, str, str]:
    return (
        uuid.UUID(str(request[SESSION_KEY])),
        str(request["action_request"]["action"]),
        str(request["call_key"]),
    )


def _shown_call(request: Mapping[str, Any]) -> _core.ShownCall:
    """The call an UndoLog HumanInterrupt shows a person: what their decision is on."""
    action = request["action_request"]
    try:
        session_id = uuid.UUID(str(request[SESSION_KEY]))
    except ValueError as error:
        raise ValueError(f"{request!r} names no UndoLog session") from error
    return _core.ShownCall(
        session_id, str(action["action"]), str(request["call_key"]), action["args"]
    )


def _tool_call(messages: Any, call_id: str) -> Mapping[str, Any] | None:
    """The model's tool call ``call_id`` among ``messages`` (a ToolNode's state key):
    the last AIMessage's call of that id."""
    listed: list[Any] = messages if isinstance(messages, list) else []
    for message in reversed(listed):
        for call in getattr(message, "tool_calls", None) or ():
            if call.get("id") == call_id:
                return cast(Mapping[str, Any], call)
    return None


def _read_by(
    tool: BaseTool, info: _core.ToolInfo, named: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The arguments ``named`` (a model's tool call) as the journal would hold them, made
    by ``tool``: read by its argument schema as LangChain reads them (each named
    argument the schema has, as it reads it), bound with the tool's defaults, in their
    JSON form. None: the tool does not take them."""
    schema = tool.args_schema
    if not isinstance(schema, type) or not issubclass(schema, BaseModel):
        return None
    try:
        read = schema.model_validate(dict(named))
        fields = type(read).model_fields
        return info.bind({name: getattr(read, name) for name in named if name in fields})
    except Exception:  # arguments the tool does not take: not a call it makes
        return None


def _tool_node_calls(graph: Any, snapshot: Any) -> list[_core.ShownCall]:
    """Each model call the thread waits on at an UndoLog interrupt of a ToolNode of
    ``graph`` (the node of the interrupted task), as the ToolNode's tool of its name
    would make it when the graph runs again, for ``_core.tool_differences``: the
    arguments the model sent (``named``: its tool call of that id, in the ToolNode's
    messages), read and bound by the tool (``_read_by``), with the tool's tier; as far as
    the tool takes them when its schema refuses them (``ToolInfo.fit``); the model's as
    they are, with no tier, when the ToolNode has no journaled tool of that name
    (removed, made SAFE). Not read: a call a node makes itself (no model's call names its
    arguments, and the tool is the node's own), and one of a ToolNode inside a subgraph
    (the thread's state is the parent graph's)."""
    nodes = getattr(graph, "nodes", None)
    values = getattr(snapshot, "values", None)
    if not isinstance(nodes, Mapping) or not isinstance(values, Mapping):
        return []
    shown = []
    for task in getattr(snapshot, "tasks", ()) or ():
        node = getattr(nodes.get(task.name), "bound", None)
        if not isinstance(node, ToolNode):
            continue
        messages = values.get(getattr(node, "_messages_key", "messages"))
        for pending in task.interrupts:
            for request in _requests(pending.value):
                call = _tool_call(messages, str(request["call_key"]))
                named = None if call is None else call.get("args")
                if call is None or not isinstance(named, Mapping):
                    continue
                shown.append(_made_now(request, node.tools_by_name.get(str(call["name"])), named))
    return shown


def _made_now(
    request: Mapping[str, Any], tool: BaseTool | None, named: Mapping[str, Any]
) -> _core.ShownCall:
    """The call of ``request`` (an UndoLog HumanInterrupt of a model's call naming
    ``named``) as ``tool`` makes it now (``_tool_node_calls``)."""
    session_id = uuid.UUID(str(request[SESSION_KEY]))
    call_key = str(request["call_key"])
    info = getattr(getattr(tool, "coroutine", None), _UNDOLOG_TOOL, None)
    if tool is None or not isinstance(info, _core.ToolInfo):
        action = str(request["action_request"]["action"])
        return _core.ShownCall(session_id, action, call_key, dict(named), named, tier=None)
    bound = _read_by(tool, info, named)
    if bound is not None:
        return _core.ShownCall(session_id, info.name, call_key, bound, named, info.tier)
    args, required = info.fit(named)
    return _core.ShownCall(
        session_id, info.name, call_key, args, named, info.tier, fits=False, required=required
    )


def _not_requested(request: Mapping[str, Any]) -> LookupError:
    """The two ways an interrupt has no request: another request of its session waits
    (the call is asked once a resumed run shows it), or the call was new to a session
    that had completed (its run raised SessionNotActive, but the thread's state keeps
    the interrupt LangGraph stopped at)."""
    return LookupError(
        f"{request['action_request']['action']} call {request['call_key']} has no UndoLog "
        "approval request yet: another request of the session waits; decide that one, "
        "resume, and this call is asked about then. If its session had completed before "
        "the run made the call instead (the run raised SessionNotActive), nobody can be "
        "asked about it: run the graph in a new thread with a new session"
    )


EDIT_REASON = "edited in the Agent Inbox"


def _decision(
    response: Mapping[str, Any], request: Mapping[str, Any]
) -> tuple[bool, str | None, dict[str, Any] | None]:
    """(approved, reason, edited args) of an Agent Inbox HumanResponse to ``request``. An
    edit's ActionRequest must name the request's tool: an edit changes the arguments of
    the call that was asked about, never which tool runs."""
    kind, args = response.get("type"), response.get("args")
    if kind == "accept":
        return True, None, None
    if kind == "ignore":
        return False, "ignored", None
    if kind == "response":
        return False, None if args is None else str(args), None
    if kind == "edit":
        asked = request["action_request"]["action"]
        if not isinstance(args, Mapping) or not isinstance(args.get("args"), Mapping):
            raise ValueError(
                f"{response!r}: an edit's args are an ActionRequest, "
                '{"action": TOOL, "args": {...}}'
            )
        if args.get("action") != asked:
            raise ValueError(
                f"an edit of the {asked} call names the tool {args.get('action')!r}: an edit "
                "changes the call's arguments, never its tool; respond instead, to reject "
                "the call and tell the model what to do"
            )
        return True, EDIT_REASON, dict(args["args"])
    raise ValueError(
        f"{response!r} is not a HumanResponse: its type is accept, edit, ignore or response"
    )


def _answer(
    approved: bool, reason: str | None, args: Mapping[str, Any] | None = None, tool: str = ""
) -> Command[Any]:
    if approved and args is not None:
        return Command(resume=[{"type": "edit", "args": {"action": tool, "args": dict(args)}}])
    if approved:
        return Command(resume=[{"type": "accept", "args": None}])
    if reason is None:
        return Command(resume=[{"type": "ignore", "args": None}])
    return Command(resume=[{"type": "response", "args": reason}])


def _lookup_client(ul: Any, approver: _core.Approver) -> Any:
    return (
        ul if ul is not None else approver if isinstance(approver, UndoLog | AsyncUndoLog) else None
    )


def _edit_is_an_approval(approved: bool, args: Mapping[str, Any] | None) -> None:
    if args is not None and not approved:
        raise ValueError("edited args go with an approval: a refusal runs nothing")


def _as_tool(item: Any) -> BaseTool:
    """An item of a ToolNode's list as ToolNode takes it: a BaseTool, or a plain callable
    made a tool by langchain_core's ``tool``."""
    return item if isinstance(item, BaseTool) else create_tool(item)


def _args_schema(
    tools: Iterable[BaseTool | Callable[..., Any]] | None, name: str
) -> type[BaseModel] | None:
    """The argument schema of the tool named ``name`` among ``tools`` (the run's own: a
    ToolNode's list, BaseTools or plain callables, or those bound to the model; the last
    of that name, as ToolNode keeps it), None when there is none, or it has no pydantic
    schema."""
    found = {made.name: made for made in map(_as_tool, tools or ())}.get(name)
    schema = None if found is None else found.args_schema
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def _checked_edit(
    request: Mapping[str, Any],
    args: Mapping[str, Any] | None,
    tools: Iterable[BaseTool | Callable[..., Any]] | None,
) -> dict[str, Any] | None:
    """A person's edited arguments read by the argument schema of the call's tool among
    ``tools`` (the run's own), as LangChain reads the model's (``"5000"`` for an int is
    5000): an edit whose values do not fit raises ValueError, and nothing is recorded.
    The edit is recorded in the JSON form the journal holds (``_core.json_form`` of each
    argument: a model with aliases by alias, as the request showed it). Which parameters
    an edit may name is the engine's rule (EditChangesArguments). A tool not among
    ``tools`` (none given: a process that decides without the graph's tools) is not known
    here: its edit goes as it is."""
    if args is None:
        return None
    action = request["action_request"]
    tool = str(action["action"])
    if not isinstance(args, Mapping):
        raise ValueError(
            f"the edited {tool} arguments are {type(args).__name__}, not a mapping of "
            "argument names to values"
        )
    schema = _args_schema(tools, tool)
    if schema is None:
        return dict(args)
    asked: Mapping[str, Any] = action["args"]
    try:
        read = schema.model_validate({**asked, **args})
    except ValidationError as error:
        raise ValueError(f"the edited {tool} arguments do not fit the tool: {error}") from error
    fields = type(read).model_fields
    return {
        name: _core.json_form(getattr(read, name)) if name in fields else value
        for name, value in args.items()
    }


def _one_response(response: Any) -> Mapping[str, Any]:
    items = response if isinstance(response, list) else [response]
    if len(items) != 1 or not isinstance(items[0], Mapping):
        raise ValueError(
            f"{response!r} is not one HumanResponse (the Agent Inbox sends a list of one)"
        )
    return items[0]
