"""The undo walk in Python: run a failed session's registered compensations, last first.

The engine decides the order (strictly LIFO), skips calls that never took effect, stops
at an irreversible call that acted, retries with backoff and halts a session whose
compensation fails for good (undolog.saga). This module only runs the compensation it is
handed and reports the outcome. A compensation is any callable registered by name
(``@ul.compensation("delete_user")``) taking one ``CompensationCall``; it must be
idempotent on ``undo_id``: after a crash the same entry may be handed out again, and
after a worker gave up on a compensation that did not return (CompensationDeadline) its
retry may run while the call given up on still does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg

from undolog import approvals, engine, engine_check, notifications, saga, tracing
from undolog.errors import (
    EngineNotInstalled,
    EngineVersionMismatch,
    InvalidStateTransition,
    PermissionDenied,
    SessionBusy,
    SessionNotActive,
    UndoLogError,
)
from undolog.queries import QUERIES

log = logging.getLogger("undolog.walk")

# How long run_walk waits for entries that are not due yet (retry backoff) before it
# returns and leaves the rest to `undolog worker`.
DEFAULT_WAIT = 10.0
POLL = 0.2
# How often a worker waiting for a NOTIFY looks whether it was asked to stop.
WAKE_SLICE = 0.2
# The least time (seconds) between the end of one pass and the start of the next one a
# NOTIFY starts. Any login may NOTIFY the channels a worker listens on (PostgreSQL has no
# privilege for it): an agent sending one every few milliseconds would otherwise start a
# pass for each, back to back. A real request's NOTIFY is answered within this much.
MIN_WAKE_GAP = 1.0
# How often a compensation that has not returned is logged (it holds its walker).
STILL_RUNNING_EVERY = 60.0
# How many times a walker reports a compensation's outcome while its session is held.
REPORT_TRIES = 3
# How long each of those reports waits for each lock (lock_session's own bound).
REPORT_WAIT = 5.0
# How long a worker's claim waits for a session another transaction holds, before it
# leaves that session for its next pass (lock_session waits 5 s otherwise). An agent
# login holds its own failed sessions as long as it keeps a transaction open that made
# one of their calls again (a replay, answered from the journal: it takes the session's
# key, shared), thousands of them in one transaction: each pass of a worker serving that
# login waited 5 s for each before it walked anyone else's. Hardly a wait: another
# walker's claim or report, a decision, holds a session for milliseconds, and a session
# left is due again at the next pass.
CLAIM_WAIT = 0.002
# A worker waits for a compensation until its claim has this much left (a tenth of what it
# had, at most CLAIM_MARGIN seconds), so that the failed attempt is recorded by this worker,
# with its reason, before the claim could be handed out again.
CLAIM_MARGIN = 5.0
# The least a worker waits for a compensation, however little its claim has left.
MIN_COMPENSATION_WAIT = 0.5
# How long past its deadline a worker waits for an async compensation it cancelled.
ASYNC_CANCEL_GRACE = 0.25
# How many compensations that did not return a worker leaves running (each holds a thread
# and whatever it opened) before it ends (WorkerStuck), for its supervisor to restart it.
MAX_ABANDONED = 4
# How long a stopping worker still waits for the compensation in hand before it gives it
# up: one that works (a few seconds' API call) returns and is recorded, so a restart costs
# it no failed attempt, and a hung one does not outlast a supervisor's stop timeout
# (Docker's 10 s default, systemd's 90 s) nor keep its entry claimed. Given up, its
# attempt is recorded as failed: the engine counts a claim as an attempt when it is made,
# so leaving it to expire would use the attempt all the same, and only delay the retry
# by undolog.claim_timeout.
STOP_GRACE = 5.0
# How many expired leases a worker's pass fails at most (saga.SWEEP_BATCH to a
# transaction) before it walks what is due; the next pass goes on. An agent login that
# begins short-lease sessions faster than they are failed (5,500 a second, where the
# sweep failed 1,700) otherwise kept every pass sweeping, and no walk ran for anyone.
# Some 0.3 s of sweeping at that rate; the oldest leases are failed first.
EXPIRED_PER_PASS = 10 * saga.SWEEP_BATCH
_R = TypeVar("_R")


@dataclass(frozen=True)
class CompensationCall:
    """What a compensation receives."""

    undo_id: uuid.UUID  # idempotency key: the same for every attempt at this entry
    args: dict[str, Any]  # the descriptor's fixed args
    call_args: dict[str, Any]  # the original call's args
    result: Any  # the original call's result; None when its outcome is unknown
    tool_name: str
    attempt: int


def _call_for(claim: saga.Claim) -> CompensationCall:
    return CompensationCall(
        undo_id=claim.undo_id,
        args=claim.compensation_args,
        call_args=claim.args,
        result=claim.result_snapshot,
        tool_name=claim.tool_name,
        attempt=claim.attempt,
    )


def _run(
    fn: Callable[..., Any], call: CompensationCall, loop: asyncio.AbstractEventLoop | None
) -> None:
    """Run a sync compensation, or an async one on ``loop`` (or a fresh one)."""
    if not inspect.iscoroutinefunction(fn):
        fn(call)
    elif loop is not None:
        asyncio.run_coroutine_threadsafe(fn(call), loop).result()
    else:
        asyncio.run(fn(call))


def storable_error(text: str) -> str:
    """``text`` as PostgreSQL can store it: U+0000 (which a text column refuses, so the
    failure could not be recorded at all) becomes U+FFFD."""
    if "\x00" not in text:
        return text
    log.warning("compensation error text contains U+0000: stored with U+FFFD in its place")
    return text.replace("\x00", "\ufffd")


def unknown_compensation(
    conn: engine.Connection,
    session_id: uuid.UUID,
    compensations: Mapping[str, Callable[..., Any]],
) -> str | None:
    """The name of the compensation the session's walk needs next when ``compensations``
    has none by that name, else None. Read only: it claims nothing, uses no attempt."""
    rows = engine.fetch_all(conn, QUERIES["next_compensation"], {"session_id": session_id})
    name = rows[0][0] if rows else None
    return name if name is not None and name not in compensations else None


def run_walk(
    conn: engine.Connection,
    session_id: uuid.UUID,
    compensations: Mapping[str, Callable[..., Any]],
    *,
    wait: float = DEFAULT_WAIT,
    loop: asyncio.AbstractEventLoop | None = None,
    stop: threading.Event | None = None,
    only_known: bool = False,
    deadline: CompensationDeadline | None = None,
    claim_wait: float | None = None,
) -> str:
    """Walk the session's undo stack until it is done, halted, or nothing is due within
    ``wait`` seconds. Answers the session's state then (compensated, halted, or still
    compensating: the worker finishes it).

    ``stop``, once set, ends the walk before its next claim (the entry in hand is
    finished and reported first), so a stopping worker leaves nothing claimed.
    A report that arrives after the claim was handed out again (the compensation outlived
    the claim timeout) is logged and the walk goes on: the newer attempt owns the entry.

    ``only_known``: stop, without claiming, before an entry whose compensation is not in
    ``compensations`` (another application's walker has it), instead of counting it as a
    failed attempt.

    ``deadline`` (the worker's): each compensation runs in a thread of its own and is
    waited for until shortly before its claim expires (or until ``stop`` is set); one
    that has not returned by then is a failed attempt (CompensationTimeout), left
    running, and its outcome is never recorded. At the deadline's ``max_abandoned`` the
    walk ends before its next claim (the worker then ends: WorkerStuck). A claim no
    longer in flight when its compensation would start (it expired and was handed out
    again) is not run. Without it, the compensation runs in the caller's thread, for as
    long as it takes.

    ``claim_wait`` (the worker's: CLAIM_WAIT): a claim waits at most this many seconds for
    a session another transaction holds, and the walk then ends (the session stays due,
    for the next pass) instead of raising SessionBusy after lock_session's 5 s.
    """
    until = time.monotonic() + wait
    while True:
        if stop is not None and stop.is_set():
            return engine.session_state(conn, session_id)
        if deadline is not None and deadline.full:
            return engine.session_state(conn, session_id)
        if only_known and unknown_compensation(conn, session_id, compensations) is not None:
            return engine.session_state(conn, session_id)
        try:
            claim = _claim(conn, session_id, claim_wait)
        except SessionNotActive:  # halted (or moved on) since recover() named it
            return engine.session_state(conn, session_id)
        except SessionBusy as exc:
            if claim_wait is None:
                raise
            raise SessionHeld(str(exc)) from exc
        if claim is None:
            state = engine.session_state(conn, session_id)
            if state != "compensating" or time.monotonic() >= until:
                return state
            time.sleep(POLL)
            continue
        fn = compensations.get(claim.name)
        # Read before the try below, whose handler records the compensation's failure: it
        # has not run, so a fault here (a lost connection: the worker reconnects) is not
        # recorded as its error. The claim expires and the entry is handed out again, its
        # attempt counted when it was claimed, as after a crash.
        limit = None
        if deadline is not None and fn is not None:
            try:
                limit = deadline.seconds_for(conn, session_id, claim)
            except BaseException as exc:
                if not isinstance(exc, Exception):  # an interrupt: recorded, as while it runs
                    _record_interrupted(conn, claim, storable_error(f"{type(exc).__name__}: {exc}"))
                raise
            if limit is None:
                log.warning(
                    "compensation %s of %s (undo %s, attempt %s) not run: its claim is no "
                    "longer this worker's (it expired, and may have been handed out again)",
                    claim.name,
                    claim.tool_name,
                    claim.undo_id,
                    claim.attempt,
                )
                continue
        try:
            if fn is None:
                raise LookupError(f"no compensation registered under {claim.name!r}")
            with (
                tracing.compensation(
                    claim.name, claim.undo_id, claim.tool_name, claim.attempt, session_id
                ),
                _said_while_running(claim, limit),
            ):
                if deadline is None or limit is None:
                    _run(fn, _call_for(claim), loop)
                else:
                    deadline.run(fn, _call_for(claim), loop, claim, limit, stop)
        except BaseException as exc:
            # Any raise is a failed attempt, a cancelled async compensation's included:
            # recorded, and the walk goes on. sys.exit() and an interrupt (Ctrl-C) are the
            # program asking to stop (a SIGTERM handler's, Celery's WorkerShutdown): the
            # attempt is recorded, so that the entry is not left claimed until
            # claim_timeout, and then they go on up (the worker goes on with the others).
            error = storable_error(f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, Exception | asyncio.CancelledError):
                _record_interrupted(conn, claim, error)
                raise
            try:
                outcome = _reported(
                    conn,
                    functools.partial(
                        saga.fail_compensation, conn, claim.undo_id, error, claim.attempt
                    ),
                )
            except InvalidStateTransition as stale:
                _stale(claim, stale)
                continue
            log.warning(
                "compensation %s of %s failed (%s): %s",
                claim.name,
                claim.tool_name,
                outcome,
                error,
            )
            if outcome == "compensation_failed":  # the session halted for an operator
                return engine.session_state(conn, session_id)
            continue
        try:
            _reported(
                conn,
                functools.partial(saga.complete_compensation, conn, claim.undo_id, claim.attempt),
            )
        except InvalidStateTransition as stale:
            _stale(claim, stale)
            continue
        log.info("compensated %s with %s (undo %s)", claim.tool_name, claim.name, claim.undo_id)


@contextlib.contextmanager
def _locks_waited_at_most(conn: engine.Connection, seconds: float, what: str) -> Iterator[None]:
    """A transaction of ``conn``'s (autocommit) in which each lock is waited for at most
    ``seconds`` (a lock_timeout of its own, which lock_session takes when it is shorter
    than its 5 s): the session's, and any met after it (a row the statement writes, the
    chain head its history row moves, a month's drain, a migrate). Any of them held
    longer raises SessionBusy, nothing done."""
    try:
        with conn.transaction():
            conn.execute(
                QUERIES["local_lock_timeout"],
                {"lock_timeout": f"{max(1, round(seconds * 1000))}ms"},
            )
            yield
    except psycopg.errors.LockNotAvailable as exc:
        raise SessionBusy(f"{what}: a lock it needs is held") from exc


def _claim(conn: engine.Connection, session_id: uuid.UUID, wait: float | None) -> saga.Claim | None:
    """The session's next claim; with ``wait``, waiting at most that long for each lock
    (a session held for this pass: SessionBusy, nothing claimed)."""
    if wait is None:
        return saga.claim_compensation(conn, session_id)
    with _locks_waited_at_most(conn, wait, f"session {session_id}'s claim"):
        return saga.claim_compensation(conn, session_id)


def _reported(conn: engine.Connection, report: Callable[[], _R]) -> _R:
    """A compensation's outcome, reported: again, REPORT_TRIES times in all, while
    another transaction holds its session or a row the report writes (each try waits
    REPORT_WAIT for each lock, then nothing was recorded). Given up (SessionBusy), the
    claim expires and the entry is handed out again, so the compensation would run once
    more: better to wait a little here. Without the bound, an agent that committed its
    own call while the walk held it, in a transaction it left open (finish_execution
    locks the effect's row), kept the report, and with it the worker, waiting for ever.
    ``conn`` in autocommit mode."""
    for attempt in range(1, REPORT_TRIES + 1):
        try:
            with _locks_waited_at_most(conn, REPORT_WAIT, "a compensation's report"):
                return report()
        except SessionBusy:
            if attempt == REPORT_TRIES:
                raise
            log.warning(
                "a compensation's report waited for its session, or a row it writes, "
                "which another transaction holds: trying again (%d of %d)",
                attempt + 1,
                REPORT_TRIES,
            )
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _said_while_running(claim: saga.Claim, limit: float | None = None) -> Iterator[None]:
    """Log, every STILL_RUNNING_EVERY seconds, that the compensation in hand has not
    returned: an operator looking at a walker that walks nothing else learns which call
    holds it, and (``limit``: the worker's deadline) until when."""
    returned = threading.Event()
    started = time.monotonic()
    until = (
        "this walker serves nothing else until it does"
        if limit is None
        else f"this worker waits for it until {limit:.0f} s, then records the attempt as failed"
    )

    def watch() -> None:
        while not returned.wait(STILL_RUNNING_EVERY):
            log.warning(
                "compensation %s of %s (undo %s, attempt %s) has not returned after %.0f s: "
                "%s. Give its network calls timeouts shorter than undolog.claim_timeout; "
                "after the claim timeout the entry is handed out again",
                claim.name,
                claim.tool_name,
                claim.undo_id,
                claim.attempt,
                time.monotonic() - started,
                until,
            )

    watcher = threading.Thread(target=watch, name="undolog-compensation-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        returned.set()


class SessionHeld(SessionBusy):
    """run_walk with a ``claim_wait``: another transaction held the session longer than
    that; nothing was claimed, and the session is due again at the next pass."""


class CompensationTimeout(TimeoutError):
    """A compensation did not return within the worker's deadline: its attempt is
    recorded as failed with this error, and the call is left running, unrecorded."""


class CompensationStopped(CompensationTimeout):
    """The worker was stopped (SIGTERM, :meth:`Worker.stop`) while a compensation ran, and
    it had not returned STOP_GRACE seconds later: it is given up, its attempt recorded as
    failed with this error (retried with the same undo_id), and the call left running,
    unrecorded, until the process ends."""


class WorkerStuck(UndoLogError):
    """A worker left ``max_abandoned`` compensations running that did not return (a
    thread cannot be stopped from inside the process): it ends, so that whatever
    supervises it restarts it, which ends them. Their attempts were recorded as failed;
    their entries are retried with the same undo_id, and one whose compensation always
    hangs reaches max_attempts and halts its session for an operator. ``undolog worker``
    exits 75 on it. ``hung``: the abandoned claims still running."""

    def __init__(self, message: str, hung: Sequence[saga.Claim] = ()) -> None:
        super().__init__(message)
        self.hung = list(hung)


class _Attempt:
    """One compensation running in a thread of its own (or a task on the worker's loop),
    and what came of it. Its outcome is read by the walker only if it ended before the
    walker gave up on it: once abandoned, nothing it does is recorded (the walker already
    failed its attempt, and a later attempt of the same entry may be running or done: a
    report now would be refused as stale at best, and must not be tried)."""

    def __init__(self, claim: saga.Claim) -> None:
        self.claim = claim
        self.started = time.monotonic()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._abandoned = False

    def run(self, target: Callable[[], object]) -> None:
        """The thread's body: the compensation, its outcome kept (never raised here)."""
        try:
            target()
        except BaseException as exc:  # SystemExit included: the walker's to judge
            self.finish(exc)
        else:
            self.finish(None)

    async def run_async(self, compensation: Any) -> None:
        """A task's body on the worker's loop: the compensation awaited, its outcome
        kept (a cancellation goes on up, so that the task ends cancelled)."""
        try:
            await compensation
        except BaseException as exc:
            self.finish(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self.finish(None)

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        with self._lock:
            self.done.set()
            abandoned = self._abandoned
        if abandoned:
            claim = self.claim
            log.warning(
                "compensation %s of %s (undo %s, attempt %s), abandoned, %s after %.0f s: "
                "its outcome is not recorded (its attempt was recorded as failed; the "
                "entry's later attempts, with the same undo_id, decide)",
                claim.name,
                claim.tool_name,
                claim.undo_id,
                claim.attempt,
                "returned" if error is None else f"raised {_one_line(error)}",
                time.monotonic() - self.started,
            )

    def abandon(self) -> bool:
        """Give up on it unless it has ended; answers whether it was given up."""
        with self._lock:
            if self.done.is_set():
                return False
            self._abandoned = True
            return True

    def outcome(self) -> None:
        """What it came to, once ended: its error raised, or nothing."""
        if self.error is not None:
            raise self.error

    def wait(self, seconds: float, stop: threading.Event | None) -> bool:
        """Wait until it ends (True), or ``seconds`` pass (False); once ``stop`` is set,
        STOP_GRACE seconds more at most. In slices of WAKE_SLICE, so that a stopping
        worker does not wait out the deadline (some 295 s with the default claim)."""
        until = time.monotonic() + seconds
        stopping = False
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return self.done.is_set()
            if self.done.wait(min(WAKE_SLICE, left) if stop is not None else left):
                return True
            if stop is not None and stop.is_set() and not stopping:
                stopping = True
                until = min(until, time.monotonic() + STOP_GRACE)


class CompensationDeadline:
    """How a worker runs compensations so that one that never returns (a network call
    without a timeout) cannot hold it: in a daemon thread, waited for until shortly
    before its claim expires (or ``timeout`` seconds, when shorter), then given up as a
    failed attempt (CompensationTimeout) and left running. The claim's idempotency key
    makes the retry safe beside it.

    A compensation therefore runs in a thread of its own, not the caller's (nor the
    main thread), a new thread for each attempt: signal-based timeouts (``signal.alarm``,
    SIGALRM handlers) cannot be used in it (Python runs signal handlers in the main thread
    only, and ``signal.signal`` refuses to be called elsewhere), and thread-local state
    set elsewhere is not there. Use the libraries' own timeouts.

    A thread cannot be stopped from outside, so at most ``max_abandoned`` are left
    running: at that bound the worker ends (WorkerStuck), for its supervisor to restart
    it. An async compensation is cancelled at the deadline instead (on ``loop``, or in
    the thread's own event loop), so it leaves nothing behind if it lets itself be
    cancelled; a task on ``loop`` that ignores its cancellation is counted as abandoned.
    A stopping worker (``stop`` set) waits STOP_GRACE seconds more at most, then gives
    the compensation up (CompensationStopped)."""

    def __init__(self, timeout: float | None = None, max_abandoned: int = MAX_ABANDONED) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"a compensation timeout must be positive, not {timeout}")
        if max_abandoned < 1:
            raise ValueError(f"max_abandoned must be 1 or more, not {max_abandoned}")
        self.timeout = timeout
        self.max_abandoned = max_abandoned
        self._abandoned: list[_Attempt] = []
        self._said_timeout_cut = False

    def abandoned(self) -> list[_Attempt]:
        """The abandoned compensations still running (those that ended are forgotten)."""
        self._abandoned = [a for a in self._abandoned if not a.done.is_set()]
        return list(self._abandoned)

    @property
    def full(self) -> bool:
        """Whether the bound is reached: claim nothing more (the worker ends)."""
        return len(self.abandoned()) >= self.max_abandoned

    def stuck(self) -> WorkerStuck:
        """The error a worker at the bound ends with, naming the calls that hold it."""
        running = self.abandoned()
        return WorkerStuck(
            f"{len(running)} abandoned compensation(s) have not returned ("
            + "; ".join(
                f"{a.claim.name} of {a.claim.tool_name} (undo {a.claim.undo_id}, attempt "
                f"{a.claim.attempt}, running for {time.monotonic() - a.started:.0f} s)"
                for a in running
            )
            + f"; max_abandoned {self.max_abandoned}): a thread cannot be stopped, so this "
            "worker process must be restarted (run it under a supervisor that restarts it), "
            "which ends them. Their attempts were recorded as failed; their entries are "
            "retried with the same undo_id, and after max_attempts their sessions halt for "
            "an operator. Find why they hang (a network call without a timeout)",
            [a.claim for a in running],
        )

    def seconds_for(
        self, conn: engine.Connection, session_id: uuid.UUID, claim: saga.Claim
    ) -> float | None:
        """How long to wait for the claim's compensation: until its claim has a tenth of
        its time left (CLAIM_MARGIN seconds at most), or ``timeout`` when that is shorter:
        a longer one let the claim expire while the compensation still ran, and another
        walker that took the entry over ran it a second time beside it. None when the
        attempt is no longer in flight (its claim expired and another walker took the
        entry over), and when its claim has expired (any walker may take the entry over
        at any moment; this one claims it again, as the next attempt). The claim is read
        with a ``timeout`` too: a worker paused past its claim (SIGSTOP) and resumed ran
        the compensation beside the walker that had taken the entry over."""
        row = engine.fetch_optional(
            conn,
            QUERIES["claim_seconds_left"],
            {"session_id": session_id, "undo_id": claim.undo_id, "attempt": claim.attempt},
        )
        left = None if row is None or row[0] is None else float(row[0])
        if left is None or left <= 0:
            return None
        until_claim = max(left - min(CLAIM_MARGIN, left / 10), MIN_COMPENSATION_WAIT)
        if self.timeout is None:
            return until_claim
        if self.timeout > until_claim:
            if not self._said_timeout_cut:  # once a worker: each claim would say it again
                self._said_timeout_cut = True
                log.warning(
                    "the compensation timeout (%g s) is longer than what the claim has left "
                    "(%.1f s): a compensation is waited for until shortly before its claim "
                    "expires (%.1f s here), so that no other walker runs it beside this one. "
                    "Raise the database's undolog.claim_timeout above the timeout to give "
                    "it longer (docs/operations/worker.md)",
                    self.timeout,
                    left,
                    until_claim,
                )
            return until_claim
        return self.timeout

    def run(
        self,
        fn: Callable[..., Any],
        call: CompensationCall,
        loop: asyncio.AbstractEventLoop | None,
        claim: saga.Claim,
        seconds: float,
        stop: threading.Event | None = None,
    ) -> None:
        """Run the compensation, waiting at most ``seconds`` (less once ``stop`` is
        set): its error raised, or CompensationTimeout (CompensationStopped)."""
        attempt = _Attempt(claim)
        if inspect.iscoroutinefunction(fn) and loop is not None:
            self._run_on_loop(fn, call, loop, attempt, seconds, stop)
            return
        wait = seconds
        if inspect.iscoroutinefunction(fn):
            # Cancelled in its own loop at the deadline, and waited for a little longer,
            # so that one that lets itself be cancelled ends here, leaving no thread.
            when = time.monotonic() + seconds  # asyncio's loop.time() is time.monotonic()
            wait = seconds + ASYNC_CANCEL_GRACE

            async def bounded() -> None:
                timeout = asyncio.timeout_at(when)
                try:
                    async with timeout:
                        await fn(call)
                except TimeoutError:
                    if not timeout.expired():  # the compensation's own TimeoutError
                        raise
                    raise self._timed_out(claim, seconds, "it was cancelled") from None

            def target() -> None:
                asyncio.run(bounded())

        else:

            def target() -> None:
                fn(call)

        # the caller's context (the compensation's tracing span) goes with it
        body = functools.partial(contextvars.copy_context().run, target)
        thread = threading.Thread(
            target=attempt.run,
            args=(body,),
            name=f"undolog-compensation-{claim.name}",
            daemon=True,  # an abandoned one must not keep the process from exiting
        )
        thread.start()
        if attempt.wait(wait, stop) or not attempt.abandon():
            attempt.outcome()
            return
        self._abandoned.append(attempt)
        raise self._given_up(
            claim, seconds, stop, "it is left running in an abandoned thread", counted=True
        )

    def _run_on_loop(
        self,
        fn: Callable[..., Any],
        call: CompensationCall,
        loop: asyncio.AbstractEventLoop,
        attempt: _Attempt,
        seconds: float,
        stop: threading.Event | None,
    ) -> None:
        """An async compensation as a task on the worker's loop: cancelled at the
        deadline; one that ignores its cancellation is counted as abandoned."""
        claim = attempt.claim
        future = asyncio.run_coroutine_threadsafe(attempt.run_async(fn(call)), loop)
        if attempt.wait(seconds, stop):
            attempt.outcome()  # it ended, however close to the deadline: its own outcome
            return
        future.cancel()  # the task is cancelled on its loop
        if attempt.done.wait(ASYNC_CANCEL_GRACE) or not attempt.abandon():
            if not isinstance(attempt.error, asyncio.CancelledError):
                attempt.outcome()  # it returned or raised before the cancellation came
                return
            raise self._given_up(claim, seconds, stop, "its task was cancelled") from None
        self._abandoned.append(attempt)
        raise self._given_up(
            claim,
            seconds,
            stop,
            "its task ignored its cancellation and is left running",
            counted=True,
        )

    def _given_up(
        self,
        claim: saga.Claim,
        seconds: float,
        stop: threading.Event | None,
        left: str,
        *,
        counted: bool = False,
    ) -> CompensationTimeout:
        if counted:
            left += f" ({len(self.abandoned())} of at most {self.max_abandoned})"
        if stop is not None and stop.is_set():
            return self._stopped(claim, left)
        return self._timed_out(claim, seconds, left)

    @staticmethod
    def _stopped(claim: saga.Claim, left: str) -> CompensationStopped:
        log.warning(
            "compensation %s of %s (undo %s, attempt %s) given up: the worker is stopping, "
            "%s; its attempt is recorded as failed and retried with the same undo_id, and "
            "whatever it does from now on is not recorded",
            claim.name,
            claim.tool_name,
            claim.undo_id,
            claim.attempt,
            left,
        )
        return CompensationStopped(
            f"the worker was stopped while it ran (and it had not returned {STOP_GRACE:.0f} s "
            "later): the attempt was given up and its outcome is not recorded"
        )

    @staticmethod
    def _timed_out(claim: saga.Claim, seconds: float, left: str) -> CompensationTimeout:
        log.warning(
            "compensation %s of %s (undo %s, attempt %s) did not return within %.1f s: %s, "
            "its attempt is recorded as failed and retried with the same undo_id, and "
            "whatever it does from now on is not recorded. Give its network calls timeouts "
            "shorter than that",
            claim.name,
            claim.tool_name,
            claim.undo_id,
            claim.attempt,
            seconds,
            left,
        )
        return CompensationTimeout(
            f"did not return within {seconds:.1f} s (the worker's deadline, before its claim "
            "expires): the attempt was given up and its outcome is not recorded"
        )


def _record_interrupted(conn: engine.Connection, claim: saga.Claim, error: str) -> None:
    """An interrupted compensation's attempt, recorded as failed (never raising: the
    interrupt goes on), so that the entry is due again after its backoff, not left
    claimed until claim_timeout."""
    try:
        saga.fail_compensation(conn, claim.undo_id, error, claim.attempt)
    except Exception:
        log.warning(
            "compensation %s of %s (undo %s) was interrupted and its attempt could not be "
            "recorded: the entry is handed out again after undolog.claim_timeout",
            claim.name,
            claim.tool_name,
            claim.undo_id,
            exc_info=True,
        )


def _owned_by(
    conn: engine.Connection, due: Sequence[uuid.UUID], owners: Sequence[str]
) -> list[uuid.UUID]:
    """The sessions of ``due`` begun by one of the logins (none given: the worker's own),
    in recover()'s order."""
    params = {"session_ids": list(due), "owners": list(owners)}
    owned = {r[0] for r in engine.fetch_all(conn, QUERIES["sessions_owned_by"], params)}
    return [sid for sid in due if sid in owned]


def _stale(claim: saga.Claim, exc: UndoLogError) -> None:
    log.warning(
        "stale claim: compensation %s of %s (undo %s, attempt %s) outlived its claim and "
        "was handed out again; its report was refused (%s)",
        claim.name,
        claim.tool_name,
        claim.undo_id,
        claim.attempt,
        exc,
    )


def close_past_deadline(
    conn: engine.Connection, on_progress: Callable[[int], object] | None = None
) -> list[uuid.UUID]:
    """Close the approval requests past their deadline (undolog.approval_timeout) as
    expired, so that a worker pass then walks the sessions that sends to their undo:
    nobody else would, and a deadline nobody enforces is none. Answers their ids. A
    backlog of thousands is closed in transactions of at most approvals.SWEEP_BATCH
    (``on_progress(expired_so_far)`` after each but the last: what it raises ends it)."""
    expired = approvals.expire_approvals(conn, on_progress=on_progress)
    if expired:
        log.info("closed %d approval request(s) past their deadline", len(expired))
    return expired


def recover_due(
    conn: engine.Connection,
    on_progress: Callable[[int], object] | None = None,
    *,
    most: int | None = None,
) -> list[uuid.UUID]:
    """What each worker pass does after closing the requests past their deadline: the
    active sessions whose lease expired are failed, the oldest expired first, in
    transactions of at most saga.SWEEP_BATCH each (saga.fail_expired_sessions;
    ``on_progress(failed_so_far)`` after each but the last: what it raises ends the
    sweep, the batches before it committed), so that the death of a fleet of agents
    never puts hundreds of subtransactions in one; then recover() answers the sessions
    whose undo walk must run (failing only those whose lease ran out meanwhile).

    ``most``: the sweep stops after failing this many, and recover() then fails one
    batch more at most: a pass that must walk whatever the number of expired leases (a
    worker's: EXPIRED_PER_PASS) leaves the rest to the next one. None (``undolog
    recover``): every one. ``conn`` outside a transaction, as for
    approvals.expire_approvals."""
    failed = saga.fail_expired_sessions(conn, most=most, on_progress=on_progress)
    if most is not None and len(failed) >= most:
        log.warning(
            "failed %d session(s) whose lease expired, this pass's bound: more are out "
            "(the oldest are failed first); walking what is due, the next pass goes on. "
            "An agent login that begins short-lease sessions faster than they are failed "
            "keeps this up: undolog health shows the lag, pg_stat_activity its statements",
            len(failed),
        )
    elif failed:
        log.info("failed %d session(s) whose lease expired", len(failed))
    # recover()'s own failures are one transaction: with a bound, one batch at most
    return saga.recover(conn, limit=None if most is None else saga.SWEEP_BATCH)


def work(
    conn: engine.Connection,
    compensations: Mapping[str, Callable[..., Any]],
    *,
    wait: float = 0.0,
    loop: asyncio.AbstractEventLoop | None = None,
    owners: Sequence[str] | None = None,
    expired_per_pass: int | None = EXPIRED_PER_PASS,
) -> dict[uuid.UUID, str]:
    """One pass of the worker: the requests past their deadline closed, at most
    ``expired_per_pass`` expired leases failed, the oldest first (None: every one; see
    recover_due), recover(), then every session it names walked (only those begun by
    ``owners`` when given, as ``undolog worker --owner``; see Worker). Answers each
    session's state after its walk.

    Each session is walked on its own, as the worker walks them: a session whose walk
    raises (a row of it that cannot be loaded, a statement refused) is logged and the
    others are walked all the same; then the first such error is raised, with a note
    naming every session whose walk raised. A lost connection, an interrupt or
    ``sys.exit()`` raises at once: nothing more can be walked."""
    close_past_deadline(conn)
    due = recover_due(conn, most=expired_per_pass)
    if owners is not None and due:
        due = _owned_by(conn, due, owners)
    states: dict[uuid.UUID, str] = {}
    raised: list[tuple[uuid.UUID, Exception]] = []
    for sid in due:
        try:
            states[sid] = run_walk(conn, sid, compensations, wait=wait, loop=loop)
        except Exception as exc:
            if _is_connection_fault(exc, conn):
                raise
            log.error(
                "session %s: %s: %s (going on with the rest)",
                sid,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            raised.append((sid, exc))
    if raised:
        first = raised[0][1]
        first.add_note(
            f"the walk of {len(raised)} session(s) raised: "
            f"{', '.join(str(sid) for sid, _ in raised)} (this error is the first one's, "
            f"each was logged); {len(states)} other session(s) walked"
        )
        raise first
    return states


class _SweepStopped(Exception):
    """Raised between two batches of a worker's sweep once it is asked to stop: the
    batches before it committed, and the pass ends there."""


class WorkerConfigError(UndoLogError):
    """The worker cannot do its job whatever it retries (e.g. its login is no operator,
    or the engine is not installed): it stops, and ``undolog worker`` exits 2."""


# SQLSTATEs of a database without the engine (or an older one): no retry fixes these.
_NO_ENGINE = ("42P01", "42883", "3F000")


def _is_connection_fault(exc: BaseException, conn: engine.Connection | None) -> bool:
    """Whether the connection is gone (reconnect), as opposed to one statement's failure
    on a connection that still works (a lock timeout is an OperationalError too)."""
    if conn is None or conn.closed or conn.broken:
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    code = exc.sqlstate
    return code is None or code.startswith(("08", "57P"))  # connection exception, shutdown


class Worker:
    """``undolog worker``: recover and walk, pass after pass, until :meth:`stop`.

    It outlives every fault a running system meets: a halted session is logged and the
    rest are walked; a session whose walk raises is logged and skipped until the next
    pass; a lost server is reconnected with exponential backoff (``first_backoff``
    doubling up to ``max_backoff`` seconds, each attempt logged); a compensation that
    does not return is waited for until shortly before its claim expires (or
    ``compensation_timeout`` seconds), then its attempt is recorded as failed and it is
    left running, unrecorded, in a thread of its own (CompensationDeadline). It stops
    when :meth:`stop` is called (between two entries: a compensation in hand that has not
    returned within STOP_GRACE seconds is given up, its attempt recorded as failed), on a
    :class:`WorkerConfigError`, and on :class:`WorkerStuck` once ``max_abandoned``
    compensations it gave up on are still running: only ending the process ends them, so
    run it under a supervisor that restarts it.

    Each pass fails at most ``expired_per_pass`` expired leases, the oldest first, then
    walks what is due, and the next pass goes on (None: every one before any walk): an
    agent login that begins short-lease sessions faster than they are failed cannot
    keep the worker from walking. A stop is honoured between two batches of a sweep.

    ``connect`` answers a new connection (after a loss, another one); the worker puts it
    in autocommit mode, since each statement of a pass is a transaction of its own.
    """

    def __init__(
        self,
        connect: Callable[[], engine.Connection],
        compensations: Mapping[str, Callable[..., Any]],
        *,
        interval: float = 5.0,
        first_backoff: float = 0.5,
        max_backoff: float = 30.0,
        on_walked: Callable[[uuid.UUID, str], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        only_known: bool = False,
        owners: Sequence[str] | None = None,
        walk: bool = True,
        notify: bool = False,
        on_notified: Callable[[notifications.Outcome], None] | None = None,
        compensation_timeout: float | None = None,
        max_abandoned: int = MAX_ABANDONED,
        expired_per_pass: int | None = EXPIRED_PER_PASS,
    ) -> None:
        if expired_per_pass is not None and expired_per_pass < 1:
            raise ValueError(f"expired_per_pass must be 1 or more, not {expired_per_pass}")
        self.expired_per_pass = expired_per_pass
        self.connect = connect
        # one compensation that never returns must not hold every other session's walk
        self.deadline = CompensationDeadline(compensation_timeout, max_abandoned)
        # walk: recover and walk (``undolog worker``); notify: deliver the notifications
        # of approval requests after that (``undolog worker`` unless --no-notify, and
        # ``undolog notify``, which does only this).
        self.walk = walk
        self.notify = notify
        self.on_notified = on_notified
        # Walk only the sessions begun by these logins (undolog worker --owner ROLE): a
        # worker serves the agents whose compensations it holds, not every agent's. None:
        # every session. An empty sequence: the sessions of the worker's own login.
        self.owners = None if owners is None else list(owners)
        # Walk only what ``compensations`` can undo: a session whose next entry is another
        # application's is left (unreported) for that application's worker.
        self.only_known = only_known
        self.compensations = compensations
        self.interval = interval
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.on_walked = on_walked
        self.loop = loop
        self._stop = threading.Event()
        self._conn: engine.Connection | None = None
        # whether self._conn LISTENs for new approval requests (notify only): then the
        # pause between passes ends as soon as one is committed (but no sooner than
        # MIN_WAKE_GAP after the last pass), and the interval is only the fallback (a
        # lost notification, a retry's backoff coming due)
        self._listening = False

    def stop(self) -> None:
        """Ask the worker to stop (safe from a signal handler): nothing more is claimed,
        and a compensation in hand that has not returned within STOP_GRACE seconds is
        given up (CompensationStopped: its attempt recorded as failed, retried with the
        same undo_id). Abandoned compensations are daemon threads: they end with the
        process."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def abandoned(self) -> int:
        """How many compensations given up at their deadline are still running."""
        return len(self.deadline.abandoned())

    def run(self, *, once: bool = False) -> bool:
        """Serve until stopped (or one pass with ``once``). Answers whether the last pass
        reached the database. Raises WorkerConfigError, and WorkerStuck when
        ``max_abandoned`` compensations it gave up on are still running (restart the
        process: that ends them)."""
        reached = False
        try:
            while not self._stop.is_set():
                reached = self.run_pass(retry_connect=not once)
                if once:
                    break
                # after a lost connection, a short pause: never a busy loop of reconnects
                if reached:
                    self._pause(self.interval)
                else:
                    self._stop.wait(self.first_backoff)
        finally:
            self._close()
        return reached

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` between two passes, or less: until :meth:`stop`, or until a
        NOTIFY of a new approval request when listening (one committed during the pass
        ends the pause at once: psycopg keeps it until it is read), but no sooner than
        MIN_WAKE_GAP seconds after the pause began: any login may NOTIFY, and a flood of
        them starts one pass per gap, not one per NOTIFY."""
        conn = self._conn
        if not self._listening or conn is None or conn.closed:
            self._stop.wait(seconds)
            return
        began = time.monotonic()
        until = began + seconds
        try:
            while not self._stop.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    return
                if any(True for _ in conn.notifies(timeout=min(WAKE_SLICE, left), stop_after=1)):
                    # woken: not before the gap (nor after the pause's own end), then the
                    # rest of a burst (a hundred requests at once, a flood): one pass for all
                    wake = min(began + MIN_WAKE_GAP, until) - time.monotonic()
                    if wake > 0 and self._stop.wait(wake):
                        return
                    drained = time.monotonic() + WAKE_SLICE  # a flood that never ends
                    for _ in conn.notifies(timeout=0):
                        if time.monotonic() >= drained:
                            break
                    return
        except psycopg.Error as exc:  # the next pass reconnects (and listens again)
            log.warning("waiting for notifications: %s", _one_line(exc))
            self._listening = False

    def _listen(self, conn: engine.Connection) -> None:
        """LISTEN for new approval requests (and for an operator's retry or new channel);
        on failure, the worker only polls."""
        self._listening = False
        try:
            conn.execute(QUERIES["listen_approvals"])
            conn.execute(QUERIES["listen_notifications"])
        except psycopg.Error as exc:
            log.warning("cannot LISTEN (%s): polling every %.1f s", _one_line(exc), self.interval)
            return
        self._listening = True

    def run_pass(self, *, retry_connect: bool = True) -> bool:
        """One pass: at most ``expired_per_pass`` expired leases failed, recover(), then
        walk each session it names. Answers False when the
        database could not be reached (after backing off, unless not ``retry_connect``)
        or was lost during the pass, True otherwise."""
        conn = self._connection(retry_connect)
        if conn is None:
            return False
        if self.walk and not self._walk_pass(conn):
            return False
        if self.notify and not self._stop.is_set():
            try:
                sent = notifications.deliver_due(conn, should_stop=self._stop.is_set)
            except Exception as exc:
                return self._fault(exc, "notifications")
            for outcome in sent:
                if outcome.error is not None:
                    log.warning(
                        "delivery %s (%s), attempt %d: %s; now %s",
                        outcome.delivery_id,
                        outcome.channel_name,
                        outcome.attempt,
                        outcome.error,
                        outcome.state,
                    )
                if self.on_notified is not None:
                    self.on_notified(outcome)
        return True

    def _stop_sweep(self, _so_far: int) -> None:
        """A sweep's progress hook: between two batches, a stop request ends it."""
        if self._stop.is_set():
            raise _SweepStopped

    def _walk_pass(self, conn: engine.Connection) -> bool:
        try:
            close_past_deadline(conn, on_progress=self._stop_sweep)
        except _SweepStopped:
            return True
        except Exception as exc:  # its own fault: recover() and the walks still run
            if not self._fault(exc, "expire_approvals()"):
                return False
        try:
            due = recover_due(conn, on_progress=self._stop_sweep, most=self.expired_per_pass)
            if self.owners is not None and due:
                due = _owned_by(conn, due, self.owners)
        except _SweepStopped:
            log.info("stopped between two batches of the expired leases' sweep")
            return True
        except Exception as exc:
            return self._fault(exc, "recover()")
        held: list[uuid.UUID] = []
        for sid in due:
            if self._stop.is_set():
                break
            self._check_stuck()
            try:
                if self.only_known and unknown_compensation(conn, sid, self.compensations):
                    continue
                state = run_walk(
                    conn,
                    sid,
                    self.compensations,
                    wait=0.0,
                    loop=self.loop,
                    stop=self._stop,
                    only_known=self.only_known,
                    deadline=self.deadline,
                    claim_wait=CLAIM_WAIT,
                )
            except SessionHeld:  # another transaction holds it: the next pass
                held.append(sid)
                continue
            except Exception as exc:
                if not self._fault(exc, f"session {sid}"):
                    return False
                continue
            except SystemExit as exc:  # a compensation called sys.exit(): not the worker
                log.error(
                    "session %s: a compensation raised SystemExit(%s) (sys.exit); its attempt "
                    "is recorded as failed (going on with the rest)",
                    sid,
                    exc.code,
                )
                continue
            if state == "halted":
                log.warning(
                    "session %s is halted: its undo walk waits for an operator "
                    "(undolog sessions show %s); serving the others",
                    sid,
                    sid,
                )
            if self.on_walked is not None:
                self.on_walked(sid, state)
        if held:
            log.warning(
                "%d due session(s) held by another transaction (an agent's, left open?), "
                "left for the next pass: %s%s; pg_stat_activity shows the holder, idle in "
                "transaction, under the sessions' login",
                len(held),
                ", ".join(str(sid) for sid in held[:5]),
                ", ..." if len(held) > 5 else "",
            )
        self._check_stuck()
        return True

    def _check_stuck(self) -> None:
        """At max_abandoned compensations still running the worker could claim nothing
        more for ever (and an entry whose compensation always hangs would never reach
        max_attempts): it ends, for its supervisor to restart it."""
        if not self._stop.is_set() and self.deadline.full:
            raise self.deadline.stuck()

    def _fault(self, exc: Exception, where: str) -> bool:
        """Log a fault; answers False if it lost the connection (reconnect next pass)."""
        self._config_error(exc)
        if _is_connection_fault(exc, self._conn):
            log.warning("%s: lost the database (%s); reconnecting", where, _one_line(exc))
            self._close()
            return False
        log.error("%s: %s: %s (going on with the rest)", where, type(exc).__name__, exc)
        return True

    @staticmethod
    def _config_error(exc: Exception) -> None:
        if isinstance(exc, EngineVersionMismatch):  # it says which to upgrade, and how
            raise WorkerConfigError(str(exc)) from exc
        if isinstance(exc, PermissionDenied):
            raise WorkerConfigError(
                f"this login may not run undo walks ({exc}): the worker needs a login "
                "with the undolog_operator role"
            ) from exc
        if isinstance(exc, EngineNotInstalled) or (
            isinstance(exc, psycopg.Error) and exc.sqlstate in _NO_ENGINE
        ):
            raise WorkerConfigError(
                "the UndoLog engine is not installed in this database (or is older than "
                f"this package): run `undolog migrate` ({_one_line(exc)})"
            ) from exc

    def _connection(self, retry: bool) -> engine.Connection | None:
        """The open connection, or a new one: retried with exponential backoff until it
        connects or the worker is stopped (then None); one attempt unless ``retry``."""
        if self._conn is not None and not (self._conn.closed or self._conn.broken):
            return self._conn
        self._close()
        pause = self.first_backoff
        while not self._stop.is_set():
            try:
                self._conn = self.connect()
                # Every statement of a pass is a transaction of its own (the sweeps commit
                # batch by batch, each walk step commits its own): on a connection made
                # without autocommit the first statement's transaction stayed open, and
                # nothing any pass did was ever committed.
                self._conn.autocommit = True
                # an engine this package does not work with: a configuration error, as
                # the clients' check says (a worker's report could fail after its
                # compensation ran, or its mail was sent, and then run it again)
                try:
                    engine_check.check(self._conn)
                except UndoLogError as exc:
                    self._config_error(exc)
                    raise
                if self.notify:
                    self._listen(self._conn)
            except psycopg.OperationalError as exc:
                if not retry:
                    log.error("cannot reach the database (%s)", _one_line(exc))
                    return None
                log.warning(
                    "cannot reach the database (%s); retrying in %.1f s", _one_line(exc), pause
                )
                self._stop.wait(pause)
                pause = min(pause * 2, self.max_backoff)
                continue
            if pause > self.first_backoff:
                log.warning("reconnected to the database")
            return self._conn
        return None

    def _close(self) -> None:
        self._listening = False
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection: nothing left to save
                log.debug("closing the old connection failed", exc_info=True)
            self._conn = None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
