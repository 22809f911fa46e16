"""The Tools page in a real browser (Chromium, the fixtures of test_dashboard_browser.py):
an operator registers a tool for an agent login, then retires it, confirming with a
reason."""

from __future__ import annotations

from typing import Any

import psycopg
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_dashboard_browser import browser, click_until, log_in, site

Conn = psycopg.Connection[Any]
__all__ = ["browser", "site"]  # fixtures shared with test_dashboard_browser


def registration(conn: Conn, tool: str) -> tuple[Any, ...] | None:
    row = conn.execute(
        "SELECT tool_id, tier, compensation, retired_by, retire_reason "
        "FROM undolog.undolog_tools WHERE owner_role = 'dash_agent' AND tool_name = %s",
        (tool,),
    ).fetchone()
    return None if row is None else tuple(row)


def test_an_operator_registers_a_tool_and_retires_it_through_the_pages(
    browser: webdriver.Chrome, site: str, conn: Conn
) -> None:
    log_in(browser, site, "dash_operator")
    browser.find_element(By.ID, "nav-tools").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "register-form"))
    browser.find_element(By.ID, "reg-tool").send_keys("book_room")
    browser.find_element(By.ID, "reg-owner").send_keys("dash_agent")
    browser.find_element(By.ID, "reg-compensation").send_keys(
        '{"name": "cancel_room", "max_attempts": 2}'
    )
    click_until(
        browser,
        "reg-submit",
        "tool book_room of dash_agent: registered as compensable",
        lambda: registration(conn, "book_room") is not None,
    )
    found = registration(conn, "book_room")
    assert found is not None
    tool_id, tier, compensation, retired_by, _ = found
    assert tier == "compensable" and retired_by is None
    assert compensation == {"name": "cancel_room", "args": {}, "max_attempts": 2}
    assert "cancel_room" in browser.find_element(By.ID, f"tool-{tool_id}").text

    click_until(browser, f"retire-{tool_id}", "Yes, retire it", lambda: False)
    assert "book_room" in browser.find_element(By.ID, "retire-title").text
    browser.find_element(By.ID, "retire-reason").send_keys("replaced by book_room_v2")
    click_until(
        browser,
        "retire-confirm",
        "tool book_room of dash_agent: retired by dash_operator",
        lambda: (registration(conn, "book_room") or (None,) * 5)[3] is not None,
    )
    assert registration(conn, "book_room") == (
        tool_id,
        "compensable",
        {"name": "cancel_room", "args": {}, "max_attempts": 2},
        "dash_operator",
        "replaced by book_room_v2",
    )
    assert not browser.find_elements(By.ID, f"tool-{tool_id}")  # live ones only
