"""The approvals round trip (docs/tutorials/approvals.md): an IRREVERSIBLE call waits for
a human, the agent waits for the decision, then runs the same session again.

    python examples/refund_approval.py      # then, elsewhere: undolog approvals approve
"""

from __future__ import annotations

import uuid
from typing import Any

from undolog import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)

# --8<-- [start:tools]
refunds: list[int] = []  # stands in for your payment system


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("cancel_ticket"),
)
def open_ticket(order: int) -> dict[str, Any]:
    print(f"  ticket opened for order {order}")
    return {"ticket": order * 10}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def refund(order: int, cents: int) -> dict[str, Any]:
    """Money leaves: nothing can undo it, so a human approves it first."""
    refunds.append(cents)
    print(f"  refunded {cents} cents on order {order}")
    return {"refunded": cents}


ul = UndoLog()


@ul.compensation("cancel_ticket")
def cancel_ticket(call: CompensationCall) -> None:
    print(f"  undo: ticket {call.result['ticket']} cancelled")


# --8<-- [end:tools]
# --8<-- [start:agent]
def handle_refund(session_id: uuid.UUID) -> dict[str, Any]:
    """The agent's work. Running it again with the same session id replays what
    already ran (open_ticket) and makes the refund call again."""
    with ul.session(session_id, agent="support") as session:
        open_ticket(order=42)
        result = refund(order=42, cents=1999)
    print(f"session {session.session_id} completed")
    return result


def main() -> None:
    session_id = uuid.uuid4()  # the agent chooses it, so it can come back to it
    try:
        handle_refund(session_id)
    except AwaitingApprovalError as waiting:
        print(
            f"waiting for a human: undolog approvals approve {waiting.approval_id} --by YOU",
            flush=True,  # the approver needs the id now, not when the agent ends
        )
        decision = ul.wait_for_decision(waiting.approval_id, timeout=600)
        print(f"decision: {decision}")
        if decision != "approved":
            return  # rejected or expired: the session's walk undoes open_ticket
    try:
        print(handle_refund(session_id))  # approved: the refund runs, once
    except ApprovalRejectedError:
        print("the refund was rejected")


if __name__ == "__main__":
    main()
# --8<-- [end:agent]
