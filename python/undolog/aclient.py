"""``AsyncUndoLog``, the async session client, and ``AsyncSession``, what its sessions yield.

This module is the source, written by hand; undolog.client_sync, the sync twin of both
classes (the core of undolog.client's UndoLog, and Session), is generated from it by
tools/async_to_sync.py. What the twins do their own way (the heartbeat's task or thread,
waits, where the undo walk runs) is in the pair undolog._acompat / undolog._compat; what
they share without a twin is in undolog.client_common. See undolog.client for sessions.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

import psycopg
from psycopg_pool import AsyncConnectionPool

from undolog import _acompat, aapprovals, aengine, asaga, context, engine_check, walk
from undolog._conninfo import UNREACHABLE_HINT, check_dsn, dsn_error
from undolog.client_common import (
    _SESSION_GONE,
    DEFAULT_LEASE,
    ClientSession,
    _Base,
    _conninfo_of,
    _default_dsn,
    _halted,
    _heartbeat_interval,
    _incomplete,
    _note_halt,
    _note_unsettled,
    _reason,
    _unknown,
    log,
    seconds,
)
from undolog.context import DEFAULT_IN_PROGRESS_WAIT, ActiveSession
from undolog.engine import take_unsettled
from undolog.errors import AwaitingApprovalError, InvalidStateTransition, UndoLogError


async def _connect(conninfo: str) -> aengine.AsyncConnection:
    """A new autocommit connection; a DSN that does not parse is said without the text
    libpq quotes of it (it may be a password: undolog._conninfo.dsn_error), and a server
    that does not answer with what to check."""
    check_dsn(conninfo)
    try:
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    except psycopg.ProgrammingError as exc:
        raise dsn_error(exc) from None
    except psycopg.OperationalError as exc:
        exc.add_note(f"hint: {UNREACHABLE_HINT}")
        raise


async def _first_use(conn: aengine.AsyncConnection, async_results: bool = False) -> None:
    """Check, the first time the client uses ``conn``, that the engine in its database is
    one this package works with (undolog.engine_check): EngineNotInstalled when there is
    none, EngineVersionMismatch when it is too old or too new; nothing after that. With
    ``async_results``, undolog.async_results is set on for the connection in the same
    statement (a session's setting: the check then costs no round trip of its own)."""
    if engine_check.checked(conn):
        if async_results:
            await aengine.set_async_results(conn, True)
        return
    try:
        row = await aengine.fetch_one(conn, engine_check.statement(async_results))
    except UndoLogError as exc:
        raise engine_check.failed(exc) from exc.__cause__
    engine_check.accept(conn, row)


async def _settled(conn: aengine.AsyncConnection) -> Exception | None:
    """Read the answer to the session's last result (sent without waiting): its error,
    if any, is raised at the session's exit rather than lost."""
    await aengine.settle(conn)
    return take_unsettled(conn)


Beat = Literal["kept", "gone", "retry"]

# A session's lifecycle steps, shared by the with-block sessions below and by faces whose
# sessions span many requests (the MCP proxy's): one beat, and failing a live session.


async def beat(conn: aengine.AsyncConnection, session_id: uuid.UUID) -> Beat:
    """One heartbeat of the session: "kept" (its lease renewed), "gone" (it moved on, or
    is no longer this login's: nothing left to keep alive) or "retry" (a passing fault,
    a lock timeout or the network, logged: the next beat tries again)."""
    try:
        await aengine.heartbeat(conn, session_id)
    except _SESSION_GONE:
        return "gone"
    except Exception as exc:
        log.warning("session %s: heartbeat failed, retrying: %s", session_id, exc)
        return "retry"
    return "kept"


async def fail_if_active(conn: aengine.AsyncConnection, session_id: uuid.UUID, error: str) -> bool:
    """Fail the session if it is still active (True), so that its undo walk runs;
    False when it is not active (already failed, waiting for a decision, ended)."""
    if await aengine.session_state(conn, session_id) != "active":
        return False
    await aengine.fail_session(conn, session_id, error)
    return True


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
        """An autocommit connection: from the pool (restored after) or a new one. The
        first time the client uses a connection, it checks that the engine in its
        database is one this package works with (EngineNotInstalled,
        EngineVersionMismatch): one round trip, once per connection."""
        async with self._connection() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _connection(
        self, async_results: bool = False
    ) -> AsyncIterator[aengine.AsyncConnection]:
        """connection(); with ``async_results`` (a session's, unless durable_results),
        undolog.async_results is on while it is used, in the same statement as the
        engine's check on a connection's first use (restored after, on a pooled one)."""
        if self.pool is None:
            async with await _connect(self.dsn) as conn:
                await _first_use(conn, async_results)
                yield conn
            return
        async with self.pool.connection() as conn:
            before = conn.autocommit
            await conn.set_autocommit(True)
            try:
                await _first_use(conn, async_results)
                yield conn
            finally:
                if async_results and not conn.closed:
                    with contextlib.suppress(Exception):  # a pooled connection: as it was
                        await aengine.set_async_results(conn, False)
                if not conn.closed:
                    await conn.set_autocommit(before)

    def session(
        self,
        session_id: uuid.UUID | None = None,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: timedelta | None = None,
        in_progress_wait: float | timedelta | None = None,
    ) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        """An async session (``async with``), yielding an ActiveSession; the arguments
        are UndoLog.session()'s."""
        return self._session(session_id, agent, metadata, lease, in_progress_wait)

    @contextlib.asynccontextmanager
    async def _session(
        self,
        session_id: uuid.UUID | None,
        agent: str | None,
        metadata: Mapping[str, Any] | None,
        lease: timedelta | None,
        in_progress_wait: float | timedelta | None,
    ) -> AsyncIterator[AsyncSession]:
        lease = lease or self.lease
        async with self._connection(async_results=not self.durable_results) as conn:
            sent = time.monotonic()
            sid = await aengine.begin_session(conn, session_id, agent, metadata, lease)
            state = await aengine.session_state(conn, sid)
            active = self._active(sid, conn, state, in_progress_wait, sent, lease, AsyncSession)
            token = context.enter(active)
            stop = _acompat.Event()
            beat = (
                _acompat.spawn(self._beat, (conn, active, lease, stop), f"undolog-heartbeat-{sid}")
                if active.state == "active"
                else None
            )
            try:
                yield active
            except BaseException as exc:
                active.left = True
                await _acompat.stop(beat, stop)
                await _acompat.uncancelled(self._left(conn, active, exc))
                raise
            else:
                active.left = True
                await _acompat.stop(beat, stop)
                await _acompat.uncancelled(self._ended(conn, active))
            finally:
                active.left = True
                await _acompat.stop(beat, stop)
                context.leave(token)

    async def _ended(self, conn: aengine.AsyncConnection, active: ActiveSession) -> str:
        """The block ended: the session completed, or failed and walked when its last
        result was refused (or an earlier one was, its error caught by the agent: raised
        again here) or a call's outcome is unknown, or left to its undo_to walk; answers
        the session's state then."""
        sid = active.session_id
        # The last result's error, or one taken earlier that the agent caught (kept).
        if (late := await _settled(conn) or active.refused) is not None:
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
            try:
                active.state = await aengine.complete_session(conn, sid)
            except InvalidStateTransition as refused:
                # A call is still executing: one interrupted where the binding could not
                # see it (a cancellation caught by the agent while the call was being
                # journaled). Its outcome is unknown: fail the session, so that the walk
                # compensates it, rather than leave it active until its lease runs out.
                await self._fail(conn, sid, self._error_text(refused))
                await self._learn_state(conn, active)
                refused.add_note(_incomplete(sid, active.state))
                raise
        return active.state

    async def _left(
        self, conn: aengine.AsyncConnection, active: ActiveSession, exc: BaseException
    ) -> str:
        """The block was left by ``exc``: the last result's error noted on it, the
        session failed and walked (unless ``exc`` suspends it for an approval); answers
        the session's state then."""
        late = await _settled(conn)
        if late is None and active.refused is not exc:  # one taken earlier, and caught
            late = active.refused
        _note_unsettled(exc, late)
        if not isinstance(exc, AwaitingApprovalError):  # that one suspends it
            await self._fail(conn, active.session_id, self._error_text(exc))
        await self._learn_state(conn, active, exc)
        return active.state

    @staticmethod
    async def _learn_state(
        conn: aengine.AsyncConnection, active: ActiveSession, exc: BaseException | None = None
    ) -> None:
        """Record in ``active.state`` where leaving the block left the session (never
        replacing the exception that is leaving it, ``exc``, which a halted undo_to walk
        is noted on)."""
        try:
            halt = await aengine.session_halt(conn, active.session_id)
            active.state = halt.state
            if exc is not None:
                _note_halt(exc, active.session_id, halt)
        except Exception:
            log.debug("session %s: reading its state failed", active.session_id, exc_info=True)

    async def _fail(self, conn: aengine.AsyncConnection, sid: uuid.UUID, error: str) -> None:
        """Fail the session (if it is still active) and walk it. This bookkeeping never
        replaces the exception that is leaving the session: its own errors are logged."""
        try:
            if await fail_if_active(conn, sid, error):
                await self._after_failure(conn, sid)
        except Exception:
            log.exception("session %s: failing it and walking its undo stack failed", sid)

    @staticmethod
    async def _beat(
        conn: aengine.AsyncConnection, active: ActiveSession, lease: timedelta, stop: _acompat.Event
    ) -> None:
        while not await stop.wait_timeout(_heartbeat_interval(lease)):
            sent = time.monotonic()
            beaten = await beat(conn, active.session_id)
            if beaten == "gone":
                return
            if beaten == "kept":
                active.lease_deadline = sent + lease.total_seconds()

    async def _after_failure(self, conn: aengine.AsyncConnection, session_id: uuid.UUID) -> None:
        """The failed session's undo walk, from the session (at its end, or undo_to): on
        the session's own connection where that can carry it (the sync twin's)."""
        await _acompat.walking(self, lambda c, loop: self._walk(c, session_id, loop), conn)

    async def run_walk(self, session_id: uuid.UUID) -> str | None:
        """Walk a failed session's undo stack with the registered compensations. (The
        async client runs the walk's SQL on a sync connection in a worker thread, and
        async compensations on its event loop.)"""
        return await _acompat.walking(
            self, lambda conn, loop: self._walk(engine_check.check(conn), session_id, loop)
        )

    async def work(self, owners: Sequence[str] | None = None) -> dict[uuid.UUID, str]:
        """One worker pass: the approval requests past their deadline closed, recover(),
        and every session it names walked (only the sessions begun by ``owners`` when
        given; an empty sequence: this login's own). (The async
        client runs sync compensations in a worker thread, async ones on its event
        loop.)"""
        return await _acompat.walking(
            self,
            lambda conn, loop: walk.work(
                engine_check.check(conn), self.compensations, wait=0.0, loop=loop, owners=owners
            ),
        )

    async def approve(
        self,
        approval_id: uuid.UUID,
        decided_by: str,
        reason: str | None = None,
        *,
        args: Mapping[str, Any] | None = None,
    ) -> str:
        """Allow the call; with ``args``, the call runs with these arguments instead of
        the requested ones (edit, then approve: undolog.approve_edited)."""
        async with self.connection() as conn:
            return await aapprovals.approve(conn, approval_id, decided_by, reason, args=args)

    async def reject(
        self, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
    ) -> str:
        async with self.connection() as conn:
            return await aapprovals.reject(conn, approval_id, decided_by, reason)

    async def wait_for_decision(
        self,
        approval_id: uuid.UUID,
        timeout: float | timedelta,
        poll_interval: float | timedelta = 5.0,
    ) -> str | None:
        """Wait until a human decides (LISTEN/NOTIFY, slow poll as fallback); answers
        'approved', 'rejected' or 'expired', or None on timeout. ``timeout`` and
        ``poll_interval`` are seconds or timedeltas."""
        wait, poll = seconds(timeout), seconds(poll_interval)
        # A connection of its own, never the pool's: it LISTENs for the whole wait.
        conninfo = self._conninfo()
        async with await _connect(conninfo) as conn:
            await _first_use(conn)
            return await aapprovals.wait_for_decision(conn, approval_id, wait, poll)

    def _conninfo(self) -> str:
        return _conninfo_of(self.dsn, self.pool)


class AsyncSession(ClientSession):
    """What ``with ul.session() as s`` yields (Session; for ``async with``, AsyncSession,
    its methods awaited): an ActiveSession that can also undo its own latest calls
    (``s.undo_to(step)``, ``s.undo_last(n)``). The engine allows it to an operator's
    login, or to the agent's own where the database allows it (``ALTER DATABASE ... SET
    undolog.agent_rollback_to = on``; PermissionDenied otherwise)."""

    async def undo_to(
        self, step: int, reason: str | None = None, *, wait: float | None = None
    ) -> str:
        """Undo this session's calls from the latest down to and including ``step``,
        last first, through the undo walk; answers the session's state after it:
        'active' (undone; the session goes on, later calls take later step indexes),
        'halted' (the walk stopped at an irreversible call or a compensation that failed
        for good: calls are refused until an operator acts) or 'compensating' (the
        worker has not finished within the client's walk_wait, or ``wait``, seconds).
        Raises NothingToUndo when nothing at or after ``step`` is left to undo."""
        assert isinstance(self.connection, psycopg.AsyncConnection)
        why = _reason(reason, f"its calls from step {step} on")
        await asaga.rollback_to(self.connection, self.session_id, step, why)
        return await self._walked(wait)

    async def undo_last(
        self, n: int = 1, reason: str | None = None, *, wait: float | None = None
    ) -> str:
        """Undo this session's last ``n`` calls still standing, last first (as undo_to).
        NothingToUndo when fewer than ``n`` are left; InvalidArgument when ``n`` < 1."""
        assert isinstance(self.connection, psycopg.AsyncConnection)
        why = _reason(reason, f"its last {n} call(s)")
        await asaga.rollback_last(self.connection, self.session_id, n, why)
        return await self._walked(wait)

    async def _walked(self, wait: float | None) -> str:
        """The walk runs here when this login may (the operator role), else `undolog
        worker` runs it; either way it is waited for, up to walk_wait (or ``wait``)."""
        assert isinstance(self.client, AsyncUndoLog)
        assert isinstance(self.connection, psycopg.AsyncConnection)
        conn, sid = self.connection, self.session_id
        self.state = "compensating"
        await self.client._after_failure(conn, sid)
        deadline = time.monotonic() + (self.client.walk_wait if wait is None else wait)
        while True:
            self.state = await aengine.session_state(conn, sid)
            if self.state != "compensating" or time.monotonic() >= deadline:
                return self.state
            await _acompat.sleep(walk.POLL)
