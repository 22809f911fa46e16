"""A NOTIFY flood on the approvals channel (any login may NOTIFY it: PostgreSQL has no
privilege for that) does not make a waiter read the request's state once per NOTIFY:
woken, a wait reads again no sooner than approvals.MIN_READ_GAP after its last read,
whether it LISTENs itself (wait_for_decision on a connection) or is woken by the
caller's LISTEN (a Wakeup, as the MCP proxy's held calls are). A real decision still
reaches it within about that gap."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from undolog import aapprovals, approvals, engine
from undolog.approvals import CHANNEL, MIN_READ_GAP

Conn = psycopg.Connection[Any]


@pytest.fixture
def flood(conn: Conn, dsn: str) -> Iterator[Callable[[], threading.Event]]:
    """flood() -> an event that stops it: another agent's login NOTIFYing the channel in
    a tight loop, from a thread, until the test ends."""
    name = f"flooder_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_agent")
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start() -> threading.Event:
        def notify() -> None:
            with psycopg.connect(make_conninfo(dsn, user=name), autocommit=True) as other:
                while not stop.is_set():
                    other.execute(f"NOTIFY {CHANNEL}")

        thread = threading.Thread(target=notify, daemon=True)
        thread.start()
        threads.append(thread)
        return stop

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


def _pending(agent_dsn: str) -> uuid.UUID:
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        session_id = engine.begin_session(agent, agent="flooded")
        answer = engine.intercept(agent, session_id, 0, "wire", "irreversible", {"c": 1})
    assert answer.approval_id is not None
    return answer.approval_id


def _decide_at(dsn: str, approval_id: uuid.UUID, after: float) -> threading.Thread:
    def decide() -> None:
        time.sleep(after)
        with psycopg.connect(dsn, autocommit=True) as approver:
            approver.execute("SET ROLE undolog_approver")
            approvals.approve(approver, approval_id, "alice")

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


def test_a_flood_does_not_make_the_waits_own_listen_read_per_notify(
    agent_dsn: str,
    dsn: str,
    flood: Callable[[], threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    approval_id = _pending(agent_dsn)
    reads: list[float] = []
    real = approvals._state_on

    def counting(*args: Any, **kwargs: Any) -> Any:
        reads.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(approvals, "_state_on", counting)
    flood()
    with psycopg.connect(agent_dsn, autocommit=True) as waiting:
        assert approvals.wait_for_decision(waiting, approval_id, 2.0, 5.0) is None
        # the decision, under the same flood, still comes within about the gap
        decider = _decide_at(dsn, approval_id, 1.5)
        started = time.monotonic()
        try:
            decision = approvals.wait_for_decision(waiting, approval_id, 10.0, 30.0)
        finally:
            decider.join()
    took = time.monotonic() - started
    assert decision == "approved"
    assert took < 1.5 + MIN_READ_GAP + 1.0, took
    # 2 s, then ~2.5 s: a read at the start and one per gap at most, not one per NOTIFY
    assert len(reads) <= (2 + 2.5) / MIN_READ_GAP + 4, f"{len(reads)} reads"


def test_a_flood_of_wakeups_does_not_make_a_held_wait_read_per_wakeup(
    agent_dsn: str, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP proxy's held calls: its one LISTEN sets every hold's Wakeup at every
    NOTIFY, and each read takes a connection of the proxy's pool."""
    approval_id = _pending(agent_dsn)
    reads: list[float] = []
    real = aapprovals._state_on

    async def counting(*args: Any, **kwargs: Any) -> Any:
        reads.append(time.monotonic())
        return await real(*args, **kwargs)

    monkeypatch.setattr(aapprovals, "_state_on", counting)
    progress: list[float] = []

    async def on_progress(waited: float) -> None:
        progress.append(waited)

    async def scenario() -> tuple[str | None, str | None, float]:
        wake = aapprovals.Wakeup()

        async def flooding() -> None:
            while True:
                wake.set()
                await asyncio.sleep(0.0005)

        flooder = asyncio.create_task(flooding())
        async with await psycopg.AsyncConnection.connect(agent_dsn, autocommit=True) as reader:
            idle = await aapprovals.wait_for_decision(
                reader, approval_id, 2.0, 30.0, listener=wake,
                on_progress=on_progress, progress_every=0.25,
            )  # fmt: skip
            decider = asyncio.create_task(asyncio.to_thread(_decide_at(dsn, approval_id, 1.5).join))
            started = time.monotonic()
            decided = await aapprovals.wait_for_decision(
                reader, approval_id, 10.0, 30.0, listener=wake
            )
            took = time.monotonic() - started
            await decider
        flooder.cancel()
        return idle, decided, took

    idle, decided, took = asyncio.run(scenario())
    assert idle is None
    assert decided == "approved"
    assert took < 1.5 + MIN_READ_GAP + 1.0, took
    assert len(reads) <= (2 + 2.5) / MIN_READ_GAP + 4, f"{len(reads)} reads"
    # the progress goes on at its own pace, flood or not (0, 0.25, ... 1.75 s; a report
    # late on a loaded machine puts the next ones back, so not always all eight)
    assert 6 <= len(progress) <= 8, progress
