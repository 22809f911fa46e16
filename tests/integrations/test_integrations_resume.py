"""The framework adapters under crashes and resumes, against a real PostgreSQL: a run
whose process died after some calls committed, made again under the same session id
(or another one); a resume whose framework state disagrees with UndoLog's record, or
was edited; two processes resuming one session at once. Each framework is driven by its
own test model (OpenAI Agents' ScriptedModel, pydantic-ai's FunctionModel, a scripted
LangChain chat model): no LLM, no network.

A process that dies is simulated by ``Killed`` raised out of the run, with the session
block's exit made to do nothing for it (``killable``): the session stays as a killed
process leaves it (active, its calls committed, nothing undone), and the framework's
state is what the process had saved (a checkpoint, a serialized RunState, a message
history)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from agents import Agent, RunState, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDenied
from test_langgraph import Chat, ScriptedChat, Steps, calls

from integration_support import (
    AsyncAgentFixture,
    World,
    decisions,
    logins,
    make_tools,
    register_compensation,
    session_state,
)
from undolog import ApprovalRejectedError, AsyncUndoLog, AwaitingApprovalError, UndoLog
from undolog.integrations import langchain as lc
from undolog.integrations import openai_agents as oa
from undolog.integrations import pydantic_ai as pa


class Killed(Exception):
    """The process died here: nothing after it ran (see ``killable``)."""


@pytest.fixture
def killable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``Killed`` leaving a session block is a process that died there: the session is
    not failed and nothing is undone (both clients, the async one and the sync one)."""
    async_left, sync_left = AsyncUndoLog._left, UndoLog._left

    async def dead_async(self: AsyncUndoLog, conn: Any, active: Any, exc: BaseException) -> str:
        if isinstance(exc, Killed):
            return str(active.state)
        return await async_left(self, conn, active, exc)

    def dead_sync(self: UndoLog, conn: Any, active: Any, exc: BaseException) -> str:
        if isinstance(exc, Killed):
            return str(active.state)
        return sync_left(self, conn, active, exc)

    monkeypatch.setattr(AsyncUndoLog, "_left", dead_async)
    monkeypatch.setattr(UndoLog, "_left", dead_sync)
    yield


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)


def sessions_named(dsn: str, session_id: uuid.UUID) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM undolog.undolog_sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


# --- OpenAI Agents -----------------------------------------------------------------------


class OpenAIFixture(AsyncAgentFixture):
    def agent(self, steps: list[Any]) -> Agent[Any]:
        tools = oa.tools(*(self.fns[n] for n in ("search", "create_user", "payout", "gift")))
        return Agent(name="ops", model=ScriptedModel(list(steps)), tools=list(tools))

    def run(self, agent: Agent[Any], input: Any) -> Any:
        return asyncio.run(oa.run(agent, self.ul, input, session_id=self.sid))


@pytest.fixture
def ofx(dsn: str) -> OpenAIFixture:
    return OpenAIFixture(dsn)


PAY: list[Any] = [
    [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
    [function_call("payout", {"cents": 500}, call_id="c2")],
    [assistant_message("paid")],
]


def _oa_stopped(ofx: OpenAIFixture, script: list[Any] = PAY) -> tuple[Agent[Any], Any]:
    agent = ofx.agent(script)
    result = ofx.run(agent, "go")
    assert [i.call_id for i in result.interruptions] == ["c2"]
    return agent, result


def _tool_outputs(result: Any) -> dict[str, str]:
    return {
        str(i.raw_item["call_id"]): str(i.raw_item["output"])
        for i in result.new_items
        if getattr(i, "type", "") == "tool_call_output_item"
    }


def test_openai_killed_after_compensable_calls_is_made_again_and_replays(
    ofx: OpenAIFixture, killable: None
) -> None:
    made = [
        [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
        [function_call("create_user", {"email": "b@x", "name": "B"}, call_id="c2")],
    ]
    with pytest.raises(Killed):
        ofx.run(ofx.agent([*made, Killed("kill -9")]), "go")
    assert session_state(ofx.admin_dsn, ofx.sid) == "active"
    again = ofx.run(ofx.agent([*made, [assistant_message("done")]]), "go")
    assert again.final_output == "done"
    assert ofx.world.runs == {"create_user:a@x": 1, "create_user:b@x": 1}
    assert session_state(ofx.admin_dsn, ofx.sid) == "completed"


def test_openai_killed_after_the_approved_call_resumes_from_the_saved_state(
    ofx: OpenAIFixture, killable: None
) -> None:
    agent, result = _oa_stopped(ofx, [*PAY[:2], Killed("kill -9"), [assistant_message("paid")]])
    saved = result.to_state().to_json()
    approval = asyncio.run(oa.approval_id(ofx.ul, ofx.sid, result.interruptions[0]))
    asyncio.run(ofx.approver.approve(approval, "alice", "ok"))
    with pytest.raises(Killed):
        ofx.run(agent, asyncio.run(RunState.from_json(agent, saved)))
    assert ofx.world.payouts == [500]
    again = ofx.run(agent, asyncio.run(RunState.from_json(agent, saved)))
    assert again.final_output == "paid"
    assert ofx.world.payouts == [500]
    assert ofx.world.runs["create_user:a@x"] == 1


def test_openai_approved_in_undolog_rejected_in_the_run_state_runs(ofx: OpenAIFixture) -> None:
    agent, result = _oa_stopped(ofx)
    state, item = result.to_state(), result.interruptions[0]
    asyncio.run(ofx.approver.approve(asyncio.run(oa.approval_id(ofx.ul, ofx.sid, item)), "a", None))
    state.reject(item, rejection_message="no")
    assert ofx.run(agent, state).final_output == "paid"
    assert ofx.world.payouts == [500]


def test_openai_rejected_in_undolog_approved_in_the_run_state_does_not_run(
    ofx: OpenAIFixture,
) -> None:
    agent = ofx.agent(
        [[function_call("gift", {"cents": 5}, call_id="g1")], [assistant_message("ok")]]
    )
    result = ofx.run(agent, "go")
    state, item = result.to_state(), result.interruptions[0]
    approval = asyncio.run(oa.approval_id(ofx.ul, ofx.sid, item))
    asyncio.run(ofx.approver.reject(approval, "alice", "too much"))
    state.approve(item)
    out = ofx.run(agent, state)
    assert _tool_outputs(out) == {"g1": "alice rejected the gift call: too much. It did not run."}
    assert ofx.world.payouts == []


def test_openai_an_edited_approval_runs_with_the_persons_args(ofx: OpenAIFixture) -> None:
    agent, result = _oa_stopped(ofx)
    item = result.interruptions[0]
    approval = asyncio.run(oa.approval_id(ofx.ul, ofx.sid, item))
    asyncio.run(ofx.approver.approve(approval, "alice", "less", args={"cents": 300}))
    out = ofx.run(agent, result.to_state())
    assert ofx.world.payouts == [300]
    assert "cents: 500 -> 300" in _tool_outputs(out)["c2"]


def test_openai_an_edited_run_state_runs_nothing(ofx: OpenAIFixture) -> None:
    """A RunState edited to approve the call (UndoLog has not), or to name a call id no
    session asked about: nothing runs, the session still waits for its person."""
    agent, result = _oa_stopped(ofx)
    state = result.to_state()
    state.approve(result.interruptions[0])
    with pytest.raises(AwaitingApprovalError):
        ofx.run(agent, asyncio.run(RunState.from_json(agent, state.to_json())))
    text = json.dumps(result.to_state().to_json()).replace('"c2"', '"c9"')
    edited = asyncio.run(RunState.from_json(agent, json.loads(text)))
    edited.approve(edited.get_interruptions()[0])
    with pytest.raises(LookupError, match="stale or edited"):
        ofx.run(agent, edited)
    assert ofx.world.payouts == []
    assert session_state(ofx.admin_dsn, ofx.sid) == "awaiting_approval"


def test_openai_two_processes_resume_one_session_at_once(ofx: OpenAIFixture) -> None:
    """Both runs end; the call runs once (the second waits for it and replays it). The
    one that ended second raised InvalidStateTransition ("completed -> completed"), with
    a note that the session "was not completed", though it was and its run had ended."""
    _, result = _oa_stopped(ofx)
    saved = result.to_state().to_json()
    approval = asyncio.run(oa.approval_id(ofx.ul, ofx.sid, result.interruptions[0]))
    asyncio.run(ofx.approver.approve(approval, "alice", "ok"))

    async def both() -> list[Any]:
        first, second = ofx.agent(PAY[2:]), ofx.agent(PAY[2:])
        other = AsyncUndoLog(ofx.ul.dsn)
        return list(
            await asyncio.gather(
                oa.run(first, ofx.ul, await RunState.from_json(first, saved), session_id=ofx.sid),
                oa.run(second, other, await RunState.from_json(second, saved), session_id=ofx.sid),
            )
        )

    assert [r.final_output for r in asyncio.run(both())] == ["paid", "paid"]
    assert ofx.world.payouts == [500]
    assert session_state(ofx.admin_dsn, ofx.sid) == "completed"


# --- pydantic-ai -------------------------------------------------------------------------


def scripted(turns: list[Any]) -> FunctionModel:
    left = list(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = left.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return ModelResponse(parts=list(turn))

    return FunctionModel(respond)


def pcall(tool: str, call_id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_name=tool, args=args, tool_call_id=call_id)


class PydanticFixture(AsyncAgentFixture):
    def agent(self, turns: list[Any]) -> PydanticAgent[None, Any]:
        tools = pa.tools(*(self.fns[n] for n in ("search", "create_user", "payout", "gift")))
        return PydanticAgent(scripted(turns), output_type=[str, DeferredToolRequests], tools=tools)

    def run(self, turns: list[Any], **kwargs: Any) -> Any:
        return asyncio.run(pa.run(self.agent(turns), self.ul, session_id=self.sid, **kwargs))


@pytest.fixture
def pfx(dsn: str) -> PydanticFixture:
    return PydanticFixture(dsn)


PPAY: list[Any] = [[pcall("create_user", "c1", email="a@x")], [pcall("payout", "c2", cents=500)]]


def _pa_stopped(pfx: PydanticFixture) -> Any:
    result = pfx.run(PPAY, user_prompt="go")
    assert isinstance(result.output, DeferredToolRequests)
    return result


def test_pydantic_ai_killed_after_compensable_calls_is_made_again_and_replays(
    pfx: PydanticFixture, killable: None
) -> None:
    made = [[pcall("create_user", "c1", email="a@x")], [pcall("create_user", "c2", email="b@x")]]
    with pytest.raises(Killed):
        pfx.run([*made, Killed("kill -9")], user_prompt="go")
    assert pfx.run([*made, [TextPart("done")]], user_prompt="go").output == "done"
    assert pfx.world.runs == {"create_user:a@x": 1, "create_user:b@x": 1}
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"


def test_pydantic_ai_killed_after_the_approved_call_resumes_and_replays(
    pfx: PydanticFixture, killable: None
) -> None:
    result = _pa_stopped(pfx)
    answers = asyncio.run(pa.decide(result.output, pfx.approver, "alice", {"c2": True}))
    resume = {"message_history": result.all_messages(), "deferred_tool_results": answers}
    with pytest.raises(Killed):
        pfx.run([Killed("kill -9")], **resume)
    assert pfx.world.payouts == [500]
    assert pfx.run([[TextPart("paid")]], **resume).output == "paid"
    assert pfx.world.payouts == [500]
    assert pfx.world.runs["create_user:a@x"] == 1


def test_pydantic_ai_approved_in_undolog_denied_in_the_results_runs(pfx: PydanticFixture) -> None:
    """UndoLog's record decides: a person approved the payout in UndoLog, the results
    say no. The payout never ran, the model heard "no", and the session completed with
    the approval standing as approved."""
    result = _pa_stopped(pfx)
    asyncio.run(pfx.approver.approve(pa.approval_id(result.output, "c2"), "alice", "ok"))
    for no in (ToolDenied("no"), False):
        resumed = pfx.run(
            [[TextPart("paid")]],
            message_history=result.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"c2": no}),
        )
        assert resumed.output == "paid"
    assert pfx.world.payouts == [500]
    assert decisions(pfx.admin_dsn, pfx.sid) == [("approved", "alice")]
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"


def test_pydantic_ai_undecided_in_undolog_denied_in_the_results_asks_again(
    pfx: PydanticFixture,
) -> None:
    """Nobody decided in UndoLog, the results say no: the call is deferred again. The
    run went on to its end, and the session was left awaiting approval for ever."""
    result = _pa_stopped(pfx)
    again = pfx.run(
        [],
        message_history=result.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"c2": ToolDenied("no")}),
    )
    assert isinstance(again.output, DeferredToolRequests)
    assert pfx.world.payouts == []
    assert session_state(pfx.admin_dsn, pfx.sid) == "awaiting_approval"
    answers = asyncio.run(pa.decide(again.output, pfx.approver, "alice", {"c2": False}))
    with pytest.raises(ApprovalRejectedError):
        pfx.run([], message_history=again.all_messages(), deferred_tool_results=answers)
    assert pfx.world.payouts == []
    assert pfx.world.undone == ["a@x"]


def test_pydantic_ai_results_naming_a_call_never_made_are_refused(pfx: PydanticFixture) -> None:
    """pydantic-ai refused them from inside the run: the session, approved and about to
    go on, failed and its create_user was undone, though nothing of the resume ran."""
    result = _pa_stopped(pfx)
    answers = asyncio.run(pa.decide(result.output, pfx.approver, "alice", {"c2": True}))
    history = result.all_messages()
    stale = DeferredToolResults(approvals={**answers.approvals, "zz": True})
    with pytest.raises(LookupError, match=r"answers calls \(zz\)"):
        pfx.run([[TextPart("paid")]], message_history=history, deferred_tool_results=stale)
    with pytest.raises(LookupError, match=r"answers calls \(c2\)"):
        pfx.run([[TextPart("paid")]], message_history=history[:1], deferred_tool_results=answers)
    assert session_state(pfx.admin_dsn, pfx.sid) == "active"  # approved, not failed
    assert pfx.world.undone == []
    resumed = pfx.run([[TextPart("paid")]], message_history=history, deferred_tool_results=answers)
    assert resumed.output == "paid"
    assert pfx.world.payouts == [500]


def test_pydantic_ai_two_processes_resume_one_session_at_once(pfx: PydanticFixture) -> None:
    result = _pa_stopped(pfx)
    answers = asyncio.run(pa.decide(result.output, pfx.approver, "alice", {"c2": True}))
    resume = {"message_history": result.all_messages(), "deferred_tool_results": answers}

    async def both() -> list[Any]:
        other = AsyncUndoLog(pfx.ul.dsn)
        return list(
            await asyncio.gather(
                pa.run(pfx.agent([[TextPart("paid")]]), pfx.ul, session_id=pfx.sid, **resume),
                pa.run(pfx.agent([[TextPart("paid")]]), other, session_id=pfx.sid, **resume),
            )
        )

    assert [r.output for r in asyncio.run(both())] == ["paid", "paid"]
    assert pfx.world.payouts == [500]
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"


# --- LangGraph ---------------------------------------------------------------------------


class GraphFixture:
    def __init__(self, dsn: str) -> None:
        self.admin_dsn = dsn
        agent_dsn, approver_dsn = logins(dsn)
        self.world = World()
        self.fns = make_tools(self.world)
        self.ul = UndoLog(agent_dsn)
        self.approver = UndoLog(approver_dsn)
        register_compensation(self.ul, self.world)
        self.sid = uuid.uuid4()
        self.config: dict[str, Any] = {"configurable": {"thread_id": str(self.sid)}}
        self.tools = lc.tools(
            *(self.fns[n] for n in ("search", "create_user_sync", "payout_sync", "gift_sync"))
        )
        self.saver = InMemorySaver()  # the thread's checkpoints outlive a "killed" run

    def chat_graph(self, turns: list[Any]) -> Any:
        model = ScriptedChat(turns=turns)
        builder = StateGraph(Chat)
        builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        builder.add_node("tools", ToolNode(self.tools))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=self.saver)

    def node_graph(self, kill: bool, fail: bool = False) -> Any:
        """A node that creates two users, then dies (``kill``) or raises (``fail``)."""
        create_user = self.tools[1]

        def node(state: Steps) -> Steps:
            create_user.invoke({"email": "a@x"})
            create_user.invoke({"email": "b@x"})
            if kill:
                raise Killed("kill -9")
            if fail:
                raise RuntimeError("the model provider went away")
            return {"done": True}

        builder = StateGraph(Steps)
        builder.add_node("node", node)
        builder.add_edge(START, "node")
        return builder.compile(checkpointer=self.saver)

    def run(self, graph: Any, input: Any, session_id: uuid.UUID | None = None) -> Any:
        return lc.run(graph, self.ul, input, self.config, session_id=session_id or self.sid)


@pytest.fixture
def gfx(dsn: str) -> GraphFixture:
    return GraphFixture(dsn)


def test_langgraph_killed_in_a_node_resumes_from_the_checkpoint_and_replays(
    gfx: GraphFixture, killable: None
) -> None:
    with pytest.raises(Killed):
        gfx.run(gfx.node_graph(kill=True), {"done": False})
    assert session_state(gfx.admin_dsn, gfx.sid) == "active"
    assert gfx.run(gfx.node_graph(kill=False), None) == {"done": True}
    assert gfx.world.runs == {"create_user:a@x": 1, "create_user:b@x": 1}
    assert session_state(gfx.admin_dsn, gfx.sid) == "completed"


def test_langgraph_a_thread_killed_midway_is_refused_under_another_session(
    gfx: GraphFixture, killable: None
) -> None:
    """The thread stopped in the middle of its node (the process died), its session still
    active: resumed under another session id, LangGraph ran the node again and both users
    were created a second time (no interrupt in the thread, so nothing refused it). Now
    it is refused before anything runs; its own session id resumes it, and replays."""
    with pytest.raises(Killed):
        gfx.run(gfx.node_graph(kill=True), {"done": False})
    other = uuid.uuid4()
    said = f"stopped in the middle of a run of UndoLog session {gfx.sid} \\(now active\\)"
    with pytest.raises(ValueError, match=said):
        gfx.run(gfx.node_graph(kill=False), None, other)
    with pytest.raises(ValueError, match=said):
        list(lc.stream(gfx.node_graph(kill=False), gfx.ul, None, gfx.config, session_id=other))
    assert gfx.world.runs == {"create_user:a@x": 1, "create_user:b@x": 1}
    assert sessions_named(gfx.admin_dsn, other) == 0
    assert gfx.run(gfx.node_graph(kill=False), None) == {"done": True}
    assert gfx.world.runs == {"create_user:a@x": 1, "create_user:b@x": 1}
    assert session_state(gfx.admin_dsn, gfx.sid) == "completed"


def test_langgraph_a_thread_whose_run_failed_is_retried_under_a_new_session(
    gfx: GraphFixture,
) -> None:
    """A run that raised failed its session and undid its calls: the thread may be run
    again under a new session, which makes them again."""
    with pytest.raises(RuntimeError):
        gfx.run(gfx.node_graph(kill=False, fail=True), {"done": False})
    assert session_state(gfx.admin_dsn, gfx.sid) == "compensated"
    assert gfx.world.undone == ["b@x", "a@x"]
    new = uuid.uuid4()
    assert gfx.run(gfx.node_graph(kill=False), None, new) == {"done": True}
    assert gfx.world.runs == {"create_user:a@x": 2, "create_user:b@x": 2}
    assert session_state(gfx.admin_dsn, new) == "completed"


LPAY = [
    calls(("create_user", "c1", {"email": "a@x"})),
    calls(("payout", "c2", {"cents": 500})),
    AIMessage("paid"),
]


def _lg_stopped(gfx: GraphFixture) -> tuple[Any, Any]:
    graph = gfx.chat_graph(list(LPAY))
    out = gfx.run(graph, {"messages": [HumanMessage("go")]})
    return graph, out[lc.INTERRUPT][0].value


def test_langgraph_approved_in_undolog_ignored_in_the_resume_runs(gfx: GraphFixture) -> None:
    graph, request = _lg_stopped(gfx)
    gfx.approver.approve(lc.approval_id(request), "alice", "ok")
    out = gfx.run(graph, Command(resume=[{"type": "ignore", "args": None}]))
    assert out["messages"][-1].content == "paid"
    assert gfx.world.payouts == [500]


def test_langgraph_an_edit_runs_with_undologs_args_not_the_resume_values(
    gfx: GraphFixture,
) -> None:
    graph, request = _lg_stopped(gfx)
    lc.decide(request, gfx.approver, "alice", approved=True, args={"cents": 300})
    tampered = [{"type": "edit", "args": {"action": "payout", "args": {"cents": 9999}}}]
    out = gfx.run(graph, Command(resume=tampered))
    assert gfx.world.payouts == [300]
    assert "cents: 500 -> 300" in out["messages"][-2].content


def test_langgraph_a_checkpoint_with_another_call_id_asks_again(gfx: GraphFixture) -> None:
    """The checkpoint's tool call id was changed: the call is another call, asked about
    on its own; the approved one is not run under the new id."""
    graph, request = _lg_stopped(gfx)
    last = graph.get_state(gfx.config).values["messages"][-1]
    edited = AIMessage(
        content="", id=last.id, tool_calls=[{"name": "payout", "args": {"cents": 500}, "id": "c9"}]
    )
    graph.update_state(gfx.config, {"messages": [edited]}, as_node="agent")
    gfx.approver.approve(lc.approval_id(request), "alice", "ok")
    out = gfx.run(graph, Command(resume=[{"type": "accept", "args": None}]))
    assert [r["call_key"] for r in out[lc.INTERRUPT][0].value] == ["c9"]
    assert gfx.world.payouts == []
    assert decisions(gfx.admin_dsn, gfx.sid) == [("approved", "alice"), ("pending", None)]
