"""A LangGraph graph, streamed as a UI drives it, whose payout waits for a human: the
person answers as LangGraph's Agent Inbox does, and the graph resumes.

Offline: a small chat model scripts what the LLM would say. UNDOLOG_DSN is the agent's
login, UNDOLOG_APPROVER_DSN a person's (the engine refuses a login approving its own call).
"""

import os
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from undolog import CompensationCall, CompensationDescriptor, ToolTier, UndoLog, undolog_tool
from undolog.integrations import langchain as ul_langchain

users: dict[str, str] = {}  # stands in for a real user directory


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
def create_user(email: str, name: str) -> dict[str, Any]:
    """Create a user account."""
    users[email] = name
    return {"email": email}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def payout(email: str, cents: int) -> dict[str, Any]:
    """Send money to a user's bank account."""
    return {"paid": cents, "to": email}


ul = UndoLog()  # the agent's login, from UNDOLOG_DSN
approver = UndoLog(os.environ["UNDOLOG_APPROVER_DSN"])  # a person's login


@ul.compensation("delete_user")
def delete_user(call: CompensationCall) -> None:
    users.pop(call.call_args["email"], None)


class ScriptedLLM(BaseChatModel):  # your LLM here, e.g. ChatOpenAI(...).bind_tools(tools)
    turns: list[AIMessage]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.turns.pop(0))])


def asks(tool: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": tool, "args": args, "id": call_id}])


llm = ScriptedLLM(
    turns=[
        asks("create_user", "c1", email="ada@example.com", name="Ada"),
        asks("payout", "c2", email="ada@example.com", cents=5000),
        AIMessage("Ada is onboarded and paid."),
    ]
)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


builder = StateGraph(State)
builder.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
tools = ul_langchain.tools(create_user, payout)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile(checkpointer=InMemorySaver())

session_id = uuid.uuid4()  # keep it: resuming uses the same session
config: Any = {"configurable": {"thread_id": str(session_id)}}
start = {"messages": [HumanMessage("Onboard Ada and pay her")]}
for chunk in ul_langchain.stream(graph, ul, start, config, session_id=session_id):
    for pending in chunk.get(ul_langchain.INTERRUPT, ()):
        [request] = pending.value  # an Agent Inbox HumanInterrupt
        print("waiting for a human:", request["action_request"]["action"])

# the person's answer, as the Agent Inbox sends it, recorded under their login (the
# graph's tools check an edit's values, as the tool would: "5000" for an int is 5000)
answer = [{"type": "accept", "args": None}]
command = ul_langchain.respond(request, answer, approver, "alice", tools=tools)
for chunk in ul_langchain.stream(
    graph, ul, command, config, session_id=session_id, stream_mode="values"
):
    last = chunk["messages"][-1]
print(last.content)
