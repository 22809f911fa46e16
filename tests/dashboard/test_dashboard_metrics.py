"""The dashboard's GET /metrics: the engine's metrics (undolog.metrics) for a logged-in
operator, read on their own connection, or for a scraper sending the configured bearer
token, read as the configured metrics login; nobody else."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient

from dashboard_helpers import (
    PASSWORD,
    csrf_of,
    halted_session,
    waiting_session,
    without_user,
)
from undolog.dashboard import create_app
from undolog.dashboard.app import Dashboard
from undolog.metrics import CONTENT_TYPE

Conn = psycopg.Connection[Any]
TOKEN = "a-long-random-token-for-prometheus"


def samples(text: str) -> dict[str, float]:
    """name{labels} -> value, for the sample lines."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            found[key] = float(value)
    return found


def log_in(client: TestClient, login: str) -> None:
    page = client.get("/login")
    answer = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
    )
    assert answer.status_code == 303


@pytest.fixture
def metrics_login(conn: Conn, dsn: str) -> Iterator[str]:
    """The login a scraper's /metrics reads as: an approver, trusted by the test cluster."""
    name = f"metrics_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_approver")
    yield make_conninfo(dsn, user=name)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def web(dsn: str, passwords_checked: bool, metrics_login: str) -> Iterator[TestClient]:
    app = create_app(without_user(dsn), metrics_token=TOKEN, metrics_dsn=metrics_login)
    with TestClient(app, follow_redirects=False) as client:
        yield client


def test_an_operator_reads_the_metrics(web: TestClient, dsn: str) -> None:
    waiting_session(dsn)
    halted_session(dsn)
    log_in(web, "dash_operator")
    answer = web.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == CONTENT_TYPE
    got = samples(answer.text)
    assert got["undolog_up"] == 1
    assert got['undolog_sessions{state="awaiting_approval"}'] == 1
    assert got["undolog_halted_sessions"] == 1
    assert got["undolog_approvals_pending"] == 1
    assert "# TYPE undolog_approval_wait_seconds summary" in answer.text


@pytest.mark.parametrize("login", ["dash_approver", "dash_agent"])
def test_other_logins_are_refused(web: TestClient, login: str) -> None:
    log_in(web, login)
    answer = web.get("/metrics")
    assert answer.status_code == 403
    assert "undolog_" not in answer.text


def test_without_a_login_or_a_token_it_asks_for_one(web: TestClient) -> None:
    answer = web.get("/metrics")
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")


def test_a_scraper_with_the_token_reads_them(web: TestClient, dsn: str) -> None:
    waiting_session(dsn)
    answer = web.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    got = samples(answer.text)
    assert got["undolog_up"] == 1 and got["undolog_approvals_pending"] == 1
    # the scrape after it reuses the metrics login's connection
    again = web.get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})
    assert samples(again.text)["undolog_up"] == 1


@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN],
)
def test_a_wrong_token_is_refused(web: TestClient, header: str) -> None:
    answer = web.get("/metrics", headers={"Authorization": header})
    assert answer.status_code == 401
    assert "undolog_" not in answer.text


def test_a_wrong_token_is_refused_even_with_an_operators_cookie(web: TestClient) -> None:
    """A request that presents a token is judged by the token alone."""
    log_in(web, "dash_operator")
    answer = web.get("/metrics", headers={"Authorization": "Bearer guess"})
    assert answer.status_code == 401


def test_no_token_configured_refuses_every_token(dsn: str, passwords_checked: bool) -> None:
    with TestClient(create_app(without_user(dsn)), follow_redirects=False) as client:
        answer = client.get("/metrics", headers={"Authorization": "Bearer "})
        assert answer.status_code == 401
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 401


def test_a_metrics_login_without_the_role_reports_up_0(dsn: str, agent_dsn: str) -> None:
    app = create_app(without_user(dsn), metrics_token=TOKEN, metrics_dsn=agent_dsn)
    with TestClient(app, follow_redirects=False) as client:
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    got = samples(answer.text)
    assert got["undolog_up"] == 0
    assert 'undolog_sessions{state="active"}' not in got


def test_token_and_login_go_together(dsn: str, metrics_login: str) -> None:
    with pytest.raises(ValueError, match="together"):
        create_app(dsn, metrics_token=TOKEN)
    with pytest.raises(ValueError, match="together"):
        create_app(dsn, metrics_dsn=metrics_login)
    with pytest.raises(ValueError, match="blank"):
        create_app(dsn, metrics_token="  ", metrics_dsn=metrics_login)


def test_the_scrapers_connection_resolves_names_in_pg_catalog_alone(
    dsn: str, passwords_checked: bool, metrics_login: str
) -> None:
    """The metrics login's connection is pinned as the logins' are (_conninfo): a function
    an agent made in public (where any login may create) is not picked by its reads."""
    dashboard = Dashboard(without_user(dsn), metrics_token=TOKEN, metrics_dsn=metrics_login)
    with TestClient(dashboard.app(), follow_redirects=False) as client:
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert samples(answer.text)["undolog_up"] == 1
        conn, portal = dashboard._metrics_conn, client.portal
        assert conn is not None and portal is not None
        path = portal.call(conn.execute, "SHOW search_path")
        assert portal.call(path.fetchone) == ("pg_catalog, pg_temp",)
