"""The pydantic-ai adapter's decide and decisions given what they must not act on: an
answer for a call that was not asked, requests whose metadata names the approval of
another call (another tool, fewer arguments), a call whose metadata lost its approval
id, a deferred call of a pydantic-ai tool that is not UndoLog's (declared
``requires_approval``); and UndoLog tools in a prefixed toolset."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, Tool
from pydantic_ai.messages import TextPart
from pydantic_ai.tools import ToolApproved
from pydantic_ai.toolsets import FunctionToolset
from test_pydantic_ai import Fixture, Turn, _pay, call, scripted

from integration_support import decisions, effects, session_state
from undolog import UndoLog
from undolog.integrations import pydantic_ai as adapter


@pytest.fixture
def fx(dsn: str) -> Fixture:
    return Fixture(dsn)


def _states(fx: Fixture) -> list[str]:
    return [state for state, _ in decisions(fx.admin_dsn, fx.sid)]


def test_an_answer_for_a_call_not_asked_records_nothing(fx: Fixture) -> None:
    result, _ = _pay(fx)
    with pytest.raises(ValueError, match="forged"):
        asyncio.run(adapter.decide(result.output, fx.approver, "bob", {"c2": True, "forged": True}))
    assert _states(fx) == ["pending"]


def test_a_rejection_for_a_call_not_asked_records_nothing(fx: Fixture) -> None:
    """Its metadata names c2's approval, but the requests do not ask about it."""
    result, _ = _pay(fx)
    requests = result.output
    requests.metadata["ghost"] = dict(requests.metadata["c2"])
    with pytest.raises(ValueError, match="ghost"):
        asyncio.run(adapter.decide(requests, fx.approver, "bob", {"ghost": False}, "no"))
    assert _states(fx) == ["pending"]


def test_a_yes_to_the_call_shown_never_approves_another(fx: Fixture) -> None:
    """The requests show payout p1 of 5 cents, but its metadata names the approval of
    payout p2 of 900000 cents: decide refuses, with or without the agent, and records
    nothing; decisions refuses too."""
    turns: list[Turn] = [[call("payout", "p1", cents=5), call("payout", "p2", cents=900000)]]
    result = asyncio.run(fx.run(turns, user_prompt="go"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    requests.metadata["p1"], requests.metadata["p2"] = (
        requests.metadata["p2"],
        requests.metadata["p1"],
    )
    for agent in (None, fx.ran):
        with pytest.raises(ValueError, match="another call"):
            asyncio.run(adapter.decide(requests, fx.approver, "alice", {"p1": True}, agent=agent))
        with pytest.raises(ValueError, match="another call"):
            asyncio.run(adapter.decide(requests, fx.ul, "agent", {"p2": False}, agent=agent))
    with pytest.raises(ValueError, match="another call"):
        asyncio.run(adapter.decisions(fx.ul, requests))
    assert _states(fx) == ["pending", "pending"]


def test_arguments_that_are_not_the_journals_are_refused(fx: Fixture) -> None:
    """Same call id, same tool, same step, but the requests show other arguments."""
    result, _ = _pay(fx)
    requests = result.output
    requests.approvals[0] = call("payout", "c2", cents=5)
    with pytest.raises(ValueError, match="the arguments"):
        asyncio.run(adapter.decide(requests, fx.approver, "alice", {"c2": True}))
    assert _states(fx) == ["pending"]


def test_a_callable_approver_needs_a_client_to_read_the_requests(fx: Fixture) -> None:
    result, rest = _pay(fx)
    recorded: list[uuid.UUID] = []

    async def record(approval: uuid.UUID, approved: bool, by: str, reason: str | None) -> None:
        recorded.append(approval)
        await fx.approver.approve(approval, by, reason)

    with pytest.raises(ValueError, match="ul="):
        asyncio.run(adapter.decide(result.output, record, "alice", {"c2": True}))
    assert recorded == []
    answers = asyncio.run(adapter.decide(result.output, record, "alice", {"c2": True}, ul=fx.ul))
    assert recorded == [adapter.approval_id(result.output, "c2")]
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]


def test_a_requires_approval_tool_is_never_approved_by_decide(fx: Fixture) -> None:
    """A pydantic-ai tool declared requires_approval=True beside an UndoLog IRREVERSIBLE
    call: answered only about the UndoLog call, decide (and decisions) leave the other
    out, and pydantic-ai refuses to resume; answered, its answer goes to pydantic-ai as
    it is, recorded nowhere in UndoLog."""
    deleted: list[str] = []

    def delete_repo(name: str) -> str:
        """Delete a repository."""
        deleted.append(name)
        return "deleted"

    tools = [*adapter.tools(fx.fns["payout"]), Tool(delete_repo, requires_approval=True)]
    turns: list[Turn] = [[call("payout", "c2", cents=5), call("delete_repo", "d1", name="prod")]]
    result = asyncio.run(fx.run(turns, tools, user_prompt="go"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert {p.tool_call_id for p in requests.approvals} == {"c2", "d1"}
    assert set(asyncio.run(adapter.decisions(fx.ul, requests)).approvals) == {"c2"}
    answers = asyncio.run(
        adapter.decide(requests, fx.approver, "alice", {"c2": True}, agent=fx.ran)
    )
    assert answers.approvals == {"c2": True}
    with pytest.raises(Exception, match="d1"):
        asyncio.run(
            fx.run(
                [[TextPart("done")]],
                tools,
                message_history=result.all_messages(),
                deferred_tool_results=answers,
            )
        )
    assert deleted == []
    assert fx.world.payouts == []
    denied = asyncio.run(
        adapter.decide(requests, fx.approver, "alice", {"d1": False}, agent=fx.ran)
    )
    assert denied.approvals == {"c2": True, "d1": False}  # c2 approved above: asked again
    assert _states(fx) == ["approved"]
    resumed = asyncio.run(
        fx.run(
            [[TextPart("done")]],
            tools,
            message_history=result.all_messages(),
            deferred_tool_results=denied,
        )
    )
    assert resumed.output == "done"
    assert deleted == []
    assert fx.world.payouts == [5]


def _bank_agent(tools: list[Any], turns: list[Turn]) -> Agent[None, Any]:
    """An agent whose tools are in a toolset prefixed "bank" (the model calls the payout
    bank_payout; the journal holds it as payout), answering the scripted turns."""
    return Agent(
        scripted(turns),
        output_type=[str, DeferredToolRequests],
        toolsets=[FunctionToolset(tools).prefixed("bank")],
    )


def test_undolog_tools_in_a_prefixed_toolset_are_decided(fx: Fixture) -> None:
    agent = _bank_agent(
        adapter.tools(fx.fns["payout"]),
        [[call("bank_payout", "c2", cents=500)], [TextPart("paid")]],
    )
    result = asyncio.run(adapter.run(agent, fx.ul, session_id=fx.sid, user_prompt="pay"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert requests.metadata["c2"][adapter.TOOL_KEY] == "payout"
    edit = ToolApproved(override_args={"cents": "50"})
    answers = asyncio.run(adapter.decide(requests, fx.approver, "alice", {"c2": edit}, agent=agent))
    out = asyncio.run(
        adapter.run(
            agent,
            fx.ul,
            session_id=fx.sid,
            message_history=result.all_messages(),
            deferred_tool_results=answers,
        )
    )
    assert out.output == "paid"
    assert fx.world.payouts == [50]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_a_prefixed_toolsets_tool_removed_before_the_resume_is_refused(fx: Fixture) -> None:
    """The model calls a prefixed toolset's payout bank_payout; the journal holds it as
    payout. Approved, then resumed by an agent that no longer has it: refused before
    anything runs, naming the journal's tool (before: the run went on without it, the
    session completed, and the approved payout never ran)."""
    paying = _bank_agent(
        adapter.tools(fx.fns["payout"]),
        [[call("bank_payout", "c2", cents=500)], [TextPart("paid")]],
    )
    result = asyncio.run(adapter.run(paying, fx.ul, session_id=fx.sid, user_prompt="pay"))
    answers = asyncio.run(
        adapter.decide(result.output, fx.approver, "alice", {"c2": True}, agent=paying)
    )
    before = session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)

    def resumed(tools: list[Any]) -> Any:
        agent = _bank_agent(tools, [[TextPart("paid")]])
        history = result.all_messages()
        return asyncio.run(
            adapter.run(
                agent,
                fx.ul,
                session_id=fx.sid,
                message_history=history,
                deferred_tool_results=answers,
            )
        )

    with pytest.raises(ValueError, match="the agent has no journaled payout tool now"):
        resumed(adapter.tools(fx.fns["search"]))
    assert fx.world.runs["payout"] == 0
    assert (session_state(fx.admin_dsn, fx.sid), effects(fx.admin_dsn, fx.sid)) == before
    assert resumed(adapter.tools(fx.fns["payout"])).output == "paid"  # the tool as it was
    assert fx.world.payouts == [500]


def test_a_sync_approver_reads_the_requests_too(fx: Fixture) -> None:
    """A sync UndoLog approver: the requests are read (and the decision recorded) through
    it, in a worker thread; a request naming another call is refused as with an async one."""
    result, rest = _pay(fx)
    approver = UndoLog(fx.approver.dsn)
    shown = result.output
    forged = dataclasses.replace(shown, approvals=[call("payout", "c2", cents=5)])
    with pytest.raises(ValueError, match="the arguments"):
        asyncio.run(adapter.decide(forged, approver, "alice", {"c2": True}))
    assert _states(fx) == ["pending"]
    answers = asyncio.run(adapter.decide(shown, approver, "alice", {"c2": True}))
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [500]


def _big_payout(fx: Fixture) -> DeferredToolRequests:
    turns: list[Turn] = [[call("payout", "c2", cents=900000)], [TextPart("paid")]]
    result = asyncio.run(fx.run(turns, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    return result.output


def test_a_call_shown_with_fewer_arguments_is_not_the_journals(fx: Fixture) -> None:
    """Without agent=, the shown arguments must be the journal's exactly: payout shown
    with no arguments is not the 900000-cent payout its approval asks about."""
    forged = dataclasses.replace(_big_payout(fx), approvals=[call("payout", "c2")])
    with pytest.raises(ValueError, match="the arguments"):
        asyncio.run(adapter.decide(forged, fx.approver, "alice", {"c2": True}))
    assert _states(fx) == ["pending"]


def test_the_tool_compared_is_the_one_shown_not_the_metadatas(fx: Fixture) -> None:
    """A harmless tool the agent does not have, shown with the payout's call id, its
    metadata naming the payout's approval and tool: the tool shown is compared with the
    journal's (never the metadata's TOOL_KEY), with agent= or without; nothing is
    recorded, and the run resumed with the real call answered yes does not pay."""
    requests = _big_payout(fx)
    assert requests.metadata["c2"][adapter.TOOL_KEY] == "payout"
    forged = dataclasses.replace(requests, approvals=[call("check_balance", "c2")])
    with pytest.raises(ValueError, match="the tool"):
        asyncio.run(adapter.decide(forged, fx.approver, "alice", {"c2": True}, agent=fx.ran))
    with pytest.raises(ValueError, match="the tool"):
        asyncio.run(adapter.decide(forged, fx.approver, "alice", {"c2": True}))
    with pytest.raises(ValueError, match="the tool"):
        asyncio.run(adapter.decisions(fx.ul, forged, agent=fx.ran))
    assert _states(fx) == ["pending"]
    assert fx.world.payouts == []


def test_a_call_whose_metadata_names_no_approval_needs_the_runs_tools(fx: Fixture) -> None:
    """The metadata of an UndoLog call without its approval id (dropped by the agent's
    process): without agent=, decide cannot tell it from a requires_approval tool of the
    agent's own and refuses, recording nothing, rather than hand the person's "no" to
    pydantic-ai only and leave the payout pending; with agent=, it is the run's UndoLog
    tool, refused as before."""
    requests = _big_payout(fx)
    requests.metadata.pop("c2")
    with pytest.raises(ValueError, match="agent="):
        asyncio.run(adapter.decide(requests, fx.approver, "alice", {"c2": False}, "no"))
    with pytest.raises(ValueError, match="names no UndoLog approval"):
        asyncio.run(
            adapter.decide(requests, fx.approver, "alice", {"c2": False}, "no", agent=fx.ran)
        )
    assert _states(fx) == ["pending"]
