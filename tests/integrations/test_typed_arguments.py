"""Tools with typed arguments (a pydantic BaseModel, a datetime.date, a Decimal) through
each framework adapter. The framework validates the model's JSON into those types before
it calls the tool; UndoLog journals and signs the JSON form of the validated arguments
(what the model sent, read by the tool's types), while the body gets the typed objects.
A person's edit (JSON) is read by the tool's types as well, and a pydantic-ai
``ToolApproved(override_args=...)`` is validated by the tool before anything is recorded.

Each framework with its own test model: pydantic-ai's FunctionModel, the OpenAI Agents
SDK's ScriptedModel, a scripted LangChain chat model; real PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import test_langgraph as lg
import test_openai_agents as oa
import test_pydantic_ai as pa
from agents import set_tracing_disabled
from agents.testing import assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import TextPart
from pydantic_ai.tools import ToolApproved

from integration_support import (
    AsyncAgentFixture,
    decided_and_resumed,
    decisions,
    effects,
    session_state,
)
from undolog import (
    AsyncUndoLog,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)
from undolog.integrations import langchain as lc_adapter
from undolog.integrations import openai_agents as oa_adapter
from undolog.integrations import pydantic_ai as pa_adapter


class Booking(BaseModel):
    room: str
    nights: int


# What the model sends (JSON), and what the journal holds: the same JSON.
BOOK_ARGS: dict[str, Any] = {
    "when": "2025-01-02",
    "booking": {"room": "a", "nights": 2},
    "price": "12.50",
}
TYPED = (datetime.date(2025, 1, 2), Booking(room="a", nights=2), Decimal("12.50"))


class Typed:
    """book (COMPENSABLE) and pay_on (IRREVERSIBLE), async and sync, whose bodies note the
    arguments they got."""

    def __init__(self) -> None:
        self.ran: list[tuple[Any, ...]] = []
        ran = self.ran

        @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
        async def book(when: datetime.date, booking: Booking, price: Decimal) -> str:
            """Book a room."""
            ran.append((when, booking, price))
            return "booked"

        @undolog_tool(
            tier=ToolTier.COMPENSABLE,
            compensation=CompensationDescriptor.new("unbook"),
            name="book",
        )
        def book_sync(when: datetime.date, booking: Booking, price: Decimal) -> str:
            """Book a room."""
            ran.append((when, booking, price))
            return "booked"

        @undolog_tool(tier=ToolTier.IRREVERSIBLE)
        async def pay_on(when: datetime.date, cents: int) -> str:
            """Pay on a day."""
            ran.append((when, cents))
            return "paid"

        @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="pay_on")
        def pay_on_sync(when: datetime.date, cents: int) -> str:
            """Pay on a day."""
            ran.append((when, cents))
            return "paid"

        self.book, self.book_sync = book, book_sync
        self.pay_on, self.pay_on_sync = pay_on, pay_on_sync

    def register(self, ul: UndoLog | AsyncUndoLog) -> None:
        @ul.compensation("unbook")
        def unbook(call: CompensationCall) -> None:  # pragma: no cover (runs complete)
            pass


def _journaled_args(dsn: str, session_id: uuid.UUID) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT args FROM undolog.undolog_effect_log WHERE session_id = %s "
            "ORDER BY executed_at, effect_id",
            (session_id,),
        ).fetchall()
    return [dict(row[0]) for row in rows]


def _exactly(got: tuple[Any, ...], want: tuple[Any, ...]) -> None:
    """The body got these values, of these very types (not their JSON)."""
    assert got == want
    assert [type(v) for v in got] == [type(v) for v in want]


def _booked_then_replayed(fx: AsyncAgentFixture, typed: Typed, book: Callable[[], str]) -> None:
    """``book`` (a run of ``typed.book`` with BOOK_ARGS whose model then answers "done")
    made twice in the fixture's session: the body gets the typed objects, the journal
    their JSON; made again from scratch, the same model JSON has the same signature, so
    the call comes back from the journal and the body does not run again."""
    assert book() == "done"
    [got] = typed.ran
    _exactly(got, TYPED)
    assert _journaled_args(fx.admin_dsn, fx.sid) == [BOOK_ARGS]
    assert book() == "done"
    assert len(typed.ran) == 1
    assert effects(fx.admin_dsn, fx.sid) == [("book", "committed", 1)]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- pydantic-ai ---------------------------------------------------------------------


@pytest.fixture
def pfx(dsn: str) -> tuple[pa.Fixture, Typed]:
    fx, typed = pa.Fixture(dsn), Typed()
    typed.register(fx.ul)
    return fx, typed


def test_pydantic_ai_typed_arguments_are_journaled_as_json_and_replay(
    pfx: tuple[pa.Fixture, Typed],
) -> None:
    fx, typed = pfx
    tools = pa_adapter.tools(typed.book)

    def book() -> str:
        turns: list[pa.Turn] = [[pa.call("book", "c1", **BOOK_ARGS)], [TextPart("done")]]
        return str(asyncio.run(fx.run(turns, tools, user_prompt="book")).output)

    _booked_then_replayed(fx, typed, book)


def test_pydantic_ai_typed_irreversible_call_edited_runs_with_typed_arguments(
    pfx: tuple[pa.Fixture, Typed],
) -> None:
    fx, typed = pfx
    tools = pa_adapter.tools(typed.pay_on)
    first: list[pa.Turn] = [[pa.call("pay_on", "c1", when="2025-01-02", cents=500)]]
    result = asyncio.run(fx.run(first, tools, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    assert typed.ran == []
    edited = ToolApproved(override_args={"when": "2025-03-04"})
    resumed = decided_and_resumed(fx, result, tools, {"c1": edited})
    assert resumed.output == "paid"
    [got] = typed.ran
    _exactly(got, (datetime.date(2025, 3, 4), 500))
    assert _journaled_args(fx.admin_dsn, fx.sid) == [{"when": "2025-01-02", "cents": 500}]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_pydantic_ai_an_edit_is_validated_by_the_tool(dsn: str) -> None:
    """A person's override_args are read by the tool's validator, as pydantic-ai reads
    the model's: "50" for cents: int runs with 50; "fifty" raises ValueError, and nothing
    is recorded (the request still waits)."""
    fx = pa.Fixture(dsn)
    result, rest = pa._pay(fx)
    with pytest.raises(ValueError, match="do not fit"):
        asyncio.run(
            pa_adapter.decide(
                result.output,
                fx.approver,
                "bob",
                {"c2": ToolApproved(override_args={"cents": "fifty"})},
                agent=fx.ran,
            )
        )
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    edited = ToolApproved(override_args={"cents": "50"})
    answers = asyncio.run(
        pa_adapter.decide(result.output, fx.approver, "bob", {"c2": edited}, agent=fx.ran)
    )
    assert decisions(fx.admin_dsn, fx.sid) == [("approved", "bob")]
    resumed = asyncio.run(
        fx.run(rest, message_history=result.all_messages(), deferred_tool_results=answers)
    )
    assert resumed.output == "paid"
    assert fx.world.payouts == [50]
    assert type(fx.world.payouts[0]) is int
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- OpenAI Agents SDK -----------------------------------------------------------------


@pytest.fixture
def ofx(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[oa.Fixture, Typed]]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    set_tracing_disabled(True)
    fx, typed = oa.Fixture(dsn), Typed()
    typed.register(fx.ul)
    yield fx, typed


def test_openai_agents_typed_arguments_are_journaled_as_json_and_replay(
    ofx: tuple[oa.Fixture, Typed],
) -> None:
    fx, typed = ofx
    tools = oa_adapter.tools(typed.book)

    def book() -> str:
        script = [[function_call("book", BOOK_ARGS, call_id="c1")], [assistant_message("done")]]
        return str(asyncio.run(fx.run(fx.agent(script, tools), "book")).final_output)

    _booked_then_replayed(fx, typed, book)


def test_openai_agents_typed_irreversible_call_asks_and_runs_with_typed_arguments(
    ofx: tuple[oa.Fixture, Typed],
) -> None:
    fx, typed = ofx
    script = [
        [function_call("pay_on", {"when": "2025-01-02", "cents": 500}, call_id="c1")],
        [assistant_message("paid")],
    ]
    agent = fx.agent(script, oa_adapter.tools(typed.pay_on))
    result = asyncio.run(fx.run(agent, "pay"))
    [item] = result.interruptions
    assert session_state(fx.admin_dsn, fx.sid) == "awaiting_approval"
    state = result.to_state()
    asyncio.run(oa_adapter.decide(state, item, fx.ul, fx.sid, fx.approver, "alice", approved=True))
    assert asyncio.run(fx.run(agent, state)).final_output == "paid"
    [got] = typed.ran
    _exactly(got, (datetime.date(2025, 1, 2), 500))
    assert _journaled_args(fx.admin_dsn, fx.sid) == [{"when": "2025-01-02", "cents": 500}]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- LangGraph -----------------------------------------------------------------------


@pytest.fixture
def lfx(dsn: str) -> tuple[lg.Fixture, Typed]:
    fx, typed = lg.Fixture(dsn), Typed()
    typed.register(fx.ul)
    typed.register(fx.aul)
    return fx, typed


def test_langgraph_typed_arguments_are_journaled_as_json_and_replay(
    lfx: tuple[lg.Fixture, Typed],
) -> None:
    fx, typed = lfx

    def turns() -> list[Any]:
        return [lg.calls(("book", "c1", BOOK_ARGS)), AIMessage("done")]

    tools = lc_adapter.tools(typed.book_sync)
    out = fx.run(fx.chat_graph(turns(), tools), {"messages": [HumanMessage("go")]})
    assert out["messages"][-1].content == "done"
    [got] = typed.ran
    _exactly(got, TYPED)
    assert _journaled_args(fx.admin_dsn, fx.sid) == [BOOK_ARGS]
    fx.config = {"configurable": {"thread_id": "again"}}  # a new thread, the same session
    fx.run(fx.chat_graph(turns(), tools), {"messages": [HumanMessage("go")]})
    assert len(typed.ran) == 1
    assert effects(fx.admin_dsn, fx.sid) == [("book", "committed", 1)]


def test_langgraph_async_typed_arguments_are_journaled_as_json(
    lfx: tuple[lg.Fixture, Typed],
) -> None:
    fx, typed = lfx
    graph = fx.chat_graph(
        [lg.calls(("book", "c1", BOOK_ARGS)), AIMessage("done")], lc_adapter.tools(typed.book)
    )
    out = asyncio.run(
        lc_adapter.arun(
            graph, fx.aul, {"messages": [HumanMessage("go")]}, fx.config, session_id=fx.sid
        )
    )
    assert out["messages"][-1].content == "done"
    [got] = typed.ran
    _exactly(got, TYPED)
    assert _journaled_args(fx.admin_dsn, fx.sid) == [BOOK_ARGS]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_langgraph_typed_irreversible_call_edited_runs_with_typed_arguments(
    lfx: tuple[lg.Fixture, Typed],
) -> None:
    fx, typed = lfx
    tools = lc_adapter.tools(typed.pay_on_sync)
    graph = fx.chat_graph(
        [lg.calls(("pay_on", "c1", {"when": "2025-01-02", "cents": 500})), AIMessage("paid")],
        tools,
    )
    out = fx.run(graph, {"messages": [HumanMessage("go")]})
    [pending] = out[lc_adapter.INTERRUPT]
    [request] = pending.value
    # the person sees the call's JSON, as the journal holds it
    assert request["action_request"] == {
        "action": "pay_on",
        "args": {"when": "2025-01-02", "cents": 500},
    }
    edit = {"when": "2025-03-04", "cents": 500}
    command = lc_adapter.decide(
        request, fx.approver, "alice", approved=True, args=edit, tools=tools
    )
    out = fx.run(graph, command)
    assert out["messages"][-1].content == "paid"
    [got] = typed.ran
    _exactly(got, (datetime.date(2025, 3, 4), 500))
    assert session_state(fx.admin_dsn, fx.sid) == "completed"
