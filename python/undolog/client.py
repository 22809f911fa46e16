"""``UndoLog`` and ``AsyncUndoLog``: sessions, heartbeats and registered compensations.

    ul = UndoLog("postgresql://agent@db/app")          # or UndoLog(pool=ConnectionPool(...))
    with ul.session(agent="onboarding") as session:    # AsyncUndoLog: async with
        create_user("ada@example.com", "Ada")

Leaving the block normally completes the session. An exception fails it, and the undo
walk runs the registered compensations last-first. AwaitingApprovalError leaving it
suspends the session (awaiting_approval) and runs no compensation. While the block is
open a heartbeat renews the session's lease, so recovery does not take a slow agent for a
dead one. Every journaled call is made on the session's connection in autocommit mode:
the journal and the undo entry are durable before a tool body runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from undolog import aengine, approvals, context, engine, walk
from undolog.context import ActiveSession
from undolog.errors import AwaitingApprovalError, PermissionDenied

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_LEASE = timedelta(minutes=5)
log = logging.getLogger("undolog")


def _default_dsn(dsn: str | None) -> str:
    return dsn if dsn is not None else os.environ.get("UNDOLOG_DSN", "")


def _heartbeat_interval(lease: timedelta) -> float:
    return max(lease.total_seconds() / 3, 0.2)


class _Base:
    def __init__(self, lease: timedelta, walk_wait: float) -> None:
        self.lease = lease
        self.walk_wait = walk_wait
        self.compensations: dict[str, Callable[..., Any]] = {}

    def _walk(
        self,
        conn: engine.Connection,
        session_id: uuid.UUID,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> str | None:
        """Run the failed session's undo walk here and now. A login without the operator
        role may not: then the session stays failed and `undolog worker` walks it."""
        try:
            return walk.run_walk(
                conn, session_id, self.compensations, wait=self.walk_wait, loop=loop
            )
        except PermissionDenied:
            log.warning(
                "session %s failed; this login may not run its undo walk, "
                "`undolog worker` (operator role) will",
                session_id,
            )
            return None

    def compensation(self, name: str) -> Callable[[F], F]:
        """Register the function that undoes calls whose descriptor names ``name``."""

        def register(fn: F) -> F:
            if name in self.compensations:
                raise ValueError(f"a compensation named {name!r} is already registered")
            self.compensations[name] = fn
            return fn

        return register

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"


class UndoLog(_Base):
    """Sync client, built from a DSN (default: UNDOLOG_DSN, then libpq's PG* variables)
    or a ``psycopg_pool.ConnectionPool``."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        lease: timedelta = DEFAULT_LEASE,
        walk_wait: float = walk.DEFAULT_WAIT,
    ) -> None:
        super().__init__(lease, walk_wait)
        self.dsn = _default_dsn(dsn)
        self.pool = pool

    @contextlib.contextmanager
    def connection(self) -> Iterator[engine.Connection]:
        """An autocommit connection: from the pool (restored after) or a new one."""
        if self.pool is None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                yield conn
            return
        with self.pool.connection() as conn:
            before = conn.autocommit
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.autocommit = before

    @contextlib.contextmanager
    def session(
        self,
        session_id: uuid.UUID | None = None,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: timedelta | None = None,
    ) -> Iterator[ActiveSession]:
        lease = lease or self.lease
        with self.connection() as conn:
            sid = engine.begin_session(conn, session_id, agent, metadata, lease)
            active = ActiveSession(sid, conn, engine.session_state(conn, sid))
            token = context.enter(active)
            stop = threading.Event()
            beat = threading.Thread(
                target=self._beat,
                args=(conn, sid, lease, stop),
                daemon=True,
                name=f"undolog-heartbeat-{sid}",
            )
            if active.state == "active":
                beat.start()
            try:
                yield active
            except AwaitingApprovalError:
                raise
            except BaseException as exc:
                stop.set()
                if active.state == "active":
                    engine.fail_session(conn, sid, self._error_text(exc))
                    self._after_failure(conn, sid)
                raise
            else:
                if active.state == "active":
                    engine.complete_session(conn, sid)
            finally:
                stop.set()
                if beat.is_alive():
                    beat.join()
                context.leave(token)

    @staticmethod
    def _beat(
        conn: engine.Connection, sid: uuid.UUID, lease: timedelta, stop: threading.Event
    ) -> None:
        while not stop.wait(_heartbeat_interval(lease)):
            try:
                engine.heartbeat(conn, sid)
            except Exception:  # the session moved on or the connection broke: stop
                return

    def _after_failure(self, conn: engine.Connection, session_id: uuid.UUID) -> None:
        self._walk(conn, session_id)

    def run_walk(self, session_id: uuid.UUID) -> str | None:
        """Walk a failed session's undo stack with the registered compensations."""
        with self.connection() as conn:
            return self._walk(conn, session_id)

    def work(self) -> dict[uuid.UUID, str]:
        """One worker pass: recover() and walk every session it names."""
        with self.connection() as conn:
            return walk.work(conn, self.compensations, wait=0.0)

    def approve(self, approval_id: uuid.UUID, decided_by: str, reason: str | None = None) -> str:
        with self.connection() as conn:
            return approvals.approve(conn, approval_id, decided_by, reason)

    def reject(self, approval_id: uuid.UUID, decided_by: str, reason: str | None = None) -> str:
        with self.connection() as conn:
            return approvals.reject(conn, approval_id, decided_by, reason)

    def wait_for_decision(
        self, approval_id: uuid.UUID, timeout: float, poll_interval: float = 5.0
    ) -> str | None:
        """Block until a human decides (LISTEN/NOTIFY, slow poll as fallback); answers
        'approved', 'rejected' or 'expired', or None on timeout."""
        with psycopg.connect(self._conninfo(), autocommit=True) as conn:
            return approvals.wait_for_decision(conn, approval_id, timeout, poll_interval)

    def _conninfo(self) -> str:
        # a pool built with a callable conninfo cannot be read here: use our DSN
        if self.pool is None:
            return self.dsn
        info = self.pool.conninfo
        return info if isinstance(info, str) else self.dsn


class AsyncUndoLog(_Base):
    """Async client, built from a DSN or a ``psycopg_pool.AsyncConnectionPool``."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        lease: timedelta = DEFAULT_LEASE,
        walk_wait: float = walk.DEFAULT_WAIT,
    ) -> None:
        super().__init__(lease, walk_wait)
        self.dsn = _default_dsn(dsn)
        self.pool = pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[aengine.AsyncConnection]:
        if self.pool is None:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                yield conn
            return
        async with self.pool.connection() as conn:
            before = conn.autocommit
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                if not conn.closed:
                    await conn.set_autocommit(before)

    @contextlib.asynccontextmanager
    async def session(
        self,
        session_id: uuid.UUID | None = None,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: timedelta | None = None,
    ) -> AsyncIterator[ActiveSession]:
        lease = lease or self.lease
        async with self.connection() as conn:
            sid = await aengine.begin_session(conn, session_id, agent, metadata, lease)
            active = ActiveSession(sid, conn, await aengine.session_state(conn, sid))
            token = context.enter(active)
            beat = (
                asyncio.create_task(self._beat(conn, sid, lease))
                if active.state == "active"
                else None
            )
            try:
                yield active
            except AwaitingApprovalError:
                raise
            except BaseException as exc:
                await self._stop(beat)
                if active.state == "active":
                    await aengine.fail_session(conn, sid, self._error_text(exc))
                    await self._after_failure(conn, sid)
                raise
            else:
                await self._stop(beat)
                if active.state == "active":
                    await aengine.complete_session(conn, sid)
            finally:
                await self._stop(beat)
                context.leave(token)

    @staticmethod
    async def _stop(beat: asyncio.Task[None] | None) -> None:
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    @staticmethod
    async def _beat(conn: aengine.AsyncConnection, sid: uuid.UUID, lease: timedelta) -> None:
        while True:
            await asyncio.sleep(_heartbeat_interval(lease))
            try:
                await aengine.heartbeat(conn, sid)
            except Exception:  # the session moved on or the connection broke: stop
                return

    async def _after_failure(self, conn: aengine.AsyncConnection, session_id: uuid.UUID) -> None:
        await self.run_walk(session_id)

    async def run_walk(self, session_id: uuid.UUID) -> str | None:
        """Walk a failed session's undo stack. The walk's SQL runs on a sync connection in
        a worker thread; async compensations run on this event loop."""
        loop = asyncio.get_running_loop()

        def in_thread() -> str | None:
            with psycopg.connect(self._conninfo(), autocommit=True) as conn:
                return self._walk(conn, session_id, loop)

        return await asyncio.to_thread(in_thread)

    async def wait_for_decision(
        self, approval_id: uuid.UUID, timeout: float, poll_interval: float = 5.0
    ) -> str | None:
        def in_thread() -> str | None:
            with psycopg.connect(self._conninfo(), autocommit=True) as conn:
                return approvals.wait_for_decision(conn, approval_id, timeout, poll_interval)

        return await asyncio.to_thread(in_thread)

    def _conninfo(self) -> str:
        # a pool built with a callable conninfo cannot be read here: use our DSN
        if self.pool is None:
            return self.dsn
        info = self.pool.conninfo
        return info if isinstance(info, str) else self.dsn
