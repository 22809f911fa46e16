"""The second hostile review's changes in a real browser (Chromium, the fixtures of
test_dashboard_browser.py): an operator closes the requests past their deadline from the
inbox, and an approver reads a bidi override in a call's arguments written out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_dashboard_browser import browser, click_until, log_in, settled, site

from dashboard_helpers import waiting_session, without_user

Conn = psycopg.Connection[Any]
__all__ = ["browser", "site"]  # fixtures shared with test_dashboard_browser


def request_state(conn: Conn, approval_id: object) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def request_expired(conn: Conn, approval_id: object) -> bool:
    row = conn.execute(
        "SELECT expired FROM undolog.pending_approvals WHERE approval_id = %s", (approval_id,)
    ).fetchone()
    return row is not None and bool(row[0])


def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not so within {within} s"
        time.sleep(0.1)


def test_an_operator_closes_the_requests_past_their_deadline_from_the_inbox(
    browser: webdriver.Chrome, site: str, dsn: str, conn: Conn
) -> None:
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 s'")
    late = waiting_session(without_user(dsn))
    eventually(lambda: request_expired(conn, late.approval_id))
    log_in(browser, site, "dash_operator")
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "expire-late"))
    assert "(1 below)" in browser.find_element(By.ID, "expire-form").text
    settled(browser)
    click_until(
        browser,
        "expire-late",
        "closed as expired by dash_operator",
        lambda: request_state(conn, late.approval_id) != "pending",
    )
    assert request_state(conn, late.approval_id) == "expired"
    assert not browser.find_elements(By.ID, "expire-late")
    assert browser.find_elements(By.ID, "inbox-empty")


def test_an_approver_reads_a_bidi_override_in_the_arguments_written_out(
    browser: webdriver.Chrome, site: str, dsn: str, conn: Conn
) -> None:
    """U+202E turns the rest of its line around: "4321-tcca" would read "acct-1234" on
    the page that asks to approve an irreversible payment."""
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 hour'")
    waiting = waiting_session(
        without_user(dsn), agent="payer \u202ebot", cents=4200, note="\u202e4321-tcca"
    )
    log_in(browser, site, "dash_approver")
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, f"req-{waiting.approval_id}"))
    row = browser.find_element(By.ID, f"req-{waiting.approval_id}").text
    assert "\\u202e4321-tcca" in row and "payer \\u202ebot" in row
    assert "\u202e" not in row
    settled(browser)
    click_until(
        browser,
        f"approve-{waiting.approval_id}",
        "Yes, approve this irreversible call",
        lambda: False,
    )
    asked = browser.find_element(By.ID, f"confirm-{waiting.approval_id}").text
    assert '"note": "\\u202e4321-tcca"' in asked and "\u202e" not in asked
    browser.find_element(By.ID, "confirm-approve").click()
    eventually(lambda: request_state(conn, waiting.approval_id) == "approved")
