"""Every operator action exists in the CLI and the dashboard, not only in SQL: the table of
the functions sql/grants.sql grants to the approver and operator roles, each with its
command and its dashboard place (or why it has none), checked against the parser and
the dashboard's routes; and the dashboard's recovery (undolog.recover, as `undolog
recover`) on a real PostgreSQL with real logins."""

from __future__ import annotations

import argparse
import html
import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient
from test_dashboard import log_in as first_log_in
from test_dashboard_maintenance import partitions

import expiry_support
import undolog._version
from dashboard_helpers import as_login, csrf_of, session_state
from undolog import asaga, engine, engine_check, walk
from undolog.cli import build_parser, main
from undolog.dashboard.app import Dashboard

Conn = psycopg.Connection[Any]
GRANTS = Path(__file__).resolve().parents[2] / "sql" / "grants.sql"
SESSION_ACTION = "/sessions/{session_id}/{action}"

# function: (the command that does it, where the dashboard does it). None where a face
# has no twin, with the reason in NOT_THERE: either it is not a person's action (the
# worker's machinery, what an agent reads) or it is a gap still open.
PARITY: dict[str, tuple[tuple[str, ...] | None, str | None]] = {
    "register_tool": (("tools", "register"), "/tools/register"),
    "retire_tool": (("tools", "retire"), "/tools/retire"),
    # retire and register in one transaction: `tools register --replace`, the form's
    # "replace" box
    "replace_tool": (("tools", "register"), "/tools/register"),
    "approval_decision": (None, None),
    "ending_decision": (None, None),
    "approval_edit": (None, None),
    # what an edit changed: the session page and Past decisions show it, `approvals
    # decided --json` has both args
    "edit_changes": (("approvals", "decided"), "/sessions/{session_id}"),
    # a delivery's last error as the reader may read it: the view
    # notification_deliveries shows it, which `notifications deliveries` and the session
    # page (each request's deliveries) read
    "delivery_last_error": (("notifications", "deliveries"), "/sessions/{session_id}"),
    "approve": (("approvals", "approve"), "/approvals/decide"),
    "approve_edited": (("approvals", "approve"), "/approvals/{approval_id}/edit"),
    "reject": (("approvals", "reject"), "/approvals/decide"),
    "recover": (("recover",), "/maintenance/recover"),
    # recover's first step, in batches (as each worker pass does it)
    "fail_expired_sessions": (("recover",), "/maintenance/recover"),
    "claim_compensation": (("worker",), None),
    "complete_compensation": (("worker",), None),
    "fail_compensation": (("worker",), None),
    "resume_session": (("sessions", "resume"), SESSION_ACTION),
    "retry_compensation": (("sessions", "retry"), SESSION_ACTION),
    "abandon_session": (("sessions", "abandon"), SESSION_ACTION),
    # a precondition of the three above (the state the person read), not an action
    "expect_session": (("sessions", "resume"), SESSION_ACTION),
    "expire_approvals": (("approvals", "expire"), "/approvals/expire"),
    "ensure_partitions": (("partitions", "ensure"), "/maintenance/ensure"),
    "drop_partitions": (("partitions", "drop"), "/maintenance/drop"),
    "maintain_partitions": (("partitions", "maintain"), "/maintenance/run"),
    "pending_partitions": (("partitions", "plan"), "/maintenance"),
    "rollback_session": (("sessions", "rollback"), SESSION_ACTION),
    "add_notification_channel": (("notifications", "add-webhook"), "/notifications/add/{kind}"),
    "remove_notification_channel": (("notifications", "remove"), "/notifications/remove"),
    "enqueue_notifications": (("notify",), None),
    "claim_notification": (("notify",), None),
    "finish_notification": (("notify",), None),
    "retry_notification": (("notifications", "retry"), SESSION_ACTION),
    "rollback_to": (("sessions", "undo-to"), SESSION_ACTION),
    "rollback_last": (("sessions", "undo-to"), SESSION_ACTION),
    "rollback_to_plan": (("sessions", "undo-to"), SESSION_ACTION),
    "version": (("status",), "/maintenance"),
    "session_state_estimates": (("metrics",), "/metrics"),
    # metrics_sessions's WHERE (the definition of an unfinished session)
    "session_unfinished": (("metrics",), "/metrics"),
    "verify_chain": (("verify",), "/sessions/{session_id}"),
    "assert_chain": (("verify",), "/sessions/{session_id}"),
    "chain_events": (("export",), "/sessions/{session_id}/export"),
    "write_anchor": (("anchor", "write"), "/maintenance/anchor"),
}
NOT_THERE = {
    "approval_decision": "the agent's binding reads it (what became of its request)",
    "ending_decision": "the agent's binding reads it (whether its session goes on)",
    "approval_edit": "the agent's binding reads it (the arguments approved instead)",
    "claim_compensation": "the worker's: it runs the application's compensations",
    "complete_compensation": "the worker's: it runs the application's compensations",
    "fail_compensation": "the worker's: it runs the application's compensations",
    "enqueue_notifications": "the delivery worker's (`undolog notify`)",
    "claim_notification": "the delivery worker's: it hands out a channel's secret",
    "finish_notification": "the delivery worker's (`undolog notify`)",
}


def granted_to_people() -> set[str]:
    """The functions grants.sql grants to undolog_approver or undolog_operator."""
    text = re.sub(r"--[^\n]*", "", GRANTS.read_text(encoding="utf-8"))
    found: set[str] = set()
    for grant in re.findall(r"GRANT EXECUTE ON FUNCTION(.*?);", text, re.S):
        if "undolog_operator" in grant or "undolog_approver" in grant:
            found.update(re.findall(r"undolog\.(\w+)\(", grant))
    return found


def commands() -> set[tuple[str, ...]]:
    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> set[tuple[str, ...]]:
        found = {words}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found |= walk(child, (*words, name))
        return found

    return walk(build_parser(), ())


def dashboard_paths() -> set[str]:
    app: Any = Dashboard("host=nowhere.invalid").app()
    while not hasattr(app, "routes"):  # the middlewares around the Starlette app
        app = app.app
    return {r.path for r in app.routes if isinstance(r, Route)}


def test_every_function_people_are_granted_has_its_command_and_its_page() -> None:
    granted = granted_to_people()
    assert granted == set(PARITY), (
        f"granted but not in the table: {granted - set(PARITY)}; "
        f"in the table but not granted: {set(PARITY) - granted}"
    )
    known_commands, paths = commands(), dashboard_paths()
    for function, (command, path) in PARITY.items():
        if command is not None:
            assert command in known_commands, (function, command)
        if path is not None:
            assert path in paths, (function, path)
        if command is None or path is None:
            assert NOT_THERE.get(function), f"{function}: say why a face has no twin"
        else:
            assert function not in NOT_THERE, f"{function} has both faces now"


# --- recovery from the Maintenance page ---------------------------------------------------


def log_in(web: TestClient, login: str) -> None:
    """Log ``login`` in, in place of whoever the client was logged in as."""
    web.cookies.clear()
    assert first_log_in(web, login).status_code == 303


def flash_of(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<p class="flash ok">(.*?)</p>', page)]


def lease_run_out(dsn: str) -> uuid.UUID:
    """An agent's session whose agent died: its lease (one second) has run out."""
    with psycopg.connect(as_login(dsn, "dash_agent"), autocommit=True) as agent:
        sid = engine.begin_session(agent, None, "died", {}, timedelta(seconds=1))
        deadline = time.monotonic() + 10
        while agent.execute(
            "SELECT lease_expires_at > now() FROM undolog.sessions_list WHERE session_id = %s",
            (sid,),
        ).fetchone() != (False,):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    return sid


def test_an_operator_recovers_and_the_flash_names_the_walks_due(
    web: TestClient, conn: Conn, dsn: str
) -> None:
    sid = lease_run_out(dsn)
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert 'id="recovery-panel"' in page.text and 'id="recover-now"' in page.text
    answer = web.post("/maintenance/recover", data={"csrf": csrf_of(page.text)})
    assert answer.status_code == 303 and answer.headers["location"] == "/maintenance"
    assert session_state(conn, sid) == "failed"
    (error,) = conn.execute(
        "SELECT error FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone() or (None,)
    assert error == "lease expired"
    (said,) = flash_of(web.get("/maintenance").text)
    assert said == (
        "recover: run by dash_operator: 1 session(s) whose lease had expired now failed; 1 "
        f"session(s) whose undo walk must run (`undolog worker` walks them): {sid}"
    )
    # again: nothing failed now, the walk is still due (no worker ran it)
    web.post("/maintenance/recover", data={"csrf": csrf_of(page.text)})
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith("recover: run by dash_operator: 0 session(s) whose lease")
    assert said.endswith(str(sid))


def test_the_flash_counts_what_recover_failed_after_the_batches(
    web: TestClient, conn: Conn, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches fail the leases run out when they run; recover() then fails the ones
    that ran out since (or that a batch skipped, held a moment), and a worker may walk
    what the batches failed before recover() reads what is due: the flash counts every
    session failed now and does not say that no lease had expired when some were."""
    first = lease_run_out(dsn)
    later = engine.begin_session(conn, None, "dies-later", {}, timedelta(hours=1))
    batches = asaga.fail_expired_sessions

    async def then_a_lease_runs_out(*args: Any, **kwargs: Any) -> list[uuid.UUID]:
        failed = await batches(*args, **kwargs)
        conn.execute(  # its agent died just now: the batches were done before
            "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 s'"
            " WHERE session_id = %s",
            (later,),
        )
        return failed

    monkeypatch.setattr(asaga, "fail_expired_sessions", then_a_lease_runs_out)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    assert (session_state(conn, first), session_state(conn, later)) == ("failed", "failed")
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith(
        "recover: run by dash_operator: 2 session(s) whose lease had expired now failed; "
        "2 session(s) whose undo walk must run"
    ), said

    # a worker walks what the batches failed before recover() reads the due list
    dead = lease_run_out(dsn)

    async def then_a_worker_walks_it(*args: Any, **kwargs: Any) -> list[uuid.UUID]:
        failed = await batches(*args, **kwargs)
        for sid in (first, later, dead):  # nothing on their stacks: the walk ends them
            conn.execute(
                "SELECT * FROM undolog.claim_compensation(%s, interval '1 minute')", (sid,)
            )
        return failed

    monkeypatch.setattr(asaga, "fail_expired_sessions", then_a_worker_walks_it)
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    assert session_state(conn, dead) != "active"
    (said,) = flash_of(web.get("/maintenance").text)
    assert said == (
        "recover: run by dash_operator: 1 session(s) whose lease had expired now failed; "
        "no undo walk is due"
    ), said


def test_one_click_fails_a_passs_bound_and_says_more_remain(
    web: TestClient, conn: Conn, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a flood of short-lease sessions more leases run out than are failed: one
    click fails walk.EXPIRED_PER_PASS of them (the oldest first) and recover() one batch
    more, as a worker's pass, and says that more had expired; the next click goes on."""
    monkeypatch.setattr(walk, "EXPIRED_PER_PASS", 3)
    monkeypatch.setattr(asaga, "SWEEP_BATCH", 2)  # recover()'s one batch more
    with psycopg.connect(as_login(dsn, "dash_agent"), autocommit=True) as agent:
        dead = [engine.begin_session(agent, None, "died", {}) for _ in range(3 + 2 + 2)]
    conn.execute(  # their agents died, one after the other
        "UPDATE undolog.undolog_sessions AS s SET lease_expires_at = now() - interval '1 hour'"
        " + d.i * interval '1 s' FROM unnest(%s::uuid[]) WITH ORDINALITY AS d (id, i)"
        " WHERE s.session_id = d.id",
        (dead,),
    )
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    assert [session_state(conn, s) for s in dead] == ["failed"] * 5 + ["active"] * 2
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith(
        "recover: run by dash_operator: 5 session(s) whose lease had expired now failed; one"
        " run fails 3 at most (the oldest first, then one batch more), and more may have"
        " expired: the workers go on failing them, or run recovery again; 5 session(s)"
        " whose undo walk must run"
    ), said
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    assert {session_state(conn, s) for s in dead} == {"failed"}
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith(
        "recover: run by dash_operator: 2 session(s) whose lease had expired now failed; 7"
        " session(s) whose undo walk must run"
    ), said


def test_a_recovery_with_nothing_to_do_says_so(web: TestClient) -> None:
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    (said,) = flash_of(web.get("/maintenance").text)
    assert said == "recover: run by dash_operator: no lease had expired and no undo walk is due"


def test_only_an_operator_recovers_and_nothing_is_done(
    web: TestClient, conn: Conn, dsn: str
) -> None:
    sid = lease_run_out(dsn)
    log_in(web, "dash_approver")
    page = web.get("/maintenance")
    assert 'id="recovery-panel"' in page.text and 'id="recover-now"' not in page.text
    for login in ("dash_approver", "dash_agent"):
        log_in(web, login)
        token = csrf_of(web.get("/sessions").text)
        answer = web.post("/maintenance/recover", data={"csrf": token})
        assert answer.status_code == 403, login
        assert "only an operator runs recovery: nothing was done" in html.unescape(answer.text)
    log_in(web, "dash_operator")
    answer = web.post("/maintenance/recover", data={"csrf": "stale"})
    assert answer.status_code == 403 and "nothing was written" in answer.text
    web.cookies.clear()
    assert web.post("/maintenance/recover", data={"csrf": "x"}).status_code == 401
    assert session_state(conn, sid) == "active"


def test_the_engines_refusal_is_said_in_its_words(web: TestClient, conn: Conn, dsn: str) -> None:
    """An operator whom the database refuses all the same (the grant is gone): 42501, in
    PostgreSQL's words, and the session is left as it was."""
    sid = lease_run_out(dsn)
    conn.execute(
        "REVOKE EXECUTE ON FUNCTION undolog.fail_expired_sessions(integer) FROM undolog_operator"
    )
    log_in(web, "dash_operator")
    answer = web.post("/maintenance/recover", data={"csrf": csrf_of(web.get("/maintenance").text)})
    assert answer.status_code == 403
    assert "permission denied for function fail_expired_sessions" in answer.text
    assert session_state(conn, sid) == "active"
    # recover() refused after the batches: what they failed is said, and stays failed
    conn.execute(
        "GRANT EXECUTE ON FUNCTION undolog.fail_expired_sessions(integer) TO undolog_operator"
    )
    conn.execute("REVOKE EXECUTE ON FUNCTION undolog.recover(integer) FROM undolog_operator")
    answer = web.post("/maintenance/recover", data={"csrf": csrf_of(web.get("/maintenance").text)})
    assert answer.status_code == 403
    said = html.unescape(answer.text)
    assert "permission denied for function recover" in said
    assert "before it, 1 session(s) whose lease had expired were failed (they stay failed)" in said
    assert session_state(conn, sid) == "failed"


def test_a_fleets_expired_leases_are_failed_in_transactions_of_50(
    web: TestClient, conn: Conn
) -> None:
    """After a fleet of agents died, their sessions are failed 50 to a transaction
    (asaga.SWEEP_BATCH), each committed before the next, as `undolog recover` does: when
    one is refused, the page says how many were failed before it."""
    dead = expiry_support.lease_run_out(conn, 70)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    with expiry_support.failure_refused(conn, sorted(dead)[59]):
        refused = web.post("/maintenance/recover", data={"csrf": token})
    said = html.unescape(refused.text)
    assert "refused by the test" in said
    assert "(50 session(s) whose lease had expired were failed before it)" in said
    assert expiry_support.failed_per_transaction(conn, dead) == [50]
    assert web.post("/maintenance/recover", data={"csrf": token}).status_code == 303
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith(
        "recover: run by dash_operator: 20 session(s) whose lease had expired now failed; "
        "70 session(s) whose undo walk must run"
    )
    assert expiry_support.failed_per_transaction(conn, dead) == [50, 20]


@pytest.mark.parametrize("hostile", ['<script>alert("x")</script>'])
def test_an_agents_name_is_not_in_the_flash(web: TestClient, dsn: str, hostile: str) -> None:
    """The flash names sessions by their ids only: nothing an agent wrote reaches it."""
    with psycopg.connect(as_login(dsn, "dash_agent"), autocommit=True) as agent:
        engine.begin_session(agent, None, hostile, {"purpose": hostile}, timedelta(seconds=1))
    time.sleep(1.1)
    log_in(web, "dash_operator")
    web.post("/maintenance/recover", data={"csrf": csrf_of(web.get("/maintenance").text)})
    page = web.get("/maintenance").text
    assert hostile not in page and "alert" not in page


# --- dropping old months from the Maintenance page ----------------------------------------


def journal_tables(conn: Conn) -> tuple[list[str], list[str]]:
    """The journal's partitions (attached), and its plain tables left by a detach."""
    attached = partitions(conn)
    plain = [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_class AS c WHERE c.relnamespace = 'undolog'::regnamespace "
            "AND c.relkind = 'r' AND c.relname ~ '^undolog_effect_(log|history)_2024_01$' "
            "AND NOT c.relispartition ORDER BY 1"
        ).fetchall()
    ]
    return attached, plain


OLD = ["undolog_effect_history_2024_01", "undolog_effect_log_2024_01"]


def confirm_token(page: str) -> str:
    found = re.search(r'name="confirm" value="([^"]+)"', page)
    assert found is not None, "no confirmation on the page"
    return found[1]


def old_month(conn: Conn) -> None:
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")


def test_an_operator_drops_the_old_months_the_page_listed_first(
    web: TestClient, conn: Conn
) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert 'id="drop-form"' in page.text
    token = csrf_of(page.text)
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2025-01"})
    assert asked.status_code == 200
    assert 'id="drop-confirm"' in asked.text and "Yes, drop these 2 partitions" in asked.text
    assert asked.text.count('class="drop-row"') == 2
    for name in OLD:
        assert f'id="drop-{name}"' in asked.text
    assert journal_tables(conn)[0].count("undolog_effect_log_2024_01") == 1  # not yet
    done = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2025-01", "confirm": confirm_token(asked.text)},
    )
    assert done.status_code == 303 and done.headers["location"] == "/maintenance"
    attached, plain = journal_tables(conn)
    assert not set(OLD) & set(attached) and plain == []
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith("drop: dropped ") and said.endswith(" by dash_operator")
    assert all(name in said for name in OLD)
    # the same confirmation again: used up, nothing left to drop, nothing done
    again = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2025-01", "confirm": confirm_token(asked.text)},
    )
    assert again.status_code == 409 and 'id="drop-none"' in again.text


def test_detach_keeps_the_months_as_plain_tables(web: TestClient, conn: Conn) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    form = {"csrf": token, "before": "2025-01", "detach": "1"}
    asked = web.post("/maintenance/drop", data=form)
    assert "Yes, detach these 2 partitions" in asked.text and "plain tables" in asked.text
    done = web.post("/maintenance/drop", data={**form, "confirm": confirm_token(asked.text)})
    assert done.status_code == 303
    attached, plain = journal_tables(conn)
    assert not set(OLD) & set(attached) and plain == OLD
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith("drop: detached ")


def test_a_confirmation_is_for_its_months_and_options_only(web: TestClient, conn: Conn) -> None:
    """A confirmation given for a drop is no good for a forced one (nor for another
    month): the page asks again, and nothing is dropped."""
    old_month(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2025-01"})
    nonce = confirm_token(asked.text)
    forced = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2025-01", "force": "1", "confirm": nonce},
    )
    assert forced.status_code == 409 and 'id="drop-stale"' in forced.text
    assert 'id="drop-force-warning"' in forced.text
    made_up = web.post(
        "/maintenance/drop", data={"csrf": token, "before": "2025-01", "confirm": "made-up"}
    )
    assert made_up.status_code == 409 and 'id="drop-stale"' in made_up.text
    assert set(OLD) <= set(journal_tables(conn)[0])


@pytest.mark.parametrize(
    ("before", "said"),
    [
        ("2025-13", "a month as YYYY-MM"),
        ("<script>x</script>", "a month as YYYY-MM"),
        ("", "a month as YYYY-MM"),
        ("9999-12", "the current month, which is being written and is never dropped"),
    ],
)
def test_a_month_that_is_not_one_is_refused(
    web: TestClient, conn: Conn, before: str, said: str
) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    answer = web.post("/maintenance/drop", data={"csrf": token, "before": before})
    assert answer.status_code == 422
    assert said in html.unescape(answer.text) and "nothing was done" in answer.text
    assert "<script>x" not in answer.text
    assert set(OLD) <= set(journal_tables(conn)[0])


def test_only_an_operator_drops_months(web: TestClient, conn: Conn) -> None:
    old_month(conn)
    log_in(web, "dash_approver")
    assert 'id="drop-form"' not in web.get("/maintenance").text
    for login in ("dash_approver", "dash_agent"):
        log_in(web, login)
        token = csrf_of(web.get("/sessions").text)
        answer = web.post("/maintenance/drop", data={"csrf": token, "before": "2025-01"})
        assert answer.status_code == 403, login
        assert "only an operator drops months: nothing was done" in html.unescape(answer.text)
    log_in(web, "dash_operator")
    answer = web.post("/maintenance/drop", data={"csrf": "stale", "before": "2025-01"})
    assert answer.status_code == 403 and "nothing was written" in answer.text
    assert set(OLD) <= set(journal_tables(conn)[0])


def test_a_month_an_unfinished_session_holds_is_refused_in_the_engines_words(
    web: TestClient, conn: Conn
) -> None:
    """The engine refuses a month an unfinished session holds (UL016, the sessions
    named): said on the page, and nothing is dropped."""
    old_month(conn)
    session = engine.begin_session(conn, agent="old")
    # a call of the live session, journaled as if in January 2024 (as the engine's own
    # partition tests fill an old month)
    conn.execute(
        "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, "
        "call_signature, step_index, tool_name, tier, args, state) VALUES (gen_random_uuid(), "
        "%s, '2024-01-15Z', repeat('a', 64), 0, 'book', 'compensable', '{}', 'executing')",
        (session,),
    )
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2025-01"})
    done = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2025-01", "confirm": confirm_token(asked.text)},
    )
    # UL016's status, as docs/reference/errors.md gives it
    assert done.status_code == 500, done.status_code
    assert str(session) in done.text and "nothing was done" in done.text
    assert set(OLD) <= set(journal_tables(conn)[0])


# --- the sessions list's filters: the page's and `undolog sessions list`'s, one rule --------


def page_ids(web: TestClient, **filters: str) -> list[str]:
    answer = web.get("/sessions", params=filters)
    assert answer.status_code == 200, answer.text
    return re.findall(r'<tr class="session-row" data-session="([0-9a-f-]+)"', answer.text)


def command_ids(capsys: pytest.CaptureFixture[str], dsn: str, *flags: str) -> list[str]:
    assert main(["sessions", "list", "--json", "--dsn", dsn, *flags]) == 0
    return [r["session_id"] for r in json.loads(capsys.readouterr().out)]


def test_the_sessions_page_and_the_command_filter_alike(
    web: TestClient, conn: Conn, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    made = []
    for agent, tool in (("par-a", "book_room"), ("par-b", "send_mail"), ("par-a", None)):
        sid = engine.begin_session(conn, agent=agent)
        if tool:
            engine.intercept(conn, sid, 0, tool, "irreversible", {})
        made.append(str(sid))
    row = conn.execute(
        "SELECT created_at FROM undolog.sessions_list WHERE session_id = %s", (made[1],)
    ).fetchone()
    assert row is not None
    since = row[0].isoformat()
    log_in(web, "dash_operator")
    for page, flags in (
        ({"agent": "par-a"}, ("--agent", "par-a")),
        ({"q": "send_mail"}, ("--tool", "send_mail")),
        ({"q": made[1][:8]}, ("--id-prefix", made[1][:8])),
        ({"since": since}, ("--since", since)),
        ({"until": since, "agent": "par-a"}, ("--until", since, "--agent", "par-a")),
        (
            {"state": "awaiting_approval", "agent": "par-b"},
            ("--state", "awaiting_approval", "--agent", "par-b"),
        ),
        # spaces around a name are trimmed, by the page and the command alike
        ({"agent": "  par-a "}, ("--agent", "  par-a ")),
        ({"q": " send_mail  "}, ("--tool", " send_mail  ")),
    ):
        shown = page_ids(web, **page)
        assert shown == command_ids(capsys, dsn, *flags), (page, flags)
        assert shown, page  # each filter finds something
    assert page_ids(web, agent="par-a") == [made[2], made[0]]


# --- the Maintenance page: maintenance with the command's two options; the engine's version


def maintenance_flash(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<p class="flash ok">(.*?)</p>', page)]


def month_ahead(n: int) -> str:
    now = datetime.now(UTC)
    index = now.year * 12 + now.month - 1 + n
    return f"{index // 12}_{index % 12 + 1:02d}"


def test_maintenance_runs_with_the_months_ahead_and_retention_given(
    web: TestClient, conn: Conn
) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert 'id="run-months-ahead"' in page.text and 'id="run-retention-months"' in page.text
    token = csrf_of(page.text)
    answer = web.post(
        "/maintenance/run",
        data={"csrf": token, "months_ahead": "5", "retention_months": " 1200 "},
    )
    assert answer.status_code == 303
    attached = journal_tables(conn)[0]
    assert set(OLD) <= set(attached)  # kept: 1200 months of retention
    assert f"undolog_effect_log_{month_ahead(5)}" in attached
    assert f"undolog_effect_history_{month_ahead(5)}" in attached
    (said,) = maintenance_flash(web.get("/maintenance").text)
    assert said.startswith(
        "maintenance: run by dash_operator with 5 months ahead, keeping 1200 months: created "
    )
    # left empty: the defaults (three months ahead, the setting's 12 months)
    web.post("/maintenance/run", data={"csrf": token, "months_ahead": "", "retention_months": ""})
    (said,) = maintenance_flash(web.get("/maintenance").text)
    assert said.startswith("maintenance: run by dash_operator: dropped ")
    assert not set(OLD) & set(journal_tables(conn)[0])


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"months_ahead": "121"}, "months ahead: must be from 0 to 120, not 121"),
        ({"months_ahead": "-1"}, "months ahead: not a whole number in digits 0-9: '-1'"),
        ({"months_ahead": "three"}, "months ahead: not a whole number in digits 0-9: 'three'"),
        ({"retention_months": "0"}, "retention months: must be from 1 to 1200, not 0"),
        ({"retention_months": "1.5"}, "retention months: not a whole number in digits 0-9"),
        # what int() takes and a number of months is not: one rule, digits 0-9 alone
        ({"months_ahead": "\u0663"}, "months ahead: not a whole number in digits 0-9"),
        ({"months_ahead": "1_2"}, "months ahead: not a whole number in digits 0-9: '1_2'"),
        ({"months_ahead": "+3"}, "months ahead: not a whole number in digits 0-9: '+3'"),
        ({"months_ahead": "-0"}, "months ahead: not a whole number in digits 0-9: '-0'"),
        ({"retention_months": "\uff11\uff12"}, "retention months: not a whole number"),
        ({"retention_months": "0000000012"}, "retention months: not a whole number"),
        ({"months_ahead": "5", "retention_months": "<script>x</script>"}, "not a whole number"),
    ],
)
def test_maintenance_refuses_what_the_command_refuses_and_does_nothing(
    web: TestClient, conn: Conn, form: dict[str, str], said: str
) -> None:
    old_month(conn)
    before = journal_tables(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    answer = web.post("/maintenance/run", data={"csrf": token, **form})
    assert answer.status_code == 422
    text = html.unescape(answer.text)
    assert said in text and "nothing was done" in text
    assert "<script>x" not in answer.text
    assert journal_tables(conn) == before
    (anchors,) = conn.execute("SELECT count(*) FROM undolog.chain_anchors").fetchone() or (0,)
    assert anchors == 0  # no run: a run writes an anchor


def test_the_maintenance_page_says_which_engine_is_installed(
    web: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_in(web, "dash_approver")  # a read: staff see it
    page = web.get("/maintenance").text
    package = undolog._version.__version__
    assert f'<code id="engine-installed">undolog {package}</code>' in page  # migrate wrote it
    assert f'<code id="engine-package">undolog {package}</code>' in page
    assert 'id="engine-mismatch"' not in page
    # a newer package than the engine (engine_check.mismatch: "older")
    monkeypatch.setattr(undolog._version, "__version__", "999.0.0")
    page = web.get("/maintenance").text
    assert '<code id="engine-package">undolog 999.0.0</code>' in page
    assert 'id="engine-mismatch"' in page and "run <code>undolog migrate</code>" in page
    # an engine of a later minor release than the package: "newer"
    monkeypatch.setattr(undolog._version, "__version__", "0.0.1")
    assert engine_check.mismatch(package, "0.0.1") == "newer"
    page = web.get("/maintenance").text
    assert 'id="engine-mismatch"' in page and "upgrade the package" in page


def test_the_maintenance_page_warns_of_an_engine_without_a_version_function(
    web: TestClient, conn: Conn
) -> None:
    """An engine with no undolog.version() (older than that function, or incomplete):
    the page loads and says so (42883 read as engine_check reads it), no 500; the rest
    of the page, read on the same connection after the failed call, is there too."""
    conn.execute("ALTER FUNCTION undolog.version() RENAME TO version_gone")
    log_in(web, "dash_operator")
    got = web.get("/maintenance")
    assert got.status_code == 200, got.text
    assert 'id="engine-mismatch"' in got.text
    assert "has no <code>undolog.version()</code>" in got.text
    assert "none answers <code>undolog.version()</code>" in got.text
    assert 'id="engine-installed"' not in got.text
    assert web.get("/maintenance").status_code == 200  # the connection goes on


def plan_on_page(page: str) -> dict[str, list[str]]:
    """The Maintenance page's plan: the partitions each of its lines names."""
    found = {}
    for key, line_id in (
        ("to_drop", "plan-drop"),
        ("to_create", "plan-create"),
        ("pending", "plan-pending"),
        ("to_drain", "plan-drain"),
    ):
        line = re.search(rf'<li id="{line_id}">(.*?)</li>', page, re.S)
        assert line is not None, line_id
        found[key] = re.findall(r"<code>([a-z0-9_]+)</code>", line[1])
    return found


def test_the_pages_plan_is_the_commands_with_more_partitions_than_it_lists(
    web: TestClient, conn: Conn, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With more partitions than the page lists (120 months ahead, and an old month past
    retention), its plan is still made from all of them: the old months to drop (the
    oldest, which the list leaves off), nothing to create, as `undolog partitions plan`
    says."""
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")
    conn.execute("SELECT * FROM undolog.ensure_partitions(120)")
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert page.status_code == 200 and 'id="partitions-more"' in page.text  # the list is cut
    assert main(["partitions", "plan", "--json", "--dsn", dsn]) == 0
    command = json.loads(capsys.readouterr().out)
    assert sorted(command["to_drop"]) == [
        "undolog_effect_history_2024_01",
        "undolog_effect_log_2024_01",
    ]
    assert command["to_create"] == []
    shown = plan_on_page(page.text)
    assert shown == {k: command[k] for k in shown}


@pytest.mark.parametrize("limit", ["3000000000", "10001", "0", "-1", "ten"])
def test_sessions_list_refuses_a_limit_out_of_bounds_as_a_usage_error(
    dsn: str, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    """--limit is from 1 to 10,000: more was "integer out of range" from the query's
    ::int (a database error), now a usage error before any connection."""
    assert main(["sessions", "list", "--limit", limit, "--dsn", dsn]) == 2
    err = capsys.readouterr().err
    assert "--limit" in err and "integer out of range" not in err
    assert main(["sessions", "list", "--limit", "10000", "--json", "--dsn", dsn]) == 0


def test_the_usage_says_partitions_list_takes_no_flags() -> None:
    import undolog.cli

    doc = undolog.cli.__doc__ or ""
    assert "partitions list | plan" not in doc
    assert "undolog partitions plan [--months-ahead N] [--retention-months N]" in doc
    assert main(["partitions", "list", "--months-ahead", "3"]) == 2  # as the usage says


def test_maintenance_shows_the_worker_lag_and_the_halted_sessions_as_health_does(
    web: TestClient, conn: Conn, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`undolog health`'s worker and operator lines on Maintenance's Recovery panel, from
    the same queries: how many sessions are due for an undo walk and how long the oldest
    has waited for a worker, and how many halted sessions wait for an operator (a link
    to them). The page showed neither: a worker that stopped was seen nowhere there."""
    from dashboard_helpers import halted_session

    log_in(web, "dash_approver")
    page = html.unescape(web.get("/maintenance").text)
    assert "no session waits for an undo walk" in page
    assert "no halted session waits for an operator" in page
    halted = halted_session(dsn)
    lease_run_out(dsn)
    conn.execute("SELECT undolog.recover(50)")  # failed: due for a walk nobody runs
    assert main(["health", "--json", "--dsn", dsn]) in (0, 1)
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    due = checks["worker"]["due_sessions"]
    assert due >= 1 and checks["operator"]["halted_sessions"] == 1
    page = html.unescape(web.get("/maintenance").text)
    assert f"{due} sessions due for an undo walk, the oldest waiting" in page, page
    assert "1 halted sessions wait for an operator" in page
    assert 'href="/sessions?state=halted"' in page
    assert session_state(conn, halted) == "halted"


def _health_checks(dsn: str, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[bool, str]]:
    """`undolog health --json`'s locks and schemas checks: ok and detail."""
    main(["health", "--json", "--dsn", dsn])
    checks = json.loads(capsys.readouterr().out)["checks"]
    return {c["name"]: (c["ok"], c["detail"]) for c in checks if c["name"] in HEALTH_SHOWN}


HEALTH_SHOWN = ("locks", "schemas", "logins")


def _page_checks(web: TestClient) -> dict[str, tuple[bool, str]]:
    page = web.get("/maintenance")
    assert page.status_code == 200
    found = re.findall(
        r'<li id="health-(\w+)"(?: class="error")?><strong>(ok|FAIL)</strong>'
        r" <code>\w+</code>: (.*?)</li>",
        page.text,
    )
    return {name: (mark == "ok", html.unescape(detail)) for name, mark, detail in found}


def test_maintenance_shows_the_security_checks_as_health_does(
    web: TestClient, conn: Conn, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`undolog health`'s locks (advisory-lock functions still open to PUBLIC), schemas
    (agent logins that may create objects where other logins' names resolve) and logins
    (an agent's login and a person's that may become one another) checks on
    Maintenance, from the same queries and the same judgement (undolog.health): the page
    says what `undolog health --json` says for the same database, to an approver and to
    an operator, when both pass and when each fails (what to do, and who does it). The
    page showed neither: only the command said that an agent could plant a function on
    every other login's search path."""
    from shadowing import writable_public

    def same(expected_ok: dict[str, bool]) -> None:
        cli = _health_checks(dsn, capsys)
        assert {name: ok for name, (ok, _) in cli.items()} == expected_ok, cli
        for login in ("dash_approver", "dash_operator"):
            log_in(web, login)
            assert _page_checks(web) == cli, login

    same({"locks": True, "schemas": True, "logins": True})
    conn.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint) TO PUBLIC")
    try:
        same({"locks": False, "schemas": True, "logins": True})
    finally:
        conn.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint) FROM PUBLIC")
    with writable_public(conn):
        same({"locks": True, "schemas": False, "logins": True})
        page = html.unescape(web.get("/maintenance").text)
        assert "the owner must revoke that privilege" in page
        assert "docs/how-to/roles.md" in page
    conn.execute("GRANT dash_agent TO dash_approver")
    try:
        same({"locks": True, "schemas": True, "logins": False})
        assert "dash_agent and dash_approver may become one another" in html.unescape(
            web.get("/maintenance").text
        )
    finally:
        conn.execute("REVOKE dash_agent FROM dash_approver")
    same({"locks": True, "schemas": True, "logins": True})
