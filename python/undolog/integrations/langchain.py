"""``@undolog_tool`` tools as LangChain tools, for LangGraph graphs (extra ``langgraph``).

    lc_tools = tools(search, create_user, payout)          # BaseTools: ToolNode, bind_tools
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    out = run(graph, ul, {"messages": [...]}, config, session_id=sid)
    if INTERRUPT in out:                                     # an IRREVERSIBLE call
        command = decide(out[INTERRUPT][0].value, approver, "alice", approved=True,
                         tools=lc_tools)     # the graph's tools: they check an edit (args=)
        out = run(graph, ul, command, config, session_id=sid)

An IRREVERSIBLE call goes through LangGraph's own ``interrupt()`` until UndoLog records
a yes, with a value in the Agent Inbox's shape: a list of one HumanInterrupt
(``action_request``, ``config``, ``description``) carrying UndoLog's
``undolog_approval_id``, ``undolog_session_id`` and ``call_key``. ``respond`` records an
Inbox HumanResponse (accept, edit, ignore, response): an edit approves the call with the
person's arguments, read by the argument schema of the call's tool among the ``tools=``
it is given (the graph's own), and the call's ToolMessage tells the model so.
``stream``/``astream`` wrap ``graph.stream``/``astream`` as ``run``/``arun`` wrap
``invoke``/``ainvoke``. A rejection of a tool declared ``on_reject="continue"`` is the
call's ToolMessage.

The approval request is written when the graph has stopped (ToolNode runs a message's
calls side by side, and a waiting session refuses new calls), and ``run`` fills its id
into the interrupts of the output it answers. ``decide`` records the
decision through the approver's login and answers the ``Command(resume=...)`` to go on
with, once it has read, with that login, that the request's approval is the call the
request shows (session, tool, call key, arguments: else ValueError, nothing recorded;
the request comes from the agent's run); a call approved elsewhere (CLI, dashboard)
runs when the graph is resumed with any resume value, and one UndoLog has not decided
interrupts again, whatever the resume value says. UndoLog's record is what counts.

A node may ask its own questions with ``interrupt()``: an IRREVERSIBLE call keeps its
interrupt on each run of its node (resumed, it takes the answer LangGraph holds for it),
so that LangGraph, which hands a task's resume values to its ``interrupt()`` calls by
their order, gives the node's question its own answer.

LangGraph re-runs an interrupted node from its start; every journaled call the node
made before comes back from the journal. A call made by a model carries its tool call id
(its step key); a call made by the node itself, ``lc_tool.invoke({...})``, is keyed by
the node task's checkpoint namespace and its position in that run of the node (so call
the adapted tool, not the bare function, inside a node). ``run`` (sync graph, ``UndoLog``,
sync or async SAFE tools, sync journaled tools) and ``arun`` (``ainvoke``,
``AsyncUndoLog``, sync or async journaled tools) open the run's UndoLog session; a
thread that waits on an UndoLog interrupt of another session is refused
(``ResumedInAnotherSession``, a ValueError). An edited call's ``ToolMessage`` is the
thread's record of what ran (``artifact["undolog_edit"]``); the AIMessage that asked for
it keeps the model's arguments.
"""

from undolog.integrations._alanggraph import aapproval_id, adecide, arespond, arun, astream
from undolog.integrations._core import ResumedInAnotherSession
from undolog.integrations._langchain_common import (
    ALLOWED,
    APPROVAL_KEY,
    EDIT_REASON,
    INTERRUPT,
    SESSION_KEY,
    UndoLogTool,
    tool,
    tools,
)
from undolog.integrations._langgraph import approval_id, decide, respond, run, stream

__all__ = [
    "ALLOWED",
    "APPROVAL_KEY",
    "EDIT_REASON",
    "INTERRUPT",
    "SESSION_KEY",
    "ResumedInAnotherSession",
    "UndoLogTool",
    "aapproval_id",
    "adecide",
    "approval_id",
    "arespond",
    "arun",
    "astream",
    "decide",
    "respond",
    "run",
    "stream",
    "tool",
    "tools",
]
