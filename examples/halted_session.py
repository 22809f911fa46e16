"""A session whose undo walk halts (docs/operations/recovery.md): its compensation fails
for good while the mail server is down.

    MAIL_DOWN=1 python examples/halted_session.py      # the session halts
    undolog worker --app examples.halted_session:ul --all-owners --once  # after a retry
"""

from __future__ import annotations

import os
from typing import Any

from undolog import (
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    # one attempt only, so that the walk halts at once (the default is 5, with backoff)
    compensation=CompensationDescriptor.new("recall_mail", max_attempts=1),
)
def send_mail(to: str) -> dict[str, Any]:
    print(f"  mail sent to {to}")
    return {"to": to}


ul = UndoLog()


@ul.compensation("recall_mail")
def recall_mail(call: CompensationCall) -> None:
    if os.environ.get("MAIL_DOWN"):
        raise ConnectionError("the mail server does not answer")
    print(f"  undo: mail to {call.result['to']} recalled")


if __name__ == "__main__":
    try:
        with ul.session(agent="mailer") as session:
            send_mail("ada@example.com")
            raise RuntimeError("the agent changed its mind")
    except RuntimeError:
        print(f"session {session.session_id} failed")
