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


# The engine's hints name what to do as a command of the CLI (`undolog sessions show
# ID`): a person in the browser is told where the same thing is here, beside it. The CLI's
# twins of the dashboard's pages (docs/reference/cli.md); a session's actions (show,
# rollback, undo-to, resume, retry, abandon) are all on its page.
PAGE_OF_COMMAND = {
    "undolog sessions list": "Sessions",
    "undolog sessions": "the session's page",
    "undolog approvals decided": "Decisions",
    "undolog approvals": "Approvals",
    "undolog tools": "Tools",
    "undolog notifications": "Notifications",
    "undolog partitions": "Maintenance",
}


def pages_of_commands(text: str) -> str:
    """Where in the dashboard the CLI commands ``text`` names are, in the order it names
    them, as a sentence to add after it ("" when it names none): "In the dashboard:
    Approvals; the session's page."."""
    if "dashboard" in text:  # the hint says where already
        return ""
    found: dict[int, str] = {}
    for command, page in PAGE_OF_COMMAND.items():
        at = text.find(command)
        while at >= 0:
            # the longest command first: "undolog sessions list" is not the session's page
            found.setdefault(at, page)
            at = text.find(command, at + 1)
    pages = dict.fromkeys(found[at] for at in sorted(found))
    return f"In the dashboard: {'; '.join(pages)}." if pages else ""
