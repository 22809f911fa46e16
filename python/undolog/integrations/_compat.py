"""What the sync twin of the adapters' round trips (undolog.integrations._run) does its
own way (the pair of undolog.integrations._acompat, with the same names): a framework run
and its callbacks return, and an async approver is refused."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import psycopg

from undolog.client import AsyncUndoLog
from undolog.integrations._core import DecisionRecorder, ShownCall, _recorded_by

T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


OtherClient = AsyncUndoLog
"""A client of the other side (async, here): what ``refuse_unshown_elsewhere`` reads with."""


class Run(Protocol[T_co]):
    """The framework run that ``run_in_session`` makes."""

    def __call__(self) -> T_co: ...


class Requested(Protocol[T_contra]):
    """What reads the approval ids of a run that stopped for a human."""

    def __call__(self, result: T_contra, conn: psycopg.Connection[Any], /) -> None: ...


def record_elsewhere(
    approver: AsyncUndoLog | DecisionRecorder,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None,
) -> None:
    """Record a decision through a decision recorder; an AsyncUndoLog, or a recorder that
    answers an awaitable, needs the async helpers."""
    if isinstance(approver, AsyncUndoLog):
        raise TypeError("an AsyncUndoLog approver needs the async decision helper")
    outcome = _recorded_by(approver, approval_id, approved, by, reason, args)
    if inspect.isawaitable(outcome):
        raise TypeError("an async decision recorder needs the async decision helper")


def refuse_unshown_elsewhere(reader: OtherClient, approval_id: uuid.UUID, shown: ShownCall) -> None:
    """``_run.refuse_unshown`` read with an AsyncUndoLog: refused, as its decision would
    be (``record_elsewhere``)."""
    raise TypeError("an AsyncUndoLog approver (or ul) needs the async decision helper")
