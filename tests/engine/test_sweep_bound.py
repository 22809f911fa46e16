"""A flood of expired leases does not keep the worker from walking: each pass fails at most
walk.EXPIRED_PER_PASS of them (the worker's ``expired_per_pass``), the oldest expired
first, then walks what is due, and the next pass goes on; a stop request is honoured
between two batches of the sweep. An agent login that began 1-second-lease sessions
faster than the sweep failed them (5,500 a second against 1,700) kept every pass sweeping
until it stopped, and another login's failed session waited for all of it.

A real worker (walk.Worker in this process, a pass at a time) against a real database."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog import saga
from undolog.walk import EXPIRED_PER_PASS, Worker, recover_due, work
from worker_support import Conn, failed_session, run_in_thread, state_of, wait_until


@pytest.fixture
def operator(login: Callable[..., Conn]) -> Conn:
    conn: Conn = login("undolog_operator")
    return conn


def flood(conn: Conn, agent: Conn, n: int, expired: str = "1 second") -> list[uuid.UUID]:
    """``n`` sessions the agent login began in one statement, as a flood does (1-second
    leases: one expiry for all), their leases run out ``expired`` ago."""
    rows = agent.execute(
        "SELECT undolog.begin_session(gen_random_uuid(), p_lease => interval '1 second')"
        " FROM generate_series(1, %(n)s)",
        {"n": n},
    ).fetchall()
    sessions = [row[0] for row in rows]
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - %s::interval"
        " WHERE session_id = ANY(%s)",
        (expired, sessions),
    )
    return sessions


def still_out(conn: Conn, sessions: list[uuid.UUID]) -> int:
    """How many of these sessions are active still, their lease run out."""
    row = conn.execute(
        "SELECT count(*) FROM undolog.undolog_sessions"
        " WHERE session_id = ANY(%s) AND state = 'active' AND lease_expires_at <= now()",
        (sessions,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_pass_fails_a_bounded_number_then_walks_another_logins_session(
    conn: Conn, dsn: str, login: Callable[..., Conn]
) -> None:
    """The flood is more than a pass fails: the victim's failed session is walked in the
    first pass, while most of the flood's leases are still out; each pass after it
    fails its share, until none is left."""
    agent = login("undolog_agent")
    # A bound of 2 batches, not the default's 10 (the same sweep, 300 sessions to begin
    # rather than 1,500: 19 s of the suite's budget)
    per_pass = 2 * saga.SWEEP_BATCH
    assert per_pass < EXPIRED_PER_PASS
    dead = flood(conn, agent, 3 * per_pass)
    victim = failed_session(conn, "delete_user", 7)
    undone: list[int] = []
    out_when_walked: list[int] = []

    def walked(sid: uuid.UUID, state: str) -> None:
        if sid == victim:
            out_when_walked.append(still_out(conn, dead))

    worker = Worker(
        lambda: psycopg.connect(dsn, autocommit=True),
        {"delete_user": lambda call: undone.append(call.result["user_id"])},
        notify=False,
        on_walked=walked,
        expired_per_pass=per_pass,
    )
    try:
        worker.run(once=True)
        assert state_of(conn, victim) == "compensated" and undone == [7]
        # before the bound the pass failed them all first: 0 were left when it walked
        assert out_when_walked and out_when_walked[0] >= per_pass, out_when_walked
        # the sweep's bound, then recover(): one batch more at most
        failed = len(dead) - still_out(conn, dead)
        assert per_pass <= failed <= per_pass + saga.SWEEP_BATCH, failed
        passes = 1
        while still_out(conn, dead) and passes < 6:
            worker.run(once=True)
            passes += 1
        assert still_out(conn, dead) == 0 and passes <= 3, passes
    finally:
        worker.stop()


def test_the_oldest_expired_lease_is_failed_first(
    conn: Conn, operator: Conn, login: Callable[..., Conn]
) -> None:
    """A lease that ran out an hour before the flood, its id the greatest of all, is
    failed by the first bounded sweep (in id order it came last)."""
    agent = login("undolog_agent")
    begun = flood(conn, agent, 301)
    early = max(begun)
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 hour'"
        " WHERE session_id = %s",
        (early,),
    )
    due = recover_due(operator, most=2 * saga.SWEEP_BATCH)
    assert early in due
    assert state_of(conn, early) == "failed"
    assert still_out(conn, begun) == 301 - 3 * saga.SWEEP_BATCH  # 100, then recover's 50
    # the order the sessions were failed in: the oldest lease first, then by id
    failed = saga.fail_expired_sessions(operator, most=saga.SWEEP_BATCH)
    assert failed == sorted(failed)
    # work(), one pass of the worker, is bounded the same way (and walks what is due:
    # sessions with no call are compensated at once)
    walked = work(operator, {}, expired_per_pass=saga.SWEEP_BATCH)
    assert len(walked) == 301 - 1 and set(walked.values()) == {"compensated"}
    assert still_out(conn, begun) == 301 - 6 * saga.SWEEP_BATCH


def test_a_stop_is_honoured_between_two_batches_of_the_sweep(
    conn: Conn, dsn: str, login: Callable[..., Conn]
) -> None:
    """A worker with no bound sweeping 4,000 expired leases (some seconds here) is asked
    to stop once the first batches are committed: the pass ends after the batch in hand,
    the leases after it still out. Before, the stop was seen only once all were failed."""
    agent = login("undolog_agent")
    dead = flood(conn, agent, 4000)
    worker = Worker(
        lambda: psycopg.connect(dsn, autocommit=True), {}, notify=False, expired_per_pass=None
    )
    thread, raised = run_in_thread(worker)
    try:
        wait_until(lambda: still_out(conn, dead) < len(dead), timeout=30, what="the first batch")
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive() and not raised, raised
        left = still_out(conn, dead)
        assert left > 0, "the whole flood was swept before the stop was seen"
        assert (len(dead) - left) % saga.SWEEP_BATCH == 0  # whole batches, each committed
    finally:
        worker.stop()
        thread.join(timeout=30)


def test_expired_per_pass_below_one_is_refused() -> None:
    def connect() -> Any:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="expired_per_pass must be 1 or more, not 0"):
        Worker(connect, {}, expired_per_pass=0)
