"""A rejection that does not end the session (docs/tutorials/approvals.md): the tool is
declared ``on_reject="continue"``, so a person's "no" comes back to the agent as
ApprovalRejectedError with the reason, the session stays active, and the agent does
something else instead.

    UNDOLOG_DSN=postgresql://agent@host/db python examples/rejection_feedback.py

It prints the approval id and waits; a person rejects it from another terminal:

    undolog approvals reject APPROVAL --by bob --reason "not to every customer"
"""

import sys
import uuid
from datetime import timedelta
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

ul = UndoLog()  # the DSN from UNDOLOG_DSN, else libpq's PG* variables
drafts: dict[int, str] = {}  # stands in for your mailing system


@undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject="continue")
def send_newsletter(subject: str, audience: str) -> dict[str, Any]:
    print(f"sent {subject!r} to {audience}", flush=True)
    return {"sent": audience}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_draft"))
def save_draft(subject: str) -> dict[str, Any]:
    draft = len(drafts) + 1
    drafts[draft] = subject
    print(f"draft {draft} saved for review: {subject}", flush=True)
    return {"draft": draft}


@ul.compensation("delete_draft")
def delete_draft(call: CompensationCall) -> None:
    drafts.pop(call.result["draft"], None)


def campaign(session_id: uuid.UUID | None = None) -> str:
    with ul.session(session_id, agent="newsletter") as session:
        try:
            send_newsletter("Spring sale", "every customer")
        except ApprovalRejectedError as no:
            # The session goes on (no.session_continues): tell the model, or adapt here.
            print(f"rejected by {no.decided_by}: {no.reason}", flush=True)
            save_draft("Spring sale")
    return session.state


def main() -> int:
    try:
        print(f"session {campaign()}")  # reached only if no approval were needed
        return 0
    except AwaitingApprovalError as waiting:
        print(f"approval {waiting.approval_id} requested for session {waiting.session_id}")
        print(f"  undolog approvals reject {waiting.approval_id} --by NAME", flush=True)
        decision = ul.wait_for_decision(waiting.approval_id, timeout=timedelta(minutes=10))
        print(f"decision: {decision}", flush=True)
        print(f"session {campaign(waiting.session_id)}")  # the same session, run again
        return 0


if __name__ == "__main__":
    sys.exit(main())
