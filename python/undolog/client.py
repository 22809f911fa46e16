"""``UndoLog`` and ``AsyncUndoLog``: sessions, heartbeats and registered compensations.

    ul = UndoLog("postgresql://agent@db/app")          # or UndoLog(pool=ConnectionPool(...))
    with ul.session(agent="onboarding") as session:    # session: an ActiveSession
        create_user("ada@example.com", "Ada")
    async with ul.session(agent="onboarding"):         # async tools: the same UndoLog
        await create_user_async("bob@example.com", "Bob")

``ul.session()`` works with ``with`` (sync tools) and ``async with`` (async tools; an
UndoLog built on a DSN opens an async connection for it, through the one async
implementation, AsyncUndoLog's, sharing this UndoLog's compensations). AsyncUndoLog
(DSN or AsyncConnectionPool) is the async client for async-only programs.

Leaving the block normally completes the session. An exception fails it, and the undo
walk runs the registered compensations last-first. AwaitingApprovalError leaving it
suspends the session (awaiting_approval) and runs no compensation. While the block is
open a heartbeat renews the session's lease, so recovery does not take a slow agent for a
dead one; it goes on while an ``undo_to`` walk is halted for an operator, and a block that
ends with that walk still halted raises SessionHalted. Every journaled call is made on
the session's connection in autocommit mode: the journal and the undo entry are durable
before a tool body runs.

The sessions' code is written once, async, in undolog.aclient (AsyncUndoLog,
AsyncSession); its sync twin, undolog.client_sync (SyncUndoLog, Session), is generated
from it (tools/async_to_sync.py). This module adds UndoLog, SyncUndoLog with the
``session()`` that also opens with ``async with``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any

from undolog.aclient import AsyncSession, AsyncUndoLog
from undolog.client_common import _conninfo_of as _conninfo_of
from undolog.client_common import seconds as seconds
from undolog.client_sync import Session, SyncUndoLog

__all__ = [
    "AsyncSession",
    "AsyncUndoLog",
    "Session",
    "SessionContext",
    "UndoLog",
]


class UndoLog(SyncUndoLog):
    """Sync client, built from a DSN (default: UNDOLOG_DSN, then libpq's PG* variables)
    or a ``psycopg_pool.ConnectionPool``."""

    # The AsyncUndoLog behind ``async with ul.session()``, made on the first use.
    _async_client: AsyncUndoLog | None = None

    def session(
        self,
        session_id: uuid.UUID | None = None,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: timedelta | None = None,
        in_progress_wait: float | timedelta | None = None,
    ) -> SessionContext:
        """A session, for ``with`` (sync tools) or ``async with`` (async tools); both
        yield an :class:`~undolog.context.ActiveSession` (``.session_id``, ``.state``).

        ``session_id`` resumes that session (after a crash, or an approval): its calls
        replay. ``lease`` (default: the client's) is how long the session survives
        without a heartbeat. ``in_progress_wait`` (seconds or a timedelta; default: the
        client's, 30 s) is how long a call still executing from an earlier run is waited
        for before CallInProgress (0: at once, which fails the session).
        """
        return SessionContext(self, session_id, agent, metadata, lease, in_progress_wait)

    def _async(self) -> AsyncUndoLog:
        """The async implementation behind ``async with ul.session()``: the same DSN,
        settings and (shared) compensations."""
        if self.pool is not None:
            raise TypeError(
                "async with ul.session() on an UndoLog built on a sync ConnectionPool: "
                "use AsyncUndoLog(pool=AsyncConnectionPool(...)) for async tools"
            )
        if self._async_client is None:
            client = AsyncUndoLog(
                self.dsn,
                lease=self.lease,
                walk_wait=self.walk_wait,
                in_progress_wait=self.in_progress_wait,
                durable_results=self.durable_results,
            )
            client.compensations = self.compensations  # one registry for both
            self._async_client = client
        return self._async_client


class SessionContext:
    """What ``UndoLog.session()`` answers: enter it with ``with`` (sync tools, through
    the session's sync connection) or ``async with`` (async tools, through the
    AsyncUndoLog implementation on an async connection). One use only."""

    def __init__(
        self,
        client: UndoLog,
        session_id: uuid.UUID | None,
        agent: str | None,
        metadata: Mapping[str, Any] | None,
        lease: timedelta | None,
        in_progress_wait: float | timedelta | None,
    ) -> None:
        self._client = client
        self._args = (session_id, agent, metadata, lease, in_progress_wait)
        self._sync: contextlib.AbstractContextManager[Session] | None = None
        self._async: contextlib.AbstractAsyncContextManager[AsyncSession] | None = None

    def __enter__(self) -> Session:
        self._sync = self._client._session(*self._args)
        return self._sync.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._sync is not None
        return self._sync.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> AsyncSession:
        session_id, agent, metadata, lease, in_progress_wait = self._args
        self._async = self._client._async().session(
            session_id,
            agent=agent,
            metadata=metadata,
            lease=lease,
            in_progress_wait=in_progress_wait,
        )
        return await self._async.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._async is not None
        return await self._async.__aexit__(exc_type, exc, tb)
