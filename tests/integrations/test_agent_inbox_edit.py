"""The Agent Inbox's "edit" answer through the LangGraph adapter: a person changes an
IRREVERSIBLE call's arguments and approves it; the call runs once with theirs, and the
model's ToolMessage says so. A scripted chat model, real LangGraph, real PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from integration_support import World, decisions, logins, make_tools, session_state
from undolog import AsyncUndoLog, EditChangesArguments, PermissionDenied, UndoLog
from undolog.integrations import langchain as adapter


class ScriptedChat(BaseChatModel):
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
        return ChatResult(generations=[ChatGeneration(message=self.turns.pop(0))])


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _payout_call(cents: int) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": "payout", "args": {"cents": cents}, "id": "c1"}]
    )


class Inbox:
    def __init__(self, dsn: str) -> None:
        self.admin_dsn = dsn
        agent_dsn, approver_dsn = logins(dsn)
        self.world = World()
        fns = make_tools(self.world)
        self.ul, self.aul = UndoLog(agent_dsn), AsyncUndoLog(agent_dsn)
        self.approver = UndoLog(approver_dsn)
        self.sid = uuid.uuid4()
        self.config: dict[str, Any] = {"configurable": {"thread_id": str(self.sid)}}
        model = ScriptedChat(turns=[_payout_call(50_000), AIMessage("done")])
        builder = StateGraph(Chat)
        builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        self.tools = adapter.tools(fns["payout_sync"])  # the graph's: they check an edit
        builder.add_node("tools", ToolNode(self.tools))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        self.graph: Any = builder.compile(checkpointer=InMemorySaver())

    def run(self, input: Any) -> Any:
        return adapter.run(self.graph, self.ul, input, self.config, session_id=self.sid)

    def asked(self) -> dict[str, Any]:
        """The HumanInterrupt as the Inbox reads it, from the thread's state."""
        out = self.run({"messages": [HumanMessage("pay")]})
        assert adapter.INTERRUPT in out
        [pending] = self.graph.get_state(self.config).interrupts
        [request] = pending.value
        assert request["config"]["allow_edit"] is True
        return dict(request)

    def approved_args(self) -> Any:
        with psycopg.connect(self.admin_dsn) as conn:
            row = conn.execute(
                "SELECT approved_args, reason FROM undolog.undolog_approval_requests"
                " WHERE session_id = %s",
                (self.sid,),
            ).fetchone()
        return row


@pytest.fixture
def inbox(dsn: str) -> Inbox:
    return Inbox(dsn)


def _edit(action: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "edit", "args": {"action": action, "args": args}}]


def test_an_edit_approves_the_call_with_the_persons_args_and_the_model_is_told(
    inbox: Inbox,
) -> None:
    request = inbox.asked()
    command = adapter.respond(request, _edit("payout", {"cents": 5_000}), inbox.approver, "alice")
    assert command.resume == _edit("payout", {"cents": 5_000})
    assert inbox.approved_args() == ({"cents": 5_000}, adapter.EDIT_REASON)
    out = inbox.run(command)
    assert inbox.world.payouts == [5_000]  # once, with the approved args
    assert decisions(inbox.admin_dsn, inbox.sid) == [("approved", "alice")]
    assert session_state(inbox.admin_dsn, inbox.sid) == "completed"
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert str(told.content).startswith("Note: alice changed the arguments of this payout call")
    assert "cents: 50000 -> 5000" in str(told.content)
    assert str(told.content).endswith('Result: {"paid": 5000}')
    assert told.artifact["undolog_edit"]["requested_args"] == {"cents": 50_000}
    assert told.artifact["undolog_edit"]["approved_args"] == {"cents": 5_000}
    assert told.artifact["result"] == {"paid": 5_000}
    # The same run again: every call replays, the payout body does not run again.
    inbox.run(command)
    assert inbox.world.payouts == [5_000]


def test_an_edit_that_names_another_tool_or_other_args_records_nothing(inbox: Inbox) -> None:
    request = inbox.asked()
    with pytest.raises(ValueError, match="never its tool"):
        adapter.respond(request, _edit("refund", {"cents": 1}), inbox.approver, "alice")
    with pytest.raises(ValueError, match="ActionRequest"):
        adapter.respond(request, [{"type": "edit", "args": {"cents": 1}}], inbox.approver, "a")
    with pytest.raises(EditChangesArguments):
        adapter.respond(request, _edit("payout", {"cents": 1, "to": "me"}), inbox.approver, "alice")
    with pytest.raises(PermissionDenied):  # the agent's login cannot approve its own call
        adapter.respond(request, _edit("payout", {"cents": 1}), inbox.ul, "me")
    assert decisions(inbox.admin_dsn, inbox.sid) == [("pending", None)]
    assert inbox.world.payouts == []


def test_an_edit_recorded_by_a_callable_gets_the_args(inbox: Inbox) -> None:
    request = inbox.asked()
    seen: list[Any] = []

    def recorder(
        approval_id: uuid.UUID, approved: bool, by: str, reason: str | None, **kw: Any
    ) -> None:
        seen.append((approved, by, reason, kw))
        inbox.approver.approve(approval_id, by, reason, args=kw.get("args"))

    answer = _edit("payout", {"cents": 7})
    command = adapter.respond(request, answer, recorder, "carol", ul=inbox.ul)
    assert seen == [(True, "carol", adapter.EDIT_REASON, {"args": {"cents": 7}})]
    inbox.run(command)
    assert inbox.world.payouts == [7]


def test_the_openai_agents_and_pydantic_ai_reply_is_the_note_then_the_result(
    inbox: Inbox,
) -> None:
    """Both adapters hand the model ``_core.edited_reply``: the note first, then the
    result as JSON; a call approved as asked answers its result untouched."""
    from undolog import AwaitingApprovalError
    from undolog.integrations import _core

    fns = make_tools(World())
    tool = _core.describe(fns["payout_sync"])
    sid = uuid.uuid4()
    with pytest.raises(AwaitingApprovalError) as raised, inbox.ul.session(sid):
        fns["payout_sync"](cents=900)
    approval = uuid.UUID(str(raised.value.approval_id))
    inbox.approver.approve(approval, "dora", "too much", args={"cents": 90})
    with inbox.ul.session(sid):
        result = fns["payout_sync"](cents=900)
        reply = _core.edited_reply(tool, result)
    assert result == {"paid": 90}
    assert reply.startswith("Note: dora changed the arguments of this payout call")
    assert "(reason: too much)" in reply and "cents: 900 -> 90" in reply
    assert reply.endswith('Result: {"paid": 90}')
    other = uuid.uuid4()
    with pytest.raises(AwaitingApprovalError) as raised, inbox.ul.session(other):
        fns["payout_sync"](cents=5)
    inbox.approver.approve(uuid.UUID(str(raised.value.approval_id)), "dora")
    with inbox.ul.session(other):
        plain = fns["payout_sync"](cents=5)
        assert _core.edited_reply(tool, plain) is plain


def test_an_edit_is_checked_against_the_tools_arguments(inbox: Inbox) -> None:
    """A person's edit goes through the tool's argument schema, as the model's arguments
    do: one that does not fit (a typo in a number) records nothing and never reaches the
    body; one pydantic reads as the type ("5000" for an int) is recorded as that type."""
    request = inbox.asked()
    with pytest.raises(ValueError, match="cents"):
        adapter.respond(
            request,
            _edit("payout", {"cents": "5,000"}),
            inbox.approver,
            "alice",
            tools=inbox.tools,
        )
    assert decisions(inbox.admin_dsn, inbox.sid) == [("pending", None)]
    command = adapter.respond(
        request, _edit("payout", {"cents": "5000"}), inbox.approver, "al", tools=inbox.tools
    )
    assert inbox.approved_args() == ({"cents": 5_000}, adapter.EDIT_REASON)
    inbox.run(command)
    assert inbox.world.payouts == [5_000]
