"""The approval gate from Python: decide, expire, and wait for a decision.

An IRREVERSIBLE call is journaled pending and its session waits (``intercept`` answers
``await_approval`` with an approval id). A human then calls :func:`approve` or
:func:`reject` (database role ``undolog_approver``); the operator's cron calls
:func:`expire_approvals` (role ``undolog_operator``) to close requests whose deadline
passed. After an approval the agent makes the same call again and it executes, once.

Every new request and every decision wakes the listeners of the PostgreSQL channel
:data:`CHANNEL` at commit, with an empty payload: any login may LISTEN, so a
notification carries nothing (no ids) and each waiter re-reads the state it may see.
:func:`wait_for_decision` listens and keeps a slow poll as a fallback, so that a missed
notification only delays it.
"""

from __future__ import annotations

import time
import uuid
from typing import Final

from undolog.engine import Connection, fetch_all, fetch_one
from undolog.errors import UnknownApproval

CHANNEL: Final = "undolog_approvals"
"""The LISTEN/NOTIFY channel of approval requests and decisions."""

DECISIONS: Final = frozenset({"approved", "rejected", "expired"})
"""The states a request can be decided into (it starts ``pending``)."""


def _decide(
    conn: Connection, function: str, approval_id: uuid.UUID, decided_by: str, reason: str | None
) -> str:
    query = f"SELECT undolog.{function}(%s, %s, %s)"
    return str(fetch_one(conn, query, (approval_id, decided_by, reason))[0])


def approve(
    conn: Connection, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
) -> str:
    """Allow the call; answers ``'approved'``.

    Raises UnknownApproval, ApprovalAlreadyDecided, ApprovalExpired (the deadline passed:
    nothing is written), InvalidArgument (blank decided_by), SessionNotActive (the session
    was sent to its undo walk meanwhile), PermissionDenied (not an approver).
    """
    return _decide(conn, "approve", approval_id, decided_by, reason)


def reject(
    conn: Connection, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
) -> str:
    """Refuse the call; the session goes to its undo walk (or, for a tool registered
    ``on_reject="continue"``, back to active: the agent gets the reason).

    Answers ``'rejected'``, or ``'expired'`` when the deadline had already passed (the
    call is refused either way; the record says the decision came too late). Raises
    UnknownApproval, ApprovalAlreadyDecided, InvalidArgument, PermissionDenied.
    """
    return _decide(conn, "reject", approval_id, decided_by, reason)


def expire_approvals(conn: Connection) -> list[uuid.UUID]:
    """Expire every pending request past its deadline (operator); answers their ids."""
    rows = fetch_all(conn, "SELECT * FROM undolog.expire_approvals()")
    return [uuid.UUID(str(row[0])) for row in rows]


def approval_state(conn: Connection, approval_id: uuid.UUID) -> str | None:
    """The request's state, or None when it does not exist or is not the caller's to read
    (an agent reads only its own sessions' requests)."""
    rows = fetch_all(
        conn,
        "SELECT state FROM undolog.session_approvals WHERE approval_id = %s",
        (approval_id,),
    )
    return str(rows[0][0]) if rows else None


def wait_for_decision(
    conn: Connection,
    approval_id: uuid.UUID,
    timeout: float,
    poll_interval: float = 5.0,
) -> str | None:
    """Block until the request is decided; answers the decision, or None on timeout.

    ``conn`` must be in autocommit mode (a LISTEN takes effect, and notifications arrive,
    only outside a transaction) and should be dedicated to waiting: this LISTENs on
    :data:`CHANNEL`, consumes the notifications that arrive meanwhile, and UNLISTENs it
    before returning. It listens before it first reads the state, so a decision made in
    between is never missed; and it reads the state again every ``poll_interval``
    seconds in case a notification was lost (e.g. the connection was re-established).
    Raises UnknownApproval if the request does not exist or is not the caller's.
    """
    if not conn.autocommit:
        raise ValueError("wait_for_decision needs a connection in autocommit mode")
    deadline = time.monotonic() + timeout
    conn.execute(f"LISTEN {CHANNEL}")
    try:
        while True:
            state = approval_state(conn, approval_id)
            if state is None:
                raise UnknownApproval(f"unknown approval {approval_id}")
            if state in DECISIONS:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for notify in conn.notifies(timeout=min(poll_interval, remaining)):
                # A payload-less wake-up (and any role may NOTIFY on the channel): the
                # decision is what the table says, read again at the loop's top.
                if notify.channel == CHANNEL:
                    break
    finally:
        conn.execute(f"UNLISTEN {CHANNEL}")
