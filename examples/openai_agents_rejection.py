"""An OpenAI Agents run whose gift a person refuses: the tool is declared
on_reject="continue", so the person's "no" and their reason reach the model as the
call's answer, and the run and its session go on.

Offline: a scripted model stands in for the LLM. UNDOLOG_DSN is the agent's login,
UNDOLOG_APPROVER_DSN a person's (the engine refuses a login approving its own call).
"""

import asyncio
import os
import uuid
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from undolog import AsyncUndoLog, CompensationCall, CompensationDescriptor, ToolTier, undolog_tool
from undolog.integrations import openai_agents as ul_agents

users: dict[str, str] = {}  # stands in for a real user directory


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
async def create_user(email: str, name: str) -> dict[str, Any]:
    """Create a user account."""
    users[email] = name
    return {"email": email}


@undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject="continue")
async def send_gift(email: str, cents: int) -> dict[str, Any]:
    """Send a welcome gift voucher."""
    return {"gift": cents, "to": email}


ul = AsyncUndoLog()  # the agent's login, from UNDOLOG_DSN
approver = AsyncUndoLog(os.environ["UNDOLOG_APPROVER_DSN"])  # a person's login


@ul.compensation("delete_user")
async def delete_user(call: CompensationCall) -> None:
    users.pop(call.call_args["email"], None)


model = ScriptedModel(  # your LLM here, e.g. model="gpt-5"
    [
        [function_call("create_user", {"email": "ada@example.com", "name": "Ada"}, call_id="c1")],
        [function_call("send_gift", {"email": "ada@example.com", "cents": 5000}, call_id="g1")],
        [assistant_message("Ada is onboarded, without a gift.")],
    ]
)
agent = Agent(name="onboarding", model=model, tools=list(ul_agents.tools(create_user, send_gift)))


async def main() -> None:
    set_tracing_disabled(True)
    session_id = uuid.uuid4()
    result = await ul_agents.run(agent, ul, "Onboard Ada, with a gift", session_id=session_id)
    item = result.interruptions[0]
    print("waiting for a human:", item.name)

    state = result.to_state()
    await ul_agents.decide(
        state, item, ul, session_id, approver, "alice", approved=False, reason="over budget"
    )
    result = await ul_agents.run(agent, ul, state, session_id=session_id)
    told = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    print("the model was told:", told[-1])
    print(result.final_output)


asyncio.run(main())
