"""A hostile review of the dashboard: an attacker's and a careless person's requests,
on a real PostgreSQL with real logins (the fixtures of test_dashboard.py)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from starlette.testclient import TestClient

from test_dashboard import app_dsn, log_in, passwords_checked, web

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
