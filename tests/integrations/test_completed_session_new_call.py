"""A completed session resumed by a run that makes an IRREVERSIBLE call its journal does
not have: a LangGraph node's own call keyed by a task of a run of the thread made after
the session completed (the thread invoked again, or replayed from an earlier checkpoint:
LangGraph gives the node a new task id), or a pydantic-ai model's new tool call. No
approval request can be written in a completed session, so the run raises the engine's
UL010 (new calls need a new session) rather than stop at an interrupt nobody can decide;
the session stays completed, and what it committed is not undone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command
from pydantic_ai.messages import TextPart
from test_langgraph import HELLO, Fixture, Steps, calls
from test_pydantic_ai import Fixture as PydanticFixture
from test_pydantic_ai import call

from integration_support import decisions, effects, pending, session_state
from undolog import ApprovalRejectedError, SessionNotActive, engine
from undolog.integrations import langchain as adapter

Runner = Callable[..., Any]  # the adapter's run, arun or stream, in the thread of ``fx``


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def _graph(fx: Fixture, is_async: bool) -> Any:
    """A graph whose first node pays (the node's own IRREVERSIBLE call) and whose second
    creates the user (COMPENSABLE); its nodes are async ones for an async run."""
    create_user, payout = fx.sync_tools[1], fx.sync_tools[2]

    def pay(state: Steps) -> Steps:
        payout.invoke({"cents": 700})
        return {"done": False}

    def welcome(state: Steps) -> Steps:
        create_user.invoke({"email": "a@x"})
        return {"done": True}

    async def apay(state: Steps) -> Steps:
        await payout.ainvoke({"cents": 700})
        return {"done": False}

    async def awelcome(state: Steps) -> Steps:
        await create_user.ainvoke({"email": "a@x"})
        return {"done": True}

    builder = StateGraph(Steps)
    builder.add_node("pay", apay if is_async else pay)
    builder.add_node("welcome", awelcome if is_async else welcome)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", "welcome")
    return builder.compile(checkpointer=InMemorySaver())


def _run(fx: Fixture, graph: Any, input: Any, config: Any = None) -> Any:
    return adapter.run(graph, fx.ul, input, config or fx.config, session_id=fx.sid)


def _arun(fx: Fixture, graph: Any, input: Any, config: Any = None) -> Any:
    return asyncio.run(adapter.arun(graph, fx.aul, input, config or fx.config, session_id=fx.sid))


def _stream(fx: Fixture, graph: Any, input: Any, config: Any = None) -> Any:
    return list(adapter.stream(graph, fx.ul, input, config or fx.config, session_id=fx.sid))


def _paid_and_completed(fx: Fixture, run: Runner) -> Any:
    """The graph run by ``run`` until the payout was approved and the session completed."""
    graph = _graph(fx, run is _arun)
    out = run(fx, graph, {"done": False})
    if run is _stream:
        [out] = [chunk for chunk in out if adapter.INTERRUPT in chunk]
    adapter.decide(out[adapter.INTERRUPT][0].value, fx.approver, "alice", approved=True)
    run(fx, graph, Command(resume="go on"))
    assert graph.get_state(fx.config).values == {"done": True}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    return graph


def _said_new_calls_need_a_new_session(error: SessionNotActive, fx: Fixture) -> None:
    assert error.sqlstate == "UL010"
    assert f"session {fx.sid} is completed" in str(error)
    assert error.hint is not None and "Begin a new session for new calls" in error.hint


@pytest.mark.parametrize("run", [_run, _arun, _stream])
@pytest.mark.parametrize("again", ["invoked again", "replayed before pay"])
def test_a_nodes_new_irreversible_call_in_a_completed_session_raises(
    fx: Fixture, run: Runner, again: str
) -> None:
    """The thread invoked again, or replayed from its checkpoint before the node that
    pays: the node's task is a new one, and so is its payout call."""
    graph = _paid_and_completed(fx, run)
    journal = effects(fx.admin_dsn, fx.sid)
    assert journal == [("payout", "committed", 0), ("create_user", "committed", 0)]
    config = fx.config
    if again == "replayed before pay":
        config = next(s for s in graph.get_state_history(fx.config) if s.next == ("pay",)).config
    with pytest.raises(SessionNotActive) as raised:
        run(fx, graph, None if again == "replayed before pay" else {"done": False}, config)
    _said_new_calls_need_a_new_session(raised.value, fx)
    # LangGraph's checkpoint keeps the interrupt: deciding it says what to do
    [kept] = graph.get_state(fx.config).interrupts
    with pytest.raises(LookupError, match="new thread with a new session"):
        adapter.decide(kept.value, fx.approver, "bob", approved=True, ul=fx.ul)
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert effects(fx.admin_dsn, fx.sid) == journal  # nothing new, nothing undone
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]  # no request written
    assert fx.world.payouts == [700]
    assert fx.world.runs == {"payout": 1, "create_user:a@x": 1}
    assert fx.world.undone == []


@pytest.fixture
def pfx(dsn: str) -> PydanticFixture:
    return PydanticFixture(dsn)


def test_a_models_new_irreversible_call_in_a_completed_session_raises(
    pfx: PydanticFixture,
) -> None:
    """pydantic-ai: the session completed, the same session id is run again and the model
    asks for a payout with a new tool call id: the run raises, nobody is asked."""
    done = asyncio.run(
        pfx.run([[call("create_user", "c1", email="a@x")], [TextPart("done")]], user_prompt="go")
    )
    assert done.output == "done"
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"
    with pytest.raises(SessionNotActive) as raised:
        asyncio.run(pfx.run([[call("payout", "c9", cents=300)]], user_prompt="pay too"))
    assert raised.value.sqlstate == "UL010"
    assert raised.value.hint is not None and "Begin a new session" in raised.value.hint
    assert session_state(pfx.admin_dsn, pfx.sid) == "completed"
    assert effects(pfx.admin_dsn, pfx.sid) == [("create_user", "committed", 0)]
    assert decisions(pfx.admin_dsn, pfx.sid) == []
    assert pfx.world.payouts == []
    assert pfx.world.undone == []


def test_a_refusal_that_ended_the_session_meanwhile_leaves_the_rest_unasked(
    fx: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a session that began active still does (not the completed case): two payouts
    of one turn, each its own task, are asked one request after the other; a person
    rejects the first as soon as it is written, which ends the session, so the second
    cannot be asked. The run stops as before, nobody asked about the second, and the
    resumed run undoes the session and raises ApprovalRejectedError; nothing paid."""
    turns = [calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7}))]
    graph = fx.chat_graph(turns, each_its_task=True)

    real_intercept = engine.intercept  # what the sync run's requests are written with

    def rejected_once_written(*args: Any) -> Any:
        answer = real_intercept(*args)
        for approval, _ in pending(fx.admin_dsn, fx.sid):  # the first request: "no"
            fx.approver.reject(approval, "bob", "not today")
        return answer

    monkeypatch.setattr(engine, "intercept", rejected_once_written)
    out = fx.run(graph, HELLO)
    shown = [request for stop in out[adapter.INTERRUPT] for request in stop.value]
    asked = {request["call_key"]: request[adapter.APPROVAL_KEY] for request in shown}
    assert sorted(asked) == ["p1", "p2"]
    assert sorted(approval is None for approval in asked.values()) == [False, True]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "bob")]  # one request only
    monkeypatch.undo()
    with pytest.raises(ApprovalRejectedError):
        fx.run(graph, Command(resume="go on"))
    assert fx.world.payouts == []
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"
