"""Words for people beside the engine's state names: an approver should not have to know
that ``awaiting_approval`` means a person must decide. The engine's name stays shown next
to each label (it is what the CLI, the views and the logs say)."""

from __future__ import annotations

SESSION = {
    "active": "Running",
    "awaiting_approval": "Waiting for a person",
    "completed": "Finished",
    "failed": "Failed, being undone",
    "compensating": "Being undone",
    "compensated": "Undone",
    "halted": "Stopped: an operator decides",
}
CALL = {
    "pending": "Not run yet",
    "executing": "Running",
    "committed": "Done",
    "failed": "Failed",
    "approved": "Approved, not run yet",
    "rejected": "Rejected: never run",
    "replayed": "Replayed",
    "compensating": "Being undone",
    "compensated": "Undone",
    "compensation_failed": "Undoing it failed",
}
UNDO = {
    "pending": "To undo if the session fails",
    "compensating": "Being undone",
    "compensated": "Undone",
    "compensation_failed": "Undoing it failed",
    "skipped": "Skipped",
}
APPROVAL = {
    "pending": "Waiting for a decision",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired: nobody decided in time",
}
KINDS = {"session": SESSION, "call": CALL, "undo": UNDO, "approval": APPROVAL}


def label(state: str | None, kind: str = "session") -> str:
    """The person's word for ``state`` of a ``kind`` (session, call, undo, approval); an
    unknown state is shown as the engine names it."""
    if state is None:
        return "-"
    return KINDS[kind].get(state, state)
