"""A pydantic-ai run whose payout waits for a human, approved, then resumed.

Offline: a FunctionModel scripts what the LLM would say. UNDOLOG_DSN is the agent's
login, UNDOLOG_APPROVER_DSN a person's (the engine refuses a login approving its own call).
"""

import asyncio
import os
import uuid
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from undolog import AsyncUndoLog, CompensationCall, CompensationDescriptor, ToolTier, undolog_tool
from undolog.integrations import pydantic_ai as ul_pydantic

users: dict[str, str] = {}  # stands in for a real user directory


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
async def create_user(email: str, name: str) -> dict[str, Any]:
    """Create a user account."""
    users[email] = name
    return {"email": email}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def payout(email: str, cents: int) -> dict[str, Any]:
    """Send money to a user's bank account."""
    return {"paid": cents, "to": email}


ul = AsyncUndoLog()  # the agent's login, from UNDOLOG_DSN
approver = AsyncUndoLog(os.environ["UNDOLOG_APPROVER_DSN"])  # a person's login


@ul.compensation("delete_user")
async def delete_user(call: CompensationCall) -> None:
    users.pop(call.call_args["email"], None)


script: list[ToolCallPart | TextPart] = [
    ToolCallPart("create_user", {"email": "ada@example.com", "name": "Ada"}, "c1"),
    ToolCallPart("payout", {"email": "ada@example.com", "cents": 5000}, "c2"),
    TextPart("Ada is onboarded and paid."),
]


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[script.pop(0)])


agent = Agent(  # your LLM here, e.g. Agent("openai:gpt-5", ...)
    FunctionModel(llm),
    output_type=[str, DeferredToolRequests],
    tools=ul_pydantic.tools(create_user, payout),
)


async def main() -> None:
    session_id = uuid.uuid4()  # keep it: resuming uses the same session
    result = await ul_pydantic.run(
        agent, ul, session_id=session_id, user_prompt="Onboard Ada and pay her"
    )
    assert isinstance(result.output, DeferredToolRequests)
    print("waiting for a human:", result.output.approvals[0].tool_name)

    # the person's decision, recorded in UndoLog under their login (the agent's tools
    # check an edit, ToolApproved(override_args=...), as pydantic-ai checks the model's)
    answers = await ul_pydantic.decide(result.output, approver, "alice", {"c2": True}, agent=agent)
    result = await ul_pydantic.run(
        agent,
        ul,
        session_id=session_id,
        message_history=result.all_messages(),
        deferred_tool_results=answers,
    )
    print(result.output)


asyncio.run(main())
