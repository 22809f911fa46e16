"""A hostile review of the dashboard: an attacker's and a careless person's requests,
on a real PostgreSQL with real logins (the fixtures of test_dashboard.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from starlette.testclient import TestClient
from test_dashboard import app_dsn, approval_row, log_in

from dashboard_helpers import (
    PASSWORD,
    as_login,
    csrf_of,
    halted_session,
    served_dashboard,
    waiting_session,
)
from shadowing import plant_approving_count, writable_public
from undolog import _serving, engine
from undolog.approvals import MIN_READ_GAP
from undolog.dashboard import create_app
from undolog.dashboard.app import MAX_STREAMS, Dashboard
from undolog.dashboard.websessions import (
    MAX_SESSIONS_PER_LOGIN,
    KnownBrowsers,
    LoginRefused,
    LoginThrottle,
    SessionStore,
    person_conninfo,
)

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn"]  # a fixture shared with test_dashboard


def backends_of(conn: Conn, login: str) -> int:
    """The dashboard's connections open as ``login`` (a closed one leaves within 2 s)."""
    deadline = time.monotonic() + 2
    while True:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s "
            "AND application_name = 'undolog-dashboard'",
            (login,),
        ).fetchone()
        assert row is not None
        if int(row[0]) == 0 or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.05)


def test_a_connection_killed_server_side_says_log_in_again(web: TestClient, conn: Conn) -> None:
    log_in(web, "dash_approver")
    assert web.get("/approvals").status_code == 200
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE usename = 'dash_approver' AND application_name = 'undolog-dashboard'"
    )
    page = web.get("/approvals")
    assert page.status_code == 503
    assert "connection to the database was closed" in page.text and "Log in" in page.text
    assert web.get("/approvals").headers["location"] == "/login"  # that web session ended
    assert backends_of(conn, "dash_approver") == 0


def test_a_huge_body_is_refused_before_it_is_read_whole(web: TestClient) -> None:
    """Starlette caps one form field at 1 MB but not the body: a thousand such fields, or
    a file (spooled to disk), on the login form, which anyone may post."""
    token = csrf_of(web.get("/login").text)
    many = {f"pad{i}": "A" * 1_000_000 for i in range(3)}
    fields = web.post("/login", data={"csrf": token, "login": "x", "password": "y", **many})
    assert fields.status_code == 413
    upload = web.post("/login", data={"csrf": token}, files={"f": ("f", b"A" * 3_000_000)})
    assert upload.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b"csrf=" + token.encode() + b"&pad="
        for _ in range(3):
            yield b"A" * 1_000_000

    streamed = web.post(
        "/login",
        content=chunks(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert streamed.status_code == 413
    assert log_in(web, "dash_approver").status_code == 303  # a normal form still works


def test_next_is_a_path_of_this_site_even_as_browsers_read_it(
    web: TestClient, app_dsn: str
) -> None:
    """Browsers read '\\' as '/' and drop tabs and newlines in a URL: '/\\evil.example' and
    '/\\t/evil.example' are '//evil.example', another site, in the outcome's Back link."""
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    for bad in ("/\\evil.example", "/\t/evil.example", "/\n/evil.example", "//evil.example"):
        refused = web.post(  # a reject without a reason: the outcome page, with Back
            "/approvals/decide",
            data={"csrf": token, "next": bad, "reject_one": str(waiting.approval_id)},
        )
        assert refused.status_code == 422
        assert 'href="/approvals" id="back"' in refused.text, repr(bad)
    kept = web.post(
        "/approvals/decide",
        data={"csrf": token, "next": f"/sessions/{waiting.session_id}", "reject_one": "x"},
    )
    assert f'href="/sessions/{waiting.session_id}" id="back"' in kept.text


def test_logging_in_again_ends_the_browsers_previous_web_session(
    web: TestClient, conn: Conn
) -> None:
    """A new id at every login (no fixation), and the old one's server state and
    connections do not linger after another login in the same browser."""
    token = csrf_of(web.get("/login").text)  # a login form left open in another tab
    assert log_in(web, "dash_approver").status_code == 303
    first = web.cookies["undolog_session"]
    web.cookies.set("undolog_login_csrf", token, path="/login")
    again = web.post(
        "/login", data={"csrf": token, "login": "dash_approver2", "password": PASSWORD}
    )
    assert again.status_code == 303 and web.cookies["undolog_session"] != first
    assert backends_of(conn, "dash_approver") == 0
    stale = TestClient(web.app, follow_redirects=False, cookies={"undolog_session": first})
    assert stale.get("/approvals").status_code == 303  # the old id opens nothing
    assert "dash_approver2" in web.get("/approvals").text


@contextlib.contextmanager
def serving(dashboard: Dashboard) -> Iterator[str]:
    """The dashboard on real HTTP (served_dashboard): event streams need a server."""
    with served_dashboard(dashboard.app()) as base:
        yield base


@contextlib.contextmanager
def approver_client(dashboard: Dashboard) -> Iterator[httpx.Client]:
    """dash_approver logged in over HTTP to ``dashboard``, served (``serving``)."""
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=10) as client:
        token = csrf_of(client.get("/login").text)
        login = {"csrf": token, "login": "dash_approver", "password": PASSWORD}
        assert client.post("/login", data=login).status_code == 303
        yield client


@contextlib.contextmanager
def live_inbox(client: httpx.Client) -> Iterator[Iterator[str]]:
    """The logged-in ``client``'s live inbox page: its stream's lines, past the first
    (retry:)."""
    with client.stream("GET", "/events?view=inbox") as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("retry:")
        yield lines


def test_live_streams_are_bounded_per_person_and_freed_when_left(
    app_dsn: str, passwords_checked: bool
) -> None:
    """Each stream re-reads the views twice a second on the person's one connection: a
    script that opens hundreds must not get them, and a left page must give its slot back."""
    dashboard = Dashboard(app_dsn)
    with approver_client(dashboard) as client:
        with contextlib.ExitStack() as open_streams:
            streams = [
                open_streams.enter_context(client.stream("GET", "/events?view=inbox"))
                for _ in range(MAX_STREAMS)
            ]
            assert {s.status_code for s in streams} == {200}
            with client.stream("GET", "/events?view=inbox") as refused:
                assert refused.status_code == 429
            assert client.get("/approvals").status_code == 200  # pages still work
        (ws,) = dashboard.store.sessions.values()
        deadline = time.monotonic() + 5
        while ws.waiters and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not ws.waiters  # every left stream gave its slot back
        with client.stream("GET", "/events?view=inbox") as again:
            assert again.status_code == 200


def test_a_notify_flood_from_any_login_does_not_spin_the_live_pages(
    app_dsn: str, passwords_checked: bool
) -> None:
    """Any login may NOTIFY the approvals channel (PostgreSQL has no privilege for it), and
    each NOTIFY woke every live page's stream, which read the views again at once: one
    agent login's tight loop of NOTIFYs had every open page read the database as fast as
    it could (the waiters of the binding and the worker wait a gap between reads). A
    stream reads again no sooner than approvals.MIN_READ_GAP after its last read."""
    stop = threading.Event()

    def flood() -> None:
        with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as agent:
            while not stop.is_set():
                agent.execute("NOTIFY undolog_approvals")

    with approver_client(Dashboard(app_dsn)) as client, live_inbox(client) as lines:
        flooder = threading.Thread(target=flood)
        flooder.start()
        reads, seconds = 0, 3.0
        try:
            began = time.monotonic()
            for line in lines:  # one line (a comment or an event) per read
                reads += line.startswith((":", "event:"))
                if time.monotonic() - began > seconds:
                    break
        finally:
            stop.set()
            flooder.join(10)
    assert reads <= seconds / MIN_READ_GAP + 2, reads


def test_a_live_page_outlasts_the_request_bound(app_dsn: str, passwords_checked: bool) -> None:
    """undolog._serving.REQUEST_TIMEOUT bounds a request, not its answer: a live page's
    stream held past it goes on, and the browser's next request is answered."""
    with approver_client(Dashboard(app_dsn)) as client, live_inbox(client) as lines:
        began = time.monotonic()
        for line in lines:
            assert not line.startswith("event:"), line  # nothing changed: comments only
            if time.monotonic() - began > _serving.REQUEST_TIMEOUT + 2:
                break
        assert time.monotonic() - began > _serving.REQUEST_TIMEOUT + 2, "the stream ended"
        assert client.get("/approvals").status_code == 200


def test_a_live_page_whose_connection_is_killed_is_told_to_log_in_again(
    app_dsn: str, passwords_checked: bool, conn: Conn
) -> None:
    dashboard = Dashboard(app_dsn)
    with approver_client(dashboard) as client:
        with live_inbox(client) as lines:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE usename = 'dash_approver' AND application_name = 'undolog-dashboard'"
            )
            events = [line for line in lines if line.startswith("event:")]
        assert events[-1] == "event: lost"
        assert not dashboard.store.sessions  # that web session ended
        assert client.get("/approvals", follow_redirects=False).headers["location"] == "/login"


EVIL = "\"'><img src=x onerror=alert(1)><script>alert(2)</script>"


def test_agent_written_text_is_escaped_on_every_page_and_attribute(
    web: TestClient, app_dsn: str
) -> None:
    """Agent name, metadata, tool name, argument keys and values, result, error, a
    reason: none reaches any page (or an attribute: the quote is escaped) as markup."""
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as agent:
        sid = engine.begin_session(agent, None, EVIL, {EVIL: EVIL}, timedelta(hours=1))
        call = engine.intercept(
            agent, sid, 0, EVIL, "compensable", {EVIL: EVIL * 100}, {"name": EVIL}
        )
        assert call.effect_id is not None
        engine.commit(agent, call.effect_id, {EVIL: EVIL})
        second = engine.intercept(agent, sid, 1, EVIL, "compensable", {"x": 1}, {"name": "c"})
        assert second.effect_id is not None
        engine.fail(agent, second.effect_id, EVIL)
    waiting = waiting_session(app_dsn, note=EVIL)
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{sid}").text)
    assert (
        web.post(f"/sessions/{sid}/rollback", data={"csrf": token, "reason": EVIL}).status_code
        == 303
    )
    bad_filter = web.get("/sessions", params={"state": EVIL})
    pages = [
        web.get("/sessions"),
        web.get("/sessions", params={"agent": EVIL, "q": EVIL, "since": "2000-01-01"}),
        bad_filter,
        web.get(f"/sessions/{sid}"),
        web.get(f"/sessions/{sid}?fragment=1"),
        web.get(f"/sessions/{sid}/calls/{call.effect_id}/args"),
        web.get(f"/sessions/{sid}/calls/{call.effect_id}/result"),
        web.get("/approvals"),
        web.get(f"/sessions/{waiting.session_id}"),
    ]
    assert bad_filter.status_code == 422
    for page in pages:
        assert "<img src=x" not in page.text and "<script>alert" not in page.text, page.url
        assert "&#34;&#39;&gt;&lt;img" in page.text or "&lt;img" in page.text, page.url
    shown = web.get(f"/sessions/{sid}").text
    assert shown.count("&lt;script&gt;alert(2)") >= 4  # agent, tool, error, reason at least


def test_every_post_refuses_a_missing_forged_or_other_persons_token(
    app_dsn: str, dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    halted = halted_session(dsn)
    waiting = waiting_session(app_dsn)
    undo = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s", (halted,)
    ).fetchone()
    assert undo is not None
    app = create_app(app_dsn)
    with (
        TestClient(app, follow_redirects=False) as victim,
        TestClient(app, follow_redirects=False) as attacker,
    ):
        log_in(victim, "dash_operator")
        log_in(attacker, "dash_approver")
        others = csrf_of(attacker.get("/approvals").text)
        posts = {
            "/approvals/decide": {"approve_one": str(waiting.approval_id)},
            f"/sessions/{halted}/resume": {"reason": "r"},
            f"/sessions/{halted}/abandon": {"reason": "r"},
            f"/sessions/{halted}/retry": {"undo_id": str(undo[0]), "reason": "r"},
            f"/sessions/{waiting.session_id}/rollback": {"reason": "r"},
            "/logout": {},
        }
        for path, data in posts.items():
            for token in (None, "", "forged", others):
                sent = dict(data) if token is None else {**data, "csrf": token}
                refused = victim.post(path, data=sent)
                assert refused.status_code == 403, (path, token)
        assert victim.get("/sessions").status_code == 200  # still logged in: no logout
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    states = conn.execute(
        "SELECT session_id, state FROM undolog.undolog_sessions WHERE session_id = ANY(%s)",
        ([halted, waiting.session_id],),
    ).fetchall()
    assert dict(states) == {halted: "halted", waiting.session_id: "awaiting_approval"}


def test_a_retry_names_an_undo_entry_of_the_session_in_its_url(
    web: TestClient, dsn: str, conn: Conn
) -> None:
    """/sessions/A/retry with B's undo entry must not retry B's compensation."""
    a, b = halted_session(dsn), halted_session(dsn)
    undo_b = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s", (b,)
    ).fetchone()
    assert undo_b is not None
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{a}").text)
    wrong = web.post(
        f"/sessions/{a}/retry", data={"csrf": token, "undo_id": str(undo_b[0]), "reason": "r"}
    )
    assert wrong.status_code == 404
    assert conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (b,)
    ).fetchone() == ("halted",)


def test_the_password_is_in_no_log_page_or_cookie(
    web: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts = []
    for password in (PASSWORD, "wrong-" + PASSWORD, PASSWORD + "\x00x"):
        page = web.get("/login")
        answer = web.post(
            "/login",
            data={"csrf": csrf_of(page.text), "login": "dash_approver", "password": password},
        )
        texts += [answer.text, str(answer.headers)]
        if answer.status_code == 303:
            texts.append(web.get("/approvals").text)
            web.post("/logout", data={"csrf": csrf_of(web.get("/approvals").text)})
    texts.append(caplog.text)
    assert "logged in" in caplog.text  # the log was captured
    for text in texts:
        assert PASSWORD not in text


def test_it_listens_on_localhost_unless_told() -> None:
    from undolog import cli
    from undolog.dashboard import server

    assert cli.build_parser().parse_args(["dashboard"]).host == "127.0.0.1"
    assert server.DEFAULT_HOST == "127.0.0.1"


def test_one_login_cannot_fill_the_dashboard_and_lock_everyone_out(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """Web sessions are capped for the whole dashboard; one login (an agent's, whose
    password sits in its environment) logging in again and again must not take them all:
    each login past the per-login cap replaces that login's oldest web session."""
    dashboard = Dashboard(app_dsn)
    dashboard.store.max_sessions = 6
    with TestClient(dashboard.app(), follow_redirects=False) as client:
        answers = []
        for _ in range(dashboard.store.max_sessions + 2):
            client.cookies.clear()
            answers.append(log_in(client, "dash_agent").status_code)
        assert answers == [303] * (dashboard.store.max_sessions + 2)
        held = [ws for ws in dashboard.store.sessions.values() if ws.login == "dash_agent"]
        assert len(held) == MAX_SESSIONS_PER_LOGIN
        # two connections per web session, and none left over by the replaced ones
        assert backends_of(conn, "dash_agent") == 2 * MAX_SESSIONS_PER_LOGIN
        client.cookies.clear()
        assert log_in(client, "dash_approver").status_code == 303  # others still get in
        client.cookies.clear()
        assert log_in(client, "dash_approver2").status_code == 303
        # the dashboard is full (6): a person of the staff holding none takes the oldest
        # agent-only web session's place (an agent's, or a person's holding none, is
        # refused: test_agent_logins_together_cannot_fill_...), one holding some
        # replaces its own oldest
        client.cookies.clear()
        assert log_in(client, "dash_operator").status_code == 303
        held = [ws for ws in dashboard.store.sessions.values() if ws.login == "dash_agent"]
        assert len(held) == MAX_SESSIONS_PER_LOGIN - 1
        client.cookies.clear()
        assert log_in(client, "dash_approver").status_code == 303
        assert len(dashboard.store.sessions) == 6
    assert backends_of(conn, "dash_agent") == 0


def test_agent_logins_together_cannot_fill_the_dashboard_and_lock_the_staff_out(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """The per-login cap stops one agent login, not several: a compromised host holding a
    few agents' passwords (max_sessions / 4 of them: 25 at the default 100) took every
    web session, each kept alive by a request now and then, and every approver and
    operator who logged in next was refused "too many people". A person of the staff
    who finds the dashboard full now takes the place of the oldest agent-only web
    session; an agent login still cannot take anyone's."""
    dashboard = Dashboard(app_dsn)
    dashboard.store.max_sessions = 8
    with TestClient(dashboard.app(), follow_redirects=False) as client:
        agents = []
        for login in ("dash_agent", "dash_agent2"):
            for _ in range(MAX_SESSIONS_PER_LOGIN):
                client.cookies.clear()
                assert log_in(client, login).status_code == 303
                agents.append(client.cookies["undolog_session"])
        assert len(dashboard.store.sessions) == dashboard.store.max_sessions  # full
        for staff in ("dash_approver", "dash_operator"):
            client.cookies.clear()
            assert log_in(client, staff).status_code == 303, staff
            assert staff in client.get("/sessions").text
        # the two oldest agents' web sessions made the room, and their pages say why
        left = TestClient(dashboard.app(), follow_redirects=False)
        for number, cookie in enumerate(agents):
            left.cookies.set("undolog_session", cookie)
            page = left.get("/sessions")
            assert page.status_code == (303 if number < 2 else 200), number
            if number < 2:
                notice = left.get("/login").text
                assert "to make room for a person of the staff" in notice
                # whose login, and when, is not the agent's to learn
                assert "dash_approver" not in notice and "dash_operator" not in notice
        assert backends_of(conn, "dash_agent") == 2 * (MAX_SESSIONS_PER_LOGIN - 2)
        # a login holding some replaces its own oldest, as before
        for login in ("dash_agent2", "dash_agent"):
            client.cookies.clear()
            assert log_in(client, login).status_code == 303
        # an agent holding none finds a dashboard full of people full, and takes nobody's
        # place; nor does a person take another person's
        staff_only = Dashboard(app_dsn)
        staff_only.store.max_sessions = 2
        with TestClient(staff_only.app(), follow_redirects=False) as other:
            for login in ("dash_approver", "dash_approver2"):
                other.cookies.clear()
                assert log_in(other, login).status_code == 303
            other.cookies.clear()
            refused = log_in(other, "dash_agent")
            assert refused.status_code == 401 and "too many people" in refused.text
            other.cookies.clear()
            refused = log_in(other, "dash_operator")
            assert refused.status_code == 401 and "too many people" in refused.text
        assert len(dashboard.store.sessions) == dashboard.store.max_sessions


def test_an_agent_takes_no_agents_place_and_a_staff_login_that_is_an_agent_keeps_its_own(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """The room made for the staff is theirs alone: the test above fills a dashboard
    with agents' web sessions only for the staff, and went on passing with login()
    letting any login take the oldest agent's place (an agent holding none evicting
    another agent's, or its own others' in turn: nobody's web session would last). And
    whose place is taken is an agent-only login's: a login that holds an approver's
    role beside the agent's is a person of the staff, whose web session stays even when
    it is the oldest."""
    dashboard = Dashboard(app_dsn)
    dashboard.store.max_sessions = MAX_SESSIONS_PER_LOGIN + 1
    with TestClient(dashboard.app(), follow_redirects=False) as client:
        assert log_in(client, "dash_both").status_code == 303  # the oldest
        both = client.cookies["undolog_session"]
        for _ in range(MAX_SESSIONS_PER_LOGIN):
            client.cookies.clear()
            assert log_in(client, "dash_agent").status_code == 303
        assert len(dashboard.store.sessions) == dashboard.store.max_sessions  # full
        client.cookies.clear()
        refused = log_in(client, "dash_agent2")  # an agent holding none
        assert refused.status_code == 401 and "too many people" in refused.text
        held = [ws for ws in dashboard.store.sessions.values() if ws.login == "dash_agent"]
        assert len(held) == MAX_SESSIONS_PER_LOGIN
        client.cookies.clear()
        assert log_in(client, "dash_approver").status_code == 303
        held = [ws for ws in dashboard.store.sessions.values() if ws.login == "dash_agent"]
        assert len(held) == MAX_SESSIONS_PER_LOGIN - 1  # an agent's made the room
        client.cookies.clear()
        client.cookies.set("undolog_session", both)
        assert client.get("/sessions").status_code == 200  # the oldest, and staff: kept
    assert backends_of(conn, "dash_agent") == 0


def test_an_idle_web_session_ends_its_open_streams_and_connections(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """An open live page is not activity: idle past the timeout, its stream says
    'logout' and the person's connections close."""
    dashboard = Dashboard(app_dsn, idle_timeout=1.0)
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=10) as client:
        token = csrf_of(client.get("/login").text)
        login = {"csrf": token, "login": "dash_operator", "password": PASSWORD}
        assert client.post("/login", data=login).status_code == 303
        started = time.monotonic()
        with client.stream("GET", f"/events?view=session&id={uuid.uuid4()}") as stream:
            events = [line for line in stream.iter_lines() if line.startswith("event:")]
        assert events[-1] == "event: logout" and time.monotonic() - started < 5
        assert backends_of(conn, "dash_operator") == 0
        assert client.get("/sessions", follow_redirects=False).headers["location"] == "/login"


def test_what_a_live_page_fetches_by_itself_is_not_activity(
    app_dsn: str, passwords_checked: bool
) -> None:
    """An approver leaves the inbox open and walks away. Requests keep arriving, and on
    each the page's own script (dashboard.js) fetches its fragment again; the sessions
    page fetches its counts; a dropped event stream reconnects. None of that is the
    person: the web session still ends at the idle timeout."""
    waiting = waiting_session(app_dsn)
    dashboard = Dashboard(app_dsn, idle_timeout=1.5)
    with TestClient(dashboard.app(), follow_redirects=False) as web:
        assert log_in(web, "dash_operator").status_code == 303
        assert web.get("/approvals").status_code == 200  # the person's last real action
        (ws,) = dashboard.store.sessions.values()
        seen = ws.last_seen
        automatic = (
            "/approvals?fragment=1",
            f"/sessions/{waiting.session_id}?fragment=1",
            "/sessions/counts",
        )
        for path in automatic:
            assert web.get(path).status_code == 200, path
        assert ws.last_seen == seen
        # the inbox's stream, open until the web session idles out
        with web.stream("GET", "/events?view=inbox") as stream:
            events = [line for line in stream.iter_lines() if line.startswith("event:")]
        assert events[-1] == "event: logout"
        assert ws.last_seen == seen
        assert web.get("/approvals?fragment=1").status_code == 303  # to the login page
        assert web.get("/approvals").status_code == 303


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0.0, -60.0])
def test_an_idle_timeout_that_is_not_a_positive_number_is_refused(
    app_dsn: str, seconds: float
) -> None:
    """NaN would never log anyone out, 0 or less would log everyone out at once (the
    command refuses them too: tests/cli/test_cli_input_errors.py)."""
    with pytest.raises(ValueError, match="idle_timeout"):
        Dashboard(app_dsn, idle_timeout=seconds)


def test_an_agent_cannot_read_another_agents_call_by_its_ids(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    other = waiting_session(app_dsn, login="dash_agent2", note="secret of agent2")
    effect = conn.execute(
        "SELECT effect_id FROM undolog.undolog_effect_log WHERE session_id = %s AND step_index = 1",
        (other.session_id,),
    ).fetchone()
    assert effect is not None
    log_in(web, "dash_agent")
    for which in ("args", "result"):
        page = web.get(f"/sessions/{other.session_id}/calls/{effect[0]}/{which}")
        assert page.status_code == 404 and "secret of agent2" not in page.text
    token = csrf_of(web.get("/sessions").text)
    for action in ("rollback", "resume", "abandon"):
        refused = web.post(
            f"/sessions/{other.session_id}/{action}", data={"csrf": token, "reason": "r"}
        )
        assert refused.status_code in (403, 404), action
    assert approval_row(conn, other.approval_id)[0] == "pending"


def test_a_login_that_may_not_log_in_is_refused_not_called_unreachable(
    web: TestClient,
) -> None:
    """A careless person types the group role's name: PostgreSQL says it 'is not
    permitted to log in'; the database is reachable, and the page must not say otherwise."""
    refused = log_in(web, "undolog_approver")
    assert refused.status_code == 401
    assert "login refused" in refused.text and "cannot be reached" not in refused.text


def test_a_decision_on_a_killed_connection_says_log_in_again(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE usename = 'dash_approver' AND application_name = 'undolog-dashboard'"
    )
    answer = web.post(
        "/approvals/decide", data={"csrf": token, "approve_one": str(waiting.approval_id)}
    )
    assert answer.status_code == 503
    assert "connection to the database was closed" in answer.text and "Log in" in answer.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    assert web.get("/approvals").headers["location"] == "/login"
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{waiting.session_id}").text)
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE usename = 'dash_operator' AND application_name = 'undolog-dashboard'"
    )
    rolled = web.post(
        f"/sessions/{waiting.session_id}/rollback", data={"csrf": token, "reason": "stop"}
    )
    assert rolled.status_code == 503 and "Log in again" in rolled.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"


def test_an_empty_password_is_refused_not_called_unreachable(
    web: TestClient, passwords_checked: bool
) -> None:
    if not passwords_checked:  # pragma: no cover - only on a cluster we may not configure
        pytest.skip("pg_hba.conf is not writable here: this cluster trusts every login")
    for password in ("", "\x00"):  # libpq ends the password at a NUL: empty again
        refused = log_in(web, "dash_approver", password)
        assert refused.status_code == 401
        assert "login refused" in refused.text and "cannot be reached" not in refused.text


def _hosts_password(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, login: str = "dash_operator"
) -> None:
    """The password of ``login`` where libpq, given none, would find it: the password file
    of whoever runs the dashboard (PGPASSFILE, ~/.pgpass) or PGPASSWORD."""
    passfile = tmp_path / ".pgpass"
    passfile.write_text(f"*:*:*:{login}:{PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.delenv("PGPASSFILE", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    if where == "PGPASSFILE":
        monkeypatch.setenv("PGPASSFILE", str(passfile))
    elif where == "PGPASSWORD":
        monkeypatch.setenv("PGPASSWORD", PASSWORD)
    else:
        monkeypatch.setenv("HOME", str(tmp_path))


@pytest.mark.parametrize("where", ["PGPASSFILE", "HOME/.pgpass"])
def test_an_empty_password_never_logs_in_with_the_hosts_password_file(
    web: TestClient,
    passwords_checked: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """libpq, given no password, reads the password file of whoever runs the dashboard
    (PGPASSFILE, or ~/.pgpass), which may well hold an operator's password. A visitor who
    types that operator's login and no password (or spaces, or a NUL, where libpq ends a
    password) is refused as a wrong password, and counted as a failed login."""
    if not passwords_checked:  # pragma: no cover - only on a cluster we may not configure
        pytest.skip("pg_hba.conf is not writable here: this cluster trusts every login")
    _hosts_password(where, tmp_path, monkeypatch)
    for password in ("", "   ", "\x00"):
        refused = log_in(web, "dash_operator", password)
        assert refused.status_code == 401, (repr(password), refused.status_code)
        assert "login refused: wrong login or password" in refused.text
        assert web.get("/maintenance").status_code == 303  # to the login page
    for _ in range(LoginThrottle.FREE - 3):
        assert log_in(web, "dash_operator", "").status_code == 401
    # the blank attempts counted: even the right password now waits
    assert log_in(web, "dash_operator").status_code == 429


def test_a_link_with_a_non_ascii_signature_is_not_valid_not_a_500(
    app_dsn: str, passwords_checked: bool
) -> None:
    """Anyone on the network, logged in or not, may open /open/<id>?exp=..&sig=..: a
    signature or expiry holding non-ASCII characters is a link not valid (403)."""
    app = create_app(app_dsn, link_secret="a-links-key-of-32-characters-xyz")
    with TestClient(app, follow_redirects=False, raise_server_exceptions=False) as web:
        aid = uuid.uuid4()
        for path in (f"/open/{aid}", f"/open/{aid}/go"):
            for exp, sig in (("9999999999", "\u00e9" * 64), ("\u0669" * 10, "0" * 64)):
                page = web.get(path, params={"exp": exp, "sig": sig})
                assert page.status_code == 403, (path, exp, page.status_code)
                assert "Link not valid" in page.text


def test_a_persons_connection_never_reads_a_password_file(app_dsn: str) -> None:
    """Whatever the dashboard's own DSN says, a person's connection names no password file
    but an empty one: only the password the person typed can log them in."""
    for dsn in (app_dsn, app_dsn + " passfile=/tmp/operator.pgpass"):
        params = conninfo_to_dict(person_conninfo(dsn, "dash_operator", PASSWORD))
        assert params["passfile"] == os.devnull
        assert params["user"] == "dash_operator" and params["password"] == PASSWORD


@pytest.mark.parametrize("where", ["PGPASSFILE", "HOME/.pgpass", "PGPASSWORD"])
def test_a_control_character_in_the_login_is_refused_before_libpq(
    app_dsn: str,
    passwords_checked: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """libpq reads a connection string up to a NUL: a login "dash_operator<NUL>" left
    the typed password and passfile=/dev/null behind it, and libpq took the operator's
    password from the host (any password typed got in); "dash operator<NUL>" (quoted)
    made the string unparsable, a 500. A login holding any control character is refused
    as a wrong password (401), and counted by the throttle."""
    if not passwords_checked:  # pragma: no cover - only on a cluster we may not configure
        pytest.skip("pg_hba.conf is not writable here: this cluster trusts every login")
    _hosts_password(where, tmp_path, monkeypatch)
    with TestClient(
        create_app(app_dsn), follow_redirects=False, raise_server_exceptions=False
    ) as web:
        for login in (
            "dash_operator\x00",
            "dash operator\x00",
            "dash_\x1boperator",
            "dash\x85operator",
        ):
            refused = log_in(web, login, "not-the-password")
            assert refused.status_code == 401, (repr(login), refused.status_code)
            assert "login refused: wrong login or password" in refused.text
            assert web.get("/maintenance").status_code == 303  # to the login page
        # the right password does not help
        assert log_in(web, "dash_operator\x00").status_code == 401
        # each attempt counted (this address's fifth failure): even the right login waits
        assert log_in(web, "dash_operator").status_code == 429


@pytest.mark.parametrize("where", ["PGPASSFILE", "PGPASSWORD"])
def test_the_store_refuses_what_libpq_would_not_read_as_typed(
    app_dsn: str,
    passwords_checked: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """The backstop behind the login form's check: person_conninfo reads back what it
    wrote, and a login, password or password file that libpq would read otherwise (a NUL
    cuts the string) is refused, as a wrong password, before any connection."""
    import asyncio

    if not passwords_checked:  # pragma: no cover - only on a cluster we may not configure
        pytest.skip("pg_hba.conf is not writable here: this cluster trusts every login")
    _hosts_password(where, tmp_path, monkeypatch)
    for login, password in (
        ("dash_operator\x00", "not-the-password"),
        ("dash operator\x00", "not-the-password"),
        ("dash_operator", "\x00"),
        ("dash_operator", "x\x00y"),
    ):
        with pytest.raises(LoginRefused, match="wrong login or password"):
            person_conninfo(app_dsn, login, password)
        store = SessionStore(app_dsn, idle_timeout=60)
        with pytest.raises(LoginRefused, match="wrong login or password"):
            asyncio.run(store.login(login, password))
        assert store.sessions == {}


def test_a_login_the_server_trusts_is_refused_whatever_the_password(
    app_dsn: str, conn: Conn, passwords_checked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Under pg_hba.conf's trust (or peer, ident, cert, gss) the server lets a login in
    without its password: the dashboard must not, or a visitor typing that login gets in
    with any password. The test cluster trusts every login outside the tests' password
    group, as this one: refused as a wrong password (401), whatever was typed, its real
    password included; the log says why."""
    login = f"trusted_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{PASSWORD}' IN ROLE undolog_operator")
    try:
        with (
            caplog.at_level(logging.WARNING, "undolog.dashboard"),
            TestClient(create_app(app_dsn), follow_redirects=False) as web,
        ):
            for password in ("not-its-password", PASSWORD):
                refused = log_in(web, login, password)
                assert refused.status_code == 401, (password, refused.status_code)
                assert "login refused: wrong login or password" in refused.text
                assert web.get("/maintenance").status_code == 303
        assert "needs password authentication" in caplog.text
        assert backends_of(conn, login) == 0  # neither connection stays open
    finally:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (login,)
        )
        conn.execute(f"DROP ROLE IF EXISTS {login}")


def test_a_persons_connection_offers_no_certificate_and_no_kerberos_ticket() -> None:
    """The dashboard's DSN may name its own client certificate (sslcert, sslkey, its
    sslpassword) or Kerberos service, and libpq would offer ~/.postgresql/postgresql.crt
    of whoever runs the dashboard by itself: under pg_hba.conf's cert or gss, a visitor
    typing the login they name would get in. A person's connection offers none of them
    (sslcertmode=disable where libpq has it, 16 on); the rest of the DSN (host, database,
    TLS checks, GSSAPI encryption, which authenticates no one) stays."""
    dsn = (
        "host=db.example dbname=app sslmode=verify-full sslrootcert=/srv/ca.crt "
        "sslcert=/srv/dash.crt sslkey=/srv/dash.key sslpassword=key-secret "
        "krbsrvname=postgres gssencmode=prefer sslcertmode=allow"
    )
    params = conninfo_to_dict(person_conninfo(dsn, "alice", "typed"))
    for key in ("sslcert", "sslkey", "sslpassword", "krbsrvname"):
        assert key not in params, key
    assert params["gssencmode"] == "prefer"  # a server may ask for it (hostgssenc)
    assert params["user"] == "alice" and params["password"] == "typed"
    assert params["passfile"] == os.devnull
    assert params["sslmode"] == "verify-full" and params["sslrootcert"] == "/srv/ca.crt"
    assert params["host"] == "db.example" and params["dbname"] == "app"
    if psycopg.pq.version() >= 160000:
        assert params["sslcertmode"] == "disable"
    else:  # pragma: no cover - a libpq older than 16 (the password check still holds)
        assert "sslcertmode" not in params


async def _login_async(base: str, login: str, password: str) -> tuple[int, str, Any]:
    client = httpx.AsyncClient(base_url=base, timeout=30, limits=httpx.Limits(max_connections=None))
    token = csrf_of((await client.get("/login")).text)
    answer = await client.post("/login", data={"csrf": token, "login": login, "password": password})
    return answer.status_code, answer.text, client


def test_concurrent_logins_respect_the_per_login_cap(app_dsn: str, passwords_checked: bool) -> None:
    """30 logins at once for one login: each gets in, and no more web sessions than the
    cap stay (counting, replacing the oldest and adding are one step)."""
    import asyncio

    dashboard = Dashboard(app_dsn)
    with serving(dashboard) as base:

        async def body() -> list[int]:
            done = await asyncio.gather(
                *(_login_async(base, "dash_agent", PASSWORD) for _ in range(30))
            )
            for _, _, client in done:
                await client.aclose()
            return [status for status, _, _ in done]

        statuses = asyncio.run(body())
        held = [ws for ws in dashboard.store.sessions.values() if ws.login == "dash_agent"]
    assert statuses.count(303) == 30, statuses
    assert len(held) == MAX_SESSIONS_PER_LOGIN


def test_concurrent_live_streams_respect_the_cap(app_dsn: str, passwords_checked: bool) -> None:
    """200 /events requests at once from one web session: at most MAX_STREAMS accepted."""
    import asyncio

    dashboard = Dashboard(app_dsn)
    with serving(dashboard) as base:

        async def body() -> list[int]:
            status, _, client = await _login_async(base, "dash_approver", PASSWORD)
            assert status == 303
            client.timeout = httpx.Timeout(30)
            async with contextlib.AsyncExitStack() as stack:

                async def one() -> int:
                    response = await stack.enter_async_context(
                        client.stream("GET", "/events?view=inbox")
                    )
                    return int(response.status_code)

                codes = await asyncio.gather(*(one() for _ in range(200)))
            await client.aclose()
            return list(codes)

        codes = asyncio.run(body())
    assert codes.count(200) == MAX_STREAMS, codes.count(200)
    assert codes.count(429) == 200 - MAX_STREAMS


def test_password_guessing_is_throttled_and_the_lockout_expires(
    app_dsn: str, passwords_checked: bool
) -> None:
    """Concurrent wrong passwords: only the first few are tried, the rest (and then the
    right password) are told to wait; once the lockout expired the right one works."""
    import asyncio

    if not passwords_checked:
        pytest.skip("this cluster accepts any password")
    dashboard = Dashboard(app_dsn)
    dashboard.throttle.MAX_LOCKOUT = 1.0
    with serving(dashboard) as base:

        async def attempt(password: str) -> tuple[int, str]:
            status, text, client = await _login_async(base, "dash_approver", password)
            await client.aclose()
            return status, text

        async def guesses() -> list[tuple[int, str]]:
            return list(await asyncio.gather(*(attempt(f"wrong{i}") for i in range(100))))

        started = time.monotonic()
        answers = asyncio.run(guesses())
        elapsed = time.monotonic() - started
        tried = [a for a in answers if a[0] == 401]
        waited = [a for a in answers if a[0] == 429]
        assert len(tried) <= dashboard.throttle.FREE + 2, (len(tried), elapsed)
        assert waited and all("too many failed logins, try again in" in t for _, t in waited)
        status, text = asyncio.run(attempt(PASSWORD))
        assert status == 429 and "too many failed logins" in text
        time.sleep(1.2)  # the lockout expires by itself
        status, text = asyncio.run(attempt(PASSWORD))
        assert status == 303, text
        # a success resets: one wrong password later is simply refused, not throttled
        assert asyncio.run(attempt("wrong"))[0] == 401
    print(f"100 concurrent guesses: {len(tried)} tried, {len(waited)} throttled in {elapsed:.2f}s")


def test_someone_else_s_wrong_passwords_do_not_lock_a_person_out_of_their_own_browser(
    app_dsn: str, passwords_checked: bool
) -> None:
    """The throttle locked a login out for everyone: an agent reads its decided requests'
    decided_by (the approver's login) and, with a wrong password every few minutes from
    anywhere, kept that approver out of the dashboard for as long as it liked. A browser
    the person logged in from before is now throttled on its own: the others' failures
    (from any address, this one's included) do not lock it out, while a browser that
    never logged in as that login is still told to wait."""
    if not passwords_checked:
        pytest.skip("this cluster accepts any password")
    dashboard = Dashboard(app_dsn)
    with TestClient(dashboard.app(), follow_redirects=False) as web:
        assert log_in(web, "dash_approver").status_code == 303
        web.post("/logout", data={"csrf": csrf_of(web.get("/sessions").text)})
        remembered = dict(web.cookies.items())
        web.cookies.clear()  # the attacker's browser, from the same address
        for i in range(dashboard.throttle.FREE):
            assert log_in(web, "dash_approver", f"wrong{i}").status_code == 401
        refused = log_in(web, "dash_approver")
        assert refused.status_code == 429 and "too many failed logins" in refused.text
        web.cookies.clear()
        for name, value in remembered.items():
            web.cookies.set(name, value)
        assert log_in(web, "dash_approver").status_code == 303  # the person's own browser
        # and its own wrong passwords are throttled too
        web.post("/logout", data={"csrf": csrf_of(web.get("/sessions").text)})
        for i in range(dashboard.throttle.FREE):
            assert log_in(web, "dash_approver", f"mine{i}").status_code == 401
        assert log_in(web, "dash_approver").status_code == 429


def test_no_logins_own_logins_make_the_dashboard_forget_anothers_browser() -> None:
    """Any login may log in (an agent's too), and each new browser is remembered: a
    login keeps its latest KnownBrowsers.PER_LOGIN, and past MAX in all a new browser is
    not remembered, so that no one's logins forget the approver's browser."""
    known = KnownBrowsers()
    known.MAX = 50
    approver = known.remember("alice", None)
    for _ in range(200):
        known.remember("agent", None)
    assert known.login_of(approver) == "alice"
    assert sum(1 for who, _ in known.tokens.values() if who == "agent") == known.PER_LOGIN
    assert [known.remember(f"login{i}", None) for i in range(100)][-1] is None
    assert len(known.tokens) == known.MAX and known.login_of(approver) == "alice"
    assert known.remember("alice", approver) == approver  # its own, kept


def test_a_login_longer_than_any_role_name_is_refused_and_kept_short(app_dsn: str) -> None:
    """A login longer than PostgreSQL's longest role name (63 bytes) is refused as a
    wrong one and counted, under one key for them all: the throttle kept a key of each
    login's text (up to a megabyte each, 100,000 of them)."""
    dashboard = Dashboard(app_dsn)
    with TestClient(dashboard.app(), follow_redirects=False) as web:
        for login in ("a" * 64, "é" * 32, "x" * 100_000):
            refused = log_in(web, login, "wrong")
            assert refused.status_code == 401, login[:80]
            assert "wrong login or password" in refused.text
    keys = [*dashboard.throttle.failures, *dashboard.throttle.locks]
    assert keys and all(len(k.encode()) <= 64 for k in keys), [k[:80] for k in keys]
    assert dashboard.throttle.failures["login:(longer than any role name)"][0] == 3


def test_a_browser_is_remembered_from_its_latest_login() -> None:
    """A token lasts KnownBrowsers.SECONDS from the browser's latest login, as its cookie
    does, not from its first."""
    known = KnownBrowsers()
    token = known.remember("alice", None)
    assert token is not None
    known.tokens[token] = ("alice", known.tokens[token][1] - known.SECONDS + 1)
    assert known.remember("alice", token) == token
    known.SECONDS = 2.0  # a day later, as it were: a first login's clock would be out
    assert known.login_of(token) == "alice"


def test_an_agents_function_in_public_does_not_run_as_the_approver_reading_the_inbox(
    app_dsn: str, dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """Where any login may create in public (a database made before PostgreSQL 15), an
    agent's public.count(uuid) was preferred to pg_catalog's count by the inbox's query
    of the calls before each request: the approver who opened /approvals approved the
    agent's own irreversible call. The dashboard's logins resolve names in pg_catalog
    alone (red team, round 7)."""
    waiting = waiting_session(dsn)
    with writable_public(conn):
        with psycopg.connect(as_login(dsn, "dash_agent"), autocommit=True) as agent:
            plant_approving_count(agent, waiting.approval_id)
        with TestClient(create_app(app_dsn), follow_redirects=False) as web:
            log_in(web, "dash_approver")
            assert web.get("/approvals").status_code == 200
        state = conn.execute(
            "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
            (waiting.approval_id,),
        ).fetchone()
        assert state == ("pending",)
