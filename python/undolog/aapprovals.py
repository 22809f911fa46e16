"""The approval gate from Python: decide, expire, and wait for a decision.

Two twins with the same functions: ``undolog.aapprovals`` on a
``psycopg.AsyncConnection`` (awaited; the source, written by hand) and
``undolog.approvals`` on a ``psycopg.Connection`` (generated from it by
tools/async_to_sync.py).

An IRREVERSIBLE call is journaled pending and its session waits (``intercept`` answers
``await_approval`` with an approval id). A human then calls :func:`approve` or
:func:`reject` (database role ``undolog_approver``); the worker calls
:func:`expire_approvals` (role ``undolog_operator``) on each pass to close requests whose
deadline passed. After an approval the agent makes the same call again and it executes, once.

Every new request and every decision wakes the listeners of the PostgreSQL channel
:data:`CHANNEL` at commit, with an empty payload: any login may LISTEN, so a
notification carries nothing (no ids) and each waiter re-reads the state it may see.
:func:`wait_for_decision` listens (or is woken by a :class:`Listener` the caller keeps)
and keeps a slow poll as a fallback, so that a missed notification only delays it.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final, Protocol

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from undolog import _acompat, tracing
from undolog.aengine import AsyncConnection, fetch_all, fetch_in_batches, fetch_one
from undolog.engine_common import SWEEP_BATCH as SWEEP_BATCH
from undolog.errors import UnknownApproval
from undolog.queries import QUERIES

CHANNEL: Final = "undolog_approvals"
"""The LISTEN/NOTIFY channel of approval requests and decisions."""

DECISIONS: Final = frozenset({"approved", "rejected", "expired"})
"""The states a request can be decided into (it starts ``pending``)."""

MIN_READ_GAP: Final = 0.5
"""The least time (seconds) between two reads of a request's state that wake-ups start.
Any login may NOTIFY :data:`CHANNEL` (PostgreSQL has no privilege for it): a flood of
them would otherwise make every waiter read the state once per NOTIFY. A real decision
reaches a waiter within this much (the same spirit as undolog.walk.MIN_WAKE_GAP, a
worker's least gap between passes)."""
DRAIN_SECONDS: Final = 0.2  # at most this long taking the wake-ups a read answers


def _decision(approval_id: uuid.UUID, decided_by: str, reason: str | None) -> dict[str, Any]:
    return {"approval_id": approval_id, "decided_by": decided_by, "reason": reason}


async def approve(
    conn: AsyncConnection,
    approval_id: uuid.UUID,
    decided_by: str,
    reason: str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
) -> str:
    """Allow the call; answers ``'approved'``.

    With ``args`` (edit, then approve): the call runs with these arguments instead of the
    requested ones; the journal keeps both, and who edited (``decided_by``) and why
    (``reason``). They are checked as any call's args, and must name the same arguments
    as the call's (EditChangesArguments); the requested args themselves approve as asked.

    Raises UnknownApproval, ApprovalAlreadyDecided (ApprovalNotEditable for an edit),
    ApprovalExpired (the deadline passed: nothing is written), InvalidArgument (blank
    decided_by, args not a JSON object), PayloadTooLarge, SessionNotActive (the session
    was sent to its undo walk meanwhile), PermissionDenied (not an approver).
    """
    params = _decision(approval_id, decided_by, reason)
    if args is None:
        row = await fetch_one(conn, QUERIES["approve"], params)
        return str(row[0])
    # Not a mapping (edited JSON is what a person typed): the engine refuses it, UL008.
    params["args"] = Jsonb(dict(args) if isinstance(args, Mapping) else args)
    row = await fetch_one(conn, QUERIES["approve_edited"], params)
    return str(row[0])


async def reject(
    conn: AsyncConnection, approval_id: uuid.UUID, decided_by: str, reason: str | None = None
) -> str:
    """Refuse the call; the session goes to its undo walk (or, for a tool registered
    ``on_reject="continue"``, back to active: the agent gets the reason).

    Answers ``'rejected'``, or ``'expired'`` when the deadline had already passed (the
    call is refused either way; the record says the decision came too late). Raises
    UnknownApproval, ApprovalAlreadyDecided, InvalidArgument, PermissionDenied.
    """
    params = _decision(approval_id, decided_by, reason)
    row = await fetch_one(conn, QUERIES["reject"], params)
    return str(row[0])


async def expire_approvals(
    conn: AsyncConnection,
    *,
    batch: int = SWEEP_BATCH,
    on_progress: _acompat.CountProgress | None = None,
) -> list[uuid.UUID]:
    """Expire every pending request past its deadline (operator); answers their ids.

    In transactions of at most ``batch`` requests each (undolog.expire_approvals with
    its limit), each committed before the next begins, until one expires fewer than
    ``batch``: a sweep of thousands then never overflows a backend's subtransaction
    cache (see :data:`SWEEP_BATCH`), and each batch's sessions are let go as soon as it
    is done. A session another transaction holds is skipped, as by the SQL function.
    ``conn`` in autocommit mode, or in none with no transaction open (each batch is then
    a ``conn.transaction()``); ValueError inside an open transaction, which each batch
    would commit. ``on_progress(expired_so_far)`` is called (awaited, on the async side)
    after each batch but the last, e.g. to tell a person that a long sweep goes on; what
    it raises ends the sweep, the batches before it committed.
    """
    rows = await fetch_in_batches(
        conn,
        QUERIES["expire_approvals"],
        batch=batch,
        on_progress=on_progress,
        caller="expire_approvals",
    )
    return [uuid.UUID(str(row[0])) for row in rows]


async def approval_state(conn: AsyncConnection, approval_id: uuid.UUID) -> str | None:
    """The request's state, or None when it does not exist or is not the caller's to read
    (an agent reads only its own sessions' requests)."""
    rows = await fetch_all(conn, QUERIES["approval_state"], {"approval_id": approval_id})
    return str(rows[0][0]) if rows else None


class Listener(Protocol):
    """A LISTEN on :data:`CHANNEL` that the caller already keeps, for
    :func:`wait_for_decision` to be woken by instead of listening itself (a process that
    waits for many requests at once keeps one LISTEN connection for all of them)."""

    async def wait(self, timeout: float) -> bool:
        """Return True once a notification arrived since the last return (at once when
        one did meanwhile), False after ``timeout`` seconds without one (``timeout`` 0:
        at once; the wait takes the wake-ups a read answers so)."""
        ...


class Wakeup:
    """A :class:`Listener` for a caller that reads its LISTEN connection itself and calls
    ``set()`` at every notification (one reader, then, for all of its waits)."""

    def __init__(self) -> None:
        self._event = _acompat.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        woken = await self._event.wait_timeout(timeout)
        self._event.clear()
        return woken


async def wait_for_decision(
    conn: AsyncConnection | AsyncConnectionPool[Any],
    approval_id: uuid.UUID,
    timeout: float,
    poll_interval: float = 5.0,
    *,
    listener: Listener | None = None,
    on_progress: _acompat.Progress | None = None,
    progress_every: float = 5.0,
) -> str | None:
    """Block until the request is decided; answers the decision, or None on timeout.

    ``conn`` must be in autocommit mode (a LISTEN takes effect, and notifications arrive,
    only outside a transaction) and should be dedicated to waiting: this LISTENs on
    :data:`CHANNEL`, consumes the notifications that arrive meanwhile, and UNLISTENs it
    before returning. It listens before it first reads the state, so a decision made in
    between is never missed; and it reads the state again every ``poll_interval``
    seconds in case a notification was lost (e.g. the connection was re-established).
    Raises UnknownApproval if the request does not exist or is not the caller's, and
    the connection's own error (psycopg.OperationalError) if it is lost while waiting.
    With OpenTelemetry, the wait is a span (undolog.tracing.approval_wait).

    ``listener``: a LISTEN the caller keeps wakes the wait instead (see :class:`Listener`;
    it must be listening before the call, so that no decision is missed; :class:`Wakeup`
    is one). ``conn`` then
    only reads the state, and may be a pool (each read takes a connection for that read
    only). A notification is only a wake-up, either way: the decision is what the table
    says, read again no sooner than :data:`MIN_READ_GAP` after the last read (any login
    may NOTIFY the channel: a flood of them costs a waiter one read per gap).
    ``on_progress(seconds_waited)`` is called (awaited, on the async side) as the wait
    begins and then every ``progress_every`` seconds until it ends, e.g. to tell a client
    that the request it made is still being worked on; what it raises ends the wait.
    """
    if poll_interval <= 0 or (on_progress is not None and progress_every <= 0):
        # either would read the state (and report) in a loop without pause
        raise ValueError("poll_interval and progress_every must be positive")
    if not isinstance(conn, AsyncConnectionPool) and not conn.autocommit:
        raise ValueError("wait_for_decision needs a connection in autocommit mode")
    with tracing.approval_wait(approval_id) as span:
        waits = _Waits(timeout, poll_interval, on_progress, progress_every)
        if listener is not None:
            decision = await _wait(conn, approval_id, waits, listener)
        elif isinstance(conn, AsyncConnectionPool):
            raise ValueError("wait_for_decision on a pool needs a listener")
        else:
            decision = await _wait_listening(conn, approval_id, waits)
        span.set_attribute("undolog.approval.decision", decision or "timeout")
        return decision


@dataclasses.dataclass
class _Waits:
    """When a wait ends, reads the state again and reports its progress."""

    timeout: float
    poll_interval: float
    on_progress: _acompat.Progress | None
    progress_every: float
    started: float = dataclasses.field(default_factory=time.monotonic)
    next_progress: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.next_progress = self.started

    def remaining(self) -> float:
        return self.started + self.timeout - time.monotonic()

    async def progress(self) -> None:
        """Report the progress when it is due."""
        now = time.monotonic()
        if self.on_progress is not None and now >= self.next_progress:
            self.next_progress = now + self.progress_every
            await self.on_progress(now - self.started)

    def pause(self, read_at: float) -> float:
        """How long to wait now, the state last read at ``read_at``: until the poll's
        read, the deadline or the next progress report, whichever comes first."""
        now = time.monotonic()
        pause = min(read_at + self.poll_interval - now, self.remaining())
        if self.on_progress is not None:
            pause = min(pause, self.next_progress - now)
        return max(pause, 0.0)


async def _state_on(
    conn: AsyncConnection | AsyncConnectionPool[Any], approval_id: uuid.UUID
) -> str | None:
    if isinstance(conn, AsyncConnectionPool):
        async with conn.connection() as taken:
            return await approval_state(taken, approval_id)
    return await approval_state(conn, approval_id)


async def _wait(
    conn: AsyncConnection | AsyncConnectionPool[Any],
    approval_id: uuid.UUID,
    waits: _Waits,
    listener: Listener,
) -> str | None:
    while True:
        state = await _state_on(conn, approval_id)
        read_at = time.monotonic()
        if state is None:
            raise UnknownApproval(f"unknown approval {approval_id}")
        if state in DECISIONS:
            return state
        if waits.remaining() <= 0:
            return None
        await _until_read(waits, listener, read_at)


async def _until_read(waits: _Waits, listener: Listener, read_at: float) -> None:
    """Wait until the state is to be read again (it was at ``read_at``), reporting the
    progress meanwhile: the poll's time, the deadline, or a wake-up, but no sooner than
    MIN_READ_GAP after the last read. A wake-up is payload-less (and any role may NOTIFY
    on the channel): the decision is what the table says. Those that came during the
    gap are drained first: one read answers them all, however many a flood sends."""
    woken = False
    while True:
        now = time.monotonic()
        if waits.remaining() <= 0 or now >= read_at + waits.poll_interval:
            return
        if woken and now >= read_at + MIN_READ_GAP:
            await _drain(listener)
            return
        await waits.progress()
        pause = waits.pause(read_at)
        if woken:
            await _acompat.sleep(max(min(pause, read_at + MIN_READ_GAP - time.monotonic()), 0.0))
        else:
            woken = await listener.wait(pause)


async def _drain(listener: Listener) -> None:
    """Take the wake-ups already there (at most DRAIN_SECONDS of them: a flood that never
    ends), so that those the next read answers do not start another one."""
    until = time.monotonic() + DRAIN_SECONDS
    while await listener.wait(0) and time.monotonic() < until:
        pass


class _Listening:
    """The wait's own LISTEN, on ``conn`` (a Listener)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def wait(self, timeout: float) -> bool:
        woken = False
        # stop_after ends the generator itself, so no half-read one is left on the
        # connection.
        async for _ in self.conn.notifies(timeout=timeout, stop_after=1):
            woken = True
        return woken


async def _wait_listening(
    conn: AsyncConnection, approval_id: uuid.UUID, waits: _Waits
) -> str | None:
    await conn.execute(f"LISTEN {CHANNEL}")
    try:
        return await _wait(conn, approval_id, waits, _Listening(conn))
    finally:
        # A connection lost while waiting: what it raised goes up as it is (an UNLISTEN
        # would only add "the connection is closed"), and a new one listens to nothing.
        if not conn.closed:
            await conn.execute(f"UNLISTEN {CHANNEL}")
