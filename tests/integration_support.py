"""Shared by the framework adapter tests: two real logins (an agent, an approver), tools
whose bodies and compensations count their runs, and what the journal says afterwards.

The agent login holds undolog_agent, undolog_operator (so that a failed run's undo walk
runs in-process) and undolog_approver (so that the engine's own-call rule, not a missing
grant, is what stops it approving its own call). The approver is another login.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from pydantic_ai.messages import TextPart

from undolog import (
    AsyncUndoLog,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    saga,
    undolog_tool,
)
from undolog.integrations import pydantic_ai as pydantic_ai_adapter

AGENT_LOGIN = "undolog_it_agent"
# An agent login and nothing more: what a deployment gives the agent's process.
AGENT_ONLY_LOGIN = "undolog_it_agent_only"
APPROVER_LOGIN = "undolog_it_approver"


def _ensure_login(admin: psycopg.Connection[Any], name: str, groups: tuple[str, ...]) -> None:
    exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
    if exists is None:
        admin.execute(f"CREATE ROLE {name} LOGIN")
    for group in groups:
        admin.execute(f"GRANT {group} TO {name}")


def logins(dsn: str, agent_only: bool = False) -> tuple[str, str]:
    """(agent dsn, approver dsn) on this test's database. The agent's login is also an
    operator (a failed run walks its own undo stack) unless ``agent_only``."""
    agent = AGENT_ONLY_LOGIN if agent_only else AGENT_LOGIN
    groups = (
        ("undolog_agent",)
        if agent_only
        else ("undolog_agent", "undolog_operator", "undolog_approver")
    )
    with psycopg.connect(dsn, autocommit=True) as admin:
        _ensure_login(admin, agent, groups)
        _ensure_login(admin, APPROVER_LOGIN, ("undolog_approver",))
    return make_conninfo(dsn, user=agent), make_conninfo(dsn, user=APPROVER_LOGIN)


@dataclass
class World:
    """What the tools did to the outside world, and how often each body ran."""

    users: dict[str, str] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)
    undone: list[str] = field(default_factory=list)
    payouts: list[int] = field(default_factory=list)


def make_tools(world: World) -> dict[str, Any]:
    """search (SAFE, sync), create_user (COMPENSABLE, async), payout (IRREVERSIBLE, async),
    gift (IRREVERSIBLE, on_reject="continue": a rejection leaves the session going on)
    and their sync twins for sync runs."""

    @undolog_tool(tier=ToolTier.SAFE)
    def search(query: str) -> str:
        """Search the web for a query."""
        world.runs["search"] += 1
        return f"result for {query}"

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    async def create_user(email: str, name: str = "anon") -> dict[str, Any]:
        """Create a user account."""
        world.runs[f"create_user:{email}"] += 1
        world.users[email] = name
        return {"email": email}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE)
    async def payout(cents: int) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        world.payouts.append(cents)
        return {"paid": cents}

    @undolog_tool(
        tier=ToolTier.COMPENSABLE,
        compensation=CompensationDescriptor.new("delete_user"),
        name="create_user",
    )
    def create_user_sync(email: str, name: str = "anon") -> dict[str, Any]:
        """Create a user account."""
        world.runs[f"create_user:{email}"] += 1
        world.users[email] = name
        return {"email": email}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    def payout_sync(cents: int) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        world.payouts.append(cents)
        return {"paid": cents}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject="continue")
    async def gift(cents: int) -> dict[str, Any]:
        """Send a gift voucher; a person may say no, and the agent goes on."""
        world.runs["gift"] += 1
        world.payouts.append(cents)
        return {"gift": cents}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject="continue", name="gift")
    def gift_sync(cents: int) -> dict[str, Any]:
        """Send a gift voucher; a person may say no, and the agent goes on."""
        world.runs["gift"] += 1
        world.payouts.append(cents)
        return {"gift": cents}

    return {
        "gift": gift,
        "gift_sync": gift_sync,
        "search": search,
        "create_user": create_user,
        "payout": payout,
        "create_user_sync": create_user_sync,
        "payout_sync": payout_sync,
    }


# Each way a later release of the app may change payout between a run's stop and its
# resume, and what the refusal says of it, after "is not as it was when the call was
# journaled: " (``payout_changed`` builds the tool so changed).
PAYOUT_CHANGES: dict[str, str] = {
    "a parameter added with a default": (
        'it now takes currency (default "EUR"), which the journaled call does not have'
    ),
    "a required parameter added": (
        "it now requires iban, with no default, which the call does not name"
    ),
    "its parameter removed": "it no longer takes cents (journaled 500)",
    "its parameter renamed": (
        "it now requires amount, with no default, which the call does not name; it no "
        "longer takes cents (journaled 500)"
    ),
    "its parameter's type changed": (
        "its parameters no longer take the arguments the call names (a parameter's type changed)"
    ),
    "its parameter's type changed, the call's value still taken": (
        "it now journals cents as \"500\", the journaled call's 500 (a parameter's type changed)"
    ),
    "made COMPENSABLE": "it is COMPENSABLE now, and the journaled call is IRREVERSIBLE",
    "made SAFE": (
        "the agent has no journaled payout tool now (removed, made SAFE, or not an "
        "@undolog_tool), and the journaled call is IRREVERSIBLE"
    ),
    "removed from the agent": (
        "the agent has no journaled payout tool now (removed, made SAFE, or not an "
        "@undolog_tool), and the journaled call is IRREVERSIBLE"
    ),
}


def payout_changed(world: World, change: str) -> list[Any]:
    """payout as a later release of the app defines it, changed as ``change`` (a key of
    ``PAYOUT_CHANGES``) says: the one tool, or none (removed from the agent)."""

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def with_a_currency(cents: int, currency: str = "EUR") -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        world.payouts.append(cents)
        return {"paid": cents, "currency": currency}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def with_an_iban(cents: int, iban: str) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": cents, "to": iban}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def without_cents() -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": 0}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def in_amount(amount: int) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": amount}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def cents_as_text(cents: str) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": cents}

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="payout")
    async def cents_as_a_decimal(cents: Decimal) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": str(cents)}

    @undolog_tool(
        tier=ToolTier.COMPENSABLE,
        compensation=CompensationDescriptor.new("delete_user"),
        name="payout",
    )
    async def compensable(cents: int) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": cents}

    @undolog_tool(tier=ToolTier.SAFE, name="payout")
    async def safe(cents: int) -> dict[str, Any]:
        """Send money to a bank account."""
        world.runs["payout"] += 1
        return {"paid": cents}

    changed: dict[str, list[Any]] = {
        "a parameter added with a default": [with_a_currency],
        "a required parameter added": [with_an_iban],
        "its parameter removed": [without_cents],
        "its parameter renamed": [in_amount],
        "its parameter's type changed": [cents_as_text],
        "its parameter's type changed, the call's value still taken": [cents_as_a_decimal],
        "made COMPENSABLE": [compensable],
        "made SAFE": [safe],
        "removed from the agent": [],
    }
    return changed[change]


def register_compensation(ul: UndoLog | AsyncUndoLog, world: World) -> None:
    @ul.compensation("delete_user")
    def delete_user(call: CompensationCall) -> None:
        email = str(call.call_args["email"])
        world.undone.append(email)
        world.users.pop(email, None)


class AsyncAgentFixture:
    """What the async frameworks' tests share: an agent login and an approver login, the
    world the tools act on, the tools, and one session id for the run and its resumes."""

    def __init__(self, dsn: str, agent_only: bool = False) -> None:
        self.admin_dsn = dsn
        agent_dsn, approver_dsn = logins(dsn, agent_only)
        self.world = World()
        self.fns = make_tools(self.world)
        self.ul = AsyncUndoLog(agent_dsn)
        self.approver = AsyncUndoLog(approver_dsn)
        register_compensation(self.ul, self.world)
        self.sid = uuid.uuid4()


def decided_and_resumed(
    fx: Any, result: Any, tools: list[Any], answers: Mapping[str, Any], decided_by: str = "bob"
) -> Any:
    """A pydantic-ai run that stopped for a person (``result`` of ``fx.run`` with
    ``tools``; ``fx`` a test_pydantic_ai Fixture) decided through the fixture's approver
    (``answers`` by tool call id; the tools of the run's own agent, ``fx.ran``, check an
    edit) and resumed with ``tools`` to a model that answers "paid": the resumed run's
    result."""
    decided = asyncio.run(
        pydantic_ai_adapter.decide(result.output, fx.approver, decided_by, answers, agent=fx.ran)
    )
    return asyncio.run(
        fx.run(
            [[TextPart("paid")]],
            tools,
            message_history=result.all_messages(),
            deferred_tool_results=decided,
        )
    )


def _session_rows(dsn: str, query: str, session_id: uuid.UUID) -> list[tuple[Any, ...]]:
    """The rows of `query` (its one parameter: the session id), read as the admin."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, (session_id,)).fetchall()


def session_state(dsn: str, session_id: uuid.UUID) -> str:
    ((state,),) = _session_rows(
        dsn, "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", session_id
    )
    return str(state)


def effects(dsn: str, session_id: uuid.UUID) -> list[tuple[str, str, int]]:
    """(tool, state, replay_count) of the session's journaled calls, in journal order."""
    rows = _session_rows(
        dsn,
        "SELECT tool_name, state, replay_count FROM undolog.undolog_effect_log "
        "WHERE session_id = %s ORDER BY executed_at, effect_id",
        session_id,
    )
    return [(str(t), str(s), int(r)) for t, s, r in rows]


def decisions(dsn: str, session_id: uuid.UUID) -> list[tuple[str, str | None]]:
    """(state, decided_by) of the session's approval requests."""
    rows = _session_rows(
        dsn,
        "SELECT state, decided_by FROM undolog.undolog_approval_requests "
        "WHERE session_id = %s ORDER BY requested_at",
        session_id,
    )
    return [(str(s), None if d is None else str(d)) for s, d in rows]


def pending(dsn: str, session_id: uuid.UUID) -> list[tuple[uuid.UUID, int]]:
    """(approval id, cents) of the session's requests a person is asked about now, as the
    approver's inbox (undolog.pending_approvals) lists them, by amount."""
    rows = _session_rows(
        dsn,
        "SELECT approval_id, (args ->> 'cents')::integer FROM undolog.pending_approvals "
        "WHERE session_id = %s ORDER BY 2",
        session_id,
    )
    return [(uuid.UUID(str(a)), int(c)) for a, c in rows]


def refused_then_rolled_back(
    world: World,
    dsn: str,
    session_id: uuid.UUID,
    before: tuple[str, list[tuple[str, str, int]]],
    walk: Callable[[], object],
) -> None:
    """After a resume refused because the approved payout's tool changed: nothing ran,
    the decision and the journal (``before``: the session's state and effects) are as
    they were; then an operator's rollback and its walk (``walk``, the adapter's own)
    undo the call made before the stop, and the approved payout never runs."""
    assert world.runs["payout"] == 0
    assert world.undone == []
    assert decisions(dsn, session_id) == [("approved", "alice")]
    assert (session_state(dsn, session_id), effects(dsn, session_id)) == before
    with psycopg.connect(dsn, autocommit=True) as conn:
        saga.rollback_session(conn, session_id, "ops", "payout changed")
    walk()
    assert world.undone == ["a@x"]
    assert world.runs["payout"] == 0
    assert session_state(dsn, session_id) == "compensated"
