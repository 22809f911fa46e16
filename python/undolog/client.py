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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from undolog import aapprovals, aengine, approvals, asaga, context, engine, saga, walk
from undolog.context import DEFAULT_IN_PROGRESS_WAIT, ActiveSession
from undolog.errors import (
    AwaitingApprovalError,
    InvalidStateTransition,
    PermissionDenied,
    SessionHalted,
    SessionNotActive,
    UnknownSession,
)

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", "Session", "AsyncSession")
DEFAULT_LEASE = timedelta(minutes=5)
log = logging.getLogger("undolog")


def _default_dsn(dsn: str | None) -> str:
    return dsn if dsn is not None else os.environ.get("UNDOLOG_DSN", "")


# A heartbeat stops for good only when the session itself is gone or no longer ours.
_SESSION_GONE = (SessionNotActive, UnknownSession, PermissionDenied)

# libpq connection parameters a pool's kwargs may carry (the rest are psycopg options).
_CONNINFO_KEYS = frozenset(
    (
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "options",
        "application_name",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "connect_timeout",
        "target_session_attrs",
        "service",
    )
)


def _unknown(active: ActiveSession) -> str:
    return (
        f"session {active.session_id} cannot complete: the outcome of "
        f"{active.unknown_outcome} is unknown (it may have acted); the session was "
        "failed so that the undo walk compensates it"
    )


def _settled(conn: engine.Connection) -> Exception | None:
    """Read the answer to the session's last result (sent without waiting): its error,
    if any, is raised at the session's exit rather than lost."""
    engine.settle(conn)
    return engine.take_unsettled(conn)


async def _asettled(conn: aengine.AsyncConnection) -> Exception | None:
    await aengine.settle(conn)
    return engine.take_unsettled(conn)


def _halted(session_id: uuid.UUID, halt: engine.SessionHalt) -> SessionHalted:
    return SessionHalted(
        f"session {session_id} is halted: its undo_to walk stopped at undo entry "
        f"{halt.halt_undo_id} ({halt.error}), so the session was not completed; an "
        "operator moves it on (undolog sessions resume|retry|abandon)",
        session_id=session_id,
        halt_undo_id=halt.halt_undo_id,
        error=halt.error,
    )


def _note_halt(exc: BaseException, session_id: uuid.UUID, halt: engine.SessionHalt) -> None:
    """An exception is leaving a session whose undo_to walk halted: say so on it."""
    if halt.halted_undo_to:
        exc.add_note(str(_halted(session_id, halt)))


def _note_unsettled(exc: BaseException, late: Exception | None) -> None:
    """An exception is leaving the session: the last result's error rides on it."""
    if late is not None:
        log.warning("the session's last result was not recorded: %s", late)
        exc.add_note(f"also, the session's last result was not recorded: {late!r}")


def _conninfo_of(dsn: str, pool: ConnectionPool[Any] | AsyncConnectionPool[Any] | None) -> str:
    """Where a fresh connection of ours (the async walk, a LISTEN) goes: the pool's
    conninfo with the connection parameters of its kwargs (user, password, ...), so that
    it logs in exactly as the pool's connections do."""
    if pool is None:
        return dsn
    info = pool.conninfo if isinstance(pool.conninfo, str) else dsn
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    params = {k: v for k, v in kwargs.items() if k in _CONNINFO_KEYS}
    return psycopg.conninfo.make_conninfo(info, **params)


def _heartbeat_interval(lease: timedelta) -> float:
    return max(lease.total_seconds() / 3, 0.2)


def seconds(value: float | timedelta) -> float:
    """A duration given as seconds (int or float) or as a timedelta, in seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a duration is seconds or a timedelta, not {value!r}")
    return float(value)


class _Base:
    def __init__(
        self,
        lease: timedelta,
        walk_wait: float,
        in_progress_wait: float | timedelta,
        durable_results: bool,
    ) -> None:
        self.lease = lease
        self.walk_wait = walk_wait
        self.in_progress_wait = seconds(in_progress_wait)
        # False (the default): a call's result is committed asynchronously (see README,
        # Performance); its intent, written by intercept, is always durable.
        self.durable_results = durable_results
        self.compensations: dict[str, Callable[..., Any]] = {}
        # Which decorated tools were registered (undolog.register_tool) on which of our
        # connections: (id(connection), tool name) -> tool_id, which each call of the tool
        # there names (intercept_tool). See ActiveSession and decorator._register.
        self.registered_tools: dict[tuple[int, str], uuid.UUID] = {}

    def _in_progress_wait(self, given: float | timedelta | None) -> float:
        return self.in_progress_wait if given is None else seconds(given)

    def _active(
        self,
        sid: uuid.UUID,
        conn: engine.Connection | aengine.AsyncConnection,
        state: str,
        in_progress_wait: float | timedelta | None,
        sent: float,
        lease: timedelta,
        kind: type[S],
    ) -> S:
        """The session as the decorator sees it. Its lease runs from ``sent``, the moment
        begin_session was sent: the server's expiry is later, so no clocks are compared."""
        return kind(
            sid,
            conn,
            state,
            self._in_progress_wait(in_progress_wait),
            durable_results=self.durable_results,
            lease_deadline=sent + lease.total_seconds(),
            lease_seconds=lease.total_seconds(),
            registered_tools=self.registered_tools,
            client=self,
        )

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
        in_progress_wait: float | timedelta = DEFAULT_IN_PROGRESS_WAIT,
        durable_results: bool = False,
    ) -> None:
        super().__init__(lease, walk_wait, in_progress_wait, durable_results)
        self.dsn = _default_dsn(dsn)
        self.pool = pool
        self._async_client: AsyncUndoLog | None = None

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

    @contextlib.contextmanager
    def _session(
        self,
        session_id: uuid.UUID | None,
        agent: str | None,
        metadata: Mapping[str, Any] | None,
        lease: timedelta | None,
        in_progress_wait: float | timedelta | None,
    ) -> Iterator[Session]:
        lease = lease or self.lease
        with self.connection() as conn:
            sent = time.monotonic()
            sid = engine.begin_session(conn, session_id, agent, metadata, lease)
            state = engine.session_state(conn, sid)
            active = self._active(sid, conn, state, in_progress_wait, sent, lease, Session)
            if not self.durable_results:
                engine.set_async_results(conn, True)
            token = context.enter(active)
            stop = threading.Event()
            beat = threading.Thread(
                target=self._beat,
                args=(conn, active, lease, stop),
                daemon=True,
                name=f"undolog-heartbeat-{sid}",
            )
            if active.state == "active":
                beat.start()
            try:
                yield active
            except BaseException as exc:
                self._stop(stop, beat)
                _note_unsettled(exc, _settled(conn))
                if not isinstance(exc, AwaitingApprovalError):  # that one suspends it
                    self._fail(conn, sid, self._error_text(exc))
                self._learn_state(conn, active, exc)
                raise
            else:
                self._stop(stop, beat)
                if (late := _settled(conn)) is not None:  # the last result's error
                    self._fail(conn, sid, self._error_text(late))
                    self._learn_state(conn, active)
                    raise late
                if active.unknown_outcome is not None:
                    self._fail(conn, sid, _unknown(active))
                    self._learn_state(conn, active)
                    raise InvalidStateTransition(_unknown(active))
                if active.state != "active":  # an undo_to ran: where its walk is now
                    halt = engine.session_halt(conn, sid)
                    active.state = halt.state
                    if halt.halted_undo_to:  # not completed: the operator moves it on
                        raise _halted(sid, halt)
                if active.state == "active":
                    active.state = engine.complete_session(conn, sid)
            finally:
                self._stop(stop, beat)
                context.leave(token)
                if self.pool is not None and not self.durable_results and not conn.closed:
                    with contextlib.suppress(Exception):  # a pooled connection: as it was
                        engine.set_async_results(conn, False)

    @staticmethod
    def _learn_state(
        conn: engine.Connection, active: ActiveSession, exc: BaseException | None = None
    ) -> None:
        """Record in ``active.state`` where leaving the block left the session (never
        replacing the exception that is leaving it, ``exc``, which a halted undo_to walk
        is noted on)."""
        try:
            halt = engine.session_halt(conn, active.session_id)
            active.state = halt.state
            if exc is not None:
                _note_halt(exc, active.session_id, halt)
        except Exception:
            log.debug("session %s: reading its state failed", active.session_id, exc_info=True)

    @staticmethod
    def _stop(stop: threading.Event, beat: threading.Thread) -> None:
        stop.set()
        if beat.is_alive():
            beat.join()

    def _fail(self, conn: engine.Connection, sid: uuid.UUID, error: str) -> None:
        """Fail the session (if it is still active) and walk it. This bookkeeping never
        replaces the exception that is leaving the session: its own errors are logged."""
        try:
            if engine.session_state(conn, sid) != "active":
                return
            engine.fail_session(conn, sid, error)
            self._after_failure(conn, sid)
        except Exception:
            log.exception("session %s: failing it and walking its undo stack failed", sid)

    @staticmethod
    def _beat(
        conn: engine.Connection, active: ActiveSession, lease: timedelta, stop: threading.Event
    ) -> None:
        while not stop.wait(_heartbeat_interval(lease)):
            try:
                sent = time.monotonic()
                engine.heartbeat(conn, active.session_id)
                active.lease_deadline = sent + lease.total_seconds()
            except _SESSION_GONE:  # the session moved on: nothing left to keep alive
                return
            except Exception as exc:  # a passing fault (lock timeout, network): next beat
                log.warning("session %s: heartbeat failed, retrying: %s", active.session_id, exc)

    def _after_failure(self, conn: engine.Connection, session_id: uuid.UUID) -> None:
        self._walk(conn, session_id)

    def run_walk(self, session_id: uuid.UUID) -> str | None:
        """Walk a failed session's undo stack with the registered compensations."""
        with self.connection() as conn:
            return self._walk(conn, session_id)

    def work(self, owners: Sequence[str] | None = None) -> dict[uuid.UUID, str]:
        """One worker pass: recover() and walk every session it names (only the sessions
        begun by ``owners`` when given; an empty sequence: this login's own)."""
        with self.connection() as conn:
            return walk.work(conn, self.compensations, wait=0.0, owners=owners)

    def approve(
        self,
        approval_id: uuid.UUID,
        decided_by: str,
        reason: str | None = None,
        *,
        args: Mapping[str, Any] | None = None,
    ) -> str:
        """Allow the call; with ``args``, the call runs with these arguments instead of
        the requested ones (edit, then approve: undolog.approve_edited)."""
        with self.connection() as conn:
            return approvals.approve(conn, approval_id, decided_by, reason, args=args)

    def reject(self, approval_id: uuid.UUID, decided_by: str, reason: str | None = None) -> str:
        with self.connection() as conn:
            return approvals.reject(conn, approval_id, decided_by, reason)

    def wait_for_decision(
        self,
        approval_id: uuid.UUID,
        timeout: float | timedelta,
        poll_interval: float | timedelta = 5.0,
    ) -> str | None:
        """Block until a human decides (LISTEN/NOTIFY, slow poll as fallback); answers
        'approved', 'rejected' or 'expired', or None on timeout. ``timeout`` and
        ``poll_interval`` are seconds or timedeltas."""
        wait, poll = seconds(timeout), seconds(poll_interval)
        with psycopg.connect(self._conninfo(), autocommit=True) as conn:
            return approvals.wait_for_decision(conn, approval_id, wait, poll)

    def _conninfo(self) -> str:
        return _conninfo_of(self.dsn, self.pool)


class AsyncUndoLog(_Base):
    """Async client, built from a DSN or a ``psycopg_pool.AsyncConnectionPool``."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        lease: timedelta = DEFAULT_LEASE,
        walk_wait: float = walk.DEFAULT_WAIT,
        in_progress_wait: float | timedelta = DEFAULT_IN_PROGRESS_WAIT,
        durable_results: bool = False,
    ) -> None:
        super().__init__(lease, walk_wait, in_progress_wait, durable_results)
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
        in_progress_wait: float | timedelta | None = None,
    ) -> AsyncIterator[AsyncSession]:
        """An async session (``async with``), yielding an ActiveSession; the arguments
        are UndoLog.session()'s."""
        lease = lease or self.lease
        async with self.connection() as conn:
            sent = time.monotonic()
            sid = await aengine.begin_session(conn, session_id, agent, metadata, lease)
            state = await aengine.session_state(conn, sid)
            active = self._active(sid, conn, state, in_progress_wait, sent, lease, AsyncSession)
            if not self.durable_results:
                await aengine.set_async_results(conn, True)
            token = context.enter(active)
            beat = (
                asyncio.create_task(self._beat(conn, active, lease))
                if active.state == "active"
                else None
            )
            try:
                yield active
            except BaseException as exc:
                await self._stop(beat)
                _note_unsettled(exc, await _asettled(conn))
                if not isinstance(exc, AwaitingApprovalError):  # that one suspends it
                    await self._fail(conn, sid, self._error_text(exc))
                await self._learn_state(conn, active, exc)
                raise
            else:
                await self._stop(beat)
                if (late := await _asettled(conn)) is not None:  # the last result's error
                    await self._fail(conn, sid, self._error_text(late))
                    await self._learn_state(conn, active)
                    raise late
                if active.unknown_outcome is not None:
                    await self._fail(conn, sid, _unknown(active))
                    await self._learn_state(conn, active)
                    raise InvalidStateTransition(_unknown(active))
                if active.state != "active":  # an undo_to ran: where its walk is now
                    halt = await aengine.session_halt(conn, sid)
                    active.state = halt.state
                    if halt.halted_undo_to:  # not completed: the operator moves it on
                        raise _halted(sid, halt)
                if active.state == "active":
                    active.state = await aengine.complete_session(conn, sid)
            finally:
                await self._stop(beat)
                context.leave(token)
                if self.pool is not None and not self.durable_results and not conn.closed:
                    with contextlib.suppress(Exception):  # a pooled connection: as it was
                        await aengine.set_async_results(conn, False)

    @staticmethod
    async def _learn_state(
        conn: aengine.AsyncConnection, active: ActiveSession, exc: BaseException | None = None
    ) -> None:
        """As UndoLog._learn_state."""
        try:
            halt = await aengine.session_halt(conn, active.session_id)
            active.state = halt.state
            if exc is not None:
                _note_halt(exc, active.session_id, halt)
        except Exception:
            log.debug("session %s: reading its state failed", active.session_id, exc_info=True)

    async def _fail(self, conn: aengine.AsyncConnection, sid: uuid.UUID, error: str) -> None:
        """As UndoLog._fail: never replaces the exception leaving the session."""
        try:
            if await aengine.session_state(conn, sid) != "active":
                return
            await aengine.fail_session(conn, sid, error)
            await self._after_failure(conn, sid)
        except Exception:
            log.exception("session %s: failing it and walking its undo stack failed", sid)

    @staticmethod
    async def _stop(beat: asyncio.Task[None] | None) -> None:
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    @staticmethod
    async def _beat(conn: aengine.AsyncConnection, active: ActiveSession, lease: timedelta) -> None:
        while True:
            await asyncio.sleep(_heartbeat_interval(lease))
            try:
                sent = time.monotonic()
                await aengine.heartbeat(conn, active.session_id)
                active.lease_deadline = sent + lease.total_seconds()
            except _SESSION_GONE:  # the session moved on: nothing left to keep alive
                return
            except Exception as exc:  # a passing fault (lock timeout, network): next beat
                log.warning("session %s: heartbeat failed, retrying: %s", active.session_id, exc)

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

    async def approve(
        self,
        approval_id: uuid.UUID,
        decided_by: str,
        reason: str | None = None,
        *,
        args: Mapping[str, Any] | None = None,
    ) -> str:
        """As UndoLog.approve."""
        async with self.connection() as conn:
            return await aapprovals.approve(conn, approval_id, decided_by, reason, args=args)

    async def reject(
        self, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
    ) -> str:
        async with self.connection() as conn:
            return await aapprovals.reject(conn, approval_id, decided_by, reason)

    async def work(self, owners: Sequence[str] | None = None) -> dict[uuid.UUID, str]:
        """One worker pass: recover() and walk every session it names (only those begun
        by ``owners`` when given; sync compensations run in a worker thread, async ones
        on this event loop)."""
        loop = asyncio.get_running_loop()

        def in_thread() -> dict[uuid.UUID, str]:
            with psycopg.connect(self._conninfo(), autocommit=True) as conn:
                return walk.work(conn, self.compensations, wait=0.0, loop=loop, owners=owners)

        return await asyncio.to_thread(in_thread)

    async def wait_for_decision(
        self,
        approval_id: uuid.UUID,
        timeout: float | timedelta,
        poll_interval: float | timedelta = 5.0,
    ) -> str | None:
        """As UndoLog.wait_for_decision (seconds or timedeltas), awaited."""
        wait, poll = seconds(timeout), seconds(poll_interval)
        # A connection of its own, never the pool's: it LISTENs for the whole wait.
        conninfo = self._conninfo()
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            return await aapprovals.wait_for_decision(conn, approval_id, wait, poll)

    def _conninfo(self) -> str:
        return _conninfo_of(self.dsn, self.pool)


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


# Undo to a point from inside the session (rollback_to). The binding waits for the walk:
# it runs the walk here when this login may (the operator role), else it waits for
# `undolog worker`, up to the client's walk_wait (or ``wait``) seconds, and answers the
# session's state then: 'active' (undone; the session goes on, later calls take later
# step indexes), 'halted' (the walk stopped at an irreversible call or a compensation
# that failed for good: calls are refused until an operator acts) or 'compensating' (the
# worker has not finished yet: calls are refused until it has).


def _reason(reason: str | None, what: str) -> str:
    return reason if reason is not None else f"the agent undid {what}"


@dataclass
class Session(ActiveSession):
    """What ``with ul.session() as s`` yields: an ActiveSession that can also undo its
    own latest calls (``s.undo_to(step)``, ``s.undo_last(n)``). The engine allows it to
    an operator's login, or to the agent's own where the database allows it
    (``ALTER DATABASE ... SET undolog.agent_rollback_to = on``; PermissionDenied
    otherwise)."""

    client: _Base | None = field(default=None, repr=False)

    def undo_to(self, step: int, reason: str | None = None, *, wait: float | None = None) -> str:
        """Undo this session's calls from the latest down to and including ``step``,
        last first, through the undo walk; answers the session's state after it (see
        above). Raises NothingToUndo when nothing at or after ``step`` is left to undo."""
        assert isinstance(self.connection, psycopg.Connection)
        why = _reason(reason, f"its calls from step {step} on")
        saga.rollback_to(self.connection, self.session_id, step, why)
        return self._walked(wait)

    def undo_last(self, n: int = 1, reason: str | None = None, *, wait: float | None = None) -> str:
        """Undo this session's last ``n`` calls still standing, last first (as undo_to).
        NothingToUndo when fewer than ``n`` are left; InvalidArgument when ``n`` < 1."""
        assert isinstance(self.connection, psycopg.Connection)
        why = _reason(reason, f"its last {n} call(s)")
        saga.rollback_last(self.connection, self.session_id, n, why)
        return self._walked(wait)

    def _walked(self, wait: float | None) -> str:
        assert isinstance(self.client, UndoLog) and isinstance(self.connection, psycopg.Connection)
        conn, sid = self.connection, self.session_id
        self.state = "compensating"
        self.client._walk(conn, sid)
        deadline = time.monotonic() + (self.client.walk_wait if wait is None else wait)
        while True:
            self.state = engine.session_state(conn, sid)
            if self.state != "compensating" or time.monotonic() >= deadline:
                return self.state
            time.sleep(walk.POLL)


@dataclass
class AsyncSession(ActiveSession):
    """What ``async with ul.session() as s`` yields: as Session, its methods awaited."""

    client: _Base | None = field(default=None, repr=False)

    async def undo_to(
        self, step: int, reason: str | None = None, *, wait: float | None = None
    ) -> str:
        """As Session.undo_to, awaited."""
        assert isinstance(self.connection, psycopg.AsyncConnection)
        why = _reason(reason, f"its calls from step {step} on")
        await asaga.rollback_to(self.connection, self.session_id, step, why)
        return await self._walked(wait)

    async def undo_last(
        self, n: int = 1, reason: str | None = None, *, wait: float | None = None
    ) -> str:
        """As Session.undo_last, awaited."""
        assert isinstance(self.connection, psycopg.AsyncConnection)
        why = _reason(reason, f"its last {n} call(s)")
        await asaga.rollback_last(self.connection, self.session_id, n, why)
        return await self._walked(wait)

    async def _walked(self, wait: float | None) -> str:
        assert isinstance(self.client, AsyncUndoLog)
        assert isinstance(self.connection, psycopg.AsyncConnection)
        conn, sid = self.connection, self.session_id
        self.state = "compensating"
        await self.client.run_walk(sid)
        deadline = time.monotonic() + (self.client.walk_wait if wait is None else wait)
        while True:
            self.state = await aengine.session_state(conn, sid)
            if self.state != "compensating" or time.monotonic() >= deadline:
                return self.state
            await asyncio.sleep(walk.POLL)
