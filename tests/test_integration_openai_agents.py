"""The OpenAI Agents SDK adapter against a real PostgreSQL, driven by the SDK's own
``agents.testing.ScriptedModel`` (no LLM, no network: tracing off, a dummy API key)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunResult, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from integration_support import (
    AsyncAgentFixture,
    decisions,
    effects,
    session_state,
)
from undolog import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    PermissionDenied,
)
from undolog.integrations import openai_agents as adapter


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)
    yield


class Fixture(AsyncAgentFixture):
    def agent(self, steps: list[Any]) -> Agent[Any]:
        tools = adapter.tools(self.fns["search"], self.fns["create_user"], self.fns["payout"])
        return Agent(name="ops", model=ScriptedModel(steps), tools=list(tools))

    async def run(self, agent: Agent[Any], input: Any) -> RunResult:
        return await adapter.run(agent, self.ul, input, session_id=self.sid)


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def test_tools_keep_name_docstring_and_schema(fx: Fixture) -> None:
    made = {t.name: t for t in adapter.tools(fx.fns["search"], fx.fns["create_user"])}
    assert made["search"].description == "Search the web for a query."
    assert made["create_user"].description == "Create a user account."
    schema = made["create_user"].params_json_schema
    assert schema["properties"]["email"]["type"] == "string"
    assert set(schema["properties"]) == {"email", "name"}
    assert made["search"].params_json_schema["properties"]["query"]["type"] == "string"
    assert made["create_user"].needs_approval is False
    assert callable(adapter.tool(fx.fns["payout"]).needs_approval)
    with pytest.raises(TypeError, match="async def"):
        adapter.tool(fx.fns["create_user_sync"])


def test_run_completes(fx: Fixture) -> None:
    agent = fx.agent(
        [
            [
                function_call("search", {"query": "docs"}, call_id="c1"),
                function_call("create_user", {"email": "ada@x", "name": "Ada"}, call_id="c2"),
            ],
            [assistant_message("done")],
        ]
    )
    result = asyncio.run(fx.run(agent, "onboard ada"))
    assert result.final_output == "done"
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert effects(fx.admin_dsn, fx.sid) == [("create_user", "committed", 0)]
    assert fx.world.runs == {"search": 1, "create_user:ada@x": 1}


def test_run_that_raises_is_rolled_back_lifo(fx: Fixture) -> None:
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("create_user", {"email": "b@x", "name": "B"}, call_id="c2")],
            RuntimeError("the model provider went away"),
        ]
    )
    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(fx.run(agent, "go"))
    assert fx.world.undone == ["b@x", "a@x"]
    assert fx.world.users == {}
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


PAY_SCRIPT: list[Any] = [
    [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
    [function_call("payout", {"cents": 500}, call_id="c2")],
    [assistant_message("paid")],
]


def _pay(fx: Fixture) -> tuple[Agent[Any], RunResult]:
    agent = fx.agent(list(PAY_SCRIPT))
    result = asyncio.run(fx.run(agent, "pay"))
    assert [item.call_id for item in result.interruptions] == ["c2"]
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs["payout"] == 0
    return agent, result


def test_irreversible_approved_then_resumed_runs_once(fx: Fixture) -> None:
    agent, result = _pay(fx)
    state = result.to_state()
    item = result.interruptions[0]
    with pytest.raises(PermissionDenied):  # the agent's login cannot approve its own call
        asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.ul, "me", approved=True))
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    resumed = asyncio.run(fx.run(agent, state))
    assert resumed.final_output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_approval_recorded_elsewhere_is_honoured(fx: Fixture) -> None:
    agent, result = _pay(fx)
    state = result.to_state()
    item = result.interruptions[0]
    state.approve(item)  # the RunState says yes, UndoLog does not: nothing runs
    with pytest.raises(AwaitingApprovalError):
        asyncio.run(fx.run(agent, state))
    assert fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    approval = asyncio.run(adapter.approval_id(fx.ul, fx.sid, item))
    asyncio.run(fx.approver.approve(approval, "bob", "checked"))  # CLI, dashboard, SQL
    resumed = asyncio.run(fx.run(agent, result.to_state()))
    assert resumed.final_output == "paid"
    assert fx.world.payouts == [500]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "bob")]


def test_irreversible_rejected_undoes_the_run(fx: Fixture) -> None:
    agent, result = _pay(fx)
    state = result.to_state()
    item = result.interruptions[0]
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.ul, "me", approved=False))
    with pytest.raises(ApprovalRejectedError):
        asyncio.run(fx.run(agent, state))
    assert fx.world.payouts == []
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "me")]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_rerun_from_scratch_replays_from_the_journal(fx: Fixture) -> None:
    """The RunState was lost after the approval: the run is made again from its input
    under the same session id; every call already made comes back from the journal."""
    _, result = _pay(fx)
    state = result.to_state()
    asyncio.run(
        adapter.decide(
            state, result.interruptions[0], fx.ul, fx.sid, fx.approver, "alice", approved=True
        )
    )
    again = asyncio.run(fx.run(fx.agent(list(PAY_SCRIPT)), "pay"))
    assert again.final_output == "paid"
    once_more = asyncio.run(fx.run(fx.agent(list(PAY_SCRIPT)), "pay"))
    assert once_more.final_output == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 2),
        ("payout", "committed", 1),
    ]
    # the model saw the journaled result, not a second execution's
    outputs = [
        i.output for i in once_more.new_items if getattr(i, "type", "") == "tool_call_output_item"
    ]
    assert json.loads(str(outputs[0])) == {"email": "a@x"}


def test_irreversible_beside_another_call_of_the_same_turn(fx: Fixture) -> None:
    """The SDK runs a turn's calls side by side: the approval is requested once the run
    has stopped, so the compensable call beside it is not refused by a waiting session."""
    agent = fx.agent(
        [
            [
                function_call("payout", {"cents": 5}, call_id="p1"),
                function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1"),
            ],
            [assistant_message("paid")],
        ]
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert [item.call_id for item in result.interruptions] == ["p1"]
    assert fx.world.runs == {"create_user:a@x": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    state = result.to_state()
    item = result.interruptions[0]
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_two_irreversible_calls_of_one_turn_are_asked_one_at_a_time(fx: Fixture) -> None:
    """A waiting session refuses new calls, so one request is written at a time: the
    second payout is asked about when the resumed run stops at it again."""
    agent = fx.agent(
        [
            [
                function_call("payout", {"cents": 5}, call_id="p1"),
                function_call("payout", {"cents": 7}, call_id="p2"),
            ],
            [assistant_message("paid")],
        ]
    )
    result = asyncio.run(fx.run(agent, "go"))
    first, second = result.interruptions
    state = result.to_state()
    with pytest.raises(LookupError, match="no UndoLog approval request"):
        asyncio.run(adapter.approval_id(fx.ul, fx.sid, second))
    asyncio.run(adapter.decide(state, first, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    result = asyncio.run(fx.run(agent, state))
    assert [item.call_id for item in result.interruptions] == ["p2"]
    assert fx.world.payouts == [5]
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    state = result.to_state()
    [second] = result.interruptions
    asyncio.run(adapter.decide(state, second, fx.ul, fx.sid, fx.approver, "bob", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [5, 7]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "bob")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
