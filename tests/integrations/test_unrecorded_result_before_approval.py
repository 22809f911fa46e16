"""A result the journal refuses (over its payload limit), sent without waiting, and then
an IRREVERSIBLE call the framework holds for a person: the run raises the refused
result's error instead of stopping for the person, the session fails and its walk
compensates the unrecorded call, and nobody is asked about a call of the doomed run.
Driven by pydantic-ai's own FunctionModel (no LLM, no network)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from integration_support import AsyncAgentFixture, decisions, effects, session_state
from undolog import CompensationDescriptor, PayloadTooLarge, ToolTier, undolog_tool
from undolog.integrations import pydantic_ai as adapter

BIG = 1024 * 1024 + 10  # characters: over the engine's payload limit (1 MiB of JSON)


def scripted(turns: list[Sequence[ToolCallPart | TextPart]]) -> FunctionModel:
    pending = list(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=list(pending.pop(0)))

    return FunctionModel(respond)


def run_with_export(fx: AsyncAgentFixture, turns: list[Sequence[ToolCallPart | TextPart]]) -> None:
    """Run the agent of ``turns`` with ``export`` (COMPENSABLE, its result too large to
    journal) and ``payout`` (IRREVERSIBLE): PayloadTooLarge must leave the run."""

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    async def export(email: str) -> str:
        """Export a user's report."""
        fx.world.runs["export"] += 1
        return "x" * BIG

    agent: Agent[None, Any] = Agent(
        scripted(turns),
        output_type=[str, DeferredToolRequests],
        tools=adapter.tools(export, fx.fns["payout"]),
    )
    with pytest.raises(PayloadTooLarge):
        asyncio.run(adapter.run(agent, fx.ul, session_id=fx.sid, user_prompt="go"))


def test_a_refused_result_then_a_held_call_in_the_next_turn_asks_nobody(dsn: str) -> None:
    fx = AsyncAgentFixture(dsn)
    run_with_export(
        fx,
        [
            [ToolCallPart("export", {"email": "a@x"}, "c1")],
            [ToolCallPart("payout", {"cents": 500}, "c2")],
            [TextPart("done")],
        ],
    )
    assert fx.world.runs["export"] == 1 and fx.world.payouts == []
    assert effects(fx.admin_dsn, fx.sid) == [("export", "compensated", 0)]
    assert fx.world.undone == ["a@x"]
    assert decisions(fx.admin_dsn, fx.sid) == []
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"


def test_a_refused_result_beside_a_held_call_in_the_same_turn_asks_nobody(dsn: str) -> None:
    fx = AsyncAgentFixture(dsn)
    run_with_export(
        fx,
        [
            [
                ToolCallPart("export", {"email": "a@x"}, "c1"),
                ToolCallPart("payout", {"cents": 500}, "c2"),
            ],
            [TextPart("done")],
        ],
    )
    assert fx.world.runs["export"] == 1 and fx.world.payouts == []
    assert effects(fx.admin_dsn, fx.sid) == [("export", "compensated", 0)]
    assert decisions(fx.admin_dsn, fx.sid) == []
    assert session_state(fx.admin_dsn, fx.sid) == "compensated"
