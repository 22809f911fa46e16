"""The session page's verify status: staff see whether the session's history matches
its hash chain, and which rows do not; an agent's page has no such section."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from dashboard_helpers import PASSWORD, csrf_of, without_user
from undolog import engine
from undolog.dashboard import create_app
from undolog.dashboard import queries as dashboard_queries

Conn = psycopg.Connection[Any]


def client_as(dsn: str, login: str) -> TestClient:
    client = TestClient(create_app(without_user(dsn)), follow_redirects=False)
    client.__enter__()
    page = client.get("/login")
    done = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
    )
    assert done.status_code == 303
    return client


def a_session(conn: Conn) -> uuid.UUID:
    session = engine.begin_session(conn, agent="chain-page")
    found = engine.intercept(
        conn,
        session,
        0,
        "create_user",
        "compensable",
        {"email": "ada@example.com"},
        {"name": "delete_user"},
    )
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"user_id": 1})
    return session


def test_staff_see_the_chain_verified_then_broken(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    session = a_session(conn)
    web = client_as(dsn, "dash_operator")
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200
    assert 'id="chain-status"' in page.text and "Verified: every recorded event" in page.text
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            # the call's commit is a link of its own row: its result changed
            "UPDATE undolog.undolog_effect_log SET result_snapshot = '{\"user_id\": 2}'"
            " WHERE session_id = %s AND committed_at IS NOT NULL",
            (session,),
        )
    page = web.get(f"/sessions/{session}")
    assert "1 recorded event(s) do not match their hash chain" in page.text
    assert "<strong>altered</strong>: undolog_effect_log effect_id=" in page.text
    web.__exit__(None, None, None)


def test_an_agent_page_has_no_chain_section(dsn: str, passwords_checked: bool) -> None:
    agent_dsn = psycopg.conninfo.make_conninfo(
        without_user(dsn), user="dash_agent", password=PASSWORD
    )
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        session = a_session(agent)
    web = client_as(dsn, "dash_agent")
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200 and "chain-page" in page.text
    assert 'id="chain-status"' not in page.text
    web.__exit__(None, None, None)


def test_a_chain_too_long_to_verify_on_each_view_says_how_to_verify_it(
    dsn: str, conn: Conn, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every view pays the recomputation: past the bound the page names the command
    monkeypatch.setattr(dashboard_queries, "VERIFIED_ON_VIEW", 0)
    session = a_session(conn)
    web = client_as(dsn, "dash_operator")
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200 and 'id="chain-status"' in page.text
    assert "Verified: every recorded event" not in page.text
    records = conn.execute(
        "SELECT seq FROM undolog.undolog_chain_heads WHERE session_id = %s", (session,)
    ).fetchone()
    assert records is not None and records[0] >= 1
    assert f"{records[0]} recorded events: too many to verify on each view" in page.text
    assert f"undolog verify --session {session}" in page.text
    web.__exit__(None, None, None)
