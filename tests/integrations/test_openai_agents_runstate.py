"""An OpenAI Agents run stopped for a person, its RunState serialised to text and
resumed from that text alone, as a web app that waits days for the person does: the
stopped run's Python objects are gone, the agent and its tools are built again, and the
RunState comes back with ``RunState.from_string``; the person's decision goes through
``decide`` on the state read back. Then the saved text edited by someone between the
stop and the resume (the payout's amount), and the payout tool changed by a new release
of the app in between (its parameters, their defaults or types, its tier, or gone). The
SDK's own ScriptedModel (no LLM, no network); a real PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, ModelBehaviorError, RunState, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from test_openai_agents import Fixture

from integration_support import (
    PAYOUT_CHANGES,
    decisions,
    effects,
    payout_changed,
    pending,
    refused_then_rolled_back,
    session_state,
)
from undolog import ApprovalRejectedError, AwaitingApprovalError
from undolog.integrations import openai_agents as adapter


@pytest.fixture
def fx(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Fixture:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)
    return Fixture(dsn)


FIRST_TURNS: list[Any] = [
    [function_call("create_user", {"email": "a@x", "name": "A"}, call_id="c1")],
    [function_call("payout", {"cents": 500}, call_id="c2")],
]
LAST_TURN: list[Any] = [[assistant_message("paid")]]


def _agent(fx: Fixture, turns: list[Any]) -> Agent[Any]:
    """The agent as a process builds it: its tools made again from the functions."""
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"], fx.fns["payout"])
    return Agent(name="ops", model=ScriptedModel(list(turns)), tools=list(tools))


def _stopped_and_saved(fx: Fixture) -> str:
    """Run until the payout of 500 waits for a person; answer the RunState's text only.
    Every object of that run goes out of scope here."""
    result = asyncio.run(fx.run(_agent(fx, FIRST_TURNS), "pay Ada"))
    assert [item.call_id for item in result.interruptions] == ["c2"]
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    assert fx.world.runs["payout"] == 0
    return result.to_state().to_string()


def _stopped_and_approved(fx: Fixture) -> tuple[str, Any, tuple[str, list[Any]]]:
    """The run stopped at its payout and saved (its RunState's text), the payout approved
    by alice: the text, the approval's id, and the session's state and effects then."""
    text = _stopped_and_saved(fx)
    _, honest = _loaded(fx, text)
    [item] = honest.get_interruptions()
    asyncio.run(adapter.decide(honest, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    approval = asyncio.run(adapter.approval_id(fx.ul, fx.sid, item))
    return text, approval, (session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid))


def _loaded(fx: Fixture, text: str) -> tuple[Agent[Any], RunState[Any]]:
    """The agent built again (its model answers the turn after the payout) and the
    RunState read back from ``text``."""
    gc.collect()
    agent = _agent(fx, LAST_TURN)
    return agent, asyncio.run(RunState.from_string(agent, text))


def test_approved_after_a_reload_runs_once_with_the_approved_args(fx: Fixture) -> None:
    """decide on the state read back finds the call's request by its call id, and the
    resumed run pays 500 once, the user created before it not again."""
    text = _stopped_and_saved(fx)
    agent, state = _loaded(fx, text)
    [item] = state.get_interruptions()
    assert json.loads(item.arguments or "") == {"cents": 500}
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    resumed = asyncio.run(fx.run(agent, state))
    assert resumed.final_output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "committed", 0),
        ("payout", "committed", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_rejected_after_a_reload_never_runs(fx: Fixture) -> None:
    """A "no" through decide on the state read back ends the session (the default
    rule): the resume raises, the payout never runs, the user created before is undone."""
    text = _stopped_and_saved(fx)
    agent, state = _loaded(fx, text)
    [item] = state.get_interruptions()
    asyncio.run(
        adapter.decide(
            state, item, fx.ul, fx.sid, fx.approver, "alice", approved=False, reason="no"
        )
    )
    with pytest.raises(ApprovalRejectedError):
        asyncio.run(fx.run(agent, state))
    assert fx.world.runs["payout"] == 0
    assert fx.world.payouts == []
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("rejected", "alice")]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def _hostile(text: str) -> str:
    """``text`` with the payout's amount changed everywhere it is written."""
    edited = text.replace('{\\"cents\\":500}', '{\\"cents\\":50000}')
    assert edited != text and "500}" not in edited.replace("50000}", "")
    return edited


def test_an_amount_edited_in_the_saved_text_is_refused_at_the_decision(fx: Fixture) -> None:
    """Edited to 50000 before the person decides: the item read back shows 50000, the
    journal asks about 500, so decide refuses (nothing recorded), and the request of
    500 is still the one waiting; the edited state's resume runs nothing."""
    text = _stopped_and_saved(fx)
    agent, state = _loaded(fx, _hostile(text))
    [item] = state.get_interruptions()
    assert json.loads(item.arguments or "") == {"cents": 50000}
    with pytest.raises(ValueError, match=re.escape('not the {"cents": 50000} shown')):
        asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    [(_, asked)] = pending(fx.admin_dsn, fx.sid)
    assert asked == 500
    with pytest.raises(AwaitingApprovalError):
        asyncio.run(fx.run(agent, state))
    assert fx.world.runs["payout"] == 0
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"


def _without_the_sdks_ledger_entry(text: str) -> str:
    """``text`` without the SDK's record of call c2 (``context.tool_invocations``, an
    unkeyed SHA-256 of each call, which anyone who edits the text may drop or compute
    again): the SDK then takes the edited call as the one it stopped at."""
    data = json.loads(text)
    del data["context"]["tool_invocations"]["c2"]
    return json.dumps(data)


EDITS: dict[str, Callable[[str], str]] = {
    "amount": _hostile,
    "amount, SDK ledger dropped": lambda text: _without_the_sdks_ledger_entry(_hostile(text)),
}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("saved_after_decide", [False, True])
def test_an_amount_edited_after_the_approval_is_refused_before_anything_runs(
    fx: Fixture, edit: str, saved_after_decide: bool
) -> None:
    """The person approved the payout of 500 (decide on the state read back); the saved
    text (the one saved at the stop, or the state saved again after decide, the SDK's
    approval in it) is edited to 50000 before the resume. UndoLog approved the call of
    500 at step c2, not this one: the resume is refused before the session is touched,
    saying so; nothing runs, nothing is recorded, the session is as it was, and the
    honest text still resumes and pays 500 once. (Before: the SDK's own ledger failed
    the run as "Model reused a tool call ID" and the session was undone; with its entry
    dropped, the edited call reached the engine and asked a person anew for 50000.)"""
    text = _stopped_and_saved(fx)
    _, honest = _loaded(fx, text)
    [item] = honest.get_interruptions()
    asyncio.run(adapter.decide(honest, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    saved = honest.to_string() if saved_after_decide else text
    del honest, item
    before = session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)
    agent, state = _loaded(fx, EDITS[edit](saved))
    said = (
        "this RunState's payout call c2 is not the call UndoLog holds at its step "
        '(its arguments are {"cents": 500}, not the {"cents": 50000} shown): nothing was run'
    )
    with pytest.raises(ValueError, match=re.escape(said)):
        asyncio.run(fx.run(agent, state))

    async def streamed() -> None:
        async with adapter.run_streamed(agent, fx.ul, state, session_id=fx.sid):
            pass

    with pytest.raises(ValueError, match=re.escape(said)):
        asyncio.run(streamed())
    assert fx.world.runs["payout"] == 0
    assert fx.world.undone == []
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert (session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)) == before
    agent, state = _loaded(fx, saved)
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [500]
    assert fx.world.runs == {"create_user:a@x": 1, "payout": 1}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def _only_the_pending_function_call(text: str) -> str:
    """``text`` with the amount changed only in the SDK's record of the function call it
    will run on resume (``last_processed_response.functions``): the interruption, which
    the adapter compares with the journal, still shows 500."""
    data = json.loads(text)
    for function in data["last_processed_response"]["functions"]:
        function["tool_call"]["arguments"] = '{"cents":50000}'
    return json.dumps(data)


@pytest.mark.parametrize("ledger_dropped", [False, True])
def test_an_edit_the_interruption_does_not_show_is_refused_by_the_sdk_mid_run(
    fx: Fixture, ledger_dropped: bool
) -> None:
    """The limit of the adapter's check: it compares the interrupted calls (what the
    person decides on) with the journal. An edit of the call the SDK runs on resume that
    leaves the interruption as it was passes it; the SDK itself then finds two calls
    under one call id and fails the run (ModelBehaviorError), with or without its ledger
    entry. The payout never runs, but the run raised inside the session: the session
    fails, what it did is undone, and the person's approval is spent."""
    text = _stopped_and_saved(fx)
    _, honest = _loaded(fx, text)
    [item] = honest.get_interruptions()
    asyncio.run(adapter.decide(honest, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    del honest, item
    edited = _only_the_pending_function_call(text)
    if ledger_dropped:
        edited = _without_the_sdks_ledger_entry(edited)
    agent, state = _loaded(fx, edited)
    assert [json.loads(i.arguments or "") for i in state.get_interruptions()] == [{"cents": 500}]
    with pytest.raises(ModelBehaviorError, match="reused a tool call ID"):
        asyncio.run(fx.run(agent, state))
    assert fx.world.runs["payout"] == 0
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert effects(fx.admin_dsn, fx.sid) == [
        ("create_user", "compensated", 0),
        ("payout", "approved", 0),
    ]
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def _payout_with_a_currency(fx: Fixture) -> Any:
    """payout as a later release of the app defines it: a parameter with a default
    added (the same UndoLog tool, name and tier)."""
    [payout] = payout_changed(fx.world, "a parameter added with a default")
    return payout


def _with_a_currency(fx: Fixture, text: str) -> tuple[Agent[Any], RunState[Any]]:
    """The agent built again with payout taking a currency, and ``text`` read back."""
    gc.collect()
    tools = adapter.tools(fx.fns["search"], fx.fns["create_user"], _payout_with_a_currency(fx))
    agent = Agent(name="ops", model=ScriptedModel(list(LAST_TURN)), tools=list(tools))
    return agent, asyncio.run(RunState.from_string(agent, text))


TOOL_CHANGED = (
    "the payout call c2 names the arguments of the call UndoLog asked about, but the payout "
    "tool is not as it was when the call was journaled: it now takes currency (default "
    '"EUR"), which the journaled call does not have. The tool changed since the run stopped'
)


def test_a_tool_that_gained_a_default_since_the_stop_is_refused_saying_so(fx: Fixture) -> None:
    """The payout of 500 approved, the app is deployed again with payout taking a
    currency (default "EUR") before the resume. The RunState is as it was saved, but the
    call it resumes is payout(cents=500, currency="EUR"): its journal form (defaults
    applied) and so its signature are not those of the call a person approved,
    payout(cents=500), and the engine would take it as a new call at the same step (a
    second request for the same payout). The resume is refused before anything runs,
    saying what differs (the tool's defaults, not the RunState's text) and what to do;
    the tool as it was still resumes it."""
    text, approval, before = _stopped_and_approved(fx)
    agent, state = _with_a_currency(fx, text)
    with pytest.raises(ValueError) as refused:
        asyncio.run(fx.run(agent, state))
    said = str(refused.value)
    assert said.startswith(f"this RunState's payout call, approved (approval {approval}): ")
    assert TOOL_CHANGED in said
    assert "the RunState was changed" not in said
    assert "nothing was run. Decide on it and resume with the tool as it was" in said
    assert f"undolog sessions rollback {fx.sid} --by WHO" in said
    assert fx.world.runs["payout"] == 0
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]
    assert (session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)) == before
    agent, state = _loaded(fx, text)
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    assert fx.world.payouts == [500]


def test_a_decision_under_a_tool_that_gained_a_default_is_refused_saying_so(
    fx: Fixture,
) -> None:
    """decide on the saved state read back by the app with payout taking a currency:
    the person is shown payout(cents=500, currency="EUR"), UndoLog asks about
    payout(cents=500). Refused, nothing recorded, saying the tool's defaults differ;
    decided under the tool as it was, it goes through."""
    text = _stopped_and_saved(fx)
    _, state = _with_a_currency(fx, text)
    [item] = state.get_interruptions()
    with pytest.raises(ValueError) as refused:
        asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    said = str(refused.value)
    assert TOOL_CHANGED in said
    assert "nothing was recorded" in said
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    _, state = _loaded(fx, text)
    [item] = state.get_interruptions()
    asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "alice")]


def _payout_changed(fx: Fixture, change: str) -> list[Any]:
    """The tools of the agent as a later release of the app builds them, payout changed
    as ``change`` says (the rest as they were)."""
    return [fx.fns["search"], fx.fns["create_user"], *payout_changed(fx.world, change)]


# What each change of payout is said to be, after "is not as it was when the call was
# journaled: " (a parameter added with a default: the tests above).
CHANGED: dict[str, str] = {
    change: said
    for change, said in PAYOUT_CHANGES.items()
    if change != "a parameter added with a default"
}


def _with_payout_changed(fx: Fixture, change: str, text: str) -> tuple[Agent[Any], RunState[Any]]:
    """The agent built again with payout changed as ``change`` says, and ``text`` read
    back."""
    gc.collect()
    tools = adapter.tools(*_payout_changed(fx, change))
    agent = Agent(name="ops", model=ScriptedModel(list(LAST_TURN)), tools=list(tools))
    return agent, asyncio.run(RunState.from_string(agent, text))


@pytest.mark.parametrize("change", list(CHANGED))
def test_a_tool_changed_otherwise_since_the_stop_is_refused_saying_so(
    fx: Fixture, change: str
) -> None:
    """The payout of 500 approved, the app is deployed again with payout changed before
    the resume: a parameter without a default added, its parameter removed, renamed or
    of another type, its tier changed, or the tool gone from the agent. This tool cannot
    make the call a person approved. (Before: the SDK told the model its arguments were
    wrong and the session completed, the approval spent and the payout never run; the
    engine refused the tool's new tier mid-run, or the SDK found no tool, and the session
    failed and was undone; a SAFE payout ran unjournaled; a removed parameter was called
    an edit of the RunState.) The resume and the streamed resume are refused before
    anything runs, saying what changed and what to do; nothing is recorded, and the
    session can still be rolled back, undoing what it did."""
    text, approval, before = _stopped_and_approved(fx)
    agent, state = _with_payout_changed(fx, change, text)
    with pytest.raises(ValueError) as refused:
        asyncio.run(fx.run(agent, state))
    said = str(refused.value)
    assert said.startswith(f"this RunState's payout call, approved (approval {approval}): ")
    journaled = "the payout tool is not as it was when the call was journaled: "
    assert f"{journaled}{CHANGED[change]}. The tool changed since the run stopped" in said
    assert "nothing was run. Decide on it and resume with the tool as it was" in said
    assert f"undolog sessions rollback {fx.sid} --by WHO" in said

    async def streamed() -> None:
        async with adapter.run_streamed(agent, fx.ul, state, session_id=fx.sid):
            pass

    with pytest.raises(ValueError, match=re.escape(CHANGED[change])):
        asyncio.run(streamed())
    refused_then_rolled_back(
        fx.world, fx.admin_dsn, fx.sid, before, lambda: asyncio.run(fx.ul.run_walk(fx.sid))
    )


@pytest.mark.parametrize("change", list(CHANGED))
def test_a_decision_under_a_tool_changed_otherwise_is_refused_saying_so(
    fx: Fixture, change: str
) -> None:
    """decide on the saved state read back by the app with payout changed: the call the
    person would approve is not one this tool makes. Refused, nothing recorded, saying
    what changed in the tool (before: the tool's refusal of the arguments was called an
    edit, shown as their JSON text, and a tool removed or of another tier was decided
    unchecked, for a resume that then failed)."""
    text = _stopped_and_saved(fx)
    _, state = _with_payout_changed(fx, change, text)
    [item] = state.get_interruptions()
    with pytest.raises(ValueError) as refused:
        asyncio.run(adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    said = str(refused.value)
    assert f"was journaled: {CHANGED[change]}. The tool changed" in said
    assert "nothing was recorded" in said
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
