"""An OpenAI Agents run whose payout waits for a human, approved, then resumed.

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


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def payout(email: str, cents: int) -> dict[str, Any]:
    """Send money to a user's bank account."""
    return {"paid": cents, "to": email}


ul = AsyncUndoLog()  # the agent's login, from UNDOLOG_DSN
approver = AsyncUndoLog(os.environ["UNDOLOG_APPROVER_DSN"])  # a person's login


@ul.compensation("delete_user")
async def delete_user(call: CompensationCall) -> None:
    users.pop(call.call_args["email"], None)


model = ScriptedModel(  # your LLM here, e.g. model="gpt-5"
    [
        [function_call("create_user", {"email": "ada@example.com", "name": "Ada"}, call_id="c1")],
        [function_call("payout", {"email": "ada@example.com", "cents": 5000}, call_id="c2")],
        [assistant_message("Ada is onboarded and paid.")],
    ]
)
agent = Agent(name="onboarding", model=model, tools=list(ul_agents.tools(create_user, payout)))


async def main() -> None:
    set_tracing_disabled(True)
    session_id = uuid.uuid4()  # keep it: resuming uses the same session
    result = await ul_agents.run(agent, ul, "Onboard Ada and pay her", session_id=session_id)
    item = result.interruptions[0]
    print("waiting for a human:", item.name)

    # the person's decision, recorded in UndoLog under their login, then in the RunState
    state = result.to_state()
    await ul_agents.decide(state, item, ul, session_id, approver, "alice", approved=True)
    result = await ul_agents.run(agent, ul, state, session_id=session_id)
    print(result.final_output)


asyncio.run(main())
