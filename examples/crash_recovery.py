"""Recovering a crashed agent (docs/tutorials/crash-recovery.md).

python examples/crash_recovery.py SESSION_ID --crash   # books, then dies mid-session
python examples/crash_recovery.py SESSION_ID           # restarted: replays, then finishes
undolog worker --app examples.crash_recovery:ul --all-owners --once # or: undo a session left to die
"""

from __future__ import annotations

import os
import sys
import uuid
from datetime import timedelta
from typing import Any

from undolog import (
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)


# --8<-- [start:tools]
@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("cancel_booking", args={"notify": True}),
)
def book(what: str, day: str) -> dict[str, Any]:
    print(f"  booked {what} on {day}")
    return {"booking": f"{what}-{day}"}


# A short lease, so that a dead agent is noticed within seconds (the default is 5 minutes).
ul = UndoLog(lease=timedelta(seconds=3))


@ul.compensation("cancel_booking")
def cancel_booking(call: CompensationCall) -> None:
    # Runs in whichever process walks the session: the agent, or `undolog worker`.
    print(f"  undo: cancelled {call.result['booking']} (notify={call.args['notify']})")


# --8<-- [end:tools]
# --8<-- [start:agent]
def trip(session_id: uuid.UUID, crash: bool) -> None:
    with ul.session(session_id, agent="travel") as session:
        book("hotel", "2026-06-01")
        book("flight", "2026-06-01")
        if crash:
            print("  the agent process dies here", flush=True)
            os._exit(1)  # no exception, no cleanup: as if the machine lost power
        book("car", "2026-06-02")
    print(f"session {session.session_id} completed")


if __name__ == "__main__":
    trip(uuid.UUID(sys.argv[1]), crash="--crash" in sys.argv[2:])
# --8<-- [end:agent]
