"""The approvals inbox's total and live fingerprint (read every POLL_SECONDS by each open
inbox) read undolog.pending_approval_ids, the pending requests alone, not
pending_approvals, which joins each to its session and its call: the same answers, as
real logins read them, at a tenth of the cost at thousands of pending requests
(docs/performance-log.md)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from dashboard_helpers import as_login, waiting_session, without_user
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]

# The two reads as they were, over pending_approvals: what the new ones must answer.
TOTAL_BEFORE = "SELECT count(*) AS n FROM undolog.pending_approvals"
FINGERPRINT_BEFORE = """
SELECT coalesce(md5(string_agg(p.approval_id::text || p.expired::text, ','
                               ORDER BY p.approval_id)), '') AS f
FROM undolog.pending_approvals AS p
"""
READS = [
    ("dashboard_inbox_total", TOTAL_BEFORE),
    ("dashboard_inbox_fingerprint", FINGERPRINT_BEFORE),
]


def _answers(dsn: str, login: str) -> list[tuple[Any, Any]]:
    """(now, before) of each read, in one transaction as ``login``: one now() for both."""
    with psycopg.connect(as_login(dsn, login)) as c:
        return [
            (c.execute(QUERIES[name]).fetchall(), c.execute(before).fetchall())
            for name, before in READS
        ]


def _age(conn: Conn, approval_id: uuid.UUID) -> None:
    """The request's deadline passes (the clock moves on), as the engine's owner."""
    conn.execute(
        "ALTER TABLE undolog.undolog_approval_requests "
        "DISABLE TRIGGER undolog_approval_requests_guard"
    )
    conn.execute(
        "UPDATE undolog.undolog_approval_requests SET requested_at = now() - interval '2 h', "
        "expires_at = now() - interval '1 minute' WHERE approval_id = %s",
        (approval_id,),
    )
    conn.execute(
        "ALTER TABLE undolog.undolog_approval_requests "
        "ENABLE TRIGGER undolog_approval_requests_guard"
    )


@pytest.mark.parametrize("login", ["dash_approver", "dash_operator", "dash_both"])
def test_the_inbox_total_and_fingerprint_answer_as_over_pending_approvals(
    dsn: str, conn: Conn, passwords_checked: bool, login: str
) -> None:
    app_dsn = without_user(dsn)
    assert _answers(app_dsn, login) == [([(0,)], [(0,)]), ([("",)], [("",)])]  # none yet
    waiting = [
        waiting_session(app_dsn, "dash_agent"),
        waiting_session(app_dsn, "dash_agent", item="car"),
        waiting_session(app_dsn, "dash_agent2"),
    ]
    seen = _answers(app_dsn, login)
    assert all(now == before for now, before in seen), seen
    assert seen[0][0] == [(3,)]
    fingerprints = {seen[1][0][0][0]}
    # one decided (it leaves both), one past its deadline (expired in both)
    with psycopg.connect(as_login(app_dsn, "dash_approver2"), autocommit=True) as c:
        c.execute("SELECT undolog.reject(%s, 'ann', 'no')", (waiting[0].approval_id,)).fetchone()
    _age(conn, waiting[1].approval_id)
    seen = _answers(app_dsn, login)
    assert all(now == before for now, before in seen), seen
    assert seen[0][0] == [(2,)]
    fingerprints.add(seen[1][0][0][0])
    assert len(fingerprints) == 2  # the change is seen


@pytest.mark.parametrize("login", ["dash_agent", "dash_agent2"])
def test_an_agent_login_reads_neither_form(dsn: str, passwords_checked: bool, login: str) -> None:
    """As before: the inbox is staff's (an agent reads its requests on its sessions' pages)."""
    app_dsn = without_user(dsn)
    waiting_session(app_dsn, "dash_agent")
    for name, before in READS:
        for statement in (QUERIES[name], before):
            with (
                psycopg.connect(as_login(app_dsn, login)) as c,
                pytest.raises(psycopg.errors.InsufficientPrivilege),
            ):
                c.execute(statement)


def test_the_total_and_fingerprint_read_no_session_and_no_call(
    dsn: str, passwords_checked: bool
) -> None:
    """Their plans, as an approver, read the pending requests only: no session, no call
    (pending_approvals probed each request's call in every month's partition)."""
    app_dsn = without_user(dsn)
    waiting_session(app_dsn, "dash_agent")
    with psycopg.connect(as_login(app_dsn, "dash_approver")) as c:
        for name, _ in READS:
            plan = "\n".join(str(r[0]) for r in c.execute(f"EXPLAIN (COSTS OFF) {QUERIES[name]}"))
            assert "undolog_approval_requests" in plan, plan
            assert "undolog_sessions" not in plan, (name, plan)
            assert "undolog_effect_log" not in plan, (name, plan)
