"""A call's result is not waited for: where its error is raised.

Run with UNDOLOG_DSN set (an agent login whose sessions it may walk, or a superuser).
The first call returns a result too large for the journal (over 1 MiB of JSON); the
call itself returns at once, and the error comes with the session's next journaled
call, before that call's body runs.
"""

import os

from undolog import (
    CompensationCall,
    CompensationDescriptor,
    PayloadTooLarge,
    ToolTier,
    UndoLog,
    undolog_tool,
)

ul = UndoLog(os.environ["UNDOLOG_DSN"])


@ul.compensation("delete_report")
def delete_report(call: CompensationCall) -> None:
    print("compensated", call.call_args)


# --8<-- [start:example]
@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_report"))
def make_report(name: str) -> str:
    print("ran", name)
    return "x" * (2 * 1024 * 1024) if name == "huge" else f"report {name}"


try:
    with ul.session(agent="reports") as session:
        make_report("huge")  # returns: its commit is sent, its answer not read yet
        make_report("small")  # PayloadTooLarge is raised here; this body does not run
except PayloadTooLarge as exc:
    print("raised:", type(exc).__name__)
print("session", session.state)  # failed, and the walk compensated "huge"
# --8<-- [end:example]
