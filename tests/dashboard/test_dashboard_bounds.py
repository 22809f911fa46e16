"""The dashboard bounded: a scraper's /metrics answers undolog_up 0 within the scrape's
bound when the journal is locked or the metrics login's server never answers, and a
scrape stuck past its bound does not make the next ones queue; bad input in a filter or a
reason is a 4xx page that says what was wrong, with nothing written."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard import app_dsn, approval_row, log_in
from test_dashboard_hostile import serving
from test_dashboard_metrics import TOKEN, metrics_login, samples

from dashboard_helpers import csrf_of, halted_session, waiting_session
from undolog import metrics as undolog_metrics
from undolog.dashboard.app import Dashboard

__all__ = ["app_dsn", "metrics_login"]  # fixtures shared with the other dashboard tests
Conn = psycopg.Connection[Any]
# Prometheus's default scrape_timeout: a scrape must answer within it
# (docs/operations/monitoring.md), undolog_up 0 if it cannot read
BOUND = 10.0
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def scrape(client: httpx.Client) -> tuple[str, float]:
    started = time.monotonic()
    answer = client.get("/metrics", headers=BEARER)
    assert answer.status_code == 200
    return answer.text, time.monotonic() - started


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port where a server accepts connections and never answers (a hung host)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_a_locked_journal_answers_up_0_within_the_bound(
    app_dsn: str, dsn: str, metrics_login: str, passwords_checked: bool
) -> None:
    dashboard = Dashboard(app_dsn, metrics_token=TOKEN, metrics_dsn=metrics_login)
    with (
        psycopg.connect(dsn) as migration,
        serving(dashboard) as base,
        httpx.Client(base_url=base, timeout=BOUND + 5) as client,
    ):
        migration.execute("LOCK TABLE undolog.undolog_sessions IN ACCESS EXCLUSIVE MODE")
        for _ in range(2):  # the second is not stuck behind the first
            text, took = scrape(client)
            assert samples(text)["undolog_up"] == 0 and took < BOUND
            assert "lock timeout" in text
        migration.rollback()  # the migration ends: the next scrape reads
        assert samples(scrape(client)[0])["undolog_up"] == 1


def test_a_metrics_server_that_never_answers_is_up_0_within_the_bound(
    app_dsn: str, silent_port: int
) -> None:
    hung = f"host=127.0.0.1 port={silent_port} user=nobody dbname=nothing"
    dashboard = Dashboard(app_dsn, metrics_token=TOKEN, metrics_dsn=hung)
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=BOUND + 5) as client:
        for _ in range(2):
            text, took = scrape(client)
            assert samples(text)["undolog_up"] == 0 and took < BOUND


def test_a_stuck_scrape_does_not_make_the_next_ones_queue(
    app_dsn: str, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DSN's own connect_timeout wins over the scrape's: here longer than the whole
    scrape's bound (1 s for the test), which then cuts it short, and the next scrape is
    not kept waiting for the lock the cut one held."""
    monkeypatch.setattr(undolog_metrics, "SCRAPE_TIMEOUT", 1.0)
    hung = f"host=127.0.0.1 port={silent_port} user=nobody dbname=nothing connect_timeout=60"
    dashboard = Dashboard(app_dsn, metrics_token=TOKEN, metrics_dsn=hung)
    with serving(dashboard) as base, httpx.Client(base_url=base, timeout=BOUND) as client:
        for _ in range(3):
            text, took = scrape(client)
            assert samples(text)["undolog_up"] == 0 and took < 3
            assert "no answer within 1.0 s" in text


# --- bad input: a 4xx page, nothing written ---------------------------------------------


def test_a_time_zone_that_names_no_file_is_a_bad_filter(web: TestClient) -> None:
    log_in(web, "dash_approver")
    for tz in ("A" * 5000, "Europe"):  # too long to be a file name; a folder of zones
        page = web.get("/decisions", params={"tz": tz})
        assert page.status_code == 422, tz[:10]
        assert "tz: no such time zone" in page.text
        assert "A" * 100 not in page.text  # the name is cut, not echoed whole


def test_a_nul_in_the_sessions_filters_is_a_bad_filter(web: TestClient) -> None:
    log_in(web, "dash_operator")
    for name in ("q", "agent"):
        page = web.get("/sessions", params={name: "bot\x00"})
        assert page.status_code == 422, name
        assert f"{name}: holds a NUL character" in page.text
    assert web.get("/sessions", params={"q": "bot"}).status_code == 200


def test_a_nul_in_a_reason_is_the_persons_input(
    web: TestClient, dsn: str, app_dsn: str, conn: Conn
) -> None:
    halted = halted_session(dsn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{halted}").text)
    refused = web.post(f"/sessions/{halted}/abandon", data={"csrf": token, "reason": "why\x00"})
    assert refused.status_code == 422
    assert "NUL" in refused.text and "nothing was written" in refused.text
    assert conn.execute(
        "SELECT state, resolved_by FROM undolog.undolog_sessions WHERE session_id = %s",
        (halted,),
    ).fetchone() == ("halted", None)

    waiting = waiting_session(app_dsn)
    web.post("/logout", data={"csrf": token})
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    rejected = web.post(
        "/approvals/decide",
        data={
            "csrf": token,
            "reject_one": str(waiting.approval_id),
            f"reason_{waiting.approval_id}": "no\x00",
        },
    )
    assert rejected.status_code == 422 and "NUL" in rejected.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
