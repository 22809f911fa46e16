"""An operator's action on a halted session applies to the state the page showed, or not
at all: the forms carry `seen` (the session's updated_at), and the engine checks it
(undolog.expect_session) under the session's lock, in the action's own transaction. Held
open here: another operator's move that commits while the post is already on its way."""

from __future__ import annotations

import datetime
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard import log_in

from dashboard_helpers import csrf_of, halted_session, operator_actions, session_state
from undolog import errors, saga

Conn = psycopg.Connection[Any]


def page_fields(web: TestClient, sid: uuid.UUID) -> tuple[str, str, str]:
    """What an operator's page of a halted session carries: its CSRF token, `seen` and
    the undo entry the walk stopped at."""
    page = web.get(f"/sessions/{sid}").text
    seen = re.search(r'name="seen" value="([^"]*)"', page)
    assert seen, "the operator's forms carry what the page showed"
    (undo_id,) = set(re.findall(r'name="undo_id" value="([^"]+)"', page))
    return csrf_of(page), seen[1], undo_id


def halt_again(conn: Conn, undo_id: uuid.UUID) -> None:
    """Another operator retries the failed compensation and it fails again: the session
    is halted again, at the same entry, a halt the first operator never saw."""
    assert saga.retry_compensation(conn, undo_id, "another_operator", "once more") == (
        "compensating"
    )
    claim = saga.claim_compensation(conn, saga_session(conn, undo_id))
    assert claim is not None and claim.undo_id == undo_id
    assert saga.fail_compensation(conn, undo_id, "down again", claim.attempt) == (
        "compensation_failed"
    )


def saga_session(conn: Conn, undo_id: uuid.UUID) -> uuid.UUID:
    row = conn.execute(
        "SELECT session_id FROM undolog.undolog_undo_stack WHERE undo_id = %s", (undo_id,)
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def wait_for_lock_wait(dsn: str, application_name: str, timeout: float = 10.0) -> None:
    """Until a backend of ``application_name`` waits for a lock (the session's row)."""
    with psycopg.connect(dsn, autocommit=True) as watcher:
        deadline = time.monotonic() + timeout
        while True:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (application_name,),
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            assert time.monotonic() < deadline, "the post never waited for the session"
            time.sleep(0.02)


@pytest.fixture
def operator(web: TestClient) -> Iterator[TestClient]:
    assert log_in(web, "dash_operator").status_code == 303
    yield web


@pytest.mark.parametrize("action", ["resume", "retry", "abandon"])
def test_a_move_committed_while_the_post_waits_for_the_session_is_not_acted_on(
    operator: TestClient, dsn: str, conn: Conn, action: str
) -> None:
    """The window between the check and the action, held open: another operator's retry,
    which halts the session again, is still uncommitted when the post arrives, and commits
    once the post waits for the session. Before the check was the engine's, the post read
    the session (the old state: its `seen` matched), then its action waited, then acted on
    the new halt (303). Now the check waits under the session's lock and sees the new
    state: 409, nothing done."""
    sid = halted_session(dsn)
    token, seen, undo_id = page_fields(operator, sid)
    answers: list[Any] = []
    with conn.transaction():
        halt_again(conn, uuid.UUID(undo_id))
        post = threading.Thread(
            target=lambda: answers.append(
                operator.post(
                    f"/sessions/{sid}/{action}",
                    data={"csrf": token, "reason": "give up", "undo_id": undo_id, "seen": seen},
                )
            )
        )
        post.start()
        wait_for_lock_wait(dsn, "undolog-dashboard")
    post.join(30)
    (answer,) = answers
    assert answer.status_code == 409, (action, answer.status_code)
    assert "changed since you read it" in answer.text
    assert session_state(conn, sid) == "halted"
    assert operator_actions(conn, sid) == [("retry", "another_operator")]
    # read again, the same choice is made on the state shown now
    token, fresh, _ = page_fields(operator, sid)
    assert fresh != seen
    done = operator.post(
        f"/sessions/{sid}/{action}",
        data={"csrf": token, "reason": "give up", "undo_id": undo_id, "seen": fresh},
    )
    assert done.status_code == 303, done.text
    assert operator_actions(conn, sid)[-1] == (action, "dash_operator")


def test_the_check_holds_the_session_until_the_action_is_done(dsn: str, conn: Conn) -> None:
    """Two operators decide on the same state at once: the first one's check locks the
    session, the second one's waits (here: gives up at its lock_timeout, UL030) and, once
    the first one's action committed, is refused (UL001): the state it read is gone."""
    sid = halted_session(dsn)
    row = conn.execute(
        "SELECT updated_at FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    seen: datetime.datetime = row[0]
    with (
        psycopg.connect(dsn, autocommit=True) as first,
        psycopg.connect(dsn, autocommit=True) as second,
    ):
        second.execute("SET lock_timeout = '200ms'")
        with first.transaction():
            assert saga.expect_session(first, sid, seen) == "halted"
            with pytest.raises(errors.SessionBusy), second.transaction():
                saga.expect_session(second, sid, seen)
            assert saga.resume_session(first, sid, "first_operator", "dealt with") == (
                "compensating"
            )
        stale = pytest.raises(errors.InvalidStateTransition, match="changed since it was read")
        with stale, second.transaction():
            saga.expect_session(second, sid, seen)
            saga.abandon_session(second, sid, "second_operator", "give up")
    assert operator_actions(conn, sid) == [("resume", "first_operator")]


def test_a_page_read_before_another_operator_acted_is_refused(
    operator: TestClient, dsn: str, conn: Conn
) -> None:
    """The plain case: another operator's abandon committed before the post."""
    sid = halted_session(dsn)
    token, seen, _ = page_fields(operator, sid)
    saga.abandon_session(conn, sid, "another_operator", "refunded by hand")
    stale = operator.post(
        f"/sessions/{sid}/resume", data={"csrf": token, "reason": "go on", "seen": seen}
    )
    assert stale.status_code == 409
    assert "changed since you read it" in stale.text
    assert operator_actions(conn, sid) == [("abandon", "another_operator")]


def test_a_seen_that_is_no_instant_the_page_showed_is_refused_and_none_acts_as_before(
    operator: TestClient, dsn: str, conn: Conn
) -> None:
    sid = halted_session(dsn)
    token, seen, undo_id = page_fields(operator, sid)
    for bad in ("yesterday", seen.split("+")[0], ""):  # not a time; no time zone; empty
        answer = operator.post(
            f"/sessions/{sid}/abandon", data={"csrf": token, "reason": "r", "seen": bad}
        )
        assert answer.status_code == 409, bad
    assert operator_actions(conn, sid) == []
    # a script's post without it acts on the session as it is
    done = operator.post(
        f"/sessions/{sid}/retry", data={"csrf": token, "reason": "r", "undo_id": undo_id}
    )
    assert done.status_code == 303
    assert operator_actions(conn, sid) == [("retry", "dash_operator")]
