"""What the async twins do their own way, for undolog.aclient, undolog.adecorator and
undolog.aengine: the heartbeat is an asyncio task, waits are awaited, the undo walk (sync
SQL) runs in a worker thread, and a result sent without waiting is read by a task of its
own. undolog._compat is the sync pair, with the same names, for the modules generated
from them (tools/async_to_sync.py renames ``_acompat`` to ``_compat``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import psycopg

from undolog.engine_wire import Wire, settle_gen

T = TypeVar("T")

# A heartbeat running beside the session's block.
Worker = asyncio.Task[None]

sleep = asyncio.sleep

# A wait's progress report (undolog.aapprovals.wait_for_decision's on_progress): awaited.
Progress = Callable[[float], Awaitable[object]]

# A sweep's progress report (undolog.aapprovals.expire_approvals's on_progress,
# undolog.asaga.fail_expired_sessions's): how many it did so far, awaited.
CountProgress = Callable[[int], Awaitable[object]]


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


def _anyio_shield() -> contextlib.AbstractContextManager[object]:
    """A shielded anyio cancel scope, when anyio is installed (the MCP SDK's and
    Starlette's, whose cancel scopes cancel a waiting task again at every turn of the
    loop while the scope is cancelled: awaited unshielded, the exit would spin); else
    nothing. asyncio's own cancellation still comes through: asyncio.shield handles it."""
    try:
        import anyio
    except ImportError:  # not installed: no anyio scope can cancel us either
        return contextlib.nullcontext()
    return anyio.CancelScope(shield=True)


async def uncancelled(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` to its end even if this task is cancelled meanwhile, then raise the
    cancellation (with the work's own error, if it raised one, as its context): a
    session's exit must fail or complete the session, not leave it active until its lease
    runs out, also in an anyio cancel scope, which cancels every await inside it until
    the scope is left."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    with _anyio_shield():
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                cancelled = exc  # (or the work's own cancellation: task.result() raises it)
            except BaseException:  # the work's own error: task.result() has it
                pass
    if cancelled is None:
        return task.result()
    if not task.cancelled() and task.exception() is not None:
        cancelled.__context__ = task.exception()  # said under the cancellation, not lost
    raise cancelled


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


# The hot path's locks (undolog.engine_wire). An async session's result is read by a task
# of its own, which holds the connection's lock from the moment the result is sent until
# its answer is read: anything else on the connection (a heartbeat, a framework
# integration's own query, the next intercept) waits for the lock as for any statement in
# flight, and never finds the connection busy. The agent's own work between two calls
# overlaps the wait.


class exclusive:  # a class rather than an asynccontextmanager: it is on the hot path
    """Entered before a statement on a connection that may have an answer unread: the
    reader of the last result sent without waiting is awaited first."""

    __slots__ = ("wire",)

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    async def __aenter__(self) -> None:
        if (reader := self.wire.reader) is not None:
            self.wire.reader = None
            await asyncio.shield(reader)

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _read_then_release(conn: psycopg.AsyncConnection[Any], wire: Wire) -> None:
    try:
        await conn.wait(settle_gen(conn, wire))
    except psycopg.Error:
        pass  # kept in wire.errors
    finally:
        conn.lock.release()


def read_later(conn: psycopg.AsyncConnection[Any], wire: Wire) -> None:
    """Hand the connection's lock, held since the result was sent, to a task that reads
    its answer and then releases it."""
    wire.reader = asyncio.create_task(_read_then_release(conn, wire))
