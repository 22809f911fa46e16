"""What the sync twins (undolog.client_sync, undolog.decorator_sync, undolog.engine) do
their own way (the pair of undolog._acompat, with the same names): the heartbeat is a
daemon thread, waits block, the undo walk runs on one of the client's connections, and a
result sent without waiting is read by the connection's next statement."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import psycopg

from undolog.engine_wire import Wire

T = TypeVar("T")

# A heartbeat running beside the session's block.
Worker = threading.Thread

sleep = time.sleep

# A wait's progress report (undolog.approvals.wait_for_decision's on_progress).
Progress = Callable[[float], object]

# A sweep's progress report (undolog.approvals.expire_approvals's on_progress,
# undolog.saga.fail_expired_sessions's): how many it did so far.
CountProgress = Callable[[int], object]


class Event(threading.Event):
    """The heartbeat's stop signal."""

    def wait_timeout(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when the event was set."""
        return self.wait(timeout)


def spawn(fn: Callable[..., None], args: tuple[Any, ...], name: str) -> Worker:
    worker = threading.Thread(target=fn, args=args, daemon=True, name=name)
    worker.start()
    return worker


def stop(worker: Worker | None, event: Event) -> None:
    """Stop the heartbeat: a beat under way finishes first."""
    event.set()
    if worker is not None and worker.is_alive():
        worker.join()


def uncancelled(result: T) -> T:
    """The sync pair of _acompat.uncancelled: the work has already run (a thread is not
    cancelled while it waits)."""
    return result


class _Client(Protocol):
    def connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]: ...


def walking(
    client: _Client,
    job: Callable[[psycopg.Connection[Any], asyncio.AbstractEventLoop | None], T],
    on: psycopg.Connection[Any] | None = None,
) -> T:
    """Run ``job`` (undo walks) on ``on`` (the session's own connection, if given) or on
    one of the client's connections (its pool's, if any)."""
    if on is not None:
        return job(on, None)
    with client.connection() as conn:
        return job(conn, None)


# Which sessions this side's journaled tools run in (ActiveSession.is_async).
ASYNC = False


# The hot path's locks (undolog.engine_wire). A sync session's result is read by the
# connection's next statement: the wire's lock is held (before conn.lock) by whatever
# sends on the hot path and by fetch_optional/fetch_all from their settle() to their own
# statement, so that no result is sent in between (psycopg would then read that result's
# answer as its own).


def exclusive(wire: Wire) -> threading.RLock:
    """Entered before a statement on a connection that may have an answer unread: no
    result is sent on it meanwhile."""
    return wire.lock


def read_later(conn: psycopg.Connection[Any], wire: Wire) -> None:
    """Release the connection's lock, held since the result was sent: its answer is read
    by the connection's next statement."""
    conn.lock.release()
