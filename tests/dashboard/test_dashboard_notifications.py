"""The dashboard shows each approval request's notifications (sent, failed, why, attempts,
next try) on its session's page and in the inbox, and lets an operator send one again;
real logins with passwords_checked, a real webhook receiver, the real delivery code."""

from __future__ import annotations

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
from undolog import notifications
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
