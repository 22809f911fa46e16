"""The LangChain/LangGraph adapter against a real PostgreSQL: a small scripted LangChain
chat model (a BaseChatModel subclass that emits tool calls) with LangGraph's ToolNode,
and a graph whose node calls the tools itself. No LLM, no network."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

import psycopg
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send

from integration_support import (
    PAYOUT_CHANGES,
    World,
    decisions,
    effects,
    logins,
    make_tools,
    payout_changed,
    pending,
    refused_then_rolled_back,
    register_compensation,
    session_state,
)
from undolog import (
    ApprovalRejectedError,
    AsyncUndoLog,
    PermissionDenied,
    UndoLog,
    UndoLogError,
)
from undolog.integrations import langchain as adapter


class ScriptedChat(BaseChatModel):
    """Answers each call with the next scripted message (or raises the scripted error)."""

    turns: list[Any]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return ChatResult(generations=[ChatGeneration(message=turn)])


def calls(*calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i} for n, i, a in calls])


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Steps(TypedDict):
    done: bool


class Fixture:
    def __init__(self, dsn: str) -> None:
        self.admin_dsn = dsn
        agent_dsn, approver_dsn = logins(dsn)
        self.world = World()
        self.fns = make_tools(self.world)
        self.ul = UndoLog(agent_dsn)
        self.aul = AsyncUndoLog(agent_dsn)
        self.approver = UndoLog(approver_dsn)
        register_compensation(self.ul, self.world)
        register_compensation(self.aul, self.world)
        self.sid = uuid.uuid4()
        self.config: dict[str, Any] = {"configurable": {"thread_id": str(self.sid)}}
        self.sync_tools = adapter.tools(
            self.fns["search"], self.fns["create_user_sync"], self.fns["payout_sync"]
        )

    def chat_graph(
        self,
        turns: list[Any],
        tools: list[BaseTool] | None = None,
        each_its_task: bool = False,
        checkpointer: Any = None,
    ) -> Any:
        """A scripted model and its ToolNode; ``each_its_task``: each tool call of a turn
        sent to the ToolNode as a task of its own (_send_each_call); ``checkpointer``: the
        threads of a graph built before (a new one's, else)."""
        model = ScriptedChat(turns=turns)
        builder = StateGraph(Chat)
        builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        builder.add_node("tools", ToolNode(tools or self.sync_tools))
        builder.add_edge(START, "agent")
        if each_its_task:
            builder.add_conditional_edges("agent", _send_each_call, ["tools", END])
        else:
            builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=checkpointer or InMemorySaver())

    def run(self, graph: Any, input: Any) -> Any:
        return adapter.run(graph, self.ul, input, self.config, session_id=self.sid)


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


HELLO = {"messages": [HumanMessage("go")]}


def test_tools_keep_name_docstring_and_schema(fx: Fixture) -> None:
    made = {t.name: t for t in fx.sync_tools}
    made_async = {t.name: t for t in adapter.tools(fx.fns["create_user"], fx.fns["payout"])}
    for tools in (made, made_async):
        assert tools["create_user"].description == "Create a user account."
        # what bind_tools sends to a model
        schema = convert_to_openai_tool(tools["create_user"])["function"]["parameters"]
        assert schema["properties"]["email"]["type"] == "string"
        assert schema["required"] == ["email"]
        assert tools["payout"].args == {"cents": {"title": "Cents", "type": "integer"}}
    assert made["search"].description == "Search the web for a query."


def test_run_completes(fx: Fixture) -> None:
    graph = fx.chat_graph(
        [
            calls(("search", "c1", {"query": "docs"}), ("create_user", "c2", {"email": "a@x"})),
            AIMessage("done"),
        ]
    )
    out = fx.run(graph, HELLO)
    assert out["messages"][-1].content == "done"
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert effects(fx.admin_dsn, fx.sid) == [("create_user", "committed", 0)]
    assert fx.world.runs == {"search": 1, "create_user:a@x": 1}


def test_run_that_raises_is_rolled_back_lifo(fx: Fixture) -> None:
    graph = fx.chat_graph(
        [
            calls(("create_user", "c1", {"email": "a@x"})),
            calls(("create_user", "c2", {"email": "b@x"})),
            RuntimeError("the model provider went away"),
        ]
    )
    with pytest.raises(RuntimeError, match="went away"):
        fx.run(graph, HELLO)
    assert fx.world.undone == ["b@x", "a@x"]
    assert fx.world.users == {}
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def _pay(fx: Fixture) -> tuple[Any, list[dict[str, Any]]]:
    graph = fx.chat_graph(
        [
            calls(("create_user", "c1", {"email": "a@x"})),
            calls(("payout", "c2", {"cents": 500})),
            AIMessage("paid"),
        ]
    )
    out = fx.run(graph, HELLO)
    [pending] = out[adapter.INTERRUPT]
    [request] = pending.value  # Agent Inbox's shape: a list of one HumanInterrupt
    assert request["action_request"] == {"action": "payout", "args": {"cents": 500}}
    assert request["config"] == {
        "allow_accept": True,
        "allow_edit": True,
        "allow_respond": True,
        "allow_ignore": True,
    }
    assert "IRREVERSIBLE" in request["description"]
    assert request[adapter.SESSION_KEY] == str(fx.sid)
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs["payout"] == 0
    return graph, pending.value


def test_irreversible_approved_then_resumed_runs_once(fx: Fixture) -> None:
    graph, request = _pay(fx)
    with pytest.raises(PermissionDenied):  # the agent's login cannot approve its own call
        adapter.decide(request, fx.ul, "me", approved=True)
    out = fx.run(graph, adapter.decide(request, fx.approver, "alice", approved=True))
    assert out["messages"][-1].content == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_resume_without_a_recorded_yes_interrupts_again(fx: Fixture) -> None:
    graph, request = _pay(fx)
    out = fx.run(graph, Command(resume={"approved": True}))  # nobody recorded it in UndoLog
    assert out[adapter.INTERRUPT][0].value == request
    assert fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"


def test_irreversible_rejected_undoes_the_run(fx: Fixture) -> None:
    graph, request = _pay(fx)
    command = adapter.decide(request, fx.ul, "me", approved=False, reason="no")
    with pytest.raises(ApprovalRejectedError):
        fx.run(graph, command)
    assert fx.world.payouts == []
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "me")]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_node_rerun_on_resume_replays_from_the_journal(fx: Fixture) -> None:
    """A node that calls the tools itself is re-run from its start on resume (the node
    before it is not): the call it made before the interrupt comes back from the journal,
    and the payout, approved elsewhere, runs once."""
    create_user, payout = fx.sync_tools[1], fx.sync_tools[2]

    def first(state: Steps) -> Steps:
        create_user.invoke({"email": "b@x"})
        return {"done": False}

    def onboard(state: Steps) -> Steps:
        create_user.invoke({"email": "a@x", "name": "A"})
        payout.invoke({"cents": 700})
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("first", first)
    builder.add_node("onboard", onboard)
    builder.add_edge(START, "first")
    builder.add_edge("first", "onboard")
    graph = builder.compile(checkpointer=InMemorySaver())
    out = fx.run(graph, {"done": False})
    request = out[adapter.INTERRUPT][0].value
    fx.approver.approve(adapter.approval_id(request), "bob", "checked")  # the CLI, say
    out = fx.run(graph, Command(resume="go on"))
    assert out == {"done": True}
    assert fx.world.runs == {"create_user:b@x": 1, "create_user:a@x": 1, "payout": 1}
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("create_user", "committed", 1),
        ("payout", "committed", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_async_graph_with_async_tools(fx: Fixture) -> None:
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"], fx.fns["payout"])
    graph = fx.chat_graph(
        [
            calls(("create_user", "c1", {"email": "a@x"})),
            calls(("payout", "c2", {"cents": 900})),
            AIMessage("paid"),
        ],
        tools,
    )

    async def scenario() -> Any:
        out = await adapter.arun(graph, fx.aul, HELLO, fx.config, session_id=fx.sid)
        request = out[adapter.INTERRUPT][0].value
        command = await adapter.adecide(request, fx.approver, "alice", approved=True)
        return await adapter.arun(graph, fx.aul, command, fx.config, session_id=fx.sid)

    out = asyncio.run(scenario())
    assert out["messages"][-1].content == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_irreversible_beside_another_call_of_the_same_turn(fx: Fixture) -> None:
    """ToolNode runs a message's calls side by side: the approval is requested once the
    graph has stopped, so the compensable call beside it is not refused. (Whether that
    call ran before the graph stopped is up to the thread pool: ToolNode's executor.map
    cancels the calls not started yet when the payout interrupts. Either way it runs
    once: the resumed node makes it, or replays it.)"""
    graph = fx.chat_graph(
        [
            calls(("payout", "p1", {"cents": 5}), ("create_user", "c1", {"email": "a@x"})),
            AIMessage("paid"),
        ]
    )
    out = fx.run(graph, HELLO)
    [pending] = out[adapter.INTERRUPT]
    assert fx.world.runs["create_user:a@x"] <= 1
    assert fx.world.runs["payout"] == 0
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    out = fx.run(graph, adapter.decide(pending.value, fx.approver, "alice", approved=True))
    assert out["messages"][-1].content == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_decision_recorded_by_a_callable(fx: Fixture) -> None:
    """The app's own recorder (here: the approver's connection) takes the decision; the
    call decided on is read with ``ul`` (here the agent's client) first."""
    graph, request = _pay(fx)
    seen: list[tuple[uuid.UUID, bool, str, str | None]] = []

    def record(approval: uuid.UUID, approved: bool, by: str, reason: str | None) -> None:
        seen.append((approval, approved, by, reason))
        fx.approver.approve(approval, by, reason)

    command = adapter.decide(request, record, "carol", approved=True, reason="ok", ul=fx.ul)
    assert seen == [(adapter.approval_id(request), True, "carol", "ok")]
    out = fx.run(graph, command)
    assert out["messages"][-1].content == "paid"
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "carol")]


def _send_each_call(state: Chat) -> Any:
    """Route each tool call of the model's turn to the tool node as its own task (the
    Send API, as LangChain's create_agent does): each task stops at its own interrupt."""
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return [Send("tools", [tool_call]) for tool_call in last.tool_calls]
    return END


def _approved_one_then_both(fx: Fixture, graph: Any) -> dict[str, Any]:
    """The graph's two payouts p1 and p2, each its own task, stopped at their interrupts:
    p1 approved and resumed alone by its interrupt id stops again (both interrupts, ids
    unchanged: p2 is undecided, and nothing is paid); once p2 is approved, both answers
    resume the graph. Its output."""
    stops = {i.value[0]["call_key"]: i for i in fx.run(graph, HELLO)[adapter.INTERRUPT]}
    assert sorted(stops) == ["p1", "p2"]
    assert len(pending(fx.admin_dsn, fx.sid)) == 2, "both asked at once"
    first = adapter.decide(stops["p1"].value, fx.approver, "alice", approved=True)
    out = fx.run(graph, Command(resume={stops["p1"].id: first.resume}))
    again = {i.value[0]["call_key"]: i.id for i in out[adapter.INTERRUPT]}
    assert again == {key: stop.id for key, stop in stops.items()}
    assert fx.world.payouts == []
    second = adapter.decide(stops["p2"].value, fx.approver, "alice", approved=True)
    both: Command[Any] = Command(
        resume={stops["p1"].id: first.resume, stops["p2"].id: second.resume}
    )
    return cast(dict[str, Any], fx.run(graph, both))


def test_two_irreversible_calls_of_one_turn_are_asked_at_once(fx: Fixture) -> None:
    """Both payouts of one model turn, sent to the tool node as a task each, are
    interrupts of the stopped graph, each with its UndoLog request (Agent Inbox
    HumanInterrupts) before any decision; the graph resumes with both answers, by
    interrupt id, and each payout runs once."""
    turns = [
        calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7})),
        AIMessage("paid"),
    ]
    graph = fx.chat_graph(turns, each_its_task=True)
    out = fx.run(graph, HELLO)
    interrupts = out[adapter.INTERRUPT]
    values = {i.value[0]["call_key"]: i.value[0] for i in interrupts}
    assert sorted(values) == ["p1", "p2"]
    asked = [uuid.UUID(values[key][adapter.APPROVAL_KEY]) for key in ("p1", "p2")]
    assert pending(fx.admin_dsn, fx.sid) == list(zip(asked, [5, 7], strict=True))
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.payouts == []
    answers = {
        i.id: adapter.decide(i.value, fx.approver, "alice", approved=True).resume
        for i in interrupts
    }
    out = fx.run(graph, Command(resume=answers))
    assert out["messages"][-1].content == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_tool_node_that_shows_one_interrupt_gets_one_request(fx: Fixture) -> None:
    """A ToolNode that runs both calls of a turn in one task surfaces only the first
    interrupt: only the call shown is asked (a person is never asked about a call they
    cannot see); the other is asked when the resumed graph shows it. Each runs once."""
    graph = fx.chat_graph(
        [
            calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7})),
            AIMessage("paid"),
        ]
    )
    out = fx.run(graph, HELLO)
    asked: list[str] = []
    while adapter.INTERRUPT in out:
        values = [i.value[0] for i in out[adapter.INTERRUPT]]
        assert len(values) == 1
        assert [approval for approval, _ in pending(fx.admin_dsn, fx.sid)] == [
            uuid.UUID(values[0][adapter.APPROVAL_KEY])
        ]
        asked.append(values[0]["call_key"])
        out = fx.run(graph, adapter.decide(values[0], fx.approver, "alice", approved=True))
    assert sorted(asked) == ["p1", "p2"]
    assert out["messages"][-1].content == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def _pay_graph(fx: Fixture, tools: list[BaseTool] | None = None) -> Any:
    return fx.chat_graph(
        [
            calls(("create_user", "c1", {"email": "a@x"})),
            calls(("payout", "c2", {"cents": 500})),
            AIMessage("paid"),
        ],
        tools,
    )


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_stream_pauses_for_approval_and_resumes(fx: Fixture, mode: str) -> None:
    """The way a UI drives a graph: stream, stop at the interrupt, resume with a Command."""
    graph = _pay_graph(fx)
    stream = adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid, stream_mode=mode)
    chunks = list(stream)
    interrupts = [c[adapter.INTERRUPT] for c in chunks if adapter.INTERRUPT in c]
    [[pending]] = interrupts
    [request] = pending.value
    assert request["action_request"]["action"] == "payout"
    assert request[adapter.APPROVAL_KEY] is not None  # filled in once the stream ended
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs == {"create_user:a@x": 1}
    command = adapter.decide(request, fx.approver, "alice", approved=True)
    rest = list(
        adapter.stream(graph, fx.ul, command, fx.config, session_id=fx.sid, stream_mode=mode)
    )
    assert not any(adapter.INTERRUPT in c for c in rest)
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_stream_that_raises_is_rolled_back(fx: Fixture) -> None:
    graph = fx.chat_graph(
        [calls(("create_user", "c1", {"email": "a@x"})), RuntimeError("the model went away")]
    )
    with pytest.raises(RuntimeError, match="went away"):
        list(adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid))
    assert fx.world.undone == ["a@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_the_bare_graph_stream_says_where_to_go() -> None:
    """Outside the adapter a journaled call has no session: the binding says so."""
    world = World()
    payout = adapter.tool(make_tools(world)["payout_sync"])
    with pytest.raises(Exception, match="session"):
        payout.invoke({"cents": 1})
    assert world.payouts == []


def test_astream_pauses_for_approval_and_resumes(fx: Fixture) -> None:
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"], fx.fns["payout"])
    graph = _pay_graph(fx, tools)

    async def scenario() -> list[Any]:
        chunks = [
            c async for c in adapter.astream(graph, fx.aul, HELLO, fx.config, session_id=fx.sid)
        ]
        [pending] = next(c[adapter.INTERRUPT] for c in chunks if adapter.INTERRUPT in c)
        assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
        approver = AsyncUndoLog(fx.approver.dsn)
        command = await adapter.adecide(pending.value, approver, "alice", approved=True)
        return [
            c async for c in adapter.astream(graph, fx.aul, command, fx.config, session_id=fx.sid)
        ]

    rest = asyncio.run(scenario())
    assert rest and not any(adapter.INTERRUPT in c for c in rest)
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_agent_inbox_reads_the_thread_and_answers_with_a_human_response(fx: Fixture) -> None:
    """What the Agent Inbox does: read the interrupt from the thread's state (a copy, so
    its approval id is not filled in: it is found by session and call key), show it, and
    send back a list of one HumanResponse, recorded under the person's login."""
    graph = _pay_graph(fx)
    list(adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid))
    [pending] = graph.get_state(fx.config).interrupts
    [request] = pending.value
    assert request[adapter.APPROVAL_KEY] is None
    with pytest.raises(ValueError, match="never its tool"):
        adapter.respond(
            request,
            [{"type": "edit", "args": {"action": "search", "args": {"query": "x"}}}],
            fx.approver,
            "alice",
        )
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    command = adapter.respond(request, [{"type": "accept", "args": None}], fx.approver, "alice")
    assert command.resume == [{"type": "accept", "args": None}]
    list(adapter.stream(graph, fx.ul, command, fx.config, session_id=fx.sid))
    assert fx.world.payouts == [500]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_agent_inbox_response_rejects_with_its_text(fx: Fixture) -> None:
    graph = _pay_graph(fx)
    list(adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid))
    [pending] = graph.get_state(fx.config).interrupts
    answer = [{"type": "response", "args": "not this month"}]
    command = adapter.respond(pending.value, answer, fx.approver, "bob")
    with pytest.raises(ApprovalRejectedError):
        list(adapter.stream(graph, fx.ul, command, fx.config, session_id=fx.sid))
    with psycopg.connect(fx.admin_dsn) as conn:
        row = conn.execute(
            "SELECT state, decided_by, reason FROM undolog.undolog_approval_requests"
        ).fetchone()
    assert row == ("rejected", "bob", "not this month")
    assert fx.world.payouts == []
    assert fx.world.undone == ["a@x"]


def test_the_pages_human_interrupt_is_the_one_the_tool_sends(fx: Fixture) -> None:
    """docs/integrations.md shows an interrupt's value: it has the keys, the config and
    the shape of the value an IRREVERSIBLE call really interrupts with."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    shown = json.loads(re.search(r"```json\n(.*?)\n```", page, re.S).group(1))  # type: ignore[union-attr]
    _, value = _pay(fx)
    assert [set(v) for v in shown] == [set(v) for v in value]
    assert shown[0]["config"] == value[0]["config"]
    assert set(shown[0]["action_request"]) == set(value[0]["action_request"])
    assert value[0]["description"].startswith(shown[0]["description"].removesuffix(" ..."))


def test_a_rejection_of_a_continue_tool_reaches_the_model(fx: Fixture) -> None:
    """on_reject="continue": the person's "no" is the call's ToolMessage (status error,
    who and why, the refusal as its artifact); the graph and the session go on."""
    tools = adapter.tools(fx.fns["create_user_sync"], fx.fns["gift_sync"])
    graph = fx.chat_graph(
        [
            calls(("create_user", "c1", {"email": "a@x"})),
            calls(("gift", "g1", {"cents": 900})),
            AIMessage("no gift then"),
        ],
        tools,
    )
    list(adapter.stream(graph, fx.ul, HELLO, fx.config, session_id=fx.sid))
    [pending] = graph.get_state(fx.config).interrupts
    answer = [{"type": "response", "args": "over budget"}]
    command = adapter.respond(pending.value, answer, fx.approver, "alice")
    out = fx.run(graph, command)
    told = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "g1"]
    assert [m.content for m in told] == [
        "alice rejected the gift call: over budget. It did not run."
    ]
    assert told[0].status == "error"
    assert told[0].artifact["undolog_refusal"]["decided_by"] == "alice"
    assert out["messages"][-1].content == "no gift then"
    assert fx.world.payouts == [] and fx.world.undone == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_rejection_in_a_node_is_the_calls_answer(fx: Fixture) -> None:
    """A node that calls a continue tool itself gets the refusal's message back."""
    gift = adapter.tool(fx.fns["gift_sync"])
    said: list[Any] = []

    def node(state: Steps) -> Steps:
        said.append(gift.invoke({"cents": 5}))
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=InMemorySaver())
    out = fx.run(graph, {"done": False})
    adapter.decide(out[adapter.INTERRUPT][0].value, fx.approver, "bob", approved=False)
    assert fx.run(graph, Command(resume="go on")) == {"done": True}
    assert said == ["bob rejected the gift call (no reason given). It did not run."]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def _onboard_graph(fx: Fixture) -> Any:
    """A node that creates a user, then pays: LangGraph re-runs it from its start when it
    is resumed."""
    create_user, payout = fx.sync_tools[1], fx.sync_tools[2]

    def onboard(state: Steps) -> Steps:
        create_user.invoke({"email": "a@x", "name": "A"})
        payout.invoke({"cents": 700})
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("onboard", onboard)
    builder.add_edge(START, "onboard")
    return builder.compile(checkpointer=InMemorySaver())


def test_a_thread_resumed_under_another_session_is_refused(fx: Fixture) -> None:
    """The thread waits on an interrupt of its run's session: resumed (or streamed, or
    run again) with another session id it is refused before the graph runs, so the
    re-run node does not make its committed calls again in a session whose journal does
    not hold them, and no second request is asked. Its own session id resumes it."""
    graph = _onboard_graph(fx)
    out = fx.run(graph, {"done": False})
    command = adapter.decide(out[adapter.INTERRUPT][0].value, fx.approver, "alice", approved=True)
    other = uuid.uuid4()
    with pytest.raises(ValueError, match=str(fx.sid)):
        adapter.run(graph, fx.ul, command, fx.config, session_id=other)
    with pytest.raises(ValueError, match=str(fx.sid)):
        list(adapter.stream(graph, fx.ul, None, fx.config, session_id=other))
    with pytest.raises(ValueError, match=str(fx.sid)):
        asyncio.run(adapter.arun(graph, fx.aul, command, fx.config, session_id=other))
    assert fx.world.runs == {"create_user:a@x": 1}
    with psycopg.connect(fx.admin_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM undolog.undolog_sessions WHERE session_id = %s", (other,)
        ).fetchone() == (0,)
    assert fx.run(graph, command) == {"done": True}
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_an_async_graph_with_sync_journaled_tools(fx: Fixture) -> None:
    """arun / astream (how LangGraph's server runs every graph) take sync @undolog_tool
    tools too: each body runs in a worker thread, journaled by the async session."""
    graph = _pay_graph(fx)  # the sync create_user and payout

    async def scenario() -> Any:
        out = await adapter.arun(graph, fx.aul, HELLO, fx.config, session_id=fx.sid)
        request = out[adapter.INTERRUPT][0].value
        command = await adapter.adecide(request, AsyncUndoLog(fx.approver.dsn), "al", approved=True)
        return [
            c async for c in adapter.astream(graph, fx.aul, command, fx.config, session_id=fx.sid)
        ]

    rest = asyncio.run(scenario())
    assert rest and not any(adapter.INTERRUPT in c for c in rest)
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("payout", "committed", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_tool_called_sync_in_an_async_run_says_how_to_call_it(fx: Fixture) -> None:
    """A node of an async run (arun) that calls an IRREVERSIBLE UndoLog tool with invoke:
    the error says which call an async run makes (ainvoke, from an async node), as the
    decorator's does for a COMPENSABLE one, not a bare AssertionError; nothing ran."""
    [_, _, payout] = fx.sync_tools

    def node(state: Steps) -> Steps:
        payout.invoke({"cents": 5})
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(UndoLogError, match="with ainvoke from an async node"):
        asyncio.run(adapter.arun(graph, fx.aul, {"done": False}, fx.config, session_id=fx.sid))
    assert fx.world.runs == {}


def _with_payout_changed(fx: Fixture, graph: Any, change: str) -> Any:
    """The chat graph as a later release of the app builds it, on ``graph``'s threads,
    its ToolNode's payout changed as ``change`` says (the rest as they were)."""
    [search, create_user, _] = fx.sync_tools
    changed = adapter.tools(*payout_changed(fx.world, change))
    return fx.chat_graph(
        [AIMessage("paid")], [search, create_user, *changed], checkpointer=graph.checkpointer
    )


@pytest.mark.parametrize("change", list(PAYOUT_CHANGES))
def test_a_resume_whose_approved_call_s_tool_changed_is_refused_saying_so(
    fx: Fixture, change: str
) -> None:
    """The payout of 500 approved, the app is deployed again with the ToolNode's payout
    changed before the resume (a parameter added, with a default or without, removed,
    renamed or of another type, its tier changed, or the tool gone from the ToolNode):
    this tool cannot make the call a person approved. (Before: a default added had the
    payout asked again at the same step; a parameter the call does not fit, or a tool
    gone, had the ToolNode tell the model and the session complete with the approved
    payout never run; COMPENSABLE failed the session mid-run, UL018, and undid it.) The
    resume (run, stream, arun) is refused before the graph runs, saying what changed
    and what to do, as with OpenAI Agents and pydantic-ai; nothing is recorded, and the
    session can still be rolled back, undoing what it did."""
    graph, request = _pay(fx)
    command = adapter.decide(request, fx.approver, "alice", approved=True)
    approval = adapter.approval_id(request, fx.ul)
    before = session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)
    changed = _with_payout_changed(fx, graph, change)
    with pytest.raises(ValueError) as refused:
        fx.run(changed, command)
    said = str(refused.value)
    assert said.startswith(
        f"this thread's payout call, approved (approval {approval}): the payout call c2 "
        "names the arguments of the call UndoLog asked about, but the payout tool is not "
        f"as it was when the call was journaled: {PAYOUT_CHANGES[change]}. The tool "
        "changed since the run stopped"
    )
    assert "nothing was run. Decide on it and resume with the tool as it was" in said
    assert f"undolog sessions rollback {fx.sid} --by WHO" in said
    with pytest.raises(ValueError, match=re.escape(PAYOUT_CHANGES[change])):
        list(adapter.stream(changed, fx.ul, command, fx.config, session_id=fx.sid))
    with pytest.raises(ValueError, match=re.escape(PAYOUT_CHANGES[change])):
        asyncio.run(adapter.arun(changed, fx.aul, command, fx.config, session_id=fx.sid))
    refused_then_rolled_back(fx.world, fx.admin_dsn, fx.sid, before, lambda: fx.ul.run_walk(fx.sid))


def test_a_resume_with_the_tool_as_it_was_goes_on(fx: Fixture) -> None:
    """Refused under a changed payout, the same resume goes on with the graph's tools as
    they were when the run stopped: the approved payout runs, once."""
    graph, request = _pay(fx)
    command = adapter.decide(request, fx.approver, "alice", approved=True)
    changed = _with_payout_changed(fx, graph, "a parameter added with a default")
    with pytest.raises(ValueError, match="it now takes currency"):
        fx.run(changed, command)
    out = fx.run(graph, command)
    assert out["messages"][-1].content == "paid"
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_call_sent_to_the_tool_node_as_its_own_task_is_checked_too(fx: Fixture) -> None:
    """A model's call sent to the ToolNode as a task of its own (Send, as LangChain's
    agents do): its tool changed since the stop, the resume is refused the same way; the
    graph as it was resumes it."""
    turns = [calls(("payout", "c2", {"cents": 500})), AIMessage("paid")]
    graph = fx.chat_graph(turns, each_its_task=True)
    [pending] = fx.run(graph, HELLO)[adapter.INTERRUPT]
    command = adapter.decide(pending.value, fx.approver, "alice", approved=True)
    [search, create_user, _] = fx.sync_tools
    payout = adapter.tools(*payout_changed(fx.world, "a required parameter added"))
    changed = fx.chat_graph(
        [AIMessage("paid")],
        [search, create_user, *payout],
        each_its_task=True,
        checkpointer=graph.checkpointer,
    )
    with pytest.raises(ValueError, match="it now requires iban, with no default"):
        fx.run(changed, command)
    assert fx.world.runs["payout"] == 0
    assert fx.run(graph, command)["messages"][-1].content == "paid"
    assert fx.world.payouts == [500]
