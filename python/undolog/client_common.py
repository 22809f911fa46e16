"""What the session clients share (undolog.client's UndoLog, undolog.aclient's
AsyncUndoLog and the sync twin generated from it): the settings and compensations of
``_Base``, the texts of the errors a session's end raises, and the durations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from undolog import aengine, engine, walk
from undolog.context import ActiveSession, RegistrationKey
from undolog.errors import PermissionDenied, SessionHalted, SessionNotActive, UnknownSession

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound="ClientSession")
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


def _incomplete(session_id: uuid.UUID, state: str) -> str:
    """Why a session block's end did not complete the session, and what follows."""
    if state in ("compensating", "compensated", "halted"):
        nxt = f"it was failed, and its undo walk compensates that call (now {state})"
    elif state == "failed":
        nxt = "it was failed: `undolog worker` compensates that call"
    else:
        nxt = (
            f"it is {state}; if it stays active, recovery fails it when its lease runs out "
            "and `undolog worker` compensates that call"
        )
    return f"session {session_id} was not completed: {nxt} (undolog sessions show {session_id})"


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
        # connections: (id(connection), definition) -> tool_id, which each call of the tool
        # there names (intercept_tool). See ActiveSession and adecorator.register.
        self.registered_tools: dict[RegistrationKey, uuid.UUID] = {}

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
class ClientSession(ActiveSession):
    """An ActiveSession that knows its client (for undo_to's walk)."""

    client: _Base | None = field(default=None, repr=False)
