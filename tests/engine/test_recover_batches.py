"""A fleet's death is recovered in bounded batches: saga.fail_expired_sessions fails the
active sessions whose lease ran out at most SWEEP_BATCH (50) to a transaction, each
committed before the next, with undolog.fail_expired_sessions(p_limit), and the worker's
pass (walk.recover_due), `undolog recover` and the dashboard do so before recover().
Each failure is a subtransaction with an XID of its own, and past 64 in one transaction
the backend's cache of them overflows: every other backend's snapshots then read
pg_subtrans until it ends (recover() used to fail every expired lease in one
transaction, hundreds of sessions held until it was done).

Which transaction failed a session is read from its updated_at
(expiry_support.failed_per_transaction)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import expiry_support
from expiry_support import failed_per_transaction
from undolog import engine, saga
from undolog.errors import InvalidArgument
from undolog.walk import recover_due

Conn = psycopg.Connection[Any]


@pytest.fixture
def operator(login: Callable[..., Conn]) -> Conn:
    conn: Conn = login("undolog_operator")
    return conn


@pytest.fixture
def lease_run_out(conn: Conn) -> Callable[[int], list[uuid.UUID]]:
    """lease_run_out(n) -> the ids of n new active sessions whose lease ran out."""
    return lambda n: expiry_support.lease_run_out(conn, n)


def _states(conn: Conn, session_ids: list[uuid.UUID]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT state, count(*) FROM undolog.undolog_sessions"
        " WHERE session_id = ANY(%s) GROUP BY 1",
        (session_ids,),
    ).fetchall()
    return {str(row[0]): int(row[1]) for row in rows}


def test_200_expired_leases_are_failed_50_to_a_transaction(
    conn: Conn, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    dead = lease_run_out(200)
    failed = saga.fail_expired_sessions(operator)
    assert failed == sorted(dead)  # in session order
    assert failed_per_transaction(conn, dead) == [50, 50, 50, 50]
    assert saga.fail_expired_sessions(operator) == []
    assert sorted(saga.recover(operator)) == sorted(dead)


def test_the_worker_pass_fails_them_in_batches_then_recovers(
    conn: Conn, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    """walk.recover_due, what each pass of the worker (and walk.work) does first."""
    dead = lease_run_out(120)
    seen: list[int] = []
    due = recover_due(operator, on_progress=seen.append)
    assert sorted(due) == sorted(dead)
    assert failed_per_transaction(conn, dead) == [50, 50, 20]
    assert seen == [50, 100]  # after each batch that may have left some


def test_a_limit_of_one_fails_one_session_a_transaction(
    conn: Conn, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    dead = lease_run_out(3)
    first = operator.execute("SELECT * FROM undolog.fail_expired_sessions(p_limit => 1)")
    (only,) = first.fetchall()
    assert only[0] == min(dead)
    assert _states(conn, dead) == {"failed": 1, "active": 2}
    rest = saga.fail_expired_sessions(operator, batch=1)
    assert [only[0], *rest] == sorted(dead)
    assert failed_per_transaction(conn, dead) == [1, 1, 1]
    # NULL, the default, as recover() calls it: every one due, in one transaction
    more = lease_run_out(2)
    got = operator.execute("SELECT * FROM undolog.fail_expired_sessions()").fetchall()
    assert sorted(row[0] for row in got) == sorted(more)
    assert failed_per_transaction(conn, more) == [2]


def test_recover_alone_still_fails_every_expired_lease(
    conn: Conn, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    """undolog.recover() keeps its meaning (a cron line calling it is unchanged)."""
    dead = lease_run_out(5)
    assert sorted(saga.recover(operator)) == sorted(dead)
    assert failed_per_transaction(conn, dead) == [5]


def test_a_limit_below_one_is_refused(operator: Conn) -> None:
    for limit in (0, -5):
        with pytest.raises(InvalidArgument, match=f"p_limit must be at least 1, not {limit}") as e:
            engine.fetch_all(operator, "SELECT * FROM undolog.fail_expired_sessions(%s)", (limit,))
        assert "NULL for every one due" in (e.value.hint or "")
        with pytest.raises(ValueError, match="batch must be at least 1"):
            saga.fail_expired_sessions(operator, batch=limit)


def test_a_session_held_by_another_transaction_is_skipped_and_failed_by_the_next_pass(
    conn: Conn, dsn: str, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    dead = lease_run_out(60)
    held = min(dead)  # the first a pass takes
    with psycopg.connect(dsn) as holder:  # a transaction that holds it (its agent's)
        holder.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE", (held,)
        )
        started = time.monotonic()
        due = recover_due(operator)
        assert time.monotonic() - started < 5  # skipped, not waited for
        # the skipped one does not count: the first batch still failed 50
        assert sorted(due) == sorted(set(dead) - {held})
        assert failed_per_transaction(conn, dead) == [50, 9]
        holder.rollback()
    assert _states(conn, [held]) == {"active": 1}
    assert held in recover_due(operator)  # the next pass
    assert _states(conn, dead) == {"failed": 60}


def test_a_session_whose_advisory_lock_is_held_is_skipped(
    conn: Conn, dsn: str, operator: Conn, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    """An intercept of it in flight holds its advisory lock: its agent is alive."""
    dead = lease_run_out(3)
    held = min(dead)
    with psycopg.connect(dsn) as holder:
        holder.execute(
            "SELECT pg_advisory_xact_lock_shared(undolog.session_lock_key(s.session_id,"
            " s.owner_role)) FROM undolog.undolog_sessions AS s WHERE s.session_id = %s",
            (held,),
        )
        assert saga.fail_expired_sessions(operator, batch=1) == sorted(dead)[1:]
        holder.rollback()
    assert saga.fail_expired_sessions(operator) == [held]


def test_a_connection_not_in_autocommit_gets_a_transaction_per_batch(
    conn: Conn, dsn: str, lease_run_out: Callable[[int], list[uuid.UUID]]
) -> None:
    dead = lease_run_out(70)
    with psycopg.connect(dsn) as worker:
        worker.execute("SET ROLE undolog_operator")
        with pytest.raises(ValueError, match="outside the transaction open"):
            saga.fail_expired_sessions(worker)  # it would commit the caller's
        worker.commit()
        failed = saga.fail_expired_sessions(worker)
        status = worker.info.transaction_status
    assert status == psycopg.pq.TransactionStatus.IDLE  # every batch committed
    assert failed == sorted(dead)
    assert failed_per_transaction(conn, dead) == [50, 20]
