"""A hostile review of the dashboard: an attacker's and a careless person's requests,
on a real PostgreSQL with real logins (the fixtures of test_dashboard.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import uvicorn
from starlette.testclient import TestClient

from dashboard_helpers import PASSWORD, csrf_of, waiting_session
from test_dashboard import app_dsn, log_in, passwords_checked, web
from undolog.dashboard.app import MAX_STREAMS, Dashboard

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn", "passwords_checked", "web"]  # fixtures shared with test_dashboard


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
    """The dashboard on real HTTP (uvicorn, in a thread): event streams need a server."""
    from pgcluster import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(dashboard.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_live_streams_are_bounded_per_person_and_freed_when_left(
    app_dsn: str, passwords_checked: bool
) -> None:
    """Each stream re-reads the views twice a second on the person's one connection: a
    script that opens hundreds must not get them, and a left page must give its slot back."""
    dashboard = Dashboard(app_dsn)
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=10) as client:
        token = csrf_of(client.get("/login").text)
        login = {"csrf": token, "login": "dash_approver", "password": PASSWORD}
        assert client.post("/login", data=login).status_code == 303
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


def test_a_live_page_whose_connection_is_killed_is_told_to_log_in_again(
    app_dsn: str, passwords_checked: bool, conn: Conn
) -> None:
    dashboard = Dashboard(app_dsn)
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=10) as client:
        token = csrf_of(client.get("/login").text)
        login = {"csrf": token, "login": "dash_approver", "password": PASSWORD}
        assert client.post("/login", data=login).status_code == 303
        with client.stream("GET", "/events?view=inbox") as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("retry:")
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE usename = 'dash_approver' AND application_name = 'undolog-dashboard'"
            )
            events = [line for line in lines if line.startswith("event:")]
        assert events[-1] == "event: lost"
        assert not dashboard.store.sessions  # that web session ended
        assert client.get("/approvals", follow_redirects=False).headers["location"] == "/login"
