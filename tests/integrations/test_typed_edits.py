"""A person's edit of a call with typed arguments, and what the journal may hold of a
typed argument, through the pydantic-ai and LangChain adapters.

- pydantic-ai: an edit of a tool whose one parameter is a model, in the shape the journal
  holds and the person is shown (``{"order": {...}}``) or by the model's fields, runs with
  the edit, and the history shows what ran; a key the tool does not take is refused; an
  edit is checked by the schema of the run's own tool (the agent ``decide`` is given),
  never another agent's tool of the same name; override_args that are not a mapping
  raise ValueError.
- A typed argument whose JSON form does not read back into an equal value (a SecretStr,
  a field excluded from serialization) is refused before it is journaled: two calls told
  apart by it alone would share a signature, and an edit would hand the body its JSON.
- An edit of one argument hands the body the other arguments as the framework gave them.
- LangChain: an edit is checked by the schema of the call's tool among the tools
  ``decide`` is given, never another tool of its name; an edit of a model with aliases is
  recorded by alias, as the journal holds it.
- A set inside a model has one JSON form from process to process.

Each framework with its own test model: pydantic-ai's FunctionModel, a scripted LangChain
chat model; real PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import os
import subprocess
import sys
import zoneinfo
from typing import Any

import pytest
import test_langgraph as lg
import test_pydantic_ai as pa
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.alias_generators import to_camel
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolApproved

from integration_support import decided_and_resumed, decisions, session_state
from undolog import SignatureError, ToolTier, undolog_tool
from undolog.integrations import _core
from undolog.integrations import _langchain_common as lc_common
from undolog.integrations import langchain as lc_adapter
from undolog.integrations import pydantic_ai as pa_adapter


class Order(BaseModel):
    cents: int
    to: str


def _pay_order(ran: list[Order], name: str) -> Any:
    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name=name)
    async def pay(order: Order) -> str:
        """Pay an order."""
        ran.append(order)
        return "paid"

    return pay


def _call_part(messages: list[Any], call_id: str) -> ToolCallPart:
    [part] = [
        p
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_call_id == call_id
    ]
    return part


@pytest.mark.parametrize(
    "override",
    [{"order": {"cents": 50, "to": "x"}}, {"cents": 50}, {"order": {"cents": 50}}],
    ids=["journal-shape", "fields", "journal-shape-partial"],
)
def test_pydantic_ai_single_model_edit_runs_with_it_and_the_history_shows_it(
    dsn: str, override: dict[str, Any]
) -> None:
    fx = pa.Fixture(dsn)
    ran: list[Order] = []
    tools = pa_adapter.tools(_pay_order(ran, "pay_order"))
    first: list[pa.Turn] = [[pa.call("pay_order", "c1", cents=100, to="x")]]
    result = asyncio.run(fx.run(first, tools, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    edited = ToolApproved(override_args=override)
    resumed = decided_and_resumed(fx, result, tools, {"c1": edited})
    assert resumed.output == "paid"
    assert ran == [Order(cents=50, to="x")]
    # the model's next turn, and a saved history, see the call as it ran: the fields
    assert _call_part(resumed.all_messages(), "c1").args_as_dict() == {"cents": 50, "to": "x"}
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


def test_pydantic_ai_an_edit_naming_what_the_tool_does_not_take_is_refused(dsn: str) -> None:
    """A key the tool does not take is refused, never ignored: for a single model
    parameter the model's validator would ignore it, and the call would run unedited."""
    fx = pa.Fixture(dsn)
    ran: list[Order] = []
    tools = pa_adapter.tools(_pay_order(ran, "pay_order"))
    first: list[pa.Turn] = [[pa.call("pay_order", "c1", cents=100, to="x")]]
    result = asyncio.run(fx.run(first, tools, user_prompt="pay"))
    assert isinstance(result.output, DeferredToolRequests)
    for bad in ({"cent": 50}, {"order": {"cent": 50}}, {"order": {"cents": 50}, "x": 1}):
        with pytest.raises(ValueError, match=r"cent|x"):
            asyncio.run(
                pa_adapter.decide(
                    result.output,
                    fx.approver,
                    "bob",
                    {"c1": ToolApproved(override_args=bad)},
                    agent=fx.ran,
                )
            )
    assert decisions(fx.admin_dsn, fx.sid) == [("pending", None)]
    assert ran == []


def test_pydantic_ai_an_unknown_key_of_a_tool_of_several_parameters_is_refused() -> None:
    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="pay_two")
    async def pay_two(to: str, cents: int) -> str:
        return "ok"

    schema = pa_adapter.tool(pay_two).function_schema
    part = ToolCallPart(tool_name="pay_two", args={"to": "x", "cents": 100}, tool_call_id="c1")
    with pytest.raises(ValueError, match="cent"):
        pa_adapter._checked_edit(part, {"cent": 50}, schema)
    assert pa_adapter._checked_edit(part, {"cents": "50"}, schema) == {"to": "x", "cents": 50}
    # a tool not given to decide is not known: its edit goes as it is
    assert pa_adapter._checked_edit(part, {"cents": "50"}, None) == {"cents": "50"}


def test_pydantic_ai_override_args_that_are_not_a_mapping_raise_value_error() -> None:
    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="pay_list")
    async def pay_list(to: str, cents: int) -> str:
        return "ok"

    schema = pa_adapter.tool(pay_list).function_schema
    part = ToolCallPart(tool_name="pay_list", args={"to": "x", "cents": 100}, tool_call_id="c1")
    for known in (schema, None):
        with pytest.raises(ValueError, match="mapping"):
            pa_adapter._checked_edit(part, [("cents", 50)], known)  # type: ignore[arg-type]


def test_pydantic_ai_edit_checked_by_the_tool_it_is_given_not_another_of_its_name() -> None:
    """Two agents' tools of one name, built in one process: an edit of a call is checked
    by the schema of the tool it is given (decide: the one of that name among its
    agent's tools), whichever was built later."""

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="send_twice")
    async def send_money(to: str, cents: int) -> str:
        return "ok"

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="send_twice")
    async def send_message(channel: str, text: str) -> str:
        return "ok"

    money_schema = pa_adapter.tool(send_money).function_schema
    text_schema = pa_adapter.tool(send_message).function_schema  # another agent's, later
    money = ToolCallPart(tool_name="send_twice", args={"to": "b", "cents": 1}, tool_call_id="c")
    assert pa_adapter._checked_edit(money, {"cents": 50}, money_schema) == {"to": "b", "cents": 50}
    text = ToolCallPart(
        tool_name="send_twice", args={"channel": "c", "text": "t"}, tool_call_id="d"
    )
    assert pa_adapter._checked_edit(text, {"text": "u"}, text_schema) == {
        "channel": "c",
        "text": "u",
    }


def test_pydantic_ai_two_agents_tools_of_one_name_each_check_their_own_calls_edit(
    dsn: str,
) -> None:
    """Two agents' tools of one name, built in one process, that read an edit
    differently (cents: int, cents: str), each asked a call whose arguments both would
    take: each call's edit is checked by its own agent's tool (the agent ``decide`` is
    given), with no guess between them, and runs as that tool reads it."""
    got: list[Any] = []

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="pay_either")
    async def pay_int(to: str, cents: int) -> str:
        """Pay an amount in cents."""
        got.append(cents)
        return "paid"

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="pay_either")
    async def pay_text(to: str, cents: str) -> str:
        """Pay an amount written out."""
        got.append(cents)
        return "paid"

    built = [pa_adapter.tools(pay_int), pa_adapter.tools(pay_text)]  # both, before any run
    for tools in built:
        fx = pa.Fixture(dsn)
        first: list[pa.Turn] = [[pa.call("pay_either", "c1", to="b", cents="1")]]
        result = asyncio.run(fx.run(first, tools, user_prompt="pay"))
        assert isinstance(result.output, DeferredToolRequests)
        edited = ToolApproved(override_args={"cents": "50"})
        assert decided_and_resumed(fx, result, tools, {"c1": edited}).output == "paid"
        assert session_state(fx.admin_dsn, fx.sid) == "completed"
    assert got == [50, "50"]
    assert [type(cents) for cents in got] == [int, str]
    # one edit, "fifty": refused by the int tool's schema, taken by the str tool's
    part = ToolCallPart(tool_name="pay_either", args={"to": "b", "cents": "1"}, tool_call_id="c")
    int_schema, text_schema = (tools[0].function_schema for tools in built)
    with pytest.raises(ValueError, match="do not fit"):
        pa_adapter._checked_edit(part, {"cents": "fifty"}, int_schema)
    fifty = pa_adapter._checked_edit(part, {"cents": "fifty"}, text_schema)
    assert fifty == {"to": "b", "cents": "fifty"}


def test_langchain_an_edit_is_checked_by_the_tool_it_is_given_not_another_of_its_name() -> None:
    """Two tools of one name (another agent's, built in the same process), that read an
    edit differently: the edit of a call is checked by the call's tool among the tools
    ``decide`` is given, with no guess between them; none given, it goes as it is."""

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="lc_pay_either")
    def pay_int(to: str, cents: int) -> str:
        return "ok"

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="lc_pay_either")
    def pay_text(to: str, cents: str) -> str:
        return "ok"

    int_tools, text_tools = lc_adapter.tools(pay_int), lc_adapter.tools(pay_text)
    request = {"action_request": {"action": "lc_pay_either", "args": {"to": "b", "cents": "1"}}}
    edit = {"to": "b", "cents": "50"}
    assert lc_common._checked_edit(request, edit, int_tools) == {"to": "b", "cents": 50}
    assert lc_common._checked_edit(request, edit, text_tools) == {"to": "b", "cents": "50"}
    with pytest.raises(ValueError, match="do not fit"):
        lc_common._checked_edit(request, {"cents": "fifty"}, int_tools)
    assert lc_common._checked_edit(request, {"cents": "fifty"}, None) == {"cents": "fifty"}


# --- what the journal may hold of a typed argument -----------------------------------


class Card(BaseModel):
    number: str
    cvv: SecretStr


class Note(BaseModel):
    text: str
    internal: str = Field(default="none", exclude=True)


def test_an_argument_whose_json_form_does_not_read_back_is_refused(dsn: str) -> None:
    """A SecretStr is '**********' in its JSON form, a field excluded from serialization
    is not there: two calls told apart by it alone would share a signature (a replay
    answers one with the other's result), and an edit would hand the body the JSON.
    The call is refused before anything is journaled or asked, naming the argument."""

    @undolog_tool(tier=ToolTier.IRREVERSIBLE)
    async def charge(card: Card, cents: int) -> str:
        """Charge a card."""
        return "charged"

    @undolog_tool(tier=ToolTier.IRREVERSIBLE)
    async def post(note: Note, channel: str) -> str:
        """Post a note."""
        return "posted"

    card = _core.describe(charge)
    with pytest.raises(SignatureError, match=r"'card'.*read back"):
        card.bind({"card": Card(number="4111", cvv=SecretStr("123")), "cents": 1})
    note = _core.describe(post)
    with pytest.raises(SignatureError, match=r"'note'.*read back"):
        note.bind({"note": Note(text="t", internal="A"), "channel": "c"})

    fx = pa.Fixture(dsn)
    tools = pa_adapter.tools(charge)
    first: list[pa.Turn] = [[pa.call("charge", "c1", card={"number": "4", "cvv": "1"}, cents=5)]]
    with pytest.raises(SignatureError, match="'card'"):
        asyncio.run(fx.run(first, tools, user_prompt="charge"))
    assert decisions(fx.admin_dsn, fx.sid) == []


def test_an_edit_of_another_argument_hands_the_body_the_framework_s_objects() -> None:
    """The edit is recorded as the whole call, in its JSON form: an argument the person
    did not change comes back equal to its JSON form, and the body gets the object the
    framework gave (an aware datetime keeps its zone, which its JSON form does not)."""

    @undolog_tool(tier=ToolTier.IRREVERSIBLE)
    def remind(at: datetime.datetime, text: str) -> str:
        return "ok"

    at = datetime.datetime(2025, 1, 2, 9, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    call = _core._Arguments(_core.describe(remind), (), {"at": at, "text": "a"})
    approved = {"at": "2025-01-02T09:00:00+01:00", "text": "b"}
    given, named = call.for_body((), approved)
    body = inspect.signature(remind).bind(*given, **named).arguments
    assert body["at"] is at
    assert body["text"] == "b"


# --- LangChain: a model with aliases --------------------------------------------------


class Transfer(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)
    account_id: str
    cents: int


def test_langgraph_edit_of_a_model_with_aliases_runs_with_it(dsn: str) -> None:
    fx = lg.Fixture(dsn)
    ran: list[Transfer] = []

    @undolog_tool(tier=ToolTier.IRREVERSIBLE)
    def send(transfer: Transfer, memo: str) -> str:
        """Send money."""
        ran.append(transfer)
        return "sent"

    asked = {"transfer": {"accountId": "a1", "cents": 500}, "memo": "m"}
    tools = lc_adapter.tools(send)
    graph = fx.chat_graph([lg.calls(("send", "c1", asked)), AIMessage("sent")], tools)
    out = fx.run(graph, {"messages": [HumanMessage("go")]})
    [pending] = out[lc_adapter.INTERRUPT]
    [request] = pending.value
    assert request["action_request"]["args"] == asked  # the journal's form: by alias
    edit = {"transfer": {"accountId": "a1", "cents": "50"}, "memo": "m"}
    command = lc_adapter.decide(
        request, fx.approver, "alice", approved=True, args=edit, tools=tools
    )
    resume: Any = command.resume
    assert resume[0]["args"]["args"]["transfer"] == {"accountId": "a1", "cents": 50}
    out = fx.run(graph, command)
    assert out["messages"][-1].content == "sent"
    assert ran == [Transfer.model_validate({"accountId": "a1", "cents": 50})]
    assert session_state(fx.admin_dsn, fx.sid) == "completed"


# --- a set inside a model -------------------------------------------------------------

_SET_IN_A_MODEL = """
from pydantic import BaseModel
from undolog.integrations._core import json_form
class Tags(BaseModel):
    names: set[str]
    nested: list[frozenset[int]]
print(json_form({"t": Tags(names={"alpha", "beta", "gamma", "delta", "eps"},
                            nested=[frozenset({300, 7, 12, 99})])}))
"""


def test_a_set_inside_a_model_has_one_json_form_from_process_to_process() -> None:
    """A restarted run signs the same call the same way: a set in a model is written in a
    fixed order, whatever the process's string hash salt."""
    forms = set()
    for seed in ("1", "2", "3", "4", "5", "6"):
        out = subprocess.run(
            [sys.executable, "-c", _SET_IN_A_MODEL],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        forms.add(out.stdout.strip())
    assert forms == {
        "{'t': {'names': ['alpha', 'beta', 'delta', 'eps', 'gamma'], 'nested': [[12, 300, 7, 99]]}}"
    }
