"""The undo walk from Python: one function per SQL function of the saga, one round trip each.

Two twins with the same functions: ``undolog.asaga`` on a ``psycopg.AsyncConnection``
(awaited; the source, written by hand) and ``undolog.saga`` on a ``psycopg.Connection``
(generated from it by tools/async_to_sync.py). Their records (Claim, PlannedUndo) are
one type for both (undolog.saga_records).

A walker loops on :func:`claim_compensation` for a failed session, runs the compensation
it is handed (passing ``undo_id`` as the idempotency key), then reports the outcome with
:func:`complete_compensation` or :func:`fail_compensation`. ``None`` from the claim means
nothing is due right now: the walk is over when the session is no longer
``compensating`` (``compensated``, or ``halted`` for an operator). :func:`recover` names
the sessions whose walk must run. The operator functions move a halted session on.

These functions need the ``undolog_operator`` role. Database errors of the project's
class come out as ``UndoLogError`` subclasses (undolog.errors).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from undolog import _acompat
from undolog.aengine import AsyncConnection, fetch_all, fetch_in_batches, fetch_one
from undolog.engine_common import SWEEP_BATCH as SWEEP_BATCH
from undolog.queries import QUERIES
from undolog.saga_records import Claim, PlannedUndo, plan_of

__all__ = [
    "Claim",
    "PlannedUndo",
    "abandon_session",
    "claim_compensation",
    "complete_compensation",
    "expect_session",
    "fail_compensation",
    "fail_expired_sessions",
    "recover",
    "resume_session",
    "retry_compensation",
    "rollback_last",
    "rollback_session",
    "rollback_to",
    "rollback_to_as_planned",
    "rollback_to_plan",
]


async def _text(conn: AsyncConnection, query: str, params: dict[str, Any]) -> str:
    row = await fetch_one(conn, query, params)
    return str(row[0])


async def fail_expired_sessions(
    conn: AsyncConnection,
    *,
    batch: int = SWEEP_BATCH,
    most: int | None = None,
    on_progress: _acompat.CountProgress | None = None,
) -> list[uuid.UUID]:
    """Fail every active session whose lease expired (its agent died), the oldest expired
    first; answers their ids.

    In transactions of at most ``batch`` sessions each (undolog.fail_expired_sessions
    with its limit), each committed before the next begins, until one fails fewer than
    ``batch``: after a fleet of agents died, its hundreds of sessions never overflow a
    backend's subtransaction cache (see :data:`SWEEP_BATCH`), and each batch's sessions
    are let go as soon as it is done. ``most``: stop after failing this many, however
    many more leases are out (a worker's pass: an agent login that begins short-lease
    sessions faster than they are failed would make the sweep endless); None, every one.
    A session another transaction holds is skipped, as by the SQL function. ``conn`` in
    autocommit mode, or in none with no transaction open (each batch is then a
    ``conn.transaction()``); ValueError inside an open transaction, which each batch
    would commit. ``on_progress(failed_so_far)`` is called (awaited, on
    the async side) after each batch but the last; what it raises ends the sweep, the
    batches before it committed. A worker calls it before :func:`recover`, which then
    finds none or few left to fail (undolog.walk.recover_due does both).
    """
    rows = await fetch_in_batches(
        conn,
        QUERIES["fail_expired_sessions"],
        batch=batch,
        on_progress=on_progress,
        caller="fail_expired_sessions",
        most=most,
    )
    return [uuid.UUID(str(row[0])) for row in rows]


async def recover(conn: AsyncConnection, limit: int | None = None) -> list[uuid.UUID]:
    """Fail the sessions whose lease expired (at most ``limit`` of them, the oldest
    expired first; None, every one); answer every session whose walk must run.

    One round trip (undolog.recover), in the caller's transaction: every session it
    fails is a subtransaction of that one transaction. With ``limit=None`` (the default)
    it fails EVERY expired lease there, however many: after a fleet of agents died,
    hundreds of subtransactions, which slow every other backend until it commits; under
    a flood of short-lease sessions by one agent login, a call that may not end. So with
    more than a few dozen expired, pass ``limit=`` or call :func:`fail_expired_sessions`
    first (batches, each committed), as the worker does (walk.recover_due: its sweep,
    then this with ``limit=SWEEP_BATCH`` once the sweep stopped at its bound)."""
    rows = await fetch_all(conn, QUERIES["recover"], {"limit": limit})
    return [uuid.UUID(str(r[0])) for r in rows]


async def claim_compensation(
    conn: AsyncConnection, session_id: uuid.UUID, claim_timeout: timedelta | None = None
) -> Claim | None:
    """The session's next compensation (strictly LIFO), or None when none is due."""
    rows = await fetch_all(
        conn,
        QUERIES["claim_compensation"],
        {"session_id": session_id, "claim_timeout": claim_timeout},
    )
    if not rows:
        return None
    (row,) = rows
    undo_id, effect_id, tool_name, compensation, args, result_snapshot, attempt = row
    return Claim(
        undo_id=undo_id,
        effect_id=effect_id,
        tool_name=str(tool_name),
        compensation=dict(compensation),
        args=dict(args),
        result_snapshot=result_snapshot,
        attempt=int(attempt),
    )


async def complete_compensation(
    conn: AsyncConnection, undo_id: uuid.UUID, attempt: int | None = None
) -> None:
    """The compensation succeeded. Pass the claim's attempt to refuse a stale report."""
    await fetch_one(
        conn, QUERIES["complete_compensation"], {"undo_id": undo_id, "attempt": attempt}
    )


async def fail_compensation(
    conn: AsyncConnection, undo_id: uuid.UUID, error: str, attempt: int | None = None
) -> str:
    """The compensation raised: answers 'retry' or 'compensation_failed' (session halted)."""
    return await _text(
        conn,
        QUERIES["fail_compensation"],
        {"undo_id": undo_id, "error": error, "attempt": attempt},
    )


async def resume_session(
    conn: AsyncConnection, session_id: uuid.UUID, by: str, reason: str | None = None
) -> str:
    """Move a halted walk on past the entry it stopped at; answers the new session state."""
    return await _text(
        conn, QUERIES["resume_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


async def retry_compensation(
    conn: AsyncConnection, undo_id: uuid.UUID, by: str, reason: str | None = None
) -> str:
    """Give a compensation that failed for good one more attempt; answers the session state."""
    return await _text(
        conn, QUERIES["retry_compensation"], {"undo_id": undo_id, "by": by, "reason": reason}
    )


async def abandon_session(
    conn: AsyncConnection, session_id: uuid.UUID, by: str, reason: str
) -> str:
    """Close a halted session as resolved by hand; it stays halted. Answers its state."""
    return await _text(
        conn, QUERIES["abandon_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


async def expect_session(conn: AsyncConnection, session_id: uuid.UUID, seen: datetime) -> str:
    """Lock the session and check that it is as it was read: its ``updated_at`` is
    ``seen``; answers its state. Call it first in the transaction of
    :func:`resume_session`, :func:`retry_compensation` or :func:`abandon_session`
    (one transaction: ``conn.transaction()``) so that nobody moves the session between the
    check and the action. Raises ``InvalidStateTransition`` (UL001) when it changed since."""
    return await _text(conn, QUERIES["expect_session"], {"session_id": session_id, "seen": seen})


async def rollback_session(
    conn: AsyncConnection, session_id: uuid.UUID, by: str, reason: str
) -> str:
    """Stop an active or waiting session and have its work undone; answers its new state."""
    return await _text(
        conn, QUERIES["rollback_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


async def rollback_to_plan(
    conn: AsyncConnection, session_id: uuid.UUID, step: int
) -> list[PlannedUndo]:
    """What rollback_to(session, step) would undo, last first. Read only."""
    params = {"session_id": session_id, "step": step}
    return plan_of(await fetch_all(conn, QUERIES["rollback_to_plan"], params))


async def rollback_to(
    conn: AsyncConnection, session_id: uuid.UUID, step: int, reason: str, by: str | None = None
) -> str:
    """Undo a live session's calls from the top of its stack down to ``step``, then let it
    go on: answers 'compensating' (the walk then runs, as a failed session's does)."""
    return await _text(
        conn,
        QUERIES["rollback_to"],
        {"session_id": session_id, "step": step, "reason": reason, "by": by},
    )


async def rollback_to_as_planned(
    conn: AsyncConnection,
    session_id: uuid.UUID,
    step: int,
    planned: Sequence[uuid.UUID],
    reason: str,
    by: str | None = None,
) -> str | None:
    """:func:`rollback_to`, only if it marks exactly the entries a person was shown:
    ``planned``, the ``undo_id`` of each entry of a :func:`rollback_to_plan` read before,
    in its order. The agent may journal another call between that read and rollback_to's
    lock on the session; what rollback_to marked is read again in its transaction (the
    session then locked: exactly what the walk will undo). Answers the new state
    ('compensating'), or None when the marked entries differ from ``planned``: then the
    transaction is rolled back, nothing changed, and the plan must be shown again. The
    dashboard's Undo from here and ``undolog sessions undo-to`` both act through this."""
    async with conn.transaction():
        state = await rollback_to(conn, session_id, step, reason, by)
        marked = await rollback_to_plan(conn, session_id, step)
        if [m.undo_id for m in marked] != list(planned):
            raise psycopg.Rollback()
        return state
    return None


async def rollback_last(
    conn: AsyncConnection, session_id: uuid.UUID, count: int, reason: str, by: str | None = None
) -> str:
    """rollback_to for the session's last ``count`` calls still to undo, in the walk's
    order: answers 'compensating'."""
    return await _text(
        conn,
        QUERIES["rollback_last"],
        {"session_id": session_id, "count": count, "reason": reason, "by": by},
    )
