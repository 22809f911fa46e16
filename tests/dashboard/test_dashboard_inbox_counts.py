"""The approvals inbox's total and live fingerprint (read every POLL_SECONDS by each open
inbox) read undolog.pending_approval_ids, the pending requests alone, not
pending_approvals, which joins each to its session and its call: the same answers, as
real logins read them, at a tenth of the cost at thousands of pending requests
(docs/performance-log.md). Its own rows (the oldest 200) are picked there too, and only
they are joined: the same rows in the same order. The rows and the total are one
statement, `undolog approvals list`'s too (queries.sql's pending_approvals)."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import psycopg
import pytest

from dashboard_helpers import as_login, waiting_session, without_user
from undolog.dashboard.queries import HEAD_CHARS
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]

# The two reads as they were, over pending_approvals: what the new ones must answer.
TOTAL_BEFORE = "SELECT count(*) AS n FROM undolog.pending_approvals"
FINGERPRINT_BEFORE = """
SELECT coalesce(md5(string_agg(p.approval_id::text || p.expired::text, ','
                               ORDER BY p.approval_id)), '') AS f
FROM undolog.pending_approvals AS p
"""
# The inbox's rows as they were read: every pending request joined, then cut.
INBOX_BEFORE = """
SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name,
       CASE WHEN length(p.args::text) <= %(head)s::int THEN p.args END AS args,
       left(p.args::text, %(head)s::int) AS args_head,
       length(p.args::text) AS args_length,
       p.requested_at, p.expires_at, p.agent, p.session_state, p.age, p.expired,
       p.owner_role, p.requested_by, p.tier, p.purpose, now() AS server_now,
       (SELECT count(*) FROM undolog.pending_approvals) AS total
FROM undolog.pending_approvals AS p
ORDER BY p.requested_at, p.approval_id
LIMIT %(limit)s::int
"""
INBOX = QUERIES["pending_approvals"]  # the inbox's rows and total
FINGERPRINT = QUERIES["dashboard_inbox_fingerprint"]


def _answers(dsn: str, login: str) -> list[tuple[Any, Any]]:
    """(now, before) of the total and the fingerprint, in one transaction as ``login``:
    one now() for both. The total is the inbox's rows' (0 without a row)."""
    with psycopg.connect(as_login(dsn, login)) as c:
        shown = c.execute(INBOX, {"head": HEAD_CHARS, "limit": 1}).fetchall()
        total = [(shown[0][-1],)] if shown else [(0,)]
        return [
            (total, c.execute(TOTAL_BEFORE).fetchall()),
            (c.execute(FINGERPRINT).fetchall(), c.execute(FINGERPRINT_BEFORE).fetchall()),
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
    params = {"head": HEAD_CHARS, "limit": 1}
    for statement in (INBOX, INBOX_BEFORE, FINGERPRINT, FINGERPRINT_BEFORE, TOTAL_BEFORE):
        with (
            psycopg.connect(as_login(app_dsn, login)) as c,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            c.execute(statement, params if "%(" in statement else None)


def test_the_fingerprint_reads_no_session_and_no_call(dsn: str, passwords_checked: bool) -> None:
    """Its plan, as an approver, reads the pending requests only: no session, no call
    (pending_approvals probed each request's call in every month's partition). The
    total's: test_the_inbox_joins_only_the_requests_it_shows."""
    app_dsn = without_user(dsn)
    waiting_session(app_dsn, "dash_agent")
    with psycopg.connect(as_login(app_dsn, "dash_approver")) as c:
        plan = "\n".join(str(r[0]) for r in c.execute(f"EXPLAIN (COSTS OFF) {FINGERPRINT}"))
    assert "undolog_approval_requests" in plan, plan
    assert "undolog_sessions" not in plan, plan
    assert "undolog_effect_log" not in plan, plan


def _requested_at(conn: Conn, approval_ids: list[uuid.UUID], at: datetime.datetime) -> None:
    """The requests were all asked at ``at`` (a tie: the order is then by approval_id)."""
    conn.execute(
        "ALTER TABLE undolog.undolog_approval_requests "
        "DISABLE TRIGGER undolog_approval_requests_guard"
    )
    conn.execute(
        "UPDATE undolog.undolog_approval_requests SET requested_at = %s"
        " WHERE approval_id = ANY(%s)",
        (at, approval_ids),
    )
    conn.execute(
        "ALTER TABLE undolog.undolog_approval_requests "
        "ENABLE TRIGGER undolog_approval_requests_guard"
    )


def _inbox(dsn: str, login: str, limit: int) -> tuple[list[Any], list[Any]]:
    """(now, before) of the inbox's rows, in one transaction as ``login``."""
    params = {"head": HEAD_CHARS, "limit": limit}
    with psycopg.connect(as_login(dsn, login)) as c:
        return (
            c.execute(INBOX, params).fetchall(),
            c.execute(INBOX_BEFORE, params).fetchall(),
        )


@pytest.mark.parametrize("login", ["dash_approver", "dash_operator", "dash_both"])
def test_the_inbox_rows_and_their_order_are_as_over_pending_approvals(
    dsn: str, conn: Conn, passwords_checked: bool, login: str
) -> None:
    """The inbox's own read picks the oldest in pending_approval_ids and joins only them:
    for every cut (fewer than pending, as many, more), the same rows in the same order as
    the read over pending_approvals, with two requests asked at the same instant (then
    by approval_id), one decided (left out) and one past its deadline (expired)."""
    app_dsn = without_user(dsn)
    assert _inbox(app_dsn, login, 200) == ([], [])  # none yet
    waiting = [
        waiting_session(app_dsn, "dash_agent"),
        waiting_session(app_dsn, "dash_agent", item="car"),
        waiting_session(app_dsn, "dash_agent2"),
        waiting_session(app_dsn, "dash_agent2", item="car", cents=7),
        waiting_session(app_dsn, "dash_agent"),
    ]
    tie = [waiting[3].approval_id, waiting[4].approval_id]
    _requested_at(conn, tie, datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1))
    _age(conn, waiting[1].approval_id)
    with psycopg.connect(as_login(app_dsn, "dash_approver2"), autocommit=True) as c:
        c.execute("SELECT undolog.reject(%s, 'ann', 'no')", (waiting[2].approval_id,)).fetchone()
    for limit in (1, 2, 3, 4, 200):
        now, before = _inbox(app_dsn, login, limit)
        assert now == before, (limit, now, before)
        assert len(now) == min(limit, 4)
    rows = _inbox(app_dsn, login, 200)[0]
    ids = [r[0] for r in rows]
    assert ids[0] == waiting[1].approval_id  # the oldest: two hours ago (and expired)
    assert ids[1:3] == sorted(tie)  # asked at the same instant: by approval_id
    assert waiting[2].approval_id not in ids  # decided


def _rows_of(plan: dict[str, Any], relation: str) -> float:
    """The rows that ``relation``'s scans gave the main query (rows times loops), not
    counting the scans of its init plans and subplans (where the oldest are picked)."""
    if plan.get("Parent Relationship") in ("InitPlan", "SubPlan"):
        return 0.0
    own = plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == relation else 0
    return own + sum(_rows_of(child, relation) for child in plan.get("Plans", []))


def _read_below(plan: dict[str, Any], below: bool = False) -> set[str]:
    """The relations that the init plans and subplans of ``plan`` read."""
    below = below or plan.get("Parent Relationship") in ("InitPlan", "SubPlan")
    own = {plan["Relation Name"]} if below and "Relation Name" in plan else set()
    return own.union(*(_read_below(child, below) for child in plan.get("Plans", [])))


def test_the_inbox_joins_only_the_requests_it_shows(dsn: str, passwords_checked: bool) -> None:
    """As an approver, with three pending and a cut at one: the main query joins one
    request to its session and its call; the oldest are picked, and all counted (the
    total), among the requests alone. Over pending_approvals every pending request was
    joined, then sorted and cut (and joined again to be counted)."""
    app_dsn = without_user(dsn)
    for item in ("room", "car", "boat"):
        waiting_session(app_dsn, "dash_agent", item=item)
    with psycopg.connect(as_login(app_dsn, "dash_approver")) as c:
        ((plan,),) = c.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {INBOX}", {"head": HEAD_CHARS, "limit": 1}
        ).fetchall()
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert _rows_of(root, "undolog_approval_requests") == 1, json.dumps(root, indent=1)
    assert _read_below(root) == {"undolog_approval_requests"}, json.dumps(root, indent=1)
