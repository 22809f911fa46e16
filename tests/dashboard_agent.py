"""A real agent process for the browser test: books (COMPENSABLE), then pays
(IRREVERSIBLE), which waits for a human. Once the decision comes, it makes the same calls
again: if approved, the payment's body runs, once, and appends a line to the ledger.

    python tests/dashboard_agent.py DSN LEDGER_FILE
Prints 'waiting APPROVAL_ID', then the decision, then 'done'.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

from undolog import (
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)

LEDGER = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("ledger.txt")


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("unbook"))
def book(item: str) -> dict[str, Any]:
    return {"booking": f"B-{item}"}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def pay(cents: int, note: str) -> dict[str, Any]:
    with LEDGER.open("a", encoding="utf-8") as ledger:
        ledger.write(f"paid {cents}\n")
    return {"paid": cents}


def main() -> int:
    ul = UndoLog(sys.argv[1])
    session_id = uuid.uuid4()

    def attempt() -> None:
        with ul.session(session_id, agent="browser-agent"):
            book("hotel")
            pay(4200, "<img src=x onerror=alert(1)>")

    try:
        attempt()
        print("ran without approval?", flush=True)
        return 1
    except AwaitingApprovalError as waiting:
        print(f"waiting {waiting.approval_id}", flush=True)
        decision = ul.wait_for_decision(
            uuid.UUID(str(waiting.approval_id)), timeout=90, poll_interval=1
        )
    print(decision, flush=True)
    if decision == "approved":
        attempt()  # book replays from the journal; pay runs now, once
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
