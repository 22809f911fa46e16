"""Two things each framework adapter owes a person who stops a run for approval.

1. A run's saved mid-turn state belongs to the UndoLog session of the run that stopped:
   resumed under another session id it is refused (ResumedInAnotherSession), before a
   session is opened or anything runs; resumed under its own, it goes on.
2. After an edit (an IRREVERSIBLE call approved with a person's arguments), the
   framework's own record of the call holds the arguments that ran.

Each framework with its own test model: pydantic-ai's FunctionModel, the OpenAI Agents
SDK's ScriptedModel, a scripted LangChain chat model; real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
import test_agent_inbox_edit as inbox_support
import test_openai_agents as oa
import test_pydantic_ai as pa
from agents import RunState, set_tracing_disabled
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.testing import assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.tools import ToolApproved

import undolog
from integration_support import effects, pending, session_state
from undolog import UndoLogError
from undolog.errors import ResumedInAnotherSession, exit_code_of, http_status_of
from undolog.integrations import langchain as lc_adapter
from undolog.integrations import openai_agents as oa_adapter
from undolog.integrations import pydantic_ai as pa_adapter


def _no_session(dsn: str, session_id: uuid.UUID) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM undolog.undolog_sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
    return row == (0,)


# --- 1. pydantic-ai: a mid-turn message history resumed under another session ---------


@pytest.fixture
def pfx(dsn: str) -> pa.Fixture:
    return pa.Fixture(dsn)


def _pay_mid_turn(fx: pa.Fixture) -> Any:
    """One model turn that creates a user and asks to pay: the user is created (in the
    session), the payout waits; the run stops in the middle of that turn."""
    turns: list[pa.Turn] = [
        [pa.call("create_user", "c1", email="a@x"), pa.call("payout", "c2", cents=500)]
    ]
    result = asyncio.run(fx.run(turns, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    assert fx.world.runs["create_user:a@x"] == 1
    return result


def test_pydantic_ai_mid_turn_history_resumed_under_another_session_is_refused(
    pfx: pa.Fixture,
) -> None:
    """The stopped run's history, saved as JSON and loaded again, resumed with another
    session id and no deferred_tool_results (the payout is asked again by its tool):
    before, the payout was asked in a second session while the first waited for ever.
    Now it is refused, and nothing is journaled in the other session; with its own
    session id it goes on."""
    result = _pay_mid_turn(pfx)
    saved = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(result.all_messages())
    )
    other = uuid.uuid4()
    agent = pfx.agent([[TextPart("x")]])
    with pytest.raises(ResumedInAnotherSession, match=str(pfx.sid)) as refused:
        asyncio.run(pa_adapter.run(agent, pfx.ul, session_id=other, message_history=saved))
    assert isinstance(refused.value, UndoLogError)
    assert f"session_id={pfx.sid}" in str(refused.value)

    async def streamed() -> None:
        async with pa_adapter.run_stream(agent, pfx.ul, session_id=other, message_history=saved):
            pass

    with pytest.raises(ResumedInAnotherSession):
        asyncio.run(streamed())
    assert _no_session(pfx.admin_dsn, other)
    assert pfx.world.payouts == []

    # a new conversation turn (a user prompt after a finished run) is no resume: see below
    answers = asyncio.run(pa_adapter.decide(result.output, pfx.approver, "alice", {"c2": True}))
    resumed = asyncio.run(
        pfx.run([[TextPart("paid")]], message_history=saved, deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert pfx.world.payouts == [500]
    assert pfx.world.runs["create_user:a@x"] == 1
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"

    # the finished run's history goes on in a new session, as a new turn
    nxt = uuid.uuid4()
    agent = pfx.agent([[TextPart("hello again")]])
    again = asyncio.run(
        pa_adapter.run(
            agent, pfx.ul, session_id=nxt, message_history=resumed.all_messages(), user_prompt="hi"
        )
    )
    assert again.output == "hello again"
    assert session_state(pfx.admin_dsn, nxt) == "completed"


# --- 1. OpenAI Agents: a saved RunState resumed under another session --------------------


@pytest.fixture
def ofx(dsn: str, monkeypatch: pytest.MonkeyPatch) -> oa.Fixture:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)
    return oa.Fixture(dsn)


def test_openai_agents_saved_run_state_resumed_under_another_session_is_refused(
    ofx: oa.Fixture,
) -> None:
    """The RunState of a run that stopped mid-turn (a user created, a payout waiting),
    saved as JSON and loaded again: resumed with another session id it is refused with
    ResumedInAnotherSession, nothing journaled there; with its own, it goes on."""
    script = [
        [
            function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1"),
            function_call("payout", {"cents": 500}, call_id="c2"),
        ],
        [assistant_message("paid")],
    ]
    agent, result = oa._stopped_at(ofx, script, "c2")
    saved = result.to_state().to_json()
    state = asyncio.run(RunState.from_json(agent, saved))
    other = uuid.uuid4()
    with pytest.raises(ResumedInAnotherSession, match=str(other)):
        asyncio.run(oa_adapter.run(agent, ofx.ul, state, session_id=other))
    assert _no_session(ofx.admin_dsn, other)
    [item] = state.get_interruptions()
    asyncio.run(oa_adapter.decide(state, item, ofx.ul, ofx.sid, ofx.approver, "al", approved=True))
    assert asyncio.run(ofx.run(agent, state)).final_output == "paid"
    assert ofx.world.payouts == [500]
    assert ofx.world.runs["create_user:a@x"] == 1


# --- 2. edits: the framework's own record holds the arguments that ran -----------------


def test_pydantic_ai_an_edit_is_the_tool_call_parts_args(pfx: pa.Fixture) -> None:
    """Approved with {"cents": 50} instead of 500: the payout ran with 50, and the run's
    history says so: the ToolCallPart's args are the approved ones (what the model sees
    on its next turn, and what a saved history holds), and the ToolReturnPart's metadata
    is the edit (requested and approved args, who, why)."""
    result, rest = pa._pay(pfx)
    answers = asyncio.run(
        pa_adapter.decide(
            result.output, pfx.approver, "bob", {"c2": ToolApproved(override_args={"cents": 50})}
        )
    )
    history = result.all_messages()
    resumed = asyncio.run(pfx.run(rest, message_history=history, deferred_tool_results=answers))
    assert pfx.world.payouts == [50]
    # the stopped run's objects, and the caller's history, keep the model's arguments
    assert [p.args_as_dict() for p in result.output.approvals] == [{"cents": 500}]
    for messages in (history, result.all_messages()):
        [asked] = [
            p
            for m in messages
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart) and p.tool_call_id == "c2"
        ]
        assert asked.args_as_dict() == {"cents": 500}
    [part] = [
        p
        for m in resumed.all_messages()
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_call_id == "c2"
    ]
    assert part.args_as_dict() == {"cents": 50}
    [returned] = [
        p
        for m in resumed.all_messages()
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart) and p.tool_call_id == "c2"
    ]
    assert returned.metadata["undolog_edit"]["requested_args"] == {"cents": 500}
    assert returned.metadata["undolog_edit"]["approved_args"] == {"cents": 50}
    assert str(returned.content).startswith("Note: bob changed the arguments")


def test_openai_agents_an_edit_is_the_run_items_arguments(ofx: oa.Fixture) -> None:
    """Approved elsewhere with {"cents": 50} instead of 500: the payout ran with 50, and
    the run's items say so: the ToolCallItem's arguments are the approved ones, and its
    output tells the model the edit."""
    agent, result = oa._pay(ofx)
    [(approval, _)] = pending(ofx.admin_dsn, ofx.sid)
    asyncio.run(ofx.approver.approve(approval, "bob", "too much", args={"cents": 50}))
    resumed = asyncio.run(ofx.run(agent, result.to_state()))
    assert ofx.world.payouts == [50]
    # the first run's items keep the model's arguments
    firsts: list[Any] = [i.raw_item for i in result.new_items if isinstance(i, ToolCallItem)]
    assert [json.loads(r.arguments) for r in firsts if r.call_id == "c2"] == [{"cents": 500}]
    asked: list[Any] = [i.raw_item for i in result.interruptions]
    assert [json.loads(r.arguments) for r in asked] == [{"cents": 500}]
    raws: list[Any] = [i.raw_item for i in resumed.new_items if isinstance(i, ToolCallItem)]
    [called] = [raw for raw in raws if raw.call_id == "c2"]
    assert json.loads(called.arguments) == {"cents": 50}
    outs: list[Any] = [i for i in resumed.new_items if isinstance(i, ToolCallOutputItem)]
    [output] = [out.output for out in outs if out.raw_item["call_id"] == "c2"]
    assert str(output).startswith("Note: bob changed the arguments")
    # what a later run sends the model, and what the saved state holds
    sent: list[Any] = [
        i
        for i in resumed.to_input_list()
        if isinstance(i, dict) and i.get("type") == "function_call" and i.get("call_id") == "c2"
    ]
    assert [json.loads(str(i["arguments"])) for i in sent] == [{"cents": 50}]
    assert '{\\"cents\\": 50}' in resumed.to_state().to_string()
    assert effects(ofx.admin_dsn, ofx.sid)[-1][0] == "payout"


@pytest.fixture
def inbox(dsn: str) -> inbox_support.Inbox:
    return inbox_support.Inbox(dsn)


def test_langgraph_an_edit_is_the_tool_messages_record(inbox: inbox_support.Inbox) -> None:
    """Approved in the Agent Inbox with {"cents": 5000} instead of 50000: the payout ran
    with 5000, and the thread's state says so in the call's ToolMessage (its artifact's
    edit: requested and approved args). The AIMessage keeps the model's request, as the
    docs say: a tool run by ToolNode cannot rewrite a message of a state whose schema
    and reducer the graph owns."""
    request = inbox.asked()
    edit = [{"type": "edit", "args": {"action": "payout", "args": {"cents": 5_000}}}]
    out = inbox.run(lc_adapter.respond(request, edit, inbox.approver, "alice"))
    assert inbox.world.payouts == [5_000]
    messages = inbox.graph.get_state(inbox.config).values["messages"]
    assert messages == out["messages"]
    [asked] = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    assert asked.tool_calls[0]["args"] == {"cents": 50_000}  # the model's request
    [told] = [m for m in messages if isinstance(m, ToolMessage)]
    assert told.artifact["undolog_edit"]["approved_args"] == {"cents": 5_000}
    assert isinstance(messages[0], HumanMessage)


# --- the one error for all three -------------------------------------------------------


def test_langgraph_thread_resumed_under_another_session_is_the_same_error(dsn: str) -> None:
    """LangGraph's check (the interrupt's recorded session) raises the error the other
    adapters raise, naming the session to resume with; its own session id resumes it."""
    import test_langgraph as lg

    fx = lg.Fixture(dsn)
    graph = lg._onboard_graph(fx)
    out = fx.run(graph, {"done": False})
    request = out[lc_adapter.INTERRUPT][0].value
    command = lc_adapter.decide(request, fx.approver, "alice", approved=True)
    other = uuid.uuid4()
    with pytest.raises(ResumedInAnotherSession, match=f"session_id={fx.sid}"):
        lc_adapter.run(graph, fx.ul, command, fx.config, session_id=other)
    assert _no_session(fx.admin_dsn, other)
    assert fx.run(graph, command) == {"done": True}
    assert fx.world.payouts == [700]
    assert fx.world.runs["create_user:a@x"] == 1


def test_openai_agents_a_streamed_run_records_the_edit_too(ofx: oa.Fixture) -> None:
    """run_streamed: after the block, the ToolCallItem of the edited call holds the
    arguments it ran with, in a new item: the first run's items keep the model's."""
    agent, result = oa._pay(ofx)
    [(approval, _)] = pending(ofx.admin_dsn, ofx.sid)
    asyncio.run(ofx.approver.approve(approval, "bob", None, args={"cents": 70}))

    async def streamed() -> Any:
        async with oa_adapter.run_streamed(
            agent, ofx.ul, result.to_state(), session_id=ofx.sid
        ) as run:
            pass
        return run

    run = asyncio.run(streamed())
    assert ofx.world.payouts == [70]
    raws: list[Any] = [i.raw_item for i in run.new_items if isinstance(i, ToolCallItem)]
    assert [json.loads(r.arguments) for r in raws if r.call_id == "c2"] == [{"cents": 70}]
    firsts: list[Any] = [i.raw_item for i in result.new_items if isinstance(i, ToolCallItem)]
    assert [json.loads(r.arguments) for r in firsts if r.call_id == "c2"] == [{"cents": 500}]


# --- the error is the binding's ------------------------------------------------------------


def test_resumed_in_another_session_is_an_error_of_the_binding() -> None:
    """Its exit code and HTTP status are its class's in undolog.errors (the errors
    table's test reads that module), importable from undolog, and every adapter
    exports that one class."""
    assert undolog.ResumedInAnotherSession is ResumedInAnotherSession
    assert ResumedInAnotherSession.__module__ == "undolog.errors"
    for adapter in (pa_adapter, oa_adapter, lc_adapter):
        assert adapter.ResumedInAnotherSession is ResumedInAnotherSession
    refused = ResumedInAnotherSession("x")
    assert isinstance(refused, LookupError) and isinstance(refused, ValueError)
    assert (exit_code_of(refused), http_status_of(refused)) == (1, 409)


# --- the refusal names the session to resume with -----------------------------------------


def test_pydantic_ai_answers_resumed_under_another_session_name_the_stopped_one(
    pfx: pa.Fixture,
) -> None:
    """Resumed with deferred_tool_results under another session id, the history's record
    is read first: the message names the session to resume with."""
    result = _pay_mid_turn(pfx)
    answers = asyncio.run(pa_adapter.decide(result.output, pfx.approver, "alice", {"c2": True}))
    other = uuid.uuid4()
    agent = pfx.agent([[TextPart("x")]])
    with pytest.raises(ResumedInAnotherSession, match=f"session_id={pfx.sid}"):
        asyncio.run(
            pa_adapter.run(
                agent,
                pfx.ul,
                session_id=other,
                message_history=result.all_messages(),
                deferred_tool_results=answers,
            )
        )
    assert _no_session(pfx.admin_dsn, other)
    assert pfx.world.payouts == []


def test_openai_agents_refusal_says_where_to_find_the_session(ofx: oa.Fixture) -> None:
    """A RunState has no room for its session: the refusal names the session id it was
    resumed under and says to take the stopped run's own, as the docs say."""
    agent, result = oa._pay(ofx)
    other = uuid.uuid4()
    with pytest.raises(ResumedInAnotherSession) as refused:
        asyncio.run(oa_adapter.run(agent, ofx.ul, result.to_state(), session_id=other))
    message = str(refused.value)
    assert f"no approval request in session {other}" in message
    assert "resume it with the session id of the run that stopped" in message
    assert str(ofx.sid) not in message  # never a session the query cannot vouch for


# --- a mid-turn history whose record was stripped ------------------------------------------


def test_pydantic_ai_mid_turn_history_without_its_record_is_refused_too(
    pfx: pa.Fixture,
) -> None:
    """The stopped run's history saved as JSON with the session's record stripped from
    its metadata, resumed under another session id with no deferred_tool_results: the
    still-unanswered IRREVERSIBLE call (the payout) has no request in that session, so
    the database check refuses it; under its own session id it goes on."""
    result = _pay_mid_turn(pfx)
    raw = json.loads(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    for message in raw:
        if message.get("kind") == "response" and message.get("metadata"):
            message["metadata"].pop("undolog_session_id", None)
    stripped = ModelMessagesTypeAdapter.validate_python(raw)
    assert "undolog_session_id" not in json.dumps(raw)
    other = uuid.uuid4()
    agent = pfx.agent([[TextPart("x")]])
    with pytest.raises(ResumedInAnotherSession, match=f"session {other}"):
        asyncio.run(pa_adapter.run(agent, pfx.ul, session_id=other, message_history=stripped))
    assert _no_session(pfx.admin_dsn, other)
    assert pfx.world.payouts == []
    # its own session: not refused (the payout is asked again, and waits)
    own = asyncio.run(
        pa_adapter.run(
            pfx.agent([[TextPart("x")]]), pfx.ul, session_id=pfx.sid, message_history=stripped
        )
    )
    assert isinstance(own.output, DeferredToolRequests)
    assert pfx.world.payouts == []
