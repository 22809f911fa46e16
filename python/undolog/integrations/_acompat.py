"""What the async twin of the adapters' round trips (undolog.integrations._arun) does its
own way: a framework run and its callbacks are awaited, and a decision may be recorded
through a sync UndoLog too (in a worker thread). undolog.integrations._compat is the sync
pair, with the same names (tools/async_to_sync.py renames ``_acompat`` to ``_compat``)."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol, TypeVar

import psycopg

from undolog.client import UndoLog
from undolog.integrations import _run
from undolog.integrations._core import DecisionRecorder, ShownCall, _recorded_by

T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


OtherClient = UndoLog
"""A client of the other side (sync, here): what ``refuse_unshown_elsewhere`` reads with."""


class Run(Protocol[T_co]):
    """The framework run that ``run_in_session`` makes: awaited."""

    def __call__(self) -> Awaitable[T_co]: ...


class Requested(Protocol[T_contra]):
    """What reads the approval ids of a run that stopped for a human: awaited."""

    def __call__(
        self, result: T_contra, conn: psycopg.AsyncConnection[Any], /
    ) -> Awaitable[None]: ...


async def record_elsewhere(
    approver: UndoLog | DecisionRecorder,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None,
) -> None:
    """Record a decision through a sync UndoLog (the sync twin's record_decision, in a
    worker thread) or a decision recorder (awaited when it answers an awaitable)."""
    if isinstance(approver, UndoLog):
        await asyncio.to_thread(
            _run.record_decision, approver, approval_id, approved, by, reason, args
        )
        return
    outcome = _recorded_by(approver, approval_id, approved, by, reason, args)
    if inspect.isawaitable(outcome):
        await outcome


async def refuse_unshown_elsewhere(
    reader: OtherClient, approval_id: uuid.UUID, shown: ShownCall
) -> None:
    """``_arun.refuse_unshown`` read with a sync UndoLog (the sync twin's, in a worker
    thread)."""
    await asyncio.to_thread(_run.refuse_unshown, reader, approval_id, shown)
