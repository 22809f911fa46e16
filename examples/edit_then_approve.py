"""Edit, then approve (docs/tutorials/edit-then-approve.md): a person changes an
IRREVERSIBLE call's arguments as they approve it; the call runs once, with theirs, and
the agent learns what changed.

    python examples/edit_then_approve.py   # then, elsewhere: undolog approvals approve ID --args
"""

from __future__ import annotations

import uuid
from typing import Any

from undolog import AwaitingApprovalError, ToolTier, UndoLog, last_edit, undolog_tool

# --8<-- [start:tool]
payouts: list[tuple[str, int]] = []  # stands in for your payment system


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def payout(account: str, cents: int) -> dict[str, Any]:
    """Money leaves: a person approves it first, and may change the amount."""
    payouts.append((account, cents))
    print(f"  paid {cents} cents to {account}")
    return {"paid": cents, "to": account}


# --8<-- [end:tool]
ul = UndoLog()


# --8<-- [start:agent]
def pay_supplier(session_id: uuid.UUID) -> dict[str, Any]:
    with ul.session(session_id, agent="accounts") as session:
        # the model asked for 250 000 cents; a person may approve less
        result = payout(account="supplier-17", cents=250_000)
        edit = last_edit()  # None when the call was approved as asked
        if edit is not None:
            print(edit.note)  # what a model would be told beside the result
            print(f"requested {edit.requested_args}, ran with {edit.approved_args}")
    print(f"session {session.session_id} completed")
    return result


def main() -> None:
    session_id = uuid.uuid4()
    try:
        pay_supplier(session_id)
    except AwaitingApprovalError as waiting:
        print(f"waiting for a human: undolog approvals approve {waiting.approval_id}", flush=True)
        decision = ul.wait_for_decision(waiting.approval_id, timeout=600)
        print(f"decision: {decision}")
        if decision != "approved":
            return
    print(pay_supplier(session_id))  # approved: the body runs once, with the approved args
    print(pay_supplier(session_id))  # the same call again: the cached result, not a 2nd run
    print(f"payouts made: {payouts}")


if __name__ == "__main__":
    main()
# --8<-- [end:agent]
