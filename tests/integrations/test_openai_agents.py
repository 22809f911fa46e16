"""The OpenAI Agents SDK adapter against a real PostgreSQL, driven by the SDK's own
``agents.testing.ScriptedModel`` (no LLM, no network: tracing off, a dummy API key)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from agents import (
    Agent,
    RunContextWrapper,
    RunResult,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    UserError,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from integration_support import (
    AsyncAgentFixture,
    decisions,
    effects,
    pending,
    session_state,
)
from undolog import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    CompensationDescriptor,
    PermissionDenied,
    ToolTier,
    UndoLogError,
    undolog_tool,
)
from undolog.integrations import openai_agents as adapter


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)
    yield


class Fixture(AsyncAgentFixture):
    def agent(self, steps: list[Any], tools: list[Any] | None = None) -> Agent[Any]:
        if tools is None:
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
    with pytest.raises(TypeError, match="needs_approval is set by the adapter"):
        adapter.tool(fx.fns["payout"], needs_approval=False)


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


def _stopped_at(
    fx: Fixture, script: list[Any], call_id: str, tools: list[Any] | None = None
) -> tuple[Agent[Any], RunResult]:
    """The agent of `script` run until it stops for a person at the call `call_id`."""
    agent = fx.agent(list(script), tools)
    result = asyncio.run(fx.run(agent, "go"))
    assert [item.call_id for item in result.interruptions] == [call_id]
    return agent, result


def _pay(fx: Fixture) -> tuple[Agent[Any], RunResult]:
    agent, result = _stopped_at(fx, PAY_SCRIPT, "c2")
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


def test_a_login_that_is_only_an_agent_is_asked_approved_and_resumed(dsn: str) -> None:
    """The approval path reads only what an agent login may read (the calls' approvals
    through undolog.call_approvals, not the engine's tables an agent cannot see)."""
    fx = Fixture(dsn, agent_only=True)
    agent, result = _pay(fx)
    state = result.to_state()
    asyncio.run(
        adapter.decide(
            state, result.interruptions[0], fx.ul, fx.sid, fx.approver, "alice", approved=True
        )
    )
    resumed = asyncio.run(fx.run(agent, state))
    assert resumed.final_output == "paid"
    assert fx.world.payouts == [500]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]


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


# One model turn that asks for two payouts: two irreversible calls to decide at once.
TWO_PAYOUTS_SCRIPT: list[Any] = [
    [
        function_call("payout", {"cents": 5}, call_id="p1"),
        function_call("payout", {"cents": 7}, call_id="p2"),
    ],
    [assistant_message("paid")],
]


def test_two_irreversible_calls_of_one_turn_are_asked_at_once(fx: Fixture) -> None:
    """Both payouts of one model turn are interruptions of the one RunState, and both
    have their UndoLog request before any decision; approved, each runs once."""
    agent = fx.agent(list(TWO_PAYOUTS_SCRIPT))
    result = asyncio.run(fx.run(agent, "go"))
    first, second = result.interruptions
    assert [first.call_id, second.call_id] == ["p1", "p2"]
    ids = [asyncio.run(adapter.approval_id(fx.ul, fx.sid, item)) for item in (first, second)]
    assert pending(fx.admin_dsn, fx.sid) == list(zip(ids, [5, 7], strict=True))
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.payouts == []
    state = result.to_state()
    asyncio.run(adapter.decide(state, first, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"  # p2 still asked
    asyncio.run(adapter.decide(state, second, fx.ul, fx.sid, fx.approver, "bob", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "bob")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_one_rejection_of_two_asked_at_once_ends_the_session(fx: Fixture) -> None:
    """A rejection of one of the two payouts (the default rule) ends the session: the
    other request is closed with it, neither runs, and the run raises."""
    agent = fx.agent(
        [
            [
                function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1"),
                function_call("payout", {"cents": 5}, call_id="p1"),
                function_call("payout", {"cents": 7}, call_id="p2"),
            ],
            [assistant_message("paid")],
        ]
    )
    result = asyncio.run(fx.run(agent, "go"))
    first, _ = result.interruptions
    assert len(pending(fx.admin_dsn, fx.sid)) == 2
    state = result.to_state()
    asyncio.run(adapter.decide(state, first, fx.ul, fx.sid, fx.approver, "alice", approved=False))
    assert pending(fx.admin_dsn, fx.sid) == []
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "alice"), ("rejected", "alice")]
    with pytest.raises(ApprovalRejectedError):
        asyncio.run(fx.run(agent, state))
    assert fx.world.payouts == []
    assert fx.world.runs == {"create_user:a@x": 1}
    assert fx.world.undone == ["a@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def outputs(result: Any) -> dict[str, str]:
    """What the model was sent back for each call: call_id -> the tool output's text."""
    sent: dict[str, str] = {}
    for item in result.new_items:
        if getattr(item, "type", "") == "tool_call_output_item":
            raw = item.raw_item
            sent[str(raw["call_id"])] = str(raw["output"])
    return sent


SDK_ERROR = "An error occurred while running the tool. Please try again."


def test_bad_json_reaches_the_model_and_the_run_goes_on(fx: Fixture) -> None:
    """The SDK's own function_tool handling: a bad JSON or a bad argument from the model
    becomes an error message for the model; nothing is undone, the good calls stand."""
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("create_user", '{"email": "b@x", "name": ', call_id="c2")],
            [function_call("create_user", {"email": ["not", "a", "string"]}, call_id="c3")],
            [function_call("create_user", {"email": "b@x", "name": "B"}, call_id="c4")],
            [assistant_message("done")],
        ]
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert result.final_output == "done"
    sent = outputs(result)
    assert sent["c2"] == SDK_ERROR and sent["c3"] == SDK_ERROR
    assert json.loads(sent["c4"]) == {"email": "b@x"}
    assert fx.world.users == {"a@x": "A", "b@x": "B"}
    assert fx.world.undone == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("create_user", "committed", 0),
    ]


@pytest.mark.parametrize("bad", ["not json at all", '{"cents": "lots"}', '["a", "list"]'])
def test_malformed_irreversible_call_asks_nobody_and_the_model_hears_why(
    fx: Fixture, bad: str
) -> None:
    """The SDK stops for approval before it validates an approval-needing call's
    arguments: no person is asked about a call that cannot run; the model gets the SDK's
    error, and its corrected call is asked about as usual."""
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("payout", bad, call_id="p1")],
            [function_call("payout", {"cents": 500}, call_id="p2")],
            [assistant_message("paid")],
        ]
    )
    result = asyncio.run(fx.run(agent, "pay"))
    assert [item.call_id for item in result.interruptions] == ["p2"]
    assert outputs(result)["p1"] == SDK_ERROR
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    state = result.to_state()
    item = result.interruptions[0]
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.undone == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_failure_error_function_is_the_sdks_option(fx: Fixture) -> None:
    said: list[str] = []

    def explain(ctx: RunContextWrapper[Any], error: Exception) -> str:
        said.append(type(error).__name__)
        return f"bad call: {type(error).__name__}"

    tools = adapter.tools(fx.fns["create_user"], fx.fns["payout"], failure_error_function=explain)
    agent = fx.agent(
        [
            [function_call("create_user", "{", call_id="c1")],
            [function_call("payout", "{", call_id="p1")],
            [assistant_message("gave up")],
        ],
        tools,
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert result.final_output == "gave up"
    assert outputs(result) == {
        "c1": "bad call: ModelBehaviorError",
        "p1": "bad call: ModelBehaviorError",
    }
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_failure_error_function_none_raises_and_undoes(fx: Fixture) -> None:
    """``failure_error_function=None`` is the SDK's "raise instead": the run fails, and
    the session with it; the earlier good call is compensated."""
    tools = adapter.tools(fx.fns["create_user"], failure_error_function=None)
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("create_user", "{", call_id="c2")],
        ],
        tools,
    )
    with pytest.raises(Exception, match="Invalid JSON input for tool create_user"):
        asyncio.run(fx.run(agent, "go"))
    assert fx.world.undone == ["a@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_a_failing_body_reaches_the_model_as_the_sdks_error(fx: Fixture) -> None:
    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    async def flaky_user(email: str) -> dict[str, Any]:
        """Create a user, but the directory is down."""
        raise ConnectionError("directory down")

    agent = fx.agent(
        [
            [function_call("flaky_user", {"email": "a@x"}, call_id="c1")],
            [function_call("create_user", {"email": "b@x", "name": "B"}, call_id="c2")],
            [assistant_message("done")],
        ],
        adapter.tools(flaky_user, fx.fns["create_user"]),
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert outputs(result)["c1"] == SDK_ERROR
    assert result.final_output == "done"
    assert effects(fx.admin_dsn, fx.sid) == [
        ("flaky_user", "pending", 0),  # it never took effect: nothing to undo
        ("create_user", "committed", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_undolog_errors_are_not_turned_into_text(fx: Fixture) -> None:
    """A journaled call the session refuses ends the run (it is not told to the model
    as a tool error): here the session was already completed, so a new call is refused."""
    asyncio.run(fx.run(fx.agent([[assistant_message("nothing to do")]]), "hi"))
    agent = fx.agent([[function_call("create_user", {"email": "a@x"}, call_id="c9")]])
    with pytest.raises(UndoLogError) as raised:
        asyncio.run(fx.run(agent, "again"))
    assert not isinstance(raised.value, UserError)
    assert fx.world.users == {}


def test_sync_journaled_tools(fx: Fixture) -> None:
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("payout", {"cents": 300}, call_id="p1")],
            [assistant_message("paid")],
        ],
        adapter.tools(fx.fns["search"], fx.fns["create_user_sync"], fx.fns["payout_sync"]),
    )
    result = asyncio.run(fx.run(agent, "pay"))
    state = result.to_state()
    [item] = result.interruptions
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [300]
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("payout", "committed", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_function_tool_options_pass_through(fx: Fixture) -> None:
    """name_override, description_override, is_enabled and tool_input_guardrails are the
    SDK's; a guardrail's "no" reaches the model, and the journal names the UndoLog tool."""

    @tool_input_guardrail
    def no_robots(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        if "robot" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("no robots")
        return ToolGuardrailFunctionOutput.allow()

    signup = adapter.tool(
        fx.fns["create_user"],
        name_override="signup",
        description_override="Sign a person up.",
        tool_input_guardrails=[no_robots],
    )
    hidden = adapter.tool(fx.fns["search"], is_enabled=False)
    assert (signup.name, signup.description) == ("signup", "Sign a person up.")
    agent = fx.agent(
        [
            [function_call("signup", {"email": "robot@x"}, call_id="c1")],
            [function_call("signup", {"email": "ada@x", "name": "Ada"}, call_id="c2")],
            [assistant_message("done")],
        ],
        [signup, hidden],
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert outputs(result)["c1"] == "no robots"
    assert fx.world.users == {"ada@x": "Ada"}
    assert effects(fx.admin_dsn, fx.sid) == [("create_user", "committed", 0)]
    model = agent.model
    assert isinstance(model, ScriptedModel)
    offered = [t.name for t in model.first_call.tools] if model.first_call else []
    assert offered == ["signup"]


def test_timeout_is_the_sdks_option(fx: Fixture) -> None:
    @undolog_tool(tier=ToolTier.SAFE)
    async def slow_lookup(query: str) -> str:
        """Look something up slowly."""
        await asyncio.sleep(5)
        return "late"

    agent = fx.agent(
        [
            [function_call("slow_lookup", {"query": "x"}, call_id="s1")],
            [assistant_message("gave up waiting")],
        ],
        adapter.tools(slow_lookup, timeout=0.2),
    )
    result = asyncio.run(fx.run(agent, "go"))
    assert outputs(result)["s1"] == "Tool 'slow_lookup' timed out after 0.2 seconds."
    assert result.final_output == "gave up waiting"
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_run_streamed_stops_for_a_human_and_resumes(fx: Fixture) -> None:
    agent = fx.agent(list(PAY_SCRIPT))

    async def scenario() -> tuple[list[str], Any]:
        seen: list[str] = []
        async with adapter.run_streamed(agent, fx.ul, "pay", session_id=fx.sid) as result:
            async for event in result.stream_events():
                seen.append(event.type)
        assert [item.call_id for item in result.interruptions] == ["c2"]
        assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
        state = result.to_state()
        item = result.interruptions[0]
        await adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True)
        async with adapter.run_streamed(agent, fx.ul, state, session_id=fx.sid) as resumed:
            pass  # the block need not read the events: they are drained
        return seen, resumed

    seen, resumed = asyncio.run(scenario())
    assert "run_item_stream_event" in seen
    assert resumed.final_output == "paid"
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_run_streamed_that_raises_is_rolled_back(fx: Fixture) -> None:
    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            RuntimeError("the model provider went away"),
        ]
    )

    async def scenario() -> None:
        async with adapter.run_streamed(agent, fx.ul, "go", session_id=fx.sid) as result:
            async for _ in result.stream_events():
                pass

    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(scenario())
    assert fx.world.undone == ["a@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


GIFT_SCRIPT: list[Any] = [
    [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
    [function_call("gift", {"cents": 900}, call_id="g1")],
    [assistant_message("no gift then; Ada is onboarded")],
]


def _gift(fx: Fixture) -> tuple[Agent[Any], RunResult]:
    return _stopped_at(fx, GIFT_SCRIPT, "g1", adapter.tools(fx.fns["create_user"], fx.fns["gift"]))


def test_a_rejection_of_a_continue_tool_reaches_the_model(fx: Fixture) -> None:
    """on_reject="continue": the person's "no" and their reason come back to the model as
    the call's rejection message; the run and the session go on; nothing is undone."""
    agent, result = _gift(fx)
    state = result.to_state()
    item = result.interruptions[0]
    asyncio.run(
        adapter.decide(
            state, item, fx.ul, fx.sid, fx.approver, "alice", approved=False, reason="over budget"
        )
    )
    resumed = asyncio.run(fx.run(agent, state))
    assert outputs(resumed)["g1"] == "alice rejected the gift call: over budget. It did not run."
    assert resumed.final_output == "no gift then; Ada is onboarded"
    assert fx.world.payouts == []
    assert fx.world.undone == []
    assert fx.world.users == {"a@x": "A"}
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_rejection_recorded_elsewhere_reaches_the_model(fx: Fixture) -> None:
    agent, result = _gift(fx)
    item = result.interruptions[0]
    approval = asyncio.run(adapter.approval_id(fx.ul, fx.sid, item))
    asyncio.run(fx.approver.reject(approval, "bob", "not this quarter"))  # the dashboard, say
    resumed = asyncio.run(fx.run(agent, result.to_state()))
    assert outputs(resumed)["g1"] == "bob rejected the gift call: not this quarter. It did not run."
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    # run again from its input, the same call ids: the rejected call is not asked again
    again = asyncio.run(fx.run(fx.agent(list(GIFT_SCRIPT), agent.tools), "onboard and gift"))
    assert outputs(again)["g1"] == "bob rejected the gift call: not this quarter. It did not run."
    assert fx.world.payouts == []
    assert fx.world.runs["create_user:a@x"] == 1


def test_a_journaled_call_cut_off_by_timeout_fails_the_session(fx: Fixture) -> None:
    """The SDK's timeout cancels the call mid-body: it may have acted, so its outcome is
    unknown. The model is told it timed out; when the run ends the session fails and its
    compensations run (the cut-off call's too)."""

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    async def slow_user(email: str) -> dict[str, Any]:
        """Create a user, slowly."""
        fx.world.users[email] = "half made"
        await asyncio.sleep(5)
        return {"email": email}

    agent = fx.agent(
        [
            [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
            [function_call("slow_user", {"email": "s@x"}, call_id="s1")],
            [assistant_message("done")],
        ],
        [*adapter.tools(fx.fns["create_user"]), adapter.tool(slow_user, timeout=0.2)],
    )
    with pytest.raises(UndoLogError, match="unknown"):
        asyncio.run(fx.run(agent, "go"))
    assert sorted(fx.world.undone) == ["a@x", "s@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_run_streamed_hands_a_malformed_irreversible_call_back_to_the_model(fx: Fixture) -> None:
    agent = fx.agent(
        [
            [function_call("payout", "not json", call_id="p1")],
            [assistant_message("could not pay")],
        ]
    )

    async def scenario() -> Any:
        async with adapter.run_streamed(agent, fx.ul, "pay", session_id=fx.sid) as result:
            pass
        return result

    result = asyncio.run(scenario())
    assert result.interruptions == []
    assert result.final_output == "could not pay"
    assert decisions(fx.admin_dsn, fx.sid) == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_run_resumed_with_one_of_two_decided_is_refused(fx: Fixture) -> None:
    """A RunState resumed with only one of the two payouts decided raises
    AwaitingApprovalError for the other, and nothing runs (nothing acts while a person
    is asked); once that one is decided too, each runs once."""
    agent = fx.agent(list(TWO_PAYOUTS_SCRIPT))
    result = asyncio.run(fx.run(agent, "go"))
    first, second = result.interruptions
    state = result.to_state()
    asyncio.run(adapter.decide(state, first, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    with pytest.raises(AwaitingApprovalError, match="p2 waits for approval") as waited:
        asyncio.run(fx.run(agent, state))
    assert waited.value.approval_id == asyncio.run(adapter.approval_id(fx.ul, fx.sid, second))
    assert fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    asyncio.run(adapter.decide(state, second, fx.ul, fx.sid, fx.approver, "bob", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_an_irreversible_tool_renamed_with_name_override_is_decided_and_resumed(
    fx: Fixture,
) -> None:
    """name_override changes the name the model calls; UndoLog journals the call under
    the tool's own name. decide, approval_id and the resume find its request all the
    same, and the approved call runs once."""
    tools = [adapter.tool(fx.fns["payout"], name_override="send_money")]
    agent = fx.agent(
        [[function_call("send_money", {"cents": 5}, call_id="p1")], [assistant_message("paid")]],
        tools,
    )
    result = asyncio.run(fx.run(agent, "pay"))
    [item] = result.interruptions
    [(asked, _)] = pending(fx.admin_dsn, fx.sid)
    assert asyncio.run(adapter.approval_id(fx.ul, fx.sid, item)) == asked
    state = result.to_state()
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [5]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_run_state_resumed_under_another_session_is_refused(fx: Fixture) -> None:
    """A RunState resumed with a session id other than its run's: its interrupted call
    was asked in the other session, so nothing runs and nothing is recorded (no second
    request, no new session); resumed with its own session id, it goes on."""
    agent, result = _pay(fx)
    state = result.to_state()
    item = result.interruptions[0]
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    other = uuid.uuid4()
    with pytest.raises(LookupError, match=str(other)):
        asyncio.run(adapter.run(agent, fx.ul, state, session_id=other))

    async def streamed() -> None:
        async with adapter.run_streamed(agent, fx.ul, state, session_id=other):
            pass

    with pytest.raises(LookupError, match=str(other)):
        asyncio.run(streamed())
    with psycopg.connect(fx.admin_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM undolog.undolog_sessions WHERE session_id = %s", (other,)
        ).fetchone() == (0,)
    assert fx.world.payouts == []
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1


def test_approving_an_irreversible_tool_for_the_rest_of_the_run_is_refused(
    fx: Fixture,
) -> None:
    """``RunState.approve(item, always_approve=True)``: the SDK then runs the tool's
    later calls without asking needs_approval, while UndoLog runs each IRREVERSIBLE call
    only with a person's approval of that call. The resumed run paid 500, then ended at
    the next payout with AwaitingApprovalError and no interruption to decide. Now the
    resume is refused before anything runs, saying why and what to do; decided call by
    call, each payout stops the run for its own approval."""
    script = [
        [function_call("payout", {"cents": 500}, call_id="c2")],
        [function_call("payout", {"cents": 700}, call_id="c3")],
        [assistant_message("paid")],
    ]
    agent, result = _stopped_at(fx, script, "c2")
    item = result.interruptions[0]
    state = result.to_state()
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    state.approve(item, always_approve=True)
    said = "payout was approved for the rest of the run (always_approve=True)"
    with pytest.raises(ValueError, match=re.escape(said)) as refused:
        asyncio.run(fx.run(agent, state))
    assert "nothing was run" in str(refused.value)
    assert "decide each waiting call alone" in str(refused.value)

    async def streamed() -> None:
        async with adapter.run_streamed(agent, fx.ul, state, session_id=fx.sid):
            pass

    with pytest.raises(ValueError, match=re.escape(said)):
        asyncio.run(streamed())
    assert fx.world.payouts == []
    assert pending(fx.admin_dsn, fx.sid) == []
    again = result.to_state()  # as the error says: the call alone
    again.approve(item)
    stopped = asyncio.run(fx.run(agent, again))
    assert fx.world.payouts == [500]
    assert [i.call_id for i in stopped.interruptions] == ["c3"]  # its own approval
    state = stopped.to_state()
    (next_item,) = stopped.interruptions
    asyncio.run(adapter.decide(state, next_item, fx.ul, fx.sid, fx.approver, "bob", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [500, 700]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "bob")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
