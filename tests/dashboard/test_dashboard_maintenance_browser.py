"""The Maintenance page in a real browser (Chromium, the fixtures of
test_dashboard_browser.py): an operator runs partition maintenance and writes an anchor
through the page, and the page says what was done."""

from __future__ import annotations

from typing import Any

import psycopg
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_dashboard_browser import browser, click_until, log_in, site
from test_dashboard_maintenance import anchors, month, old_month, partitions

Conn = psycopg.Connection[Any]
__all__ = ["browser", "site"]  # fixtures shared with test_dashboard_browser


def test_an_operator_runs_maintenance_and_writes_an_anchor_through_the_page(
    browser: webdriver.Chrome, site: str, conn: Conn
) -> None:
    old_month(conn)
    log_in(browser, site, "dash_operator")
    browser.find_element(By.ID, "nav-maintenance").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "run-maintenance"))
    assert "undolog_effect_log_2024_01" in browser.find_element(By.ID, "plan-drop").text
    click_until(
        browser,
        "run-maintenance",
        "maintenance: run by dash_operator: created",
        lambda: anchors(conn) != [],
    )
    assert "dropped undolog_effect_log_2024_01" in browser.find_element(By.TAG_NAME, "main").text
    assert "undolog_effect_log_2024_01" not in partitions(conn)
    assert f"undolog_effect_log_{month(3)}" in partitions(conn)
    assert anchors(conn) == [1]
    assert browser.find_elements(By.ID, "anchor-1")

    click_until(
        browser,
        "write-anchor",
        "anchor: #2 written by dash_operator",
        lambda: len(anchors(conn)) > 1,
    )
    assert anchors(conn) == [1, 2]
    assert browser.find_elements(By.ID, "anchor-2")
    assert "none" in browser.find_element(By.ID, "plan-drop").text
