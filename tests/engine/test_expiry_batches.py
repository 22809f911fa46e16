"""A mass expiry runs in bounded batches: approvals.expire_approvals expires the requests
past their deadline at most SWEEP_BATCH (50) to a transaction, each committed before the
next, with undolog.expire_approvals(p_limit). Each expiry is a subtransaction with an XID
of its own, and past 64 in one transaction the backend's cache of them overflows: every
other backend's snapshots then read pg_subtrans until the sweep ends (it used to expire
every request due in one transaction, thousands of them holding their locks until done).

Which transaction expired a request is read from its effect's updated_at
(expiry_support.expired_per_transaction)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import expiry_support
from expiry_support import expired_per_transaction, expiry_refused, in_sweep_order
from undolog import approvals, engine
from undolog.errors import InvalidArgument

Conn = psycopg.Connection[Any]


@pytest.fixture
def operator(login: Callable[..., Conn]) -> Conn:
    conn: Conn = login("undolog_operator")
    return conn


@pytest.fixture
def past_deadline(conn: Conn) -> Callable[[int], list[uuid.UUID]]:
    """past_deadline(n) -> the ids of n new requests past their deadline, a session each."""
    return lambda n: expiry_support.past_deadline(conn, n)


def _states(conn: Conn, approval_ids: list[uuid.UUID]) -> dict[tuple[str, str], int]:
    """How many of these requests are in each (request state, session state)."""
    rows = conn.execute(
        """
        SELECT a.state, s.state, count(*) FROM undolog.undolog_approval_requests AS a
        JOIN undolog.undolog_sessions AS s USING (session_id)
        WHERE a.approval_id = ANY(%s) GROUP BY 1, 2
        """,
        (approval_ids,),
    ).fetchall()
    return {(row[0], row[1]): int(row[2]) for row in rows}


def test_200_requests_are_expired_50_to_a_transaction(
    conn: Conn, operator: Conn, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    due = past_deadline(200)
    expired = approvals.expire_approvals(operator)
    assert sorted(expired) == sorted(due)
    assert _states(conn, due) == {("expired", "compensating"): 200}
    assert expired_per_transaction(conn, due) == [50, 50, 50, 50]
    assert approvals.expire_approvals(operator) == []


def test_the_progress_is_reported_after_each_batch_that_may_have_left_some(
    operator: Conn, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    past_deadline(100)
    seen: list[int] = []
    assert len(approvals.expire_approvals(operator, on_progress=seen.append)) == 100
    # the third batch answered none: the sweep ended there, with nothing more to say
    assert seen == [50, 100]
    assert approvals.expire_approvals(operator, on_progress=seen.append) == []
    assert seen == [50, 100]


def test_a_limit_of_one_expires_one_request_a_transaction(
    conn: Conn, operator: Conn, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    due = past_deadline(3)
    first = operator.execute("SELECT * FROM undolog.expire_approvals(p_limit => 1)").fetchall()
    assert len(first) == 1 and first[0][0] in due
    assert _states(conn, due) == {
        ("expired", "compensating"): 1,
        ("pending", "awaiting_approval"): 2,
    }
    rest = approvals.expire_approvals(operator, batch=1)
    assert sorted([first[0][0], *rest]) == sorted(due)
    assert expired_per_transaction(conn, due) == [1, 1, 1]
    # NULL, the default: every one due, as `SELECT undolog.expire_approvals()` from cron
    more = past_deadline(2)
    got = operator.execute("SELECT * FROM undolog.expire_approvals()").fetchall()
    assert sorted(row[0] for row in got) == sorted(more)
    assert expired_per_transaction(conn, more) == [2]


def test_a_limit_below_one_is_refused(operator: Conn) -> None:
    for limit in (0, -5):
        with pytest.raises(InvalidArgument, match=f"p_limit must be at least 1, not {limit}") as e:
            engine.fetch_all(operator, "SELECT * FROM undolog.expire_approvals(%s)", (limit,))
        assert "NULL for every one due" in (e.value.hint or "")
        with pytest.raises(ValueError, match="batch must be at least 1"):
            approvals.expire_approvals(operator, batch=limit)


def test_a_session_held_by_another_transaction_is_skipped_and_expired_by_the_next_sweep(
    conn: Conn, dsn: str, operator: Conn, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    due = past_deadline(60)
    first = in_sweep_order(conn, due)[0]
    (held_sid,) = conn.execute(
        "SELECT session_id FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (first,),
    ).fetchone() or (None,)
    with psycopg.connect(dsn) as holder:  # a transaction that holds the first session
        holder.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE",
            (held_sid,),
        )
        started = time.monotonic()
        expired = approvals.expire_approvals(operator)
        assert time.monotonic() - started < 5  # skipped, not waited for
        # the skipped one does not count: the first batch still expired 50
        assert sorted(expired) == sorted(set(due) - {first})
        assert expired_per_transaction(conn, due) == [50, 9]
        holder.rollback()
    assert approvals.expire_approvals(operator) == [first]
    assert _states(conn, due) == {("expired", "compensating"): 60}


def test_a_connection_not_in_autocommit_gets_a_transaction_per_batch(
    conn: Conn, dsn: str, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    due = past_deadline(70)
    with psycopg.connect(dsn) as sweeper:
        sweeper.execute("SET ROLE undolog_operator")
        with pytest.raises(ValueError, match="outside the transaction open"):
            approvals.expire_approvals(sweeper)  # it would commit the caller's
        sweeper.commit()
        expired = approvals.expire_approvals(sweeper)
        status = sweeper.info.transaction_status
    assert status == psycopg.pq.TransactionStatus.IDLE  # every batch committed
    assert sorted(expired) == sorted(due)
    assert expired_per_transaction(conn, due) == [50, 20]


def test_a_batch_that_fails_leaves_the_batches_before_it_committed(
    conn: Conn, operator: Conn, past_deadline: Callable[[int], list[uuid.UUID]]
) -> None:
    due = past_deadline(80)
    seen: list[int] = []
    with (
        expiry_refused(conn, in_sweep_order(conn, due)[59]),
        pytest.raises(psycopg.errors.RaiseException, match="refused by the test"),
    ):
        approvals.expire_approvals(operator, on_progress=seen.append)
    assert seen == [50]
    assert _states(conn, due) == {
        ("expired", "compensating"): 50,
        ("pending", "awaiting_approval"): 30,
    }
    assert len(approvals.expire_approvals(operator)) == 30
