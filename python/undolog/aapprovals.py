"""The approval gate from Python: decide, expire, and wait for a decision.

Two twins with the same functions: ``undolog.aapprovals`` on a
``psycopg.AsyncConnection`` (awaited; the source, written by hand) and
``undolog.approvals`` on a ``psycopg.Connection`` (generated from it by
tools/async_to_sync.py).

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
from collections.abc import Mapping
from typing import Any, Final

from psycopg.types.json import Jsonb

from undolog import tracing
from undolog.aengine import AsyncConnection, fetch_all, fetch_one
from undolog.errors import UnknownApproval
from undolog.queries import QUERIES

CHANNEL: Final = "undolog_approvals"
"""The LISTEN/NOTIFY channel of approval requests and decisions."""

DECISIONS: Final = frozenset({"approved", "rejected", "expired"})
"""The states a request can be decided into (it starts ``pending``)."""


def _decision(approval_id: uuid.UUID, decided_by: str, reason: str | None) -> dict[str, Any]:
    return {"approval_id": approval_id, "decided_by": decided_by, "reason": reason}


async def approve(
    conn: AsyncConnection,
    approval_id: uuid.UUID,
    decided_by: str,
    reason: str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
) -> str:
    """Allow the call; answers ``'approved'``.

    With ``args`` (edit, then approve): the call runs with these arguments instead of the
    requested ones; the journal keeps both, and who edited (``decided_by``) and why
    (``reason``). They are checked as any call's args, and must name the same arguments
    as the call's (EditChangesArguments); the requested args themselves approve as asked.

    Raises UnknownApproval, ApprovalAlreadyDecided (ApprovalNotEditable for an edit),
    ApprovalExpired (the deadline passed: nothing is written), InvalidArgument (blank
    decided_by, args not a JSON object), PayloadTooLarge, SessionNotActive (the session
    was sent to its undo walk meanwhile), PermissionDenied (not an approver).
    """
    params = _decision(approval_id, decided_by, reason)
    if args is None:
        row = await fetch_one(conn, QUERIES["approve"], params)
        return str(row[0])
    # Not a mapping (edited JSON is what a person typed): the engine refuses it, UL008.
    params["args"] = Jsonb(dict(args) if isinstance(args, Mapping) else args)
    row = await fetch_one(conn, QUERIES["approve_edited"], params)
    return str(row[0])


async def reject(
    conn: AsyncConnection, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
) -> str:
    """Refuse the call; the session goes to its undo walk (or, for a tool registered
    ``on_reject="continue"``, back to active: the agent gets the reason).

    Answers ``'rejected'``, or ``'expired'`` when the deadline had already passed (the
    call is refused either way; the record says the decision came too late). Raises
    UnknownApproval, ApprovalAlreadyDecided, InvalidArgument, PermissionDenied.
    """
    params = _decision(approval_id, decided_by, reason)
    row = await fetch_one(conn, QUERIES["reject"], params)
    return str(row[0])


async def expire_approvals(conn: AsyncConnection) -> list[uuid.UUID]:
    """Expire every pending request past its deadline (operator); answers their ids."""
    rows = await fetch_all(conn, QUERIES["expire_approvals"])
    return [uuid.UUID(str(row[0])) for row in rows]


async def approval_state(conn: AsyncConnection, approval_id: uuid.UUID) -> str | None:
    """The request's state, or None when it does not exist or is not the caller's to read
    (an agent reads only its own sessions' requests)."""
    rows = await fetch_all(conn, QUERIES["approval_state"], {"approval_id": approval_id})
    return str(rows[0][0]) if rows else None


async def wait_for_decision(
    conn: AsyncConnection,
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
    With OpenTelemetry, the wait is a span (undolog.tracing.approval_wait).
    """
    with tracing.approval_wait(approval_id) as span:
        decision = await _wait_for_decision(conn, approval_id, timeout, poll_interval)
        span.set_attribute("undolog.approval.decision", decision or "timeout")
        return decision


async def _wait_for_decision(
    conn: AsyncConnection,
    approval_id: uuid.UUID,
    timeout: float,
    poll_interval: float,
) -> str | None:
    if not conn.autocommit:
        raise ValueError("wait_for_decision needs a connection in autocommit mode")
    deadline = time.monotonic() + timeout
    await conn.execute(f"LISTEN {CHANNEL}")
    try:
        while True:
            state = await approval_state(conn, approval_id)
            if state is None:
                raise UnknownApproval(f"unknown approval {approval_id}")
            if state in DECISIONS:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # One wake-up, payload-less (and any role may NOTIFY on the channel): the
            # decision is what the table says, read again at the loop's top. stop_after
            # ends the generator itself, so no half-read one is left on the connection.
            async for _ in conn.notifies(timeout=min(poll_interval, remaining), stop_after=1):
                pass
    finally:
        await conn.execute(f"UNLISTEN {CHANNEL}")
