"""The dashboard shows each approval request's notifications (sent, failed, why, attempts,
next try) on its session's page and in the inbox, and lets an operator send one again;
real logins with passwords_checked, a real webhook receiver, the real delivery code."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from dashboard_helpers import (
    PASSWORD,
    csrf_of,
    waiting_session,
    without_user,
)
from undolog import links, notifications
from undolog.dashboard import create_app

Conn = psycopg.Connection[Any]
SECRET = "dashboard-hook-secret-0123"


@pytest.fixture
def answers() -> list[int]:
    return []


@pytest.fixture
def hook_url(answers: list[int]) -> Iterator[str]:
    """A webhook receiver answering the statuses of ``answers`` in turn, then 200."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            signed = notifications.verify(
                SECRET, self.headers.get(notifications.SIGNATURE_HEADER), body
            )
            self.send_response(answers.pop(0) if answers and signed else 200 if signed else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def client_as(dsn: str, login: str) -> TestClient:
    client = TestClient(create_app(without_user(dsn)), follow_redirects=False)
    client.__enter__()
    page = client.get("/login")
    answer = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
    )
    assert answer.status_code == 303
    return client


def deliver(conn: Conn) -> list[notifications.Outcome]:
    conn.execute("SET ROLE undolog_operator")
    try:
        return notifications.deliver_due(conn)
    finally:
        conn.execute("RESET ROLE")


def test_the_request_shows_its_notifications_and_an_operator_sends_one_again(
    dsn: str, conn: Conn, passwords_checked: bool, hook_url: str, answers: list[int]
) -> None:
    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.notification_max_attempts = 1')
    conn.execute("SET ROLE undolog_operator")
    notifications.add_webhook(conn, "ops-hook", hook_url, SECRET, by="ops")
    conn.execute("RESET ROLE")
    with psycopg.connect(dsn, autocommit=True) as su:  # the new setting: a new connection
        waiting = waiting_session(dsn, item="<b>room</b>")
        answers.append(500)
        [first] = deliver(su)
    assert (first.state, first.error) == ("failed", "RuntimeError: HTTP 500 Internal Server Error")

    operator = client_as(dsn, "dash_operator")
    page = operator.get(f"/sessions/{waiting.session_id}")
    assert page.status_code == 200
    assert f'id="delivery-{first.delivery_id}" data-state="failed"' in page.text
    assert "<strong>ops-hook</strong> (webhook): failed, 1 of 1 attempts" in page.text
    assert "HTTP 500 Internal Server Error" in page.text
    assert "Send again" in page.text
    inbox = operator.get("/approvals")
    assert "notified: ops-hook failed (1 attempts)" in inbox.text

    approver = client_as(dsn, "dash_approver")
    shown = approver.get(f"/sessions/{waiting.session_id}")
    assert "ops-hook" in shown.text and "Send again" not in shown.text
    refused = approver.post(
        f"/sessions/{waiting.session_id}/notify-retry",
        data={"csrf": csrf_of(shown.text), "delivery_id": str(first.delivery_id)},
    )
    assert refused.status_code == 403  # the engine's refusal: not an operator

    # a delivery id of another session is not this session's to retry
    other = operator.post(
        f"/sessions/{waiting.session_id}/notify-retry",
        data={"csrf": csrf_of(page.text), "delivery_id": str(uuid.uuid4())},
    )
    assert other.status_code == 404
    sent_again = operator.post(
        f"/sessions/{waiting.session_id}/notify-retry",
        data={"csrf": csrf_of(page.text), "delivery_id": str(first.delivery_id)},
    )
    assert sent_again.status_code == 303
    with psycopg.connect(dsn, autocommit=True) as su:
        [second] = deliver(su)
    assert (second.delivery_id, second.state, second.attempt) == (first.delivery_id, "sent", 2)
    page = operator.get(f"/sessions/{waiting.session_id}")
    assert "<strong>ops-hook</strong> (webhook): sent at" in page.text
    assert "Send again" in page.text  # a sent one can be sent again while the request waits

    # the agent reads its own session's notifications, never their channel's secret
    agent = client_as(dsn, "dash_agent")
    mine = agent.get(f"/sessions/{waiting.session_id}")
    assert "ops-hook" in mine.text and SECRET not in mine.text and "Send again" not in mine.text
    for client in (operator, approver, agent):
        client.__exit__(None, None, None)


LINK_KEY = "dashboard-link-key-0123456789"


@pytest.fixture
def posted() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver that keeps each body: (its URL, the bodies as JSON)."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    server.shutdown()
    server.server_close()


def linked_client(dsn: str, login: str | None = None, key: str | None = LINK_KEY) -> TestClient:
    client = TestClient(create_app(without_user(dsn), link_secret=key), follow_redirects=False)
    client.__enter__()
    if login is not None:
        page = client.get("/login")
        answer = client.post(
            "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/"
    return client


def test_the_notifications_link_is_signed_and_opens_the_request_after_the_login(
    dsn: str,
    conn: Conn,
    passwords_checked: bool,
    posted: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, bodies = posted
    conn.execute("SET ROLE undolog_operator")
    notifications.add_webhook(
        conn, "ops-hook", url, SECRET, by="ops", dashboard_url="http://testserver/"
    )
    conn.execute("RESET ROLE")
    waiting = waiting_session(dsn, item="<b>room</b>")
    monkeypatch.setenv(links.SECRET_ENV, LINK_KEY)  # the worker's environment
    with psycopg.connect(dsn, autocommit=True) as su:
        [sent] = deliver(su)
    assert sent.state == "sent"
    link = bodies[0]["url"]
    assert link.startswith(f"http://testserver/open/{waiting.approval_id}?exp=")
    path = link.removeprefix("http://testserver")

    # nobody logged in (or a cross-site click, which sends no cookie): a page of this site
    # that goes on, then the login, then the request
    client = linked_client(dsn)
    hop = client.get(path)
    assert hop.status_code == 200
    go = path.replace("?", "/go?", 1)
    assert f'content="0; url={go.replace("&", "&amp;")}"' in hop.text
    assert str(waiting.session_id) not in hop.text
    to_login = client.get(go)
    assert (to_login.status_code, to_login.headers["location"]) == (303, "/login")
    page = client.get("/login")
    logged_in = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": "dash_approver", "password": PASSWORD}
    )
    assert (logged_in.status_code, logged_in.headers["location"]) == (303, go)
    opened = client.get(go)
    assert opened.status_code == 303
    assert opened.headers["location"] == (
        f"/sessions/{waiting.session_id}#approval-{waiting.approval_id}"
    )
    shown = client.get(opened.headers["location"])
    assert 'name="approve_one"' in shown.text and "&lt;b&gt;room" in shown.text
    client.__exit__(None, None, None)

    # an agent login that may not see the request: the same link opens nothing
    stranger = linked_client(dsn, "dash_agent2")
    refused = stranger.get(go)
    assert refused.status_code == 404 and str(waiting.session_id) not in refused.text
    stranger.__exit__(None, None, None)

    # a dashboard without the key (none given, none in the environment) checks no link,
    # and says how to turn it on
    monkeypatch.delenv(links.SECRET_ENV)
    plain = linked_client(dsn, key=None)
    off = plain.get(path)
    assert off.status_code == 404 and links.SECRET_ENV in off.text
    plain.__exit__(None, None, None)


def test_a_bad_link_is_refused_before_any_read_and_echoes_nothing(
    dsn: str, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn)
    client = linked_client(dsn, "dash_approver")
    good = links.signed_url("", waiting.approval_id, LINK_KEY, links.expiry(600))
    hostile = '"><script>alert(1)</script>'
    for path, status in [
        (good.replace("sig=", "sig=0"), 403),
        (good + hostile, 403),
        (f"/open/{waiting.approval_id}?exp=1&sig={hostile}", 403),
        (f"/open/{hostile}?exp=1&sig=00", 404),  # a slash in it: no such page
        ("/open/%22%3E%3Cb%3Ebold?exp=1&sig=00", 403),
        (f"/open/{waiting.approval_id}/go", 403),
        (links.signed_url("", waiting.approval_id, LINK_KEY, 1_000_000_000), 410),
    ]:
        answer = client.get(path)
        assert answer.status_code == status, path
        assert "<script>alert" not in answer.text and "<b>bold" not in answer.text
        assert str(waiting.session_id) not in answer.text
        assert status == 404 or "approvals inbox" in answer.text
    with pytest.raises(ValueError, match="at least 16"):
        create_app(without_user(dsn), link_secret="short")
    client.__exit__(None, None, None)


def test_the_notifications_page_lists_the_latest_deliveries_as_the_command_does(
    dsn: str,
    conn: Conn,
    passwords_checked: bool,
    hook_url: str,
    answers: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`undolog notifications deliveries [--state S]` on the Notifications page, with the
    same query: the latest deliveries of every request, filtered by state, each with why
    it failed and a link to its session's page (where Send again is). The engine's hint
    for an unknown delivery says "undolog notifications deliveries shows them. In the
    dashboard: Notifications", and the page listed channels only. An approver's Send
    again (no button for them) is told who may, not PostgreSQL's bare 42501."""
    from undolog.cli import main

    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.notification_max_attempts = 1')
    conn.execute("SET ROLE undolog_operator")
    notifications.add_webhook(conn, "ops-hook", hook_url, SECRET, by="ops")
    conn.execute("RESET ROLE")
    with psycopg.connect(dsn, autocommit=True) as su:
        failing = waiting_session(dsn, item="one")
        answers.append(500)
        [failed] = deliver(su)
        sent = waiting_session(dsn, item="two")
        [ok] = deliver(su)
    assert (failed.state, ok.state) == ("failed", "sent")

    operator = client_as(dsn, "dash_operator")
    page = operator.get("/notifications")
    assert page.status_code == 200 and 'id="deliveries-table"' in page.text
    for d, sid in ((failed, failing.session_id), (ok, sent.session_id)):
        assert f'id="delivery-{d.delivery_id}"' in page.text
        assert f'href="/sessions/{sid}"' in page.text
    assert "HTTP 500 Internal Server Error" in page.text
    only_failed = operator.get("/notifications?deliveries=failed")
    assert f'id="delivery-{failed.delivery_id}"' in only_failed.text
    assert f'id="delivery-{ok.delivery_id}"' not in only_failed.text
    # the command's rows, in its order
    for state, shown in ((None, page), ("failed", only_failed)):
        flags = ["--state", state] if state else []
        assert main(["notifications", "deliveries", *flags, "--json", "--dsn", dsn]) == 0
        listed = [r["delivery_id"] for r in json.loads(capsys.readouterr().out)]
        assert re.findall(r'class="delivery-row" id="delivery-([0-9a-f-]+)"', shown.text) == listed
    assert operator.get("/notifications?deliveries=bogus").status_code == 422

    approver = client_as(dsn, "dash_approver")
    assert f'id="delivery-{failed.delivery_id}"' in approver.get("/notifications").text
    refused = approver.post(
        f"/sessions/{failing.session_id}/notify-retry",
        data={
            "csrf": csrf_of(approver.get(f"/sessions/{failing.session_id}").text),
            "delivery_id": str(failed.delivery_id),
        },
    )
    assert refused.status_code == 403
    assert "only an operator sends a notification again: nothing was done" in refused.text
    for client in (operator, approver):
        client.__exit__(None, None, None)
