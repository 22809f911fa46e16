"""What the async twins do their own way, for undolog.aclient and undolog.adecorator:
the heartbeat is an asyncio task, waits are awaited, and the undo walk (sync SQL) runs in
a worker thread. undolog._compat is the sync pair, with the same names, for the modules
generated from them (tools/async_to_sync.py renames ``_acompat`` to ``_compat``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import psycopg

T = TypeVar("T")

# A heartbeat running beside the session's block.
Worker = asyncio.Task[None]

sleep = asyncio.sleep

# A wait's progress report (undolog.aapprovals.wait_for_decision's on_progress): awaited.
Progress = Callable[[float], Awaitable[object]]


class Event(asyncio.Event):
    """The heartbeat's stop signal."""

    async def wait_timeout(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when the event was set."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.wait()
        return self.is_set()


def spawn(fn: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...], name: str) -> Worker:
    return asyncio.create_task(fn(*args), name=name)


async def stop(worker: Worker | None, event: Event) -> None:
    """Stop the heartbeat at once: cancelled, also in the middle of a beat."""
    event.set()
    if worker is not None and not worker.done():
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker


class _Client(Protocol):
    def _conninfo(self) -> str: ...


async def walking(
    client: _Client,
    job: Callable[[psycopg.Connection[Any], asyncio.AbstractEventLoop | None], T],
    on: psycopg.AsyncConnection[Any] | None = None,
) -> T:
    """Run ``job`` (undo walks: their SQL is sync) on a sync connection of its own in a
    worker thread; the async compensations it meets run on this event loop. ``on``, the
    session's connection, is async: it cannot carry the walk."""
    loop = asyncio.get_running_loop()

    def in_thread() -> T:
        with psycopg.connect(client._conninfo(), autocommit=True) as conn:
            return job(conn, loop)

    return await asyncio.to_thread(in_thread)


# Which sessions this side's journaled tools run in (ActiveSession.is_async).
ASYNC = True
