"""The approval round trip: an IRREVERSIBLE call waits for a person, then runs once.

    UNDOLOG_DSN=postgresql://agent@host/db python examples/approval_round_trip.py

It prints the approval id and waits. A person (an approver login, not the agent's) then
decides from another terminal:

    undolog approvals approve APPROVAL --by alice --reason "checked the invoice"

Once approved, the agent opens the same session again (``waiting.session_id``) and makes
the same calls: what already ran replays from the journal, and the approved call runs,
once.
"""

import sys
import uuid
from datetime import timedelta
from typing import Any

from undolog import AwaitingApprovalError, ToolTier, UndoLog, undolog_tool


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def send_payout(user_id: int, cents: int) -> dict[str, Any]:
    print(f"paid {cents} cents to user {user_id}", flush=True)
    return {"paid_cents": cents}


ul = UndoLog()  # the DSN from UNDOLOG_DSN, else libpq's PG* variables


def pay_out(session_id: uuid.UUID | None = None) -> str:
    with ul.session(session_id, agent="payouts") as session:
        send_payout(42, 5000)
    return session.state


def main() -> int:
    try:
        print(f"session {pay_out()}")  # reached only if no approval were needed
        return 0
    except AwaitingApprovalError as waiting:
        print(f"approval {waiting.approval_id} requested for session {waiting.session_id}")
        print(f"  undolog approvals approve {waiting.approval_id} --by NAME", flush=True)
        decision = ul.wait_for_decision(waiting.approval_id, timeout=timedelta(minutes=10))
        if decision != "approved":
            print(f"the payout was not approved: {decision or 'no decision in time'}")
            return 1
        print(f"session {pay_out(waiting.session_id)}")  # the same session, resumed
        return 0


if __name__ == "__main__":
    sys.exit(main())
