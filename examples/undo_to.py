"""Undo to a point (docs/tutorials/undo-to-a-point.md): an agent takes back its own last
calls and goes on; or, with --hold, it waits half-way for an operator to do it.

    python examples/undo_to.py                 # the agent undoes its last booking itself
    python examples/undo_to.py --hold DIR      # books, writes DIR/session, waits for DIR/go
    undolog worker --app examples.undo_to:ul --all-owners --once   # an undo-to's walk
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from undolog import CompensationCall, CompensationDescriptor, ToolTier, UndoLog, undolog_tool

# --8<-- [start:tools]
bookings: dict[str, str] = {}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("cancel"))
def book(kind: str, what: str) -> dict[str, Any]:
    bookings[kind] = what
    print(f"  booked {kind}: {what}")
    return {"kind": kind, "what": what}


ul = UndoLog()


@ul.compensation("cancel")
def cancel(call: CompensationCall) -> None:
    bookings.pop(call.result["kind"], None)
    print(f"  undo: cancelled {call.result['kind']} {call.result['what']}")


# --8<-- [end:tools]


def own_undo() -> None:
    # --8<-- [start:agent]
    with ul.session(agent="travel") as session:
        book("flight", "LIS -> OSL, 3 May")  # step 0
        book("hotel", "Grand, 3-6 May")  # step 1
        book("car", "compact, 3-6 May")  # step 2
        # the customer wants no car and another hotel: take back the last two calls
        print("state after undo:", session.undo_last(2, "the customer changed the plan"))
        book("hotel", "Bristol, 3-6 May")  # step 3: the session goes on
    print("session", session.state, "bookings now:", bookings)
    # --8<-- [end:agent]


def held(folder: Path) -> None:
    with ul.session(agent="travel") as session:
        book("flight", "LIS -> OSL, 3 May")
        book("hotel", "Grand, 3-6 May")
        book("car", "compact, 3-6 May")
        (folder / "session").write_text(str(session.session_id))
        while not (folder / "go").exists():  # the operator's turn (examples/undo_to.sh)
            time.sleep(0.1)
        book("train", "OSL -> BGO, 6 May")
    print("session", session.state)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hold"]:
        held(Path(sys.argv[2]))
    else:
        own_undo()
