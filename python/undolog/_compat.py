"""What the sync twins (undolog.client_sync, undolog.decorator_sync) do their own way
(the pair of undolog._acompat, with the same names): the heartbeat is a daemon thread,
waits block, and the undo walk runs on one of the client's connections."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import psycopg

T = TypeVar("T")

# A heartbeat running beside the session's block.
Worker = threading.Thread

sleep = time.sleep

# A wait's progress report (undolog.approvals.wait_for_decision's on_progress).
Progress = Callable[[float], object]


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
