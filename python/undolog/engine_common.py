"""What undolog.aengine and the sync twin generated from it (undolog.engine) share
without a twin: the types and constants of the engine's SQL API, the answers' records,
each SQL function's parameters for its catalogue query (undolog.queries), and the
translation of the engine's SQLSTATEs into UndoLogError subclasses (undolog.errors).
Both engine modules re-export the records, the constants and translated
(``engine.Interception``, ``aengine.SESSION_STATES`` ...).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg.types.json import Jsonb

from undolog.errors import InvalidArgument, LateResult, translate
from undolog.queries import QUERIES
from undolog.signature import call_signature as sign
from undolog.signature import check_storable

# Positional (%s) or named (%(name)s, the catalogue's: undolog.queries) parameters.
Params = tuple[Any, ...] | Mapping[str, Any]

SWEEP_BATCH: Final = 50
"""How many rows a sweep of what ran out writes in one transaction at most: approval
requests past their deadline (approvals.expire_approvals) and sessions whose lease
expired (saga.fail_expired_sessions). Each is a subtransaction with an XID of its own,
and a backend caches 64 of them (PGPROC_MAX_CACHED_SUBXIDS): past that, until its
transaction ends, every other backend's snapshot looks them up in pg_subtrans, a
slowdown of the whole cluster."""

# The engine's step_index is a PostgreSQL integer.
MAX_STEP_INDEX = 2**31 - 1
# The session state machine's states (docs/design/state-machines.md), for the faces'
# filters and choices.
SESSION_STATES = (
    "active",
    "awaiting_approval",
    "completed",
    "failed",
    "compensating",
    "compensated",
    "halted",
)


@dataclass(frozen=True)
class Interception:
    """What intercept() answered: the action tells the caller what to do next."""

    effect_id: uuid.UUID | None
    action: str  # execute | replay | await_approval | in_progress | rejected
    state: str | None
    result_snapshot: Any
    approval_id: uuid.UUID | None


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise the engine's SQLSTATEs as UndoLogError subclasses."""
    try:
        yield
    except psycopg.Error as exc:
        err = translate(exc)
        if err is exc:
            raise
        raise err from exc


def check_step_index(step_index: int) -> None:
    """A call's step must fit the engine's integer: refused here, before anything is sent."""
    if not 0 <= step_index <= MAX_STEP_INDEX:
        raise InvalidArgument(f"step_index must be an integer in 0..{MAX_STEP_INDEX}")


# Each SQL function's parameters for its catalogue query (undolog.queries).


def begin_session_params(
    session_id: uuid.UUID | None,
    agent: str | None,
    metadata: Mapping[str, Any] | None,
    lease: timedelta,
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "agent": agent,
        "metadata": Jsonb(dict(metadata or {})),
        "lease": lease,
    }


def intercept_params(
    session_id: uuid.UUID,
    step_index: int,
    tool_name: str,
    tier: str,
    args: Mapping[str, Any],
    compensation: Mapping[str, Any] | None = None,
    call_signature: str | None = None,
) -> dict[str, Any]:
    """The signature is computed unless given. What can be signed but not stored (U+0000,
    nesting past the limit) is refused here, before anything is sent."""
    signature = call_signature or sign(session_id, step_index, tool_name, args)
    check_storable(args)
    if compensation is not None:
        check_storable(compensation, "compensation")
    check_step_index(step_index)
    return {
        "session_id": session_id,
        "step_index": step_index,
        "tool_name": tool_name,
        "tier": tier,
        "args": Jsonb(dict(args)),
        "call_signature": signature,
        "compensation": None if compensation is None else Jsonb(dict(compensation)),
    }


def register_tool_params(
    tool_name: str,
    tier: str,
    compensation: Mapping[str, Any] | None,
    on_reject: str = "fail_session",
) -> dict[str, Any]:
    """on_reject only when it is not the default: a default tool's registration is then
    the same statement for an engine before on_reject existed (register_tool_query)."""
    params: dict[str, Any] = {
        "tool_name": tool_name,
        "tier": tier,
        "compensation": Jsonb(dict(compensation)) if compensation is not None else None,
    }
    if on_reject != "fail_session":
        params["on_reject"] = on_reject
    return params


def register_tool_query(params: Mapping[str, Any]) -> str:
    """The catalogue's statement for register_tool_params' answer."""
    if "on_reject" in params:
        return QUERIES["register_tool_on_reject"]
    return QUERIES["register_tool"]


def intercept_tool_params(
    session_id: uuid.UUID,
    tool_id: uuid.UUID,
    step_index: int,
    args: Mapping[str, Any],
    call_signature: str,
) -> dict[str, Any]:
    """The parameters of the catalogue's intercept_tool. The signature is the caller's:
    it is computed over the tool's name, which the id stands for."""
    check_storable(args)
    check_step_index(step_index)
    return {
        "session_id": session_id,
        "tool_id": tool_id,
        "step_index": step_index,
        "args": Jsonb(dict(args)),
        "call_signature": call_signature,
    }


def commit_params(effect_id: uuid.UUID, result: Any, asynchronous: bool) -> dict[str, Any]:
    return {"effect_id": effect_id, "result": Jsonb(result), "async": asynchronous}


def fail_params(effect_id: uuid.UUID, error: str, asynchronous: bool) -> dict[str, Any]:
    return {"effect_id": effect_id, "error": error, "async": asynchronous}


def check_late(answer: Any, effect_id: uuid.UUID, what: str) -> None:
    """Raise LateResult when commit or fail answered 'late'."""
    if answer == "late":
        # The engine answers 'late' whatever started the walk, so the text names every
        # cause rather than guess one.
        raise LateResult(
            f"effect {effect_id}: this {what} arrived after the undo walk had taken the call "
            "(the session was failed or rolled back, its lease lapsed, or rollback_to / "
            "rollback_last undid the calls down to this one while it ran); the engine "
            "recorded it in the effect's history, which flags the session for an operator "
            "(needs_attention)"
        )


@dataclass(frozen=True)
class ApprovalDecision:
    """What became of an approval request (undolog.approval_decision)."""

    approval_id: uuid.UUID
    session_id: uuid.UUID
    effect_id: uuid.UUID
    tool_name: str | None
    decision: str  # pending | approved | rejected | expired
    decided_by: str | None  # None for the engine's own expiry
    decided_at: datetime | None
    reason: str | None
    on_reject: str  # the call's tool's registration: fail_session | continue
    session_state: str
    session_continues: bool  # the session can still take calls (active/awaiting_approval)


@dataclass(frozen=True)
class ApprovalEdit:
    """The arguments a person approved an IRREVERSIBLE call with instead of the requested
    ones (undolog.approve_edited; read with undolog.approval_edit). The call's body runs
    with ``approved_args``; the journal keeps both, who edited and why."""

    approval_id: uuid.UUID
    tool_name: str
    requested_args: dict[str, Any]
    approved_args: dict[str, Any]
    decided_by: str
    decided_role: str
    decided_at: datetime
    reason: str | None

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Each argument the edit changed: (requested value, approved value)."""
        return {
            name: (self.requested_args.get(name), value)
            for name, value in self.approved_args.items()
            if self.requested_args.get(name) != value
        }

    @property
    def note(self) -> str:
        """What the agent (a model) is told beside the call's result."""
        changed = "; ".join(
            f"{name}: {json.dumps(old, ensure_ascii=False)} -> "
            f"{json.dumps(new, ensure_ascii=False)}"
            for name, (old, new) in self.changes.items()
        )
        why = f" (reason: {self.reason})" if self.reason else " (no reason given)"
        return (
            f"Note: {self.decided_by} changed the arguments of this {self.tool_name} call "
            f"before approving it{why}. It ran once, with the approved arguments, not the "
            f"requested ones: {changed}."
        )

    def as_dict(self) -> dict[str, Any]:
        """The edit as JSON-ready data (a framework's artifact, a tool result's meta)."""
        return {
            "approval_id": str(self.approval_id),
            "tool": self.tool_name,
            "requested_args": self.requested_args,
            "approved_args": self.approved_args,
            "edited_by": self.decided_by,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class SessionHalt:
    """A session's state as its block's exit reads it after an undo walk; ``error`` and
    ``halt_undo_id`` say why and where a halted walk stopped; ``partial``: the walk is an
    undo_to's (it stops at a floor, and the session goes on after it)."""

    state: str
    error: str | None
    halt_undo_id: uuid.UUID | None
    partial: bool

    @property
    def halted_undo_to(self) -> bool:
        return self.state == "halted" and self.partial
