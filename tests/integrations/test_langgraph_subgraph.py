"""The LangChain/LangGraph adapter with its tools inside a subgraph: a compiled graph that
is a node of the parent graph, run (and resumed) through the parent, as LangGraph's
human-in-the-loop convention has it: the parent is invoked with a thread id and a
checkpointer, an interrupt inside the subgraph surfaces at the parent, and the app
resumes the parent with ``Command(resume=...)``. Scripted models, a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from test_langgraph import (
    HELLO,
    Chat,
    Fixture,
    ScriptedChat,
    Steps,
    _approved_one_then_both,
    _send_each_call,
    calls,
)

from integration_support import decisions, effects, pending, session_state
from undolog import ApprovalRejectedError
from undolog.integrations import langchain as adapter


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def _inside(subgraph: Any, state: type = Chat) -> Any:
    """The parent graph, with a checkpointer: one node, the compiled subgraph, whose
    checkpoints are kept by the parent's checkpointer."""
    builder: StateGraph[Any] = StateGraph(state)
    builder.add_node("inner", subgraph)
    builder.add_edge(START, "inner")
    builder.add_edge("inner", END)
    return builder.compile(checkpointer=InMemorySaver())


def _agent_subgraph(
    turns: list[Any], tools: list[BaseTool], route: Any = None, checkpointer: Any = None
) -> Any:
    """A model and its ToolNode, compiled as a subgraph: ``checkpointer`` None (it runs in
    the parent's checkpoints, each run of it anew) or True (its state kept in the thread
    from one run of the parent to the next)."""
    model = ScriptedChat(turns=turns)
    builder = StateGraph(Chat)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    if route is None:
        builder.add_conditional_edges("agent", tools_condition)
    else:
        builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


PAY = [
    calls(("create_user", "c1", {"email": "a@x"})),
    calls(("payout", "c2", {"cents": 500})),
    AIMessage("paid"),
]


def _pay(fx: Fixture, turns: list[Any] | None = None, checkpointer: Any = None) -> tuple[Any, Any]:
    """The parent graph, stopped at the payout its subgraph's ToolNode asks about."""
    graph = _inside(_agent_subgraph(list(turns or PAY), fx.sync_tools, None, checkpointer))
    out = fx.run(graph, HELLO)
    [stop] = out[adapter.INTERRUPT]
    [request] = stop.value
    assert request["action_request"] == {"action": "payout", "args": {"cents": 500}}
    assert request["call_key"] == "c2"
    assert request[adapter.APPROVAL_KEY] is not None  # filled in at the parent's output
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs == {"create_user:a@x": 1}
    return graph, stop


@pytest.mark.parametrize("checkpointer", [None, True], ids=["per-run", "stateful"])
def test_approved_inside_a_subgraph_runs_once_on_resume_of_the_parent(
    fx: Fixture, checkpointer: Any
) -> None:
    graph, stop = _pay(fx, checkpointer=checkpointer)
    # the parent's thread state shows the subgraph's interrupt too (what the Inbox reads)
    [seen] = graph.get_state(fx.config).interrupts
    assert seen.id == stop.id
    out = fx.run(graph, adapter.decide(stop.value, fx.approver, "alice", approved=True))
    assert out["messages"][-1].content == "paid"
    told = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c2"]
    assert [m.content for m in told] == ['{"paid": 500}']
    assert fx.world.payouts == [500]
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("payout", "committed", 0),
    ]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_an_edit_inside_a_subgraph_runs_the_approved_arguments(fx: Fixture) -> None:
    graph, stop = _pay(fx)
    edit = [{"type": "edit", "args": {"action": "payout", "args": {"cents": "50"}}}]
    out = fx.run(
        graph, adapter.respond(stop.value, edit, fx.approver, "alice", tools=fx.sync_tools)
    )
    assert fx.world.payouts == [50]
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c2"]
    assert told.artifact["undolog_edit"]["approved_args"] == {"cents": 50}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_resume_of_the_parent_without_a_decision_asks_again(fx: Fixture) -> None:
    graph, stop = _pay(fx)
    out = fx.run(graph, Command(resume=[{"type": "accept", "args": None}]))
    [again] = out[adapter.INTERRUPT]
    assert again.id == stop.id and again.value == stop.value
    assert fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    out = fx.run(graph, adapter.decide(again.value, fx.approver, "alice", approved=True))
    assert out["messages"][-1].content == "paid"
    assert fx.world.payouts == [500]


def test_rejected_inside_a_subgraph_never_runs_and_undoes_the_run(fx: Fixture) -> None:
    """payout (on_reject "raise", the default): the resumed parent raises, as a graph
    without a subgraph does, and what the session did before is undone."""
    graph, stop = _pay(fx)
    command = adapter.decide(stop.value, fx.approver, "bob", approved=False, reason="no")
    with pytest.raises(ApprovalRejectedError):
        fx.run(graph, command)
    assert fx.world.payouts == []
    assert fx.world.runs == {"create_user:a@x": 1}
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "bob")]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_a_rejection_of_a_continue_tool_inside_a_subgraph_reaches_the_model(
    fx: Fixture,
) -> None:
    """on_reject="continue": the person's "no" is the call's ToolMessage (status error),
    which the subgraph's model reads, and the parent's run completes."""
    tools = adapter.tools(fx.fns["create_user_sync"], fx.fns["gift_sync"])
    seen_by_model: list[Any] = []

    class Remembering(ScriptedChat):
        """Keeps the messages of its last turn: what the model read after the refusal."""

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            if len(self.turns) == 1:
                seen_by_model.extend(messages)
            return super()._generate(messages, *args, **kwargs)

    model = Remembering(turns=[calls(("gift", "g1", {"cents": 900})), AIMessage("no gift then")])
    builder = StateGraph(Chat)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = _inside(builder.compile())
    [stop] = fx.run(graph, HELLO)[adapter.INTERRUPT]
    answer = [{"type": "response", "args": "over budget"}]
    out = fx.run(graph, adapter.respond(stop.value, answer, fx.approver, "alice"))
    [told] = [m for m in seen_by_model if isinstance(m, ToolMessage)]
    assert told.content == "alice rejected the gift call: over budget. It did not run."
    assert told.status == "error"
    assert told.artifact["undolog_refusal"]["decided_by"] == "alice"
    assert out["messages"][-1].content == "no gift then"
    assert fx.world.runs == {} and fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_replay_of_the_parent_does_not_run_the_body_again(fx: Fixture) -> None:
    """After the approved run completed: the same resume sent again, the parent invoked
    again in the same thread (the model gives the same calls again), and LangGraph's own
    replay of the parent from the checkpoint before its subgraph ran: the payout comes
    back from the journal each time, nobody is asked again, and its body ran once."""
    graph, stop = _pay(fx, PAY + PAY + PAY)
    command = adapter.decide(stop.value, fx.approver, "alice", approved=True)
    finished = fx.run(graph, command)
    assert finished["messages"][-1].content == "paid"
    assert fx.world.payouts == [500]

    out = fx.run(graph, command)  # the same resume again: nothing waits on it
    assert out == finished
    out = fx.run(graph, HELLO)  # the same thread, invoked again
    assert adapter.INTERRUPT not in out
    assert out["messages"][-1].content == "paid"
    before_inner = next(
        s for s in graph.get_state_history(fx.config) if s.next == ("inner",)
    ).config
    out = adapter.run(graph, fx.ul, None, before_inner, session_id=fx.sid)  # replay
    assert adapter.INTERRUPT not in out
    assert out["messages"][-1].content == "paid"

    assert fx.world.payouts == [500]
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_the_async_parent_resumes_a_subgraphs_call(fx: Fixture) -> None:
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"], fx.fns["payout"])
    graph = _inside(_agent_subgraph(list(PAY), tools))

    async def scenario() -> Any:
        out = await adapter.arun(graph, fx.aul, HELLO, fx.config, session_id=fx.sid)
        [stop] = out[adapter.INTERRUPT]
        command = await adapter.adecide(stop.value, fx.approver, "alice", approved=True)
        return [
            c
            async for c in adapter.astream(
                graph, fx.aul, command, fx.config, session_id=fx.sid, subgraphs=True
            )
        ]

    rest = asyncio.run(scenario())
    assert rest and not any(adapter.INTERRUPT in c[-1] for c in rest)
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_streamed_parent_names_the_subgraphs_approval(fx: Fixture) -> None:
    """stream(..., subgraphs=True): the subgraph's interrupt chunk has its approval id
    filled in once the stream has ended; the resume is streamed through the parent."""
    graph = _inside(_agent_subgraph(list(PAY), fx.sync_tools))
    chunks = list(adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid, subgraphs=True))
    stops = [s for _, chunk in chunks for s in chunk.get(adapter.INTERRUPT, ())]
    assert stops and all(s.value[0][adapter.APPROVAL_KEY] is not None for s in stops)
    command = adapter.decide(stops[0].value, fx.approver, "alice", approved=True)
    list(adapter.stream(graph, fx.ul, command, fx.config, session_id=fx.sid, subgraphs=True))
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- several calls of one turn, and a node's own question, inside the subgraph -------------


def test_two_calls_of_one_turn_in_the_subgraphs_tool_node(fx: Fixture) -> None:
    """One ToolNode task runs both payouts side by side: the parent shows one interrupt
    at a time, each is asked and decided in turn, and each runs once."""
    turns = [calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7})), AIMessage("ok")]
    graph = _inside(_agent_subgraph(turns, fx.sync_tools))
    out = fx.run(graph, HELLO)
    asked: list[str] = []
    while adapter.INTERRUPT in out:
        [stop] = out[adapter.INTERRUPT]
        assert [a for a, _ in pending(fx.admin_dsn, fx.sid)] == [adapter.approval_id(stop.value)]
        asked.append(stop.value[0]["call_key"])
        out = fx.run(graph, adapter.decide(stop.value, fx.approver, "alice", approved=True))
    assert sorted(asked) == ["p1", "p2"]
    assert out["messages"][-1].content == "ok"
    assert sorted(fx.world.payouts) == [5, 7]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_two_calls_of_one_turn_sent_as_tasks_of_the_subgraph(fx: Fixture) -> None:
    """Each payout its own task of the subgraph (the Send API): both interrupts surface at
    the parent at once; the parent is resumed with both answers by interrupt id."""
    turns = [calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7})), AIMessage("ok")]
    graph = _inside(_agent_subgraph(turns, fx.sync_tools, route=_send_each_call))
    out = _approved_one_then_both(fx, graph)
    assert out["messages"][-1].content == "ok"
    assert sorted(fx.world.payouts) == [5, 7]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_subgraph_nodes_own_question_after_its_approved_call(fx: Fixture) -> None:
    """A node of the subgraph pays (an IRREVERSIBLE call it makes itself), then asks its
    own question with interrupt(): resumed through the parent, the payout takes its own
    answer and the question is asked next, then handed the person's answer to it. The
    node runs a third time for that answer: the payout comes back from the journal
    (replayed once), its body not run again."""
    payout = fx.sync_tools[2]
    answers: list[Any] = []

    def node(state: Steps) -> Steps:
        payout.invoke({"cents": 700})
        answers.append(interrupt({"question": "also close the account?"}))
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = _inside(builder.compile(), Steps)
    [stop] = fx.run(graph, {"done": False})[adapter.INTERRUPT]
    assert stop.value[0]["action_request"] == {"action": "payout", "args": {"cents": 700}}
    out = fx.run(graph, adapter.decide(stop.value, fx.approver, "bob", approved=True))
    [question] = out[adapter.INTERRUPT]
    assert question.value == {"question": "also close the account?"}
    assert fx.world.payouts == [700] and answers == []
    assert fx.run(graph, Command(resume="yes")) == {"done": True}
    assert answers == ["yes"]
    assert fx.world.payouts == [700]
    assert effects(fx.admin_dsn, fx.sid) == [("payout", "committed", 1)]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- other ways a subgraph is a part of its parent -----------------------------------------


def test_a_subgraph_two_levels_down(fx: Fixture) -> None:
    """The subgraph's parent is itself a subgraph of the graph that is run."""
    graph = _inside(_inside_uncompiled(_agent_subgraph(list(PAY), fx.sync_tools)))
    [stop] = fx.run(graph, HELLO)[adapter.INTERRUPT]
    assert stop.value[0]["call_key"] == "c2"
    out = fx.run(graph, adapter.decide(stop.value, fx.approver, "alice", approved=True))
    assert out["messages"][-1].content == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def _inside_uncompiled(subgraph: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("middle", subgraph)
    builder.add_edge(START, "middle")
    builder.add_edge("middle", END)
    return builder.compile()


def test_a_subgraph_invoked_by_a_node_of_the_parent(fx: Fixture) -> None:
    """The parent's node calls the compiled subgraph itself (``subgraph.invoke``, another
    state schema): LangGraph runs the node again on resume, and the subgraph picks up
    where it stopped."""
    subgraph = _agent_subgraph(list(PAY), fx.sync_tools)

    def delegate(state: Steps) -> Steps:
        out = subgraph.invoke(HELLO)
        return {"done": out["messages"][-1].content == "paid"}

    builder = StateGraph(Steps)
    builder.add_node("delegate", delegate)
    builder.add_edge(START, "delegate")
    graph = builder.compile(checkpointer=InMemorySaver())
    [stop] = fx.run(graph, {"done": False})[adapter.INTERRUPT]
    assert stop.value[0]["call_key"] == "c2"
    assert fx.world.runs == {"create_user:a@x": 1}
    out = fx.run(graph, adapter.decide(stop.value, fx.approver, "alice", approved=True))
    assert out == {"done": True}
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_parent_waiting_on_its_subgraph_is_refused_to_another_session(fx: Fixture) -> None:
    """The thread's state at the parent holds the subgraph's UndoLog interrupt: resumed
    with another session id, the parent is refused before anything runs."""
    graph, stop = _pay(fx)
    command = adapter.decide(stop.value, fx.approver, "alice", approved=True)
    with pytest.raises(adapter.ResumedInAnotherSession, match=str(fx.sid)):
        adapter.run(graph, fx.ul, command, fx.config, session_id=uuid.uuid4())
    assert fx.world.runs == {"create_user:a@x": 1}
    fx.run(graph, command)
    assert fx.world.payouts == [500]


def test_two_subgraphs_side_by_side(fx: Fixture) -> None:
    """Two subgraphs run in one step of the parent, each stopping at its own payout: both
    interrupts surface at the parent at once, and one resume by interrupt id answers both."""
    builder: StateGraph[Any] = StateGraph(Chat)
    for name, (key, cents) in {"one": ("a1", 5), "two": ("b1", 7)}.items():
        turns = [calls(("payout", key, {"cents": cents})), AIMessage(name)]
        builder.add_node(name, _agent_subgraph(turns, fx.sync_tools))
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    graph = builder.compile(checkpointer=InMemorySaver())
    stops = fx.run(graph, HELLO)[adapter.INTERRUPT]
    assert sorted(s.value[0]["call_key"] for s in stops) == ["a1", "b1"]
    answers = {
        s.id: adapter.decide(s.value, fx.approver, "alice", approved=True).resume for s in stops
    }
    out = fx.run(graph, Command(resume=answers))
    assert sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage)) == [
        '{"paid": 5}',
        '{"paid": 7}',
    ]
    assert sorted(fx.world.payouts) == [5, 7]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
