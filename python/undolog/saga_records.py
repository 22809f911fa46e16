"""The records the undo walk's functions answer, one definition shared by the sync
(undolog.saga) and async (undolog.asaga) twins, so a Claim is one type for both."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


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


def plan_of(rows: list[tuple[Any, ...]]) -> list[PlannedUndo]:
    return [PlannedUndo(*row) for row in rows]
