"""The LangChain/LangGraph adapter (and the OpenAI Agents adapter's decide) against
requests an adversary shaped, and LangGraph's own human-in-the-loop beside UndoLog's: a
request whose approval id is not the call it shows, a node's own ``interrupt()`` after a
journaled IRREVERSIBLE call, a ToolNode's list with plain callables."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from agents import set_tracing_disabled
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from test_langgraph import (
    HELLO,
    Fixture,
    Steps,
    _approved_one_then_both,
    calls,
)
from test_openai_agents import PAY_SCRIPT
from test_openai_agents import Fixture as AgentsFixture

from integration_support import decisions, logins, pending, session_state
from undolog import AsyncUndoLog, UndoLog
from undolog.integrations import langchain as adapter
from undolog.integrations import openai_agents


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def _stopped(fx: Fixture, cents: int) -> tuple[Any, list[dict[str, Any]]]:
    graph = fx.chat_graph([calls(("payout", "c2", {"cents": cents})), AIMessage("paid")])
    out = fx.run(graph, HELLO)
    [stop] = out[adapter.INTERRUPT]
    return graph, stop.value


# --- a decision is on the call the person was shown ---------------------------------------


@pytest.mark.parametrize("approved", [True, False])
def test_a_request_showing_other_arguments_is_refused(fx: Fixture, approved: bool) -> None:
    """The request handed to the approver comes from the agent's run: its arguments
    changed to 5 cents, it still carries the approval id of the 900000-cent call. A yes
    (or a no) to it is refused, and nothing is recorded."""
    graph, request = _stopped(fx, 900000)
    shown = copy.deepcopy(request)
    shown[0]["action_request"]["args"] = {"cents": 5}
    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        adapter.decide(shown, fx.approver, "alice", approved=approved, tools=fx.sync_tools)
    assert [cents for _, cents in pending(fx.admin_dsn, fx.sid)] == [900000]
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    # the request as the run answered it is decided as usual
    fx.run(graph, adapter.decide(request, fx.approver, "alice", approved=True))
    assert fx.world.payouts == [900000]


def test_a_request_naming_another_calls_approval_is_refused(fx: Fixture, dsn: str) -> None:
    """An approval id of another session's call (same tool, same arguments) put in this
    session's request: the decision would land on the other session's call."""
    other = Fixture(dsn)
    _, theirs = _stopped(other, 500)
    _, ours = _stopped(fx, 500)
    forged = copy.deepcopy(ours)
    forged[0][adapter.APPROVAL_KEY] = theirs[0][adapter.APPROVAL_KEY]
    with pytest.raises(ValueError, match="its session is"):
        adapter.respond(forged, [{"type": "accept", "args": None}], fx.approver, "alice")
    forged = copy.deepcopy(ours)
    forged[0]["call_key"] = "c3"  # the call key decides the step
    with pytest.raises(ValueError, match="its step is"):
        adapter.decide(forged, fx.approver, "alice", approved=False)
    assert (
        decisions(fx.admin_dsn, fx.sid)
        == decisions(other.admin_dsn, other.sid)
        == [("pending", None)]
    )


def test_an_async_decision_compares_too(fx: Fixture) -> None:
    """adecide reads the request with an async approver, or a sync one in a thread."""
    _, request = _stopped(fx, 700)
    shown = copy.deepcopy(request)
    shown[0]["action_request"]["args"] = {"cents": 7}
    for approver in (fx.approver, AsyncUndoLog(logins(fx.admin_dsn)[1])):
        with pytest.raises(ValueError, match="not the call the person was shown"):
            asyncio.run(adapter.adecide(shown, approver, "alice", approved=True))
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]


def _payout_shown_as_five_cents(dsn: str) -> tuple[AgentsFixture, Any, Any, Any]:
    """An OpenAI Agents run stopped at its payout's approval: the fixture, the run's state,
    the interruption item, and a copy of it whose arguments read 5 cents (a forged item
    shown to the person)."""
    set_tracing_disabled(True)
    fx = AgentsFixture(dsn)
    agent = fx.agent(list(PAY_SCRIPT))
    result = asyncio.run(fx.run(agent, "go"))
    [item] = result.interruptions
    raw = cast(Any, item.raw_item).model_copy(update={"arguments": json.dumps({"cents": 5})})
    return fx, result.to_state(), item, type(item)(agent=item.agent, raw_item=raw)


def test_an_openai_agents_item_showing_other_arguments_is_refused(dsn: str) -> None:
    """The OpenAI Agents decide finds the approval by the item's session, tool and call
    id; the item's arguments must be the journal's too."""
    fx, state, item, shown = _payout_shown_as_five_cents(dsn)
    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        asyncio.run(
            openai_agents.decide(state, shown, fx.ul, fx.sid, fx.approver, "al", approved=True)
        )
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    asyncio.run(openai_agents.decide(state, item, fx.ul, fx.sid, fx.approver, "al", approved=True))
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "al")]


def _recorder(approver: Any, recorded: list[Any]) -> Callable[..., None]:
    """A decision recorder (the app's own, here the approver's client behind it) that
    notes each approval it is handed."""

    def record(approval: Any, approved: bool, by: str, reason: str | None, **kw: Any) -> None:
        recorded.append(approval)
        if approved:
            approver.approve(approval, by, reason, args=kw.get("args"))
        else:
            approver.reject(approval, by, reason)

    return record


def test_a_callable_approver_is_checked_against_the_journal_too(fx: Fixture) -> None:
    """A decision recorder is handed the approval id only, so decide reads the call with
    ``ul`` (a client that may read the session's requests: the agent's here) and refuses
    a request showing 5 cents whose approval asks about 900000, as it refuses one decided
    through a client; without ``ul`` it cannot read the call, and refuses, saying to give
    ``ul=``. The recorder is never called; the request as the run answered it is decided
    through it as usual."""
    graph, request = _stopped(fx, 900000)
    shown = copy.deepcopy(request)
    shown[0]["action_request"]["args"] = {"cents": 5}
    recorded: list[Any] = []
    record = _recorder(fx.approver, recorded)
    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        adapter.decide(shown, record, "alice", approved=True, ul=fx.ul)
    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        accept = [{"type": "accept", "args": None}]
        adapter.respond(shown, accept, record, "alice", ul=fx.ul)
    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        asyncio.run(adapter.adecide(shown, record, "alice", approved=True, ul=fx.aul))
    for request_seen in (shown, request):
        with pytest.raises(ValueError, match="ul="):
            adapter.decide(request_seen, record, "alice", approved=True)
        with pytest.raises(ValueError, match="ul="):
            asyncio.run(adapter.adecide(request_seen, record, "alice", approved=True))
    assert recorded == []
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    fx.run(graph, adapter.decide(request, record, "alice", approved=True, ul=fx.ul))
    assert recorded == [adapter.approval_id(request)]
    assert fx.world.payouts == [900000]


def test_a_callable_approver_refuses_an_approval_its_reader_cannot_see(
    fx: Fixture, dsn: str
) -> None:
    """``ul`` reads for a decision recorder with its own login: an agent's sees its own
    sessions only. A request naming another session's approval (one ``ul`` may not read)
    is refused, as pydantic-ai's decide refuses it: an unread call is an unchecked one,
    and the recorder, the app's, would record the person's yes on a call never shown."""
    other = Fixture(dsn)
    _, theirs = _stopped(other, 900000)
    _, ours = _stopped(fx, 5)
    forged = copy.deepcopy(ours)
    forged[0][adapter.APPROVAL_KEY] = theirs[0][adapter.APPROVAL_KEY]
    recorded: list[Any] = []
    record = _recorder(fx.approver, recorded)
    blind_dsn = logins(dsn, agent_only=True)[0]  # its login sees neither session
    blind, ablind = UndoLog(blind_dsn), AsyncUndoLog(blind_dsn)
    with pytest.raises(ValueError, match="cannot be read"):
        adapter.decide(forged, record, "alice", approved=True, ul=blind)
    with pytest.raises(ValueError, match="cannot be read"):
        asyncio.run(adapter.adecide(forged, record, "alice", approved=True, ul=ablind))
    assert recorded == []
    assert decisions(other.admin_dsn, other.sid) == [("pending", None)]


def test_an_openai_agents_callable_approver_is_checked_against_the_journal_too(
    dsn: str,
) -> None:
    """The OpenAI Agents decide reads the call with ``ul`` (the agent's client it always
    takes) when the approver is a decision recorder: an item showing 5 cents whose call
    id asks about 500 is refused, the recorder never called."""
    fx, state, item, shown = _payout_shown_as_five_cents(dsn)
    recorded: list[Any] = []

    async def record(approval: Any, approved: bool, by: str, reason: str | None) -> None:
        recorded.append(approval)
        await fx.approver.approve(approval, by, reason)

    with pytest.raises(ValueError, match=r"not the call the person was shown.*arguments"):
        asyncio.run(openai_agents.decide(state, shown, fx.ul, fx.sid, record, "al", approved=True))
    assert recorded == []
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    asyncio.run(openai_agents.decide(state, item, fx.ul, fx.sid, record, "al", approved=True))
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "al")]


# --- a ToolNode's list --------------------------------------------------------------------


def test_decide_takes_the_list_the_tool_node_was_built_with(fx: Fixture) -> None:
    """ToolNode takes plain callables beside BaseTools: the same list checks an edit."""

    def lookup(query: str) -> str:
        """Look something up."""
        return query

    lc_tools: list[BaseTool | Callable[..., Any]] = [*fx.sync_tools, lookup]
    ToolNode(lc_tools)
    graph = fx.chat_graph(
        [calls(("payout", "c2", {"cents": 500})), AIMessage("paid")], cast(Any, lc_tools)
    )
    request = fx.run(graph, HELLO)[adapter.INTERRUPT][0].value
    edit = {"type": "edit", "args": {"action": "payout", "args": {"cents": "50"}}}
    with pytest.raises(ValueError, match="do not fit the tool"):
        bad = {"type": "edit", "args": {"action": "payout", "args": {"cents": "fifty"}}}
        adapter.respond(request, [bad], fx.approver, "alice", tools=lc_tools)
    fx.run(graph, adapter.respond(request, [edit], fx.approver, "alice", tools=lc_tools))
    assert fx.world.payouts == [50]


# --- the node's own interrupt() after a journaled call ------------------------------------


class _Asking:
    """A graph whose one node pays (each amount an UndoLog IRREVERSIBLE call it makes
    itself), then asks its own question with LangGraph's interrupt()."""

    def __init__(self, fx: Fixture, amounts: list[int]) -> None:
        payout = fx.sync_tools[2]
        self.answers: list[Any] = []

        def node(state: Steps) -> Steps:
            for cents in amounts:
                payout.invoke({"cents": cents})
            self.answers.append(interrupt({"question": "also close the account?"}))
            return {"done": True}

        builder = StateGraph(Steps)
        builder.add_node("node", node)
        builder.add_edge(START, "node")
        self.graph = builder.compile(checkpointer=InMemorySaver())


def _question(out: Any) -> Any:
    [stop] = out[adapter.INTERRUPT]
    return stop.value


def _run_in(fx: Fixture, graph: Any, input: Any, thread: str) -> Any:
    config = {"configurable": {"thread_id": thread}}
    return adapter.run(graph, fx.ul, input, config, session_id=fx.sid)


def test_the_nodes_own_question_is_asked_after_an_approved_call(fx: Fixture) -> None:
    """LangGraph hands resume values to a task's interrupt() calls by their order: the
    resumed payout takes its own answer, and the node's question is asked, then gets the
    person's answer to it."""
    asking = _Asking(fx, [700])
    request = _question(fx.run(asking.graph, {"done": False}))
    out = fx.run(asking.graph, adapter.decide(request, fx.approver, "bob", approved=True))
    assert fx.world.payouts == [700]
    assert _question(out) == {"question": "also close the account?"}
    assert asking.answers == []
    out = fx.run(asking.graph, Command(resume="yes"))
    assert asking.answers == ["yes"]
    assert out == {"done": True}
    assert fx.world.payouts == [700]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_langgraphs_bookkeeping_unreadable_is_said_once(
    fx: Fixture, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should a LangGraph release move the internals the adapter reads to keep a call's
    interrupt slot, the call still runs only once approved (it interrupts while UndoLog
    waits), and a warning says, once a process, that a node's own interrupt() may be
    handed its answer (docs/integrations.md)."""
    from undolog.integrations import _langchain_common

    monkeypatch.setattr(_langchain_common, "_next_interrupt", lambda: None)
    monkeypatch.setattr(_langchain_common, "_unreadable_said", False)
    caplog.set_level("WARNING", logger=_langchain_common.__name__)
    asking = _Asking(fx, [700])
    request = _question(fx.run(asking.graph, {"done": False}))
    assert fx.world.payouts == []
    fx.run(asking.graph, adapter.decide(request, fx.approver, "bob", approved=True))
    assert fx.world.payouts == [700]
    said = [r for r in caplog.records if "interrupt bookkeeping" in r.getMessage()]
    assert len(said) == 1


def test_two_approved_calls_of_one_node_then_its_own_question(fx: Fixture) -> None:
    asking = _Asking(fx, [100, 200])
    first = _question(fx.run(asking.graph, {"done": False}))
    out = fx.run(asking.graph, adapter.decide(first, fx.approver, "bob", approved=True))
    second = _question(out)
    assert second[0]["action_request"]["args"] == {"cents": 200}
    out = fx.run(asking.graph, adapter.decide(second, fx.approver, "bob", approved=True))
    assert _question(out) == {"question": "also close the account?"}
    assert asking.answers == []
    assert fx.run(asking.graph, Command(resume="no")) == {"done": True}
    assert asking.answers == ["no"]
    assert fx.world.payouts == [100, 200]


def test_a_resume_without_a_decision_then_the_nodes_question(fx: Fixture) -> None:
    """Resumed before UndoLog recorded a decision, the payout is asked about again (a
    second interrupt of its own); once approved, both of its answers are its own and the
    node's question still gets the person's answer to it."""
    asking = _Asking(fx, [300])
    request = _question(fx.run(asking.graph, {"done": False}))
    assert _question(fx.run(asking.graph, Command(resume="too soon"))) == request
    out = fx.run(asking.graph, adapter.decide(request, fx.approver, "bob", approved=True))
    assert _question(out) == {"question": "also close the account?"}
    assert fx.run(asking.graph, Command(resume="yes")) == {"done": True}
    assert asking.answers == ["yes"]
    assert fx.world.payouts == [300]


def test_an_approved_call_run_in_a_new_thread_asks_nobody_again(fx: Fixture) -> None:
    """The payout approved, the model's turn is run again in a new thread (a crash
    recovery: the model gives the same call again), and once the session completed, in
    another one (a replay): the payout was decided before it ran there, so nobody is
    asked again, and it runs once."""
    script = [calls(("payout", "c2", {"cents": 400})), AIMessage("paid")]
    _, request = _stopped(fx, 400)
    adapter.decide(request, fx.approver, "bob", approved=True)
    for thread in ("recovered", "replayed"):
        out = _run_in(fx, fx.chat_graph(list(script)), HELLO, thread)
        assert adapter.INTERRUPT not in out
        assert out["messages"][-1].content == "paid"
    assert fx.world.payouts == [400]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_call_resumed_by_interrupt_id_before_its_session_may_go_on(fx: Fixture) -> None:
    """Both payouts of a turn, each its own task: the first is approved and resumed by its
    interrupt id while the second is undecided (the first is held until it is): it stops
    again at the same interrupt, its id unchanged, and both run once decided."""
    turns = [
        calls(("payout", "p1", {"cents": 5}), ("payout", "p2", {"cents": 7})),
        AIMessage("paid"),
    ]
    graph = fx.chat_graph(turns, each_its_task=True)
    out = _approved_one_then_both(fx, graph)
    assert out["messages"][-1].content == "paid"
    assert sorted(fx.world.payouts) == [5, 7]
