"""The pydantic-ai adapter against a real PostgreSQL, driven by pydantic-ai's own
FunctionModel (a scripted model: no LLM, no network)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolApproved, ToolDenied
from pydantic_ai.toolsets import FunctionToolset

from integration_support import (
    PAYOUT_CHANGES,
    AsyncAgentFixture,
    decided_and_resumed,
    decisions,
    effects,
    payout_changed,
    pending,
    refused_then_rolled_back,
    session_state,
)
from undolog import ApprovalRejectedError, PermissionDenied
from undolog.integrations import pydantic_ai as adapter

Turn = Sequence[ToolCallPart | TextPart] | Exception


def scripted(turns: list[Turn]) -> FunctionModel:
    """A model that answers each request with the next scripted turn (streamed too)."""
    pending = list(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = pending.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return ModelResponse(parts=list(turn))

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        for i, part in enumerate(respond(messages, info).parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                args = json.dumps(part.args) if isinstance(part.args, dict) else part.args
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}

    return FunctionModel(respond, stream_function=stream)


def call(tool: str, call_id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_name=tool, args=args, tool_call_id=call_id)


class Fixture(AsyncAgentFixture):
    ran: Agent[None, Any] | None = None  # the agent of the last run: its tools check an edit

    def agent(self, turns: list[Turn], tools: list[Any] | None = None) -> Agent[None, Any]:
        if tools is None:
            tools = adapter.tools(self.fns["search"], self.fns["create_user"], self.fns["payout"])
        return Agent(scripted(turns), output_type=[str, DeferredToolRequests], tools=tools)

    async def run(self, turns: list[Turn], tools: list[Any] | None = None, **kwargs: Any) -> Any:
        """The agent of `turns` (and `tools`, else search, create_user and payout) run in
        the fixture's session."""
        self.ran = self.agent(turns, tools)
        return await adapter.run(self.ran, self.ul, session_id=self.sid, **kwargs)


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def test_tools_keep_name_docstring_and_schema(fx: Fixture) -> None:
    made = {t.name: t for t in adapter.tools(*(fx.fns[n] for n in ("search", "create_user")))}
    assert made["search"].description == "Search the web for a query."
    assert made["create_user"].description == "Create a user account."
    schema = made["create_user"].function_schema.json_schema
    assert schema["properties"]["email"]["type"] == "string"
    assert schema["required"] == ["email"]
    assert made["search"].function_schema.json_schema["required"] == ["query"]


def test_run_completes(fx: Fixture) -> None:
    turns: list[Turn] = [
        [call("search", "c1", query="docs"), call("create_user", "c2", email="ada@x")],
        [TextPart("done")],
    ]
    result = asyncio.run(fx.run(turns, user_prompt="onboard ada"))
    assert result.output == "done"
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert effects(fx.admin_dsn, fx.sid) == [("create_user", "committed", 0)]
    assert fx.world.runs == {"search": 1, "create_user:ada@x": 1}


def test_run_that_raises_is_rolled_back_lifo(fx: Fixture) -> None:
    turns: list[Turn] = [
        [call("create_user", "c1", email="a@x")],
        [call("create_user", "c2", email="b@x")],
        RuntimeError("the model provider went away"),
    ]
    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(fx.run(turns, user_prompt="go"))
    assert fx.world.undone == ["b@x", "a@x"]
    assert fx.world.users == {}
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def _pay(fx: Fixture) -> tuple[Any, list[Turn]]:
    """A run that creates a user, then asks to pay: it stops for a human."""
    turns: list[Turn] = [
        [call("create_user", "c1", email="a@x")],
        [call("payout", "c2", cents=500)],
    ]
    result = asyncio.run(fx.run(turns, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    assert [p.tool_call_id for p in result.output.approvals] == ["c2"]
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs["payout"] == 0
    return result, [[TextPart("paid")]]


def test_irreversible_approved_then_resumed_runs_once(fx: Fixture) -> None:
    result, rest = _pay(fx)
    requests = result.output
    # the agent's own login may not say yes to its own call (the engine's 42501 rule)
    with pytest.raises(PermissionDenied):
        asyncio.run(adapter.decide(requests, fx.ul, "agent", {"c2": True}))
    answers = asyncio.run(adapter.decide(requests, fx.approver, "alice", {"c2": True}))
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_approval_recorded_elsewhere_is_honoured(fx: Fixture) -> None:
    result, rest = _pay(fx)
    requests = result.output
    # pydantic-ai told "approved" while UndoLog holds no yes: the call is deferred again
    again = asyncio.run(
        fx.run(
            [[TextPart("never")]],
            message_history=result.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"c2": True}),
        )
    )
    assert isinstance(again.output, DeferredToolRequests)
    assert fx.world.payouts == []
    # a person approves from the CLI / dashboard / SQL
    asyncio.run(fx.approver.approve(adapter.approval_id(requests, "c2"), "bob", "checked"))
    answers = asyncio.run(adapter.decisions(fx.ul, requests))
    assert answers.approvals == {"c2": True}
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]


def test_irreversible_rejected_undoes_the_run(fx: Fixture) -> None:
    result, rest = _pay(fx)
    answers = asyncio.run(adapter.decide(result.output, fx.ul, "agent", {"c2": False}, "no"))
    assert asyncio.run(adapter.decisions(fx.ul, result.output)).approvals == {"c2": False}
    with pytest.raises(ApprovalRejectedError):
        asyncio.run(
            fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
        )
    assert fx.world.payouts == []
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "agent")]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_rerun_from_scratch_replays_from_the_journal(fx: Fixture) -> None:
    """The message history was lost after the approval: the whole run is made again
    under the same session id, and every call already made comes back from the journal."""
    result, _ = _pay(fx)
    asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}))
    turns: list[Turn] = [
        [call("create_user", "c1", email="a@x")],
        [call("payout", "c2", cents=500)],
        [TextPart("paid")],
    ]
    assert asyncio.run(fx.run(turns, user_prompt="pay")).output == "paid"
    assert asyncio.run(fx.run(turns[:], user_prompt="pay")).output == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 2),
        ("payout", "committed", 1),
    ]


def test_test_model_calls_every_tool(fx: Fixture) -> None:
    """pydantic-ai's TestModel calls each tool once with generated arguments."""
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"])
    agent: Agent[None, str] = Agent(TestModel(), tools=tools)
    result = asyncio.run(adapter.run(agent, fx.ul, session_id=fx.sid, user_prompt="hi"))
    assert isinstance(result.output, str)
    assert fx.world.runs["search"] == 1
    assert [e[:2] for e in effects(fx.admin_dsn, fx.sid)] == [("create_user", "committed")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_irreversible_beside_another_call_of_the_same_turn(fx: Fixture) -> None:
    """pydantic-ai runs a turn's calls side by side: the approval is requested once the
    run has stopped, so the compensable call beside it is not refused."""
    turns: list[Turn] = [[call("payout", "p1", cents=5), call("create_user", "c1", email="a@x")]]
    result = asyncio.run(fx.run(turns, user_prompt="go"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert fx.world.runs == {"create_user:a@x": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    answers = asyncio.run(adapter.decide(requests, fx.approver, "alice", {"p1": True}))
    resumed = asyncio.run(
        fx.run(
            [[TextPart("paid")]],
            message_history=result.all_messages(),
            deferred_tool_results=answers,
        )
    )
    assert resumed.output == "paid"
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_two_irreversible_calls_of_one_turn_are_asked_at_once(fx: Fixture) -> None:
    """Both payouts of one model turn are deferred tool requests of the one result, each
    with its UndoLog request before any decision; approved, each runs once."""
    turns: list[Turn] = [[call("payout", "p1", cents=5), call("payout", "p2", cents=7)]]
    result = asyncio.run(fx.run(turns, user_prompt="go"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [p.tool_call_id for p in requests.approvals] == ["p1", "p2"]
    assert set(requests.metadata) == {"p1", "p2"}
    asked = [adapter.approval_id(requests, key) for key in ("p1", "p2")]
    assert pending(fx.admin_dsn, fx.sid) == list(zip(asked, [5, 7], strict=True))
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.payouts == []
    answers = asyncio.run(adapter.decide(requests, fx.approver, "alice", {"p1": True, "p2": True}))
    result = asyncio.run(
        fx.run(
            [[TextPart("paid")]],
            message_history=result.all_messages(),
            deferred_tool_results=answers,
        )
    )
    assert result.output == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice"), ("approved", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_run_resumed_with_one_of_two_decided_defers_both_again(fx: Fixture) -> None:
    """Resumed after only one of the two payouts was approved, the run defers both again
    and neither runs (nothing acts while a person is asked); once the other is approved
    too, each runs once."""
    turns: list[Turn] = [[call("payout", "p1", cents=5), call("payout", "p2", cents=7)]]
    result = asyncio.run(fx.run(turns, user_prompt="go"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    answers = asyncio.run(adapter.decide(requests, fx.approver, "alice", {"p1": True}))
    result = asyncio.run(
        fx.run([], message_history=result.all_messages(), deferred_tool_results=answers)
    )
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [p.tool_call_id for p in requests.approvals] == ["p1", "p2"]
    assert fx.world.payouts == []
    assert [a for a, _ in pending(fx.admin_dsn, fx.sid)] == [adapter.approval_id(requests, "p2")]
    answers = asyncio.run(adapter.decide(requests, fx.approver, "bob", {"p2": True}))
    result = asyncio.run(
        fx.run(
            [[TextPart("paid")]],
            message_history=result.all_messages(),
            deferred_tool_results=answers,
        )
    )
    assert result.output == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_sync_journaled_tools(fx: Fixture) -> None:
    tools = adapter.tools(fx.fns["create_user_sync"], fx.fns["payout_sync"])
    turns: list[Turn] = [[call("create_user", "c1", email="a@x")], [call("payout", "p1", cents=9)]]
    result = asyncio.run(fx.run(turns, tools, user_prompt="go"))
    resumed = decided_and_resumed(fx, result, tools, {"p1": True}, "alice")
    assert resumed.output == "paid"
    assert fx.world.payouts == [9]
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("payout", "committed", 0),
    ]


def test_run_stream_stops_for_a_human_and_resumes(fx: Fixture) -> None:
    async def scenario() -> Any:
        turns: list[Turn] = [
            [call("create_user", "c1", email="a@x")],
            [call("payout", "c2", cents=500)],
        ]
        async with adapter.run_stream(
            fx.agent(turns), fx.ul, session_id=fx.sid, user_prompt="pay"
        ) as streamed:
            pass  # the block need not read it: the run is finished when it ends
        requests = streamed.result.output
        assert isinstance(requests, DeferredToolRequests)
        assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
        answers = await adapter.decide(requests, fx.approver, "alice", {"c2": True})
        async with adapter.run_stream(
            fx.agent([[TextPart("paid")]]),
            fx.ul,
            session_id=fx.sid,
            message_history=streamed.result.all_messages(),
            deferred_tool_results=answers,
        ) as resumed:
            text = [t async for t in resumed.stream_text(debounce_by=None)]
        return text

    text = asyncio.run(scenario())
    assert text[-1] == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_iter_stops_for_a_human_and_resumes(fx: Fixture) -> None:
    async def scenario() -> Any:
        turns: list[Turn] = [
            [call("create_user", "c1", email="a@x")],
            [call("payout", "c2", cents=500)],
        ]
        nodes: list[str] = []
        async with adapter.iter(
            fx.agent(turns), fx.ul, session_id=fx.sid, user_prompt="pay"
        ) as agent_run:
            async for node in agent_run:
                nodes.append(type(node).__name__)
        assert "CallToolsNode" in nodes
        first = agent_run.result
        assert first is not None and isinstance(first.output, DeferredToolRequests)
        assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
        answers = await adapter.decide(first.output, fx.approver, "alice", {"c2": True})
        async with adapter.iter(
            fx.agent([[TextPart("paid")]]),
            fx.ul,
            session_id=fx.sid,
            message_history=first.all_messages(),
            deferred_tool_results=answers,
        ) as resumed:
            pass  # the nodes not walked are run when the block ends
        return resumed.result

    result = asyncio.run(scenario())
    assert result is not None and result.output == "paid"
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_run_stream_that_raises_is_rolled_back(fx: Fixture) -> None:
    async def scenario() -> None:
        turns: list[Turn] = [[call("create_user", "c1", email="a@x")], RuntimeError("gone")]
        async with adapter.run_stream(fx.agent(turns), fx.ul, session_id=fx.sid, user_prompt="go"):
            pass

    with pytest.raises(RuntimeError, match="gone"):
        asyncio.run(scenario())
    assert fx.world.undone == ["a@x"]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def _told(result: Any, call_id: str) -> str:
    """What the model was told about a call (the tool return it was sent)."""
    for message in result.all_messages():
        for part in getattr(message, "parts", ()):
            if isinstance(part, ToolReturnPart) and part.tool_call_id == call_id:
                return str(part.content)
    raise AssertionError(f"no tool return for {call_id}")


def _gift(fx: Fixture) -> Any:
    tools = adapter.tools(fx.fns["create_user"], fx.fns["gift"])
    turns: list[Turn] = [[call("create_user", "c1", email="a@x")], [call("gift", "g1", cents=900)]]
    result = asyncio.run(fx.run(turns, tools, user_prompt="go"))
    assert isinstance(result.output, DeferredToolRequests)
    return result


def _resume(fx: Fixture, result: Any, answers: DeferredToolResults) -> Any:
    return asyncio.run(
        fx.run(
            [[TextPart("no gift then")]],
            adapter.tools(fx.fns["create_user"], fx.fns["gift"]),
            message_history=result.all_messages(),
            deferred_tool_results=answers,
        )
    )


def test_a_rejection_of_a_continue_tool_reaches_the_model(fx: Fixture) -> None:
    """on_reject="continue": the "no" is pydantic-ai's ToolDenied, with who and why; the
    run and the session go on; nothing is undone."""
    result = _gift(fx)
    answers = asyncio.run(
        adapter.decide(result.output, fx.approver, "alice", {"g1": False}, "over budget")
    )
    assert isinstance(answers.approvals["g1"], ToolDenied)
    resumed = _resume(fx, result, answers)
    assert _told(resumed, "g1") == "alice rejected the gift call: over budget. It did not run."
    assert resumed.output == "no gift then"
    assert fx.world.payouts == [] and fx.world.undone == []
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_rejection_recorded_elsewhere_reaches_the_model(fx: Fixture) -> None:
    result = _gift(fx)
    approval = adapter.approval_id(result.output, "g1")
    asyncio.run(fx.approver.reject(approval, "bob", "not this quarter"))
    answers = asyncio.run(adapter.decisions(fx.ul, result.output))
    resumed = _resume(fx, result, answers)
    assert _told(resumed, "g1") == "bob rejected the gift call: not this quarter. It did not run."
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_resume_told_yes_while_undolog_says_no_tells_the_model_no(fx: Fixture) -> None:
    """The run was told "approved" but UndoLog holds a rejection: the call does not run;
    the tool answers the refusal."""
    result = _gift(fx)
    approval = adapter.approval_id(result.output, "g1")
    asyncio.run(fx.approver.reject(approval, "bob", "no"))
    resumed = _resume(fx, result, DeferredToolResults(approvals={"g1": True}))
    assert _told(resumed, "g1") == "bob rejected the gift call: no. It did not run."
    assert fx.world.payouts == []


def test_decide_takes_pydantic_ais_own_answers(fx: Fixture) -> None:
    """pydantic-ai's own answers work in ``decide``: ToolDenied(message) rejects (its
    message the reason; it never approves), ToolApproved(override_args=...) approves
    with the person's arguments (edit, then approve): the call runs once, with them, and
    the model is told."""
    result = _gift(fx)
    answers = asyncio.run(
        adapter.decide(result.output, fx.approver, "alice", {"g1": ToolDenied("over budget")})
    )
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "alice")]
    resumed = _resume(fx, result, answers)
    assert _told(resumed, "g1") == "alice rejected the gift call: over budget. It did not run."
    assert fx.world.payouts == []

    fx.sid = uuid.uuid4()
    result, rest = _pay(fx)
    edited = ToolApproved(override_args={"cents": 50})
    answers = asyncio.run(
        adapter.decide(result.output, fx.approver, "bob", {"c2": edited}, agent=fx.ran)
    )
    assert answers.approvals == {"c2": True}  # UndoLog runs it with the approved args
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [50]
    assert _told(resumed, "c2").startswith("Note: bob changed the arguments of this payout call")
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "bob")]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    with pytest.raises(TypeError, match="ToolApproved"):
        asyncio.run(adapter.decide(result.output, fx.approver, "bob", {"c2": "yes"}))  # type: ignore[dict-item]


def test_a_run_resumed_under_another_session_is_refused(fx: Fixture) -> None:
    """A run resumed (deferred_tool_results) with a session id other than the one of the
    run that deferred its calls: their calls were asked in the other session. Resumed
    there, the payout was asked again in a second session, and the first was left
    open for ever. Now nothing runs and nothing is recorded (no second
    request, no new session), as with LangGraph and OpenAI Agents; resumed with its own
    session id, it goes on."""
    result, rest = _pay(fx)
    answers = asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}))
    history = result.all_messages()
    other = uuid.uuid4()
    resume = {"message_history": history, "deferred_tool_results": answers}
    with pytest.raises(LookupError, match=f"no approval request in session {other}"):
        asyncio.run(adapter.run(fx.agent([[TextPart("x")]]), fx.ul, session_id=other, **resume))

    async def streamed() -> None:
        agent = fx.agent([[TextPart("x")]])
        async with adapter.run_stream(agent, fx.ul, session_id=other, **resume):
            pass

    async def walked() -> None:
        async with adapter.iter(fx.agent([[TextPart("x")]]), fx.ul, session_id=other, **resume):
            pass

    for refused in (streamed, walked):
        with pytest.raises(LookupError, match=str(other)):
            asyncio.run(refused())
    with psycopg.connect(fx.admin_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM undolog.undolog_sessions WHERE session_id = %s", (other,)
        ).fetchone() == (0,)
    assert fx.world.payouts == []
    resumed = asyncio.run(fx.run(rest, **resume))
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs["create_user:a@x"] == 1
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def _payout_changed(fx: Fixture, change: str) -> list[Any]:
    """The tools of the agent as a later release of the app builds them, payout changed
    as ``change`` says (the rest as they were)."""
    built = [fx.fns["search"], fx.fns["create_user"], *payout_changed(fx.world, change)]
    return adapter.tools(*built)


@pytest.mark.parametrize("change", list(PAYOUT_CHANGES))
def test_a_resume_whose_approved_call_s_tool_changed_is_refused_saying_so(
    fx: Fixture, change: str
) -> None:
    """The payout of 500 approved, the app is deployed again with payout changed before
    the resume (a parameter added, with a default or without, removed, renamed or of
    another type, its tier changed, or the tool gone from the agent): this tool cannot
    make the call a person approved. (Before: a default added made the call another one,
    which the engine asked about anew at the same step; a parameter the call does not
    fit, or a tool gone, had pydantic-ai tell the model and the session complete with
    the approved payout never run; COMPENSABLE failed the session mid-run, UL018, and
    undid it.) The resume, streamed or walked too, is refused before anything runs,
    saying what changed and what to do, as with OpenAI Agents; nothing is recorded, and
    the session can still be rolled back, undoing what it did."""
    result, rest = _pay(fx)
    answers = asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}))
    approval = adapter.approval_id(result.output, "c2")
    before = session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)
    tools = _payout_changed(fx, change)
    resume = {"message_history": result.all_messages(), "deferred_tool_results": answers}
    with pytest.raises(ValueError) as refused:
        asyncio.run(fx.run(rest, tools, **resume))
    said = str(refused.value)
    assert said.startswith(
        f"this message history's payout call, approved (approval {approval}): the payout "
        "call c2 names the arguments of the call UndoLog asked about, but the payout tool "
        f"is not as it was when the call was journaled: {PAYOUT_CHANGES[change]}. The tool "
        "changed since the run stopped"
    )
    assert "nothing was run. Decide on it and resume with the tool as it was" in said
    assert f"undolog sessions rollback {fx.sid} --by WHO" in said

    async def streamed() -> None:
        agent = fx.agent(rest, tools)
        async with adapter.run_stream(agent, fx.ul, session_id=fx.sid, **resume):
            pass

    async def walked() -> None:
        async with adapter.iter(fx.agent(rest, tools), fx.ul, session_id=fx.sid, **resume):
            pass

    for refused_too in (streamed, walked):
        with pytest.raises(ValueError, match=re.escape(PAYOUT_CHANGES[change])):
            asyncio.run(refused_too())
    refused_then_rolled_back(
        fx.world, fx.admin_dsn, fx.sid, before, lambda: asyncio.run(fx.ul.run_walk(fx.sid))
    )


def test_a_resume_with_the_tool_as_it_was_goes_on(fx: Fixture) -> None:
    """Refused under a changed payout, the same resume goes on with the tool as it was
    when the run stopped: the approved payout runs, once."""
    result, rest = _pay(fx)
    answers = asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}))
    resume = {"message_history": result.all_messages(), "deferred_tool_results": answers}
    with pytest.raises(ValueError, match="it now takes currency"):
        asyncio.run(fx.run(rest, _payout_changed(fx, "a parameter added with a default"), **resume))
    resumed = asyncio.run(fx.run(rest, **resume))
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


@pytest.mark.parametrize("change", list(PAYOUT_CHANGES))
def test_a_decision_under_a_changed_tool_is_refused_saying_so(fx: Fixture, change: str) -> None:
    """decide given the agent as the app builds it again with payout changed: the call
    the person would approve is not one this tool makes. Refused, nothing recorded,
    saying what changed in the tool (before: a tool whose parameters refuse the call's
    arguments was said to ask about another call, "the arguments differ", and one gone
    or of another tier was decided, for a resume that then went wrong); decided with the
    agent as it was, it goes through."""
    result, _ = _pay(fx)
    approval = adapter.approval_id(result.output, "c2")
    agent = fx.agent([], _payout_changed(fx, change))
    with pytest.raises(ValueError) as refused:
        asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}, agent=agent))
    said = str(refused.value)
    assert said.startswith(f"approval {approval}: the payout call c2 names the arguments")
    assert f"was journaled: {PAYOUT_CHANGES[change]}. The tool changed" in said
    assert "nothing was recorded" in said
    with pytest.raises(ValueError, match=re.escape(PAYOUT_CHANGES[change])):
        asyncio.run(adapter.decisions(fx.ul, result.output, agent=agent))
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    asyncio.run(adapter.decide(result.output, fx.approver, "alice", {"c2": True}, agent=fx.ran))
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]


def test_a_resume_whose_tools_a_toolset_function_builds_goes_on(fx: Fixture) -> None:
    """The agent's tools built by a toolset function (a DynamicToolset: pydantic-ai
    builds them in the run, so nothing lists them before it): a tool the adapter does
    not find there may be one of theirs, not a tool gone. Decided with the agent given
    and resumed, the approved payout runs, once. (Before: the resume, and decide with
    agent=, were refused saying the agent has no journaled payout tool now.)"""

    def agent(turns: list[Turn], tools: list[Any] | None = None) -> Agent[None, Any]:
        built = adapter.tools(fx.fns["search"], fx.fns["create_user"], fx.fns["payout"])

        def dynamic(ctx: RunContext[None]) -> FunctionToolset[None]:
            return FunctionToolset(built)

        return Agent(scripted(turns), output_type=[str, DeferredToolRequests], toolsets=[dynamic])

    fx.agent = agent  # type: ignore[method-assign]
    result, rest = _pay(fx)
    answers = asyncio.run(
        adapter.decide(result.output, fx.approver, "alice", {"c2": True}, agent=fx.ran)
    )
    assert asyncio.run(adapter.decisions(fx.ul, result.output, agent=fx.ran)) == answers
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
