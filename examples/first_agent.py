"""Your first agent (docs/tutorials/first-agent.md): one tool of each tier, a session that
completes and one that fails and is undone.

    python examples/first_agent.py          # both sessions
    undolog worker --app examples.first_agent:ul --all-owners --once   # as a worker
"""

from __future__ import annotations

# --8<-- [start:tools]
from typing import Any

from undolog import (
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)

accounts: dict[str, str] = {}  # stands in for your real system: email -> plan


@undolog_tool(tier=ToolTier.SAFE)
def lookup_plan(team_size: int) -> str:
    """Reads only: SAFE tools run directly, with no journal."""
    return "team" if team_size > 1 else "solo"


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("close_account"),
)
def open_account(email: str, plan: str) -> dict[str, Any]:
    """Changes the world: journaled, with its undo written down before it runs."""
    accounts[email] = plan
    print(f"  opened {email} on plan {plan}")
    return {"email": email, "plan": plan}


# --8<-- [end:tools]
# --8<-- [start:client]
ul = UndoLog()  # the DSN from UNDOLOG_DSN, else libpq's PG* variables


@ul.compensation("close_account")
def close_account(call: CompensationCall) -> None:
    """Undoes open_account. call.result is what open_account returned."""
    accounts.pop(call.result["email"], None)
    print(f"  undo: closed {call.result['email']} (idempotency key {call.undo_id})")


# --8<-- [end:client]
# --8<-- [start:sessions]
def main() -> None:
    # A session that completes: both calls stay done.
    with ul.session(agent="first-agent") as session:
        plan = lookup_plan(team_size=3)
        open_account("ada@example.com", plan)
    print(f"session {session.session_id} completed; accounts now: {accounts}")

    # A session that fails: open_account is undone by close_account.
    try:
        with ul.session(agent="first-agent") as session:
            open_account("bob@example.com", lookup_plan(team_size=1))
            raise RuntimeError("the agent changed its mind")
    except RuntimeError as exc:
        print(f"session {session.session_id} failed ({exc}); accounts now: {accounts}")


if __name__ == "__main__":
    main()
# --8<-- [end:sessions]
