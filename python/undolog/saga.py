"""The undo walk from Python: one function per SQL function of the saga, one round trip each.

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

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from undolog.engine import Connection, fetch_all, fetch_one
from undolog.queries import QUERIES


@dataclass(frozen=True)
class Claim:
    """One compensation handed to a walker by claim_compensation()."""

    undo_id: uuid.UUID  # the idempotency key of this compensation
    effect_id: uuid.UUID
    tool_name: str
    compensation: dict[str, Any]  # {"name": ..., "args": {...}}
    args: dict[str, Any]  # the original call's args
    result_snapshot: Any  # the call's result, None when its outcome is unknown
    attempt: int  # 1 for the first attempt

    @property
    def name(self) -> str:
        """The compensation to run."""
        return str(self.compensation["name"])

    @property
    def compensation_args(self) -> dict[str, Any]:
        """The arguments registered with the compensation."""
        args = self.compensation.get("args") or {}
        return dict(args)


def _text(conn: Connection, query: str, params: dict[str, Any]) -> str:
    return str(fetch_one(conn, query, params)[0])


def recover(conn: Connection) -> list[uuid.UUID]:
    """Fail the sessions whose lease expired; answer every session whose walk must run."""
    rows = fetch_all(conn, QUERIES["recover"])
    return [uuid.UUID(str(r[0])) for r in rows]


def claim_compensation(
    conn: Connection, session_id: uuid.UUID, claim_timeout: timedelta | None = None
) -> Claim | None:
    """The session's next compensation (strictly LIFO), or None when none is due."""
    rows = fetch_all(
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


def complete_compensation(conn: Connection, undo_id: uuid.UUID, attempt: int | None = None) -> None:
    """The compensation succeeded. Pass the claim's attempt to refuse a stale report."""
    fetch_one(conn, QUERIES["complete_compensation"], {"undo_id": undo_id, "attempt": attempt})


def fail_compensation(
    conn: Connection, undo_id: uuid.UUID, error: str, attempt: int | None = None
) -> str:
    """The compensation raised: answers 'retry' or 'compensation_failed' (session halted)."""
    return _text(
        conn,
        QUERIES["fail_compensation"],
        {"undo_id": undo_id, "error": error, "attempt": attempt},
    )


def resume_session(
    conn: Connection, session_id: uuid.UUID, by: str, reason: str | None = None
) -> str:
    """Move a halted walk on past the entry it stopped at; answers the new session state."""
    return _text(
        conn, QUERIES["resume_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


def retry_compensation(
    conn: Connection, undo_id: uuid.UUID, by: str, reason: str | None = None
) -> str:
    """Give a compensation that failed for good one more attempt; answers the session state."""
    return _text(
        conn, QUERIES["retry_compensation"], {"undo_id": undo_id, "by": by, "reason": reason}
    )


def abandon_session(conn: Connection, session_id: uuid.UUID, by: str, reason: str) -> str:
    """Close a halted session as resolved by hand; it stays halted. Answers its state."""
    return _text(
        conn, QUERIES["abandon_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


def rollback_session(conn: Connection, session_id: uuid.UUID, by: str, reason: str) -> str:
    """Stop an active or waiting session and have its work undone; answers its new state."""
    return _text(
        conn, QUERIES["rollback_session"], {"session_id": session_id, "by": by, "reason": reason}
    )


@dataclass(frozen=True)
class PlannedUndo:
    """One entry rollback_to would undo, in the walk's order (undolog.rollback_to_plan)."""

    stack_position: int
    undo_id: uuid.UUID
    effect_id: uuid.UUID
    step_index: int
    tool_name: str
    tier: str
    effect_state: str
    action: str  # 'undo' (compensated), 'skip' (never acted), 'stop' (the walk halts here)


def _positional(query: str) -> str:
    """A catalogue query with its named parameters made positional, in the order they
    appear: undolog.aengine still sends these three with tuples of arguments (in the
    engine function's order), until it reads the catalogue too. One statement either way."""
    return re.sub(r"%\(\w+\)s", "%s", query)


ROLLBACK_TO_PLAN = _positional(QUERIES["rollback_to_plan"])
ROLLBACK_TO = _positional(QUERIES["rollback_to"])
ROLLBACK_LAST = _positional(QUERIES["rollback_last"])


def plan_of(rows: list[tuple[Any, ...]]) -> list[PlannedUndo]:
    return [PlannedUndo(*row) for row in rows]


def rollback_to_plan(conn: Connection, session_id: uuid.UUID, step: int) -> list[PlannedUndo]:
    """What rollback_to(session, step) would undo, last first. Read only."""
    return plan_of(
        fetch_all(conn, QUERIES["rollback_to_plan"], {"session_id": session_id, "step": step})
    )


def rollback_to(
    conn: Connection, session_id: uuid.UUID, step: int, reason: str, by: str | None = None
) -> str:
    """Undo a live session's calls from the top of its stack down to ``step``, then let it
    go on: answers 'compensating' (the walk then runs, as a failed session's does)."""
    return _text(
        conn,
        QUERIES["rollback_to"],
        {"session_id": session_id, "step": step, "reason": reason, "by": by},
    )


def rollback_last(
    conn: Connection, session_id: uuid.UUID, count: int, reason: str, by: str | None = None
) -> str:
    """rollback_to for the session's last ``count`` calls still to undo, in the walk's
    order: answers 'compensating'."""
    return _text(
        conn,
        QUERIES["rollback_last"],
        {"session_id": session_id, "count": count, "reason": reason, "by": by},
    )
