"""The dashboard's HTTP layer (Starlette's TestClient) on a real PostgreSQL, with real
logins: each person logs in with their own login and password, and the engine's roles
and row-level security decide what they see and may do."""

from __future__ import annotations

import contextlib
import hmac
import html
import re
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from dashboard_helpers import (
    PASSWORD,
    active_session,
    as_login,
    confirm_form,
    csrf_of,
    halted_session,
    operator_actions,
    reject_one,
    session_state,
    waiting_session,
    without_user,
)
from undolog.dashboard import create_app

Conn = psycopg.Connection[Any]


@pytest.fixture
def app_dsn(dsn: str) -> str:
    return without_user(dsn)


def log_in(client: TestClient, login: str, password: str = PASSWORD) -> Any:
    page = client.get("/login")
    return client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": password}
    )


def client_as(dsn: str, login: str) -> TestClient:
    client = TestClient(create_app(without_user(dsn)), follow_redirects=False)
    client.__enter__()
    assert log_in(client, login).status_code == 303
    return client


def approval_row(conn: Conn, approval_id: uuid.UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state, decided_by, decided_role, reason FROM undolog.undolog_approval_requests "
        "WHERE approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_login_ok_shows_who_and_sets_a_safe_cookie(web: TestClient) -> None:
    response = log_in(web, "dash_approver")
    assert response.status_code == 303
    cookie = response.headers["set-cookie"]
    assert "undolog_session=" in cookie
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert PASSWORD not in cookie
    page = web.get("/approvals")
    assert page.status_code == 200 and "dash_approver" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


def test_login_refused(web: TestClient, passwords_checked: bool) -> None:
    unknown = log_in(web, "no_such_login_here")
    assert unknown.status_code == 401 and "login refused" in unknown.text
    nobody = log_in(web, "dash_nobody")
    assert nobody.status_code == 401 and "holds none of the roles" in nobody.text
    if not passwords_checked:  # pragma: no cover - only on a cluster we may not configure
        pytest.skip("pg_hba.conf is not writable here: this cluster trusts every login")
    wrong = log_in(web, "dash_approver", "not-the-password")
    assert wrong.status_code == 401 and "wrong login or password" in wrong.text
    assert "undolog_session=" not in wrong.headers.get("set-cookie", "")


def test_login_when_the_database_is_unreachable_says_so(passwords_checked: bool) -> None:
    from pgcluster import free_port

    dead = f"host=127.0.0.1 port={free_port()} dbname=nothing connect_timeout=2"
    with TestClient(create_app(dead), follow_redirects=False) as client:
        response = log_in(client, "dash_approver")
    assert response.status_code == 401
    assert "cannot be reached" in response.text and PASSWORD not in response.text


def test_login_form_needs_its_csrf_token(web: TestClient) -> None:
    web.get("/login")
    response = web.post(
        "/login", data={"csrf": "forged", "login": "dash_approver", "password": PASSWORD}
    )
    assert response.status_code == 403
    assert web.get("/approvals").status_code == 303  # not logged in


def test_a_post_without_the_csrf_token_writes_nothing(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    for token in (None, "stale-token"):
        data = {"approve_one": str(waiting.approval_id)}
        if token:
            data["csrf"] = token
        response = web.post("/approvals/decide", data=data)
        assert response.status_code == 403 and "nothing was written" in response.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"


def test_a_logged_out_post_writes_nothing(web: TestClient, app_dsn: str, conn: Conn) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    web.post("/logout", data={"csrf": token})
    response = web.post(
        "/approvals/decide", data={"csrf": token, "approve_one": str(waiting.approval_id)}
    )
    assert response.status_code == 401 and "not logged in" in response.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    assert web.get("/sessions").status_code == 303


def test_approve_records_the_login_and_a_second_click_says_who_decided(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(app_dsn, note="please")
    first, second = client_as(app_dsn, "dash_approver"), client_as(app_dsn, "dash_approver2")
    try:
        inbox = first.get("/approvals")
        assert str(waiting.approval_id) in inbox.text and "pay" in inbox.text
        assert "book" in inbox.text  # what the session did before this call
        stale = csrf_of(second.get("/approvals").text)  # the second approver's page, open
        asked = first.post(
            "/approvals/decide",
            data={"csrf": csrf_of(inbox.text), "approve_one": str(waiting.approval_id)},
        )
        assert asked.status_code == 200 and "Yes, approve" in asked.text
        assert approval_row(conn, waiting.approval_id)[0] == "pending"  # not by one click
        done = first.post("/approvals/decide", data=confirm_form(asked.text))
        assert done.status_code == 303
        assert "approved by dash_approver" in first.get("/approvals").text  # the flash
        assert str(waiting.approval_id) not in first.get("/approvals").text
        # the second approver's click: the request is no longer pending, so no question
        late = second.post(
            "/approvals/decide", data={"csrf": stale, "approve_one": str(waiting.approval_id)}
        )
        assert late.status_code == 409
        assert "already decided" in late.text and "by dash_approver" in late.text
        # the engine's hint names a CLI command; the page says where that is here
        assert "In the dashboard: the session&#39;s page." in late.text
    finally:
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)
    assert approval_row(conn, waiting.approval_id) == (
        "approved",
        "dash_approver",
        "dash_approver",
        None,
    )


def test_reject_needs_a_reason_within_the_engines_limit(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    aid = str(waiting.approval_id)
    blank = web.post("/approvals/decide", data={"csrf": token, "reject_one": aid})
    assert blank.status_code == 422 and "needs a reason" in blank.text
    huge = web.post(
        "/approvals/decide",
        data={"csrf": token, "reject_one": aid, f"reason_{aid}": "x" * 8193},
    )
    assert huge.status_code == 422 and "over the limit of 8192" in huge.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    done = web.post(
        "/approvals/decide",
        data={"csrf": token, "reject_one": aid, f"reason_{aid}": "amount <b>too</b> high"},
    )
    assert done.status_code == 303
    assert approval_row(conn, waiting.approval_id) == (
        "rejected",
        "dash_approver",
        "dash_approver",
        "amount <b>too</b> high",
    )
    page = web.get(f"/sessions/{waiting.session_id}")
    assert (
        "amount &lt;b&gt;too&lt;/b&gt; high" in page.text
        and "by <strong>dash_approver" in page.text
    )
    assert f'value="{aid}"' not in page.text  # decided: no button left


def test_bulk_decisions_report_each_item(web: TestClient, app_dsn: str, conn: Conn) -> None:
    a, b = waiting_session(app_dsn), waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    done = web.post(
        "/approvals/decide",
        data={
            "csrf": token,
            "action": "reject",
            "reason": "batch",
            "ids": [str(a.approval_id), str(b.approval_id)],
        },
    )
    assert done.status_code == 303
    assert [approval_row(conn, w.approval_id)[0] for w in (a, b)] == ["rejected", "rejected"]
    c = waiting_session(app_dsn)
    asked = web.post(
        "/approvals/decide",
        data={"csrf": token, "action": "approve", "ids": [str(c.approval_id), str(a.approval_id)]},
    )
    # only c is still pending: the confirmation restates it alone, a is left to the engine
    assert asked.status_code == 200 and f"confirm-{c.approval_id}" in asked.text
    assert f"confirm-{a.approval_id}" not in asked.text
    assert approval_row(conn, c.approval_id)[0] == "pending"
    mixed = web.post("/approvals/decide", data=confirm_form(asked.text))
    assert mixed.status_code == 409  # a was decided already; c is approved all the same
    assert "approved by dash_approver" in mixed.text and "already decided" in mixed.text
    assert approval_row(conn, c.approval_id)[0] == "approved"


def test_approving_ones_own_call_is_refused(web: TestClient, app_dsn: str, conn: Conn) -> None:
    waiting = waiting_session(app_dsn, login="dash_both")
    log_in(web, "dash_both")
    token = csrf_of(web.get("/approvals").text)
    response = web.post(
        "/approvals/decide", data={"csrf": token, "approve_one": str(waiting.approval_id)}
    )
    assert response.status_code == 403
    assert "cannot approve its own call" in response.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"


def test_an_expired_request_cannot_be_approved(web: TestClient, app_dsn: str, conn: Conn) -> None:
    dbname = conn.info.dbname
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET undolog.approval_timeout = '300 milliseconds'")
    waiting = waiting_session(app_dsn)
    time.sleep(0.4)
    log_in(web, "dash_approver")
    inbox = web.get("/approvals")
    assert "Close (expired)" in inbox.text
    assert f'id="approve-{waiting.approval_id}"' not in inbox.text
    response = web.post(
        "/approvals/decide",
        data={"csrf": csrf_of(inbox.text), "approve_one": str(waiting.approval_id)},
    )
    assert response.status_code == 409 and "can no longer be approved" in response.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"


def test_unknown_and_malformed_ids_are_404(web: TestClient, app_dsn: str) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    for path in (
        "/sessions/not-a-uuid",
        f"/sessions/{uuid.uuid4()}",
        f"/sessions/{waiting.session_id}/calls/{uuid.uuid4()}/args",
        f"/sessions/{waiting.session_id}/calls/nonsense/args",
        "/no/such/page",
    ):
        response = web.get(path)
        assert response.status_code == 404, path
        assert "Not found" in response.text
    token = csrf_of(web.get("/approvals").text)
    for bad in ("123", str(uuid.uuid4())):
        response = web.post("/approvals/decide", data={"csrf": token, "approve_one": bad})
        assert response.status_code == 404, bad
    response = web.post(f"/sessions/{uuid.uuid4()}/rollback", data={"csrf": token, "reason": "x"})
    assert response.status_code == 404


def test_agent_sees_only_its_own_sessions_and_no_decision_buttons(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    own = waiting_session(app_dsn, login="dash_agent")
    other = waiting_session(app_dsn, login="dash_agent2")
    log_in(web, "dash_agent")
    listing = web.get("/sessions")
    assert str(own.session_id) in listing.text and str(other.session_id) not in listing.text
    assert web.get(f"/sessions/{other.session_id}").status_code == 404
    page = web.get(f"/sessions/{own.session_id}")
    assert page.status_code == 200
    for control in ("approve_one", "reject_one", "/rollback", "/resume", "/abandon"):
        assert control not in page.text
    assert web.get("/approvals").status_code == 403
    token = csrf_of(page.text)
    refused = web.post(f"/sessions/{own.session_id}/rollback", data={"csrf": token, "reason": "x"})
    assert refused.status_code == 403 and "only an operator or an approver" in refused.text
    decided = web.post(
        "/approvals/decide", data={"csrf": token, "approve_one": str(own.approval_id)}
    )
    assert decided.status_code == 403
    assert approval_row(conn, own.approval_id)[0] == "pending"


def test_operator_retries_resumes_abandons_and_rolls_back(
    web: TestClient, app_dsn: str, dsn: str, conn: Conn
) -> None:
    halted = halted_session(dsn)
    live = active_session(app_dsn)
    log_in(web, "dash_operator")
    page = web.get(f"/sessions/{halted}")
    assert "Halted: a human decides" in page.text and "booking API down" in page.text
    token = csrf_of(page.text)
    undo_id = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s", (halted,)
    ).fetchone()
    assert undo_id is not None
    no_reason = web.post(f"/sessions/{halted}/abandon", data={"csrf": token, "reason": " "})
    assert no_reason.status_code == 422
    retried = web.post(
        f"/sessions/{halted}/retry",
        data={"csrf": token, "undo_id": str(undo_id[0]), "reason": "API is back"},
    )
    assert retried.status_code == 303
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (halted,)
    ).fetchone()
    assert state == ("compensating",)
    twice = web.post(f"/sessions/{halted}/resume", data={"csrf": token, "reason": "again"})
    assert twice.status_code == 409  # compensating again: nothing to resume

    rolled = web.post(f"/sessions/{live}/rollback", data={"csrf": token, "reason": "stop it"})
    assert rolled.status_code == 303
    page = web.get(f"/sessions/{live}")
    assert "rollback</strong> by <strong>dash_operator" in page.text
    assert conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (live,)
    ).fetchone() == ("failed",)
    assert 'id="rollback"' not in page.text  # failed: nothing left to roll back
    again = web.post(f"/sessions/{live}/rollback", data={"csrf": token, "reason": "again"})
    assert again.status_code == 409 and "only an active or waiting session" in again.text
    # the engine's hint in commands, and where they are here
    assert "undolog sessions resume, retry or abandon" in again.text
    assert "In the dashboard: the session&#39;s page." in again.text


def test_operator_abandons_a_halted_session(web: TestClient, dsn: str, conn: Conn) -> None:
    halted = halted_session(dsn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{halted}").text)
    done = web.post(
        f"/sessions/{halted}/abandon", data={"csrf": token, "reason": "refunded by hand"}
    )
    assert done.status_code == 303
    page = web.get(f"/sessions/{halted}")
    assert "Abandoned by <strong>dash_operator" in page.text and 'id="abandon"' not in page.text
    row = conn.execute(
        "SELECT resolved_by, resolution FROM undolog.undolog_sessions WHERE session_id = %s",
        (halted,),
    ).fetchone()
    assert row == ("dash_operator", "refunded by hand")


def test_a_session_action_beyond_the_role_says_who_may_and_writes_nothing(
    web: TestClient, app_dsn: str, dsn: str, conn: Conn
) -> None:
    """The page shows an approver no Resume, Retry or Abandon, and an agent no Roll back;
    a post all the same (a page read before the role changed, a script) is refused as
    every other action of the dashboard refuses it: who may, and that nothing was done.
    It was PostgreSQL's bare "permission denied for function resume_session", which says
    nothing of what to do (the parity audit)."""
    halted = halted_session(dsn)
    undo_id = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s", (halted,)
    ).fetchone()
    assert undo_id is not None
    log_in(web, "dash_approver")
    token = csrf_of(web.get(f"/sessions/{halted}").text)
    for action in ("resume", "retry", "abandon"):
        answer = web.post(
            f"/sessions/{halted}/{action}",
            data={"csrf": token, "reason": "r", "undo_id": str(undo_id[0])},
        )
        assert answer.status_code == 403, action
        said = html.unescape(answer.text)
        assert (
            "only an operator resumes, retries or abandons a halted session: nothing was done"
            in said
        ), action
    assert session_state(conn, halted) == "halted"
    assert operator_actions(conn, halted) == []
    own = waiting_session(app_dsn, login="dash_agent")
    web.cookies.clear()
    log_in(web, "dash_agent")
    token = csrf_of(web.get(f"/sessions/{own.session_id}").text)
    answer = web.post(f"/sessions/{own.session_id}/rollback", data={"csrf": token, "reason": "x"})
    assert answer.status_code == 403
    assert "only an operator or an approver rolls back a session: nothing was done" in (
        html.unescape(answer.text)
    )
    assert session_state(conn, own.session_id) == "awaiting_approval"


def test_not_found_says_where_the_ids_are_listed(web: TestClient, dsn: str) -> None:
    """An id (or a channel's name) that names nothing the person may see is 404, and says
    where the ones they may see are listed, as the command's hint does (`undolog sessions
    list`, ...): "No session with that id that you may see." said nothing to do next."""
    halted = halted_session(dsn)
    unknown = uuid.uuid4()
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    answers = {
        "Sessions lists the sessions you may see": web.get(f"/sessions/{unknown}"),
        "Tools lists the registrations": web.post(
            "/tools/retire", data={"csrf": token, "tool_id": str(unknown), "reason": "r"}
        ),
        "Notifications lists the channels": web.post(
            "/notifications/remove", data={"csrf": token, "name": "no-such-channel"}
        ),
        "The session's page lists them: read it again": web.post(
            f"/sessions/{halted}/retry",
            data={"csrf": token, "undo_id": str(unknown), "reason": "r"},
        ),
    }
    for where, answer in answers.items():
        assert answer.status_code == 404, where
        assert where in html.unescape(answer.text), (where, answer.text)
    channel = html.unescape(answers["Notifications lists the channels"].text)
    assert "No live notification channel with that name that you may see." in channel


def test_hostile_content_is_escaped_and_huge_args_are_cut(web: TestClient, app_dsn: str) -> None:
    hostile = "<script>alert('x')</script>" + "A" * 5000
    waiting = waiting_session(app_dsn, note=hostile)
    log_in(web, "dash_approver")
    for page in (web.get("/approvals"), web.get(f"/sessions/{waiting.session_id}")):
        assert "<script>alert" not in page.text
        assert "&lt;script&gt;alert" in page.text
        assert "See it whole" in page.text
        assert "A" * 5000 not in page.text
    effect = web.get(f"/sessions/{waiting.session_id}").text
    link = effect.split('class="see-whole"')[0].rsplit('href="', 1)[1].split('"')[0]
    whole = web.get(link)
    assert whole.status_code == 200 and "A" * 5000 in whole.text
    assert "<script>alert" not in whole.text


def test_sessions_counts_stop_at_the_cap_and_say_so(
    web: TestClient, app_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each state is counted up to queries.COUNT_CAP sessions and no further (a count of a
    million completed sessions read every one at each load of the page): past it the
    page says "N+", and a state under it is counted exactly. Failed before the cap: the
    55 active sessions were counted whole."""
    from undolog.dashboard import queries as dashboard_queries

    monkeypatch.setattr(dashboard_queries, "COUNT_CAP", 50, raising=False)
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as agent:
        for i in range(55):
            agent.execute("SELECT undolog.begin_session(NULL, %s)", (f"bulk-{i % 2}",))
    waiting_session(app_dsn)
    log_in(web, "dash_operator")
    counts = web.get("/sessions/counts").text
    assert 'id="count-active" title="more than 50:' in counts, counts
    assert ">50+<" in counts and ">55<" not in counts
    assert 'id="count-awaiting_approval">1<' in counts


def test_sessions_list_filters_counts_and_keyset_pages(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as agent:
        for i in range(55):
            agent.execute("SELECT undolog.begin_session(NULL, %s)", (f"bulk-{i % 2}",))
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_operator")
    first = web.get("/sessions")
    assert first.status_code == 200 and 'id="next-page"' in first.text
    assert first.text.count('class="session-row"') == 50
    counts = web.get("/sessions/counts").text
    assert 'id="count-active">55<' in counts and 'id="count-awaiting_approval">1<' in counts
    href = first.text.split('id="next-page" href="')[1].split('"')[0].replace("&amp;", "&")
    second = web.get(href)
    assert second.text.count('class="session-row"') == 6 and 'id="next-page"' not in second.text
    rows1 = {r.split('"')[0] for r in first.text.split('data-session="')[1:]}
    rows2 = {r.split('"')[0] for r in second.text.split('data-session="')[1:]}
    assert not rows1 & rows2 and len(rows1 | rows2) == 56
    by_state = web.get("/sessions?state=awaiting_approval")
    assert by_state.text.count('class="session-row"') == 1
    by_tool = web.get("/sessions?q=pay")
    assert (
        str(waiting.session_id) in by_tool.text and by_tool.text.count('class="session-row"') == 1
    )
    by_prefix = web.get(f"/sessions?q={str(waiting.session_id)[:8]}")
    assert str(waiting.session_id) in by_prefix.text
    assert web.get("/sessions?agent=bulk-1").text.count('class="session-row"') == 27
    assert web.get("/sessions?since=2999-01-01").text.count('class="session-row"') == 0
    assert web.get("/sessions?state=bogus").status_code == 422
    assert web.get("/sessions?after=garbage").status_code == 422


def test_an_idle_web_session_ends(app_dsn: str, passwords_checked: bool) -> None:
    with TestClient(create_app(app_dsn, idle_timeout=0.3), follow_redirects=False) as client:
        assert log_in(client, "dash_approver").status_code == 303
        assert client.get("/approvals").status_code == 200
        time.sleep(0.5)
        assert client.get("/approvals").status_code == 303  # to the login page


def test_behind_tls_the_cookie_is_secure(app_dsn: str, passwords_checked: bool) -> None:
    with TestClient(
        create_app(app_dsn), base_url="https://dash.example", follow_redirects=False
    ) as client:
        response = log_in(client, "dash_approver")
        assert response.status_code == 303
        assert "secure" in response.headers["set-cookie"].lower()


def test_events_need_a_login_and_a_known_view(web: TestClient) -> None:
    assert web.get("/events?view=inbox").status_code == 401
    log_in(web, "dash_agent")
    assert web.get("/events?view=inbox").status_code == 404  # agents have no inbox
    assert web.get("/events?view=session&id=nonsense").status_code == 404
    assert web.get("/events?view=other").status_code == 404


def test_the_cli_serves_the_dashboard_only_with_its_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from undolog import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["dashboard", "--help"])
    assert done.value.code == 0
    assert "--port" in capsys.readouterr().out
    # Without the extra the import fails: a clear message naming it, exit 2, no traceback.
    monkeypatch.setitem(sys.modules, "undolog.dashboard.server", None)
    assert cli.main(["dashboard", "--port", "1"]) == 2
    assert "pip install 'undolog[dashboard]'" in capsys.readouterr().err


def test_the_cli_refuses_the_demo_on_a_database_it_did_not_make(
    dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from undolog import cli

    monkeypatch.delenv("UNDOLOG_THROWAWAY_DSN", raising=False)
    assert cli.main(["dashboard", "--demo", "--port", "1", "--dsn", dsn]) == 2
    err = capsys.readouterr().err
    assert "--demo refused" in err and "--i-know-this-creates-demo-logins" in err


def test_the_demo_fills_the_dashboard(dsn: str, conn: Conn, passwords_checked: bool) -> None:
    """`make dashboard-demo`: the demo's logins log in with their password, and only with
    it. Its throwaway cluster (tools/pgcluster.py, as this test's) trusts local logins but
    asks the demo's for their password; the dashboard lets in no login the server did not
    ask for its password."""
    import pgcluster
    from undolog.demos.dashboard import DEMO_PASSWORD, PASSWORD_LOGINS, fill

    assert PASSWORD_LOGINS == pgcluster.PASSWORD_LOGINS
    rules = conn.execute(
        "SELECT count(*) FROM pg_hba_file_rules WHERE %s = ANY (user_name)",
        (f"+{PASSWORD_LOGINS}",),
    ).fetchone()
    if rules == (0,):  # pragma: no cover - a server of yours (--postgresql-port)
        pytest.skip("not a cluster tools/pgcluster.py made: the demo's logins are trusted")
    fill(dsn)
    with TestClient(create_app(without_user(dsn)), follow_redirects=False) as client:
        for login in ("demo_approver", "demo_operator", "demo_agent"):
            assert log_in(client, login, "not-demo").status_code == 401, login
        assert log_in(client, "demo_approver", DEMO_PASSWORD).status_code == 303
        inbox = client.get("/approvals").text
        assert "wire_transfer" in inbox and "&lt;script&gt;alert(" in inbox
        listing = client.get("/sessions").text
        for state in ("halted", "active", "awaiting_approval", "compensated", "completed"):
            assert f"state-{state}" in listing


def test_leaving_a_live_page_midway_keeps_the_persons_connection(
    app_dsn: str, passwords_checked: bool
) -> None:
    """A browser that leaves while its event stream is reading cancels the stream; the
    read must still finish, or psycopg closes the person's connection (logging them out)."""
    import asyncio

    from undolog.dashboard.app import Dashboard
    from undolog.dashboard.websessions import SessionStore

    async def scenario() -> None:
        store = SessionStore(app_dsn, idle_timeout=60)
        ws = await store.login("dash_approver", PASSWORD)
        try:

            async def slow(conn: Any) -> str:
                await conn.execute("SELECT pg_sleep(0.3)")
                return "read"

            reading = asyncio.ensure_future(Dashboard._shielded(ws, slow))
            await asyncio.sleep(0.05)
            reading.cancel()  # as Starlette's task group does, twice while it unwinds
            await asyncio.sleep(0)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            async with ws.db() as conn:  # waits for the read to finish, then works
                row = await (await conn.execute("SELECT session_user")).fetchone()
            assert row == ("dash_approver",)
            assert store.get(ws.sid) is ws
        finally:
            await store.close_all()

    asyncio.run(scenario())


def test_a_web_session_ends_after_the_read_on_its_connection_not_under_it(
    app_dsn: str, passwords_checked: bool
) -> None:
    """A newer login replacing a web session (a logout in another tab, the idle reaper)
    closed its connection while the person's live page was reading on it (twice a
    second). The read's task still waited on the closed socket's number, which the next
    connection opened reuses: that one failed ("connection socket closed": the newer
    login was told "the database cannot be reached right now"); psycopg's C code went on
    with the freed libpq handle when the read woke (a segfault of the dashboard, once);
    and the page was told its database connection was lost, not that it was logged out.
    Now the read is cancelled, the connection closed once the read has ended, and the
    page told it was logged out."""
    import asyncio

    from undolog.dashboard.app import Dashboard

    async def scenario() -> None:
        dashboard = Dashboard(app_dsn)
        ws = await dashboard.store.login("dash_approver", PASSWORD)
        try:

            async def slow(conn: Any) -> str:
                await conn.execute("SELECT pg_sleep(30)")
                return "read"

            wake = asyncio.Event()
            ws.waiters.add(wake)
            stream = dashboard._stream(ws, slow, "", wake)
            assert await anext(stream) == "retry: 1000\n\n"
            told = asyncio.ensure_future(anext(stream))
            while not ws.lock.locked():  # the read has the connection
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # its query sent, its task waiting for the server
            started = time.monotonic()
            await dashboard.store.logout(ws)
            await asyncio.gather(*dashboard.store.closing)  # it closes in the background
            read_left = ws.lock.locked()
            newer = await dashboard.store.login("dash_approver", PASSWORD)  # opens two
            assert not read_left, "closed under the read"
            assert ws.conn.closed and ws.listener.closed and not newer.conn.closed
            assert await told == "event: logout\ndata: ended\n\n"
            assert time.monotonic() - started < 5  # the read cancelled, not waited for
        finally:
            await dashboard.store.close_all()

    asyncio.run(scenario())


def test_a_web_sessions_repr_names_no_connection_and_no_secret() -> None:
    """A WebSession's repr (a log line, a test's failure report) asks libpq nothing: a
    failure report is written by another thread than the one serving the dashboard,
    which may be using the connection at that moment. Nor does it show the cookie's id
    or the tokens."""
    from typing import cast

    from undolog.dashboard.websessions import Roles, WebSession

    class Unasked:
        def __repr__(self) -> str:
            raise AssertionError("the connection's repr was asked for")

    ws = WebSession(
        sid="the-cookie-id",
        login="dash_approver",
        roles=Roles(agent=False, approver=True, operator=False),
        conn=cast(Any, Unasked()),
        listener=cast(Any, Unasked()),
    )
    ws.confirms["a-nonce"] = (frozenset(), 0.0)
    shown = repr(ws)
    assert "dash_approver" in shown
    assert not {"the-cookie-id", ws.csrf, "a-nonce"} & set(re.findall(r"[\w-]+", shown))


def test_demo_refuses_a_database_it_did_not_make(dsn: str, conn: Conn) -> None:
    """--demo creates password logins (password 'demo'): on a database that is not the
    throwaway one its own run made it refuses, says why and how, and writes nothing."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "UNDOLOG_THROWAWAY_DSN"}
    done = subprocess.run(
        [sys.executable, "-m", "undolog.dashboard", "--demo", "--dsn", dsn, "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--demo refused" in done.stderr
    assert "--i-know-this-creates-demo-logins" in done.stderr
    assert conn.execute("SELECT count(*) FROM undolog.undolog_sessions").fetchone() == (0,)


# --- what an approver reads before deciding, and how they decide -------------------------


HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(2)>"
REASON = 'checked the "invoice" <b>& the IBAN</b>'


def assert_escaped(page: str) -> None:
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert" in page


def test_the_inbox_shows_the_login_beside_the_agents_claimed_name(
    web: TestClient, app_dsn: str
) -> None:
    # an agent login that calls itself by an approver's name, to look like a person
    waiting = waiting_session(app_dsn, login="dash_agent", agent="dash_approver2 (finance)")
    log_in(web, "dash_approver")
    inbox = web.get("/approvals").text
    row = inbox.split(f'id="req-{waiting.approval_id}"')[1].split("</tr>")[0]
    assert 'login <strong class="login">dash_agent</strong>' in row
    assert "calls itself" in row and "dash_approver2 (finance)" in row
    assert "(the agent's claim)" in row
    session = web.get(f"/sessions/{waiting.session_id}").text
    assert 'login <strong class="login">dash_agent</strong>' in session
    assert "(the agent's claim)" in session


def test_approving_an_irreversible_call_takes_a_second_explicit_step(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(
        app_dsn, agent=HOSTILE, cents=990000, note=HOSTILE, metadata={"purpose": HOSTILE}
    )
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    aid = str(waiting.approval_id)
    asked = web.post(
        "/approvals/decide",
        data={"csrf": token, "approve_one": aid, f"reason_{aid}": REASON},
    )
    # the click only asks: the page restates the call, its arguments, session and logins
    assert asked.status_code == 200
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    page = asked.text
    assert 'id="confirm-approve"' in page and "Nothing can undo" in page
    assert ">pay<" in page and "990000" in page and str(waiting.session_id) in page
    assert 'class="login">dash_agent<' in page and "no purpose given" not in page
    assert_escaped(page)
    assert 'id="confirm-stale"' not in page  # the first question is no complaint
    # a forged confirmation approves nothing, and shows the question again
    for forged in ("", "0" * 64, csrf_of(page)):
        again = web.post("/approvals/decide", data={**confirm_form(page), "confirm": [forged]})
        assert again.status_code == 200 and 'id="confirm-approve"' in again.text
        assert 'id="confirm-stale"' in again.text
        page = again.text  # each question hands out a new nonce; the last one is used below
    # nor does the confirmation without the web session's CSRF token (the nonce is kept)
    stale = web.post("/approvals/decide", data={**confirm_form(page), "csrf": ["stale"]})
    assert stale.status_code == 403
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    done = web.post("/approvals/decide", data=confirm_form(page))
    assert done.status_code == 303 and done.headers["location"] == "/approvals"
    assert approval_row(conn, waiting.approval_id) == (
        "approved",
        "dash_approver",
        "dash_approver",
        REASON,  # carried through the confirmation page as it was typed
    )


def test_a_hand_made_confirmation_approves_nothing(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """The CSRF token is on every page, so nothing derived from it may stand for the
    second click: only a nonce that a confirmation page handed out does."""
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    aid = str(waiting.approval_id)
    made = hmac.new(token.encode(), f"approve:{aid}".encode(), "sha256").hexdigest()
    for confirm in (made, token, "x"):
        response = web.post(
            "/approvals/decide",
            data={"csrf": token, "pick": f"approve:{aid}", "confirm": confirm},
        )
        assert response.status_code == 200 and 'id="confirm-approve"' in response.text
        assert 'id="confirm-stale"' in response.text
        assert approval_row(conn, waiting.approval_id)[0] == "pending"
    # the id spelled another way is the same request, and asked about all the same
    upper = web.post("/approvals/decide", data={"csrf": token, "approve_one": aid.upper()})
    assert upper.status_code == 200 and f'id="confirm-{aid}"' in upper.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"


def test_a_confirmation_nonce_works_once_for_its_requests_in_its_web_session(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    a, b = waiting_session(app_dsn, cents=111), waiting_session(app_dsn, cents=222)
    mine, theirs = client_as(app_dsn, "dash_approver"), client_as(app_dsn, "dash_approver2")
    try:
        token = csrf_of(mine.get("/approvals").text)

        def ask(client: TestClient, csrf: str, *ids: uuid.UUID) -> dict[str, list[str]]:
            page = client.post(
                "/approvals/decide", data={"csrf": csrf, "action": "approve", "ids": ids}
            )
            assert page.status_code == 200
            return confirm_form(page.text)

        def asked_again(fields: dict[str, list[str]]) -> bool:
            response = mine.post("/approvals/decide", data=fields)
            return response.status_code == 200 and 'id="confirm-stale"' in response.text

        # another login's nonce, for the very same request, is not this web session's
        foreign = ask(theirs, csrf_of(theirs.get("/approvals").text), a.approval_id)
        assert asked_again({**ask(mine, token, a.approval_id), "confirm": foreign["confirm"]})
        # a nonce given for a alone does not approve a and b, nor b alone
        for_a = ask(mine, token, a.approval_id)
        both = [f"approve:{a.approval_id}", f"approve:{b.approval_id}"]
        assert asked_again({**for_a, "pick": both})
        for_b = ask(mine, token, b.approval_id)
        assert asked_again({**for_b, "pick": [f"approve:{a.approval_id}"]})
        # each of those tries used its nonce up: the untouched form fails too now
        assert asked_again(for_a) and asked_again(for_b)
        assert [approval_row(conn, w.approval_id)[0] for w in (a, b)] == ["pending"] * 2
        # an expired nonce (its page read long ago) asks again
        from undolog.dashboard import websessions

        keep = websessions.CONFIRM_TTL
        websessions.CONFIRM_TTL = 0.0
        try:
            old = ask(mine, token, a.approval_id)
        finally:
            websessions.CONFIRM_TTL = keep
        assert asked_again(old)
        # the other login's own nonce was left alone by the foreign try: it approves
        assert theirs.post("/approvals/decide", data=foreign).status_code == 303
        assert approval_row(conn, a.approval_id)[:2] == ("approved", "dash_approver2")
        fresh = ask(mine, token, b.approval_id)
        assert mine.post("/approvals/decide", data=fresh).status_code == 303
        # replayed: b is decided, and the used nonce is not taken for anything else
        c = waiting_session(app_dsn, cents=333)
        assert asked_again({**fresh, "pick": [f"approve:{c.approval_id}"]})
        assert approval_row(conn, c.approval_id)[0] == "pending"
        replay = mine.post("/approvals/decide", data=fresh)
        assert replay.status_code == 409 and "already decided" in replay.text
    finally:
        mine.__exit__(None, None, None)
        theirs.__exit__(None, None, None)
    assert approval_row(conn, b.approval_id)[:2] == ("approved", "dash_approver")


def test_the_confirmation_names_the_rejects_and_approvals_the_same_click_sends(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    pay_it, drop_it = waiting_session(app_dsn, cents=404), waiting_session(app_dsn, cents=505)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    gone = uuid.uuid4()
    picks = [
        f"approve:{pay_it.approval_id}",
        f"reject:{drop_it.approval_id}",
        f"approve:{gone}",
    ]
    asked = web.post(
        "/approvals/decide",
        data={"csrf": token, "pick": picks, f"reason_{drop_it.approval_id}": "<b>dup</b>"},
    )
    assert asked.status_code == 200
    assert "Approve 1 irreversible call and reject 1?" in asked.text
    assert f"confirm-{pay_it.approval_id}" in asked.text
    also = asked.text.split('id="confirm-also"')[1].split("</section>")[0]
    rejected = also.split(f'id="also-reject-{drop_it.approval_id}"')[1].split("</li>")[0]
    assert "rejects" in rejected and ">pay<" in rejected
    assert "&lt;b&gt;dup&lt;/b&gt;" in rejected  # the reason, as typed, escaped
    assert f'id="also-approve-{gone}"' in also and "not pending" in also
    assert "and reject 1</button>" in asked.text
    assert [approval_row(conn, w.approval_id)[0] for w in (pay_it, drop_it)] == ["pending"] * 2
    done = web.post("/approvals/decide", data=confirm_form(asked.text))
    assert done.status_code == 404  # the made-up id; the other two are decided
    assert approval_row(conn, pay_it.approval_id)[0] == "approved"
    assert approval_row(conn, drop_it.approval_id)[:4:3] == ("rejected", "<b>dup</b>")


def test_rejecting_takes_one_step_and_a_bulk_approval_is_confirmed_as_a_whole(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    a, b, c = (waiting_session(app_dsn, cents=n) for n in (101, 202, 303))
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    rejected = reject_one(web, token, c.approval_id, "no")
    assert rejected.status_code == 303 and approval_row(conn, c.approval_id)[0] == "rejected"
    asked = web.post(
        "/approvals/decide",
        data={"csrf": token, "action": "approve", "ids": [str(a.approval_id), str(b.approval_id)]},
    )
    assert "Approve 2 irreversible calls?" in asked.text
    # both calls restated, with their arguments (JSON, escaped)
    assert "&#34;cents&#34;: 101" in asked.text and "&#34;cents&#34;: 202" in asked.text
    assert [approval_row(conn, w.approval_id)[0] for w in (a, b)] == ["pending", "pending"]
    assert web.post("/approvals/decide", data=confirm_form(asked.text)).status_code == 303
    assert [approval_row(conn, w.approval_id)[0] for w in (a, b)] == ["approved", "approved"]


class Browser:
    """One browser's cookies, on a client shared by several browsers (:func:`browser_of`)."""

    def __init__(self) -> None:
        self.cookies: Any = None


@contextlib.contextmanager
def browser_of(client: TestClient, browser: Browser) -> Iterator[TestClient]:
    """``client`` as ``browser``, with its cookies (kept there after): several browsers of
    one person on one client, so on the one event loop the dashboard is served on. A
    TestClient each would run the app on a thread each, and the web session of one (its
    connections, its listening task) would be closed by another's login, from another
    thread (libpq's connections are not thread-safe)."""
    client.cookies = browser.cookies if browser.cookies is not None else {}
    try:
        yield client
    finally:
        browser.cookies = client.cookies


def test_the_fifth_login_replaces_the_oldest_web_session(
    app_dsn: str, passwords_checked: bool
) -> None:
    from undolog.dashboard.websessions import MAX_SESSIONS_PER_LOGIN

    browsers = [Browser() for _ in range(MAX_SESSIONS_PER_LOGIN + 1)]
    with TestClient(create_app(app_dsn), follow_redirects=False) as client:

        def status(browser: Browser, path: str) -> int:
            with browser_of(client, browser):
                return int(client.get(path).status_code)

        for n, browser in enumerate(browsers):
            with browser_of(client, browser):
                assert log_in(client, "dash_approver").status_code == 303, n
            time.sleep(0.01)  # each later than the last
        oldest, *others = browsers
        # the oldest web session was logged out: its cookie no longer works, and its
        # login page says why
        assert status(oldest, "/approvals") == 303
        with browser_of(client, oldest):
            notice = client.get("/login").text
            assert "You were logged out here because dash_approver logged in somewhere else" in (
                notice
            )
            token = csrf_of(notice)  # the login form's, not a web session's
            assert client.post("/logout", data={"csrf": token}).status_code == 401
        assert [status(b, "/approvals") for b in others] == [200] * len(others)
        # it logs in again, and now the second oldest is the one replaced
        with browser_of(client, oldest):
            assert log_in(client, "dash_approver").status_code == 303
        assert status(oldest, "/approvals") == 200
        assert status(others[0], "/approvals") == 303
        assert [status(b, "/approvals") for b in others[1:]] == [200] * len(others[1:])


def test_states_have_human_labels_and_times_are_time_elements(
    web: TestClient, app_dsn: str
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    inbox = web.get("/approvals").text
    assert 'title="engine state: awaiting_approval">Waiting for a person</span>' in inbox
    assert '<code class="engine-state">awaiting_approval</code>' in inbox
    page = web.get(f"/sessions/{waiting.session_id}").text
    assert ">Waiting for a decision</span>" in page and ">Done</span>" in page
    # UTC without JavaScript, in an element the page's script turns into local time
    assert re.search(
        r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00">'
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>",
        page,
    )
    listing = web.get("/sessions").text
    assert "Waiting for a person (awaiting_approval)" in listing


def test_undo_entries_are_numbered_within_their_session(web: TestClient, app_dsn: str) -> None:
    for _ in range(3):  # other sessions' entries first: the stack's ids are global
        waiting_session(app_dsn)
    sid = uuid.uuid4()
    from dashboard_helpers import book
    from undolog import UndoLog

    with UndoLog(as_login(app_dsn, "dash_agent")).session(sid, agent="three"):
        book("a")
        book("b")
        book("c")
        log_in(web, "dash_operator")
        page = web.get(f"/sessions/{sid}").text
    numbers = re.findall(r'<td class="undo-number">(\d+)</td>', page)
    assert numbers == ["3", "2", "1"]  # top of the stack first, as the walk goes


def test_the_inbox_shows_earlier_calls_with_their_args_and_the_stated_purpose(
    web: TestClient, app_dsn: str
) -> None:
    told = waiting_session(
        app_dsn, item=HOSTILE, metadata={"purpose": "refund order 1234 " + HOSTILE}
    )
    silent = waiting_session(app_dsn, item="plain-room")
    log_in(web, "dash_approver")
    inbox = web.get("/approvals").text
    row = inbox.split(f'id="req-{told.approval_id}"')[1].split("</tr>")[0]
    assert "book" in row and "&lt;script&gt;alert" in row  # the earlier call's arguments
    assert "says it is for" in row and "refund order 1234" in row
    quiet = inbox.split(f'id="req-{silent.approval_id}"')[1].split("</tr>")[0]
    assert "plain-room" in quiet and "says it is for" not in quiet
    assert_escaped(inbox)
    session = web.get(f"/sessions/{told.session_id}").text
    assert "refund order 1234" in session
    assert_escaped(session)
    assert "The agent gave no purpose" in web.get(f"/sessions/{silent.session_id}").text


def test_past_decisions_page_filters_today_and_by_me(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    mine, theirs, old = (waiting_session(app_dsn, note=HOSTILE) for _ in range(3))
    other = client_as(app_dsn, "dash_approver2")
    try:
        token = csrf_of(other.get("/approvals").text)
        reject_one(other, token, theirs.approval_id, HOSTILE)
        reject_one(other, token, old.approval_id, "last week")
    finally:
        other.__exit__(None, None, None)
    conn.execute("ALTER TABLE undolog.undolog_approval_requests DISABLE TRIGGER USER")
    try:
        conn.execute(
            "UPDATE undolog.undolog_approval_requests SET decided_at = now() - interval '3 days'"
            " WHERE approval_id = %s",
            (old.approval_id,),
        )
    finally:
        conn.execute("ALTER TABLE undolog.undolog_approval_requests ENABLE TRIGGER USER")
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    reject_one(web, token, mine.approval_id, "mine")

    def listed(query: str) -> set[str]:
        page = web.get(f"/decisions{query}")
        assert page.status_code == 200, page.text
        assert_escaped(page.text)
        return set(re.findall(r'data-approval="([^"]+)"', page.text))

    m, t, o = (str(w.approval_id) for w in (mine, theirs, old))
    assert listed("") >= {m, t, o}
    assert o not in listed("?today=1") and t in listed("?today=1")
    assert listed("?mine=1") == {m}
    assert listed("?today=1&mine=1&tz=Pacific/Kiritimati") <= {m}
    page = web.get("/decisions?today=1&tz=Europe/Paris").text
    assert "the start of today, Europe/Paris" in page
    assert "decided today" in page and 'name="mine"' in page
    assert "(login dash_approver2)" in page and 'class="login">dash_agent<' in page
    assert web.get("/decisions?tz=Mars/Olympus").status_code == 422
    assert web.get("/decisions?after=garbage").status_code == 422
    agent = client_as(app_dsn, "dash_agent")
    try:
        assert agent.get("/decisions").status_code == 403
    finally:
        agent.__exit__(None, None, None)


def test_the_pages_purpose_example_runs_and_the_session_page_shows_it(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "dashboard.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    example = next(b for b in blocks if '"purpose"' in b)
    exec(compile(example, "docs/dashboard.md", "exec"), {"dsn": as_login(app_dsn, "dash_agent")})
    row = conn.execute(
        "SELECT session_id FROM undolog.undolog_sessions WHERE agent = 'refunds'"
    ).fetchone()
    assert row is not None
    log_in(web, "dash_approver")
    shown = web.get(f"/sessions/{row[0]}").text
    assert "says it is for" in shown and "refund order 1234, asked twice" in shown
