"""Edit, then approve, on the dashboard: the approval page's JSON edited, the changes shown
(server-rendered, every value HTML-escaped) before a one-time confirmation, then the
call approved with the edited arguments. Over HTTP (Starlette's TestClient) and in a real
browser (Debian's Chromium, Selenium, headless), on a real PostgreSQL with real logins."""

from __future__ import annotations

import html
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from starlette.testclient import TestClient

from dashboard_helpers import (
    PASSWORD,
    as_login,
    book,
    csrf_of,
    pay,
    served_dashboard,
    waiting_session,
    without_user,
)
from undolog import UndoLog, last_edit
from undolog.dashboard import create_app
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def client_as(dsn: str, login: str) -> TestClient:
    client = TestClient(create_app(without_user(dsn)), follow_redirects=False)
    client.__enter__()
    page = client.get("/login")
    answer = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
    )
    assert answer.status_code == 303
    return client


def _request(conn: Conn, approval_id: uuid.UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT a.state, a.approved_args, a.decided_by, a.reason, e.args, e.tool_name"
        " FROM undolog.undolog_approval_requests AS a"
        " JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)"
        " WHERE a.approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found is not None, name
    return html.unescape(found.group(1))


def _review(client: TestClient, approval_id: uuid.UUID, args: str, reason: str = "") -> Any:
    page = client.get(f"/approvals/{approval_id}/edit")
    assert page.status_code == 200, page.text
    return client.post(
        f"/approvals/{approval_id}/edit",
        data={"csrf": csrf_of(page.text), "args": args, "reason": reason},
    )


def _confirm(client: TestClient, approval_id: uuid.UUID, review: Any, **over: str) -> Any:
    form = {
        "csrf": csrf_of(review.text),
        "confirm": _hidden(review.text, "confirm"),
        "args": _hidden(review.text, "args"),
        "reason": _hidden(review.text, "reason"),
    }
    form.update(over)
    return client.post(f"/approvals/{approval_id}/edit", data=form)


def test_edit_shows_the_changes_then_approves_with_the_edited_args(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=50_000, note="rent")
    client = client_as(dsn, "dash_approver")
    inbox = client.get("/approvals")
    assert f'href="/approvals/{waiting.approval_id}/edit"' in inbox.text
    review = _review(client, waiting.approval_id, '{"cents": 5000, "note": "rent"}', "cap")
    assert review.status_code == 200
    assert "<del" in review.text and "50000" in review.text and "5000" in review.text
    assert 'id="change-1"' in review.text and 'id="change-2"' not in review.text  # cents only
    assert _request(conn, waiting.approval_id)[0] == "pending"  # shown, not approved yet
    done = _confirm(client, waiting.approval_id, review)
    assert done.status_code == 303, done.text
    state, approved, by, reason, args, tool = _request(conn, waiting.approval_id)
    assert (state, approved, by, reason) == (
        "approved",
        {"cents": 5000, "note": "rent"},
        "dash_approver",
        "cap",
    )
    assert (args, tool) == ({"cents": 50_000, "note": "rent"}, "pay")
    # the agent's call again: it runs with the approved args and learns so
    with UndoLog(as_login(dsn, "dash_agent")).session(waiting.session_id):
        book("room")
        assert pay(50_000, note="rent") == {"paid": 5000}
        edit = last_edit()
    assert edit is not None and edit.decided_by == "dash_approver"


def test_a_boolean_for_a_number_is_shown_as_the_change_it_is(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """What changes is what the journal tells apart: `true` for `1` is an edit (the
    engine records it, and the body runs with True), though Python's True == 1 made the
    page say "No change: this approves the call as asked". A number written another way
    (1.0 for 1) is the same value to the engine too: no change."""
    waiting = waiting_session(dsn, cents=1, note="")
    client = client_as(dsn, "dash_approver")
    review = _review(client, waiting.approval_id, '{"cents": true, "note": ""}')
    assert review.status_code == 200, review.text
    assert 'id="edit-no-change"' not in review.text
    assert 'id="change-1"' in review.text and "<code>cents</code>" in review.text
    same = _review(client, waiting.approval_id, '{"cents": 1.0, "note": ""}')
    assert 'id="edit-no-change"' in same.text
    assert _confirm(client, waiting.approval_id, review).status_code == 303
    assert _request(conn, waiting.approval_id)[1] == {"cents": True, "note": ""}


def test_what_changes_is_read_against_the_stored_request(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """The request's arguments as stored, not as Python reads them: an agent's
    0.10000000000000000001 is read as 0.1, and the page said "No change" for a typed 0.1
    that the engine, comparing with the stored jsonb, records as an edit. A nested true
    for 1 is a change as a top-level one is."""
    with psycopg.connect(as_login(dsn, "dash_agent"), autocommit=True) as agent:
        agent.execute("SELECT undolog.register_tool('pay', 'irreversible')")
        (sid,) = agent.execute("SELECT undolog.begin_session()").fetchone() or (None,)
        (approval_id,) = agent.execute(
            "SELECT approval_id FROM undolog.intercept(p_session_id => %s, p_step_index => 0,"
            " p_tool_name => 'pay', p_tier => 'irreversible',"
            ' p_args => \'{"cents": 0.10000000000000000001, "note": [1]}\'::jsonb,'
            " p_call_signature => %s)",
            (sid, call_signature(str(sid), 0, "pay", {"cents": 0.1, "note": [1]})),
        ).fetchone() or (None,)
    assert approval_id is not None
    client = client_as(dsn, "dash_approver")
    review = _review(client, approval_id, '{"cents": 0.1, "note": [1]}')
    assert review.status_code == 200, review.text
    assert 'id="edit-no-change"' not in review.text and "<code>cents</code>" in review.text
    nested = _review(client, approval_id, '{"cents": 0.1, "note": [true]}')
    assert "<code>note</code>" in nested.text
    same = _review(client, approval_id, '{"cents": 0.1, "note": [1.0]}')
    assert "<code>cents</code>" in same.text and "<code>note</code>" not in same.text
    # and what cannot be approved as typed is not offered for confirmation at all
    for typed in (
        '{"cents": 0.10000000000000000001, "note": [1]}',
        '{"cents": 1, "cents": 100, "note": [1]}',
        '{"cents": 9007199254740993, "note": [1]}',
    ):
        refused = _review(client, approval_id, typed)
        assert refused.status_code == 422 and "would not be approved as typed" in refused.text
    assert _request(conn, approval_id)[0] == "pending"


def test_the_nonce_is_for_these_args_once_and_a_decided_request_is_not_editable(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=900)
    client = client_as(dsn, "dash_approver")
    review = _review(client, waiting.approval_id, '{"cents": 90, "note": ""}')
    # other args than those shown, under the same nonce: asked again, nothing approved
    swapped = _confirm(client, waiting.approval_id, review, args='{"cents": 1, "note": ""}')
    assert swapped.status_code == 200 and 'id="confirm-stale"' in swapped.text
    assert _request(conn, waiting.approval_id)[0] == "pending"
    # the nonce was used up by the failed try: the first review's nonce is dead too
    again = _confirm(client, waiting.approval_id, review)
    assert 'id="confirm-stale"' in again.text
    assert _request(conn, waiting.approval_id)[0] == "pending"
    fresh = _review(client, waiting.approval_id, '{"cents": 90, "note": ""}')
    assert _confirm(client, waiting.approval_id, fresh).status_code == 303
    assert _request(conn, waiting.approval_id)[1] == {"cents": 90, "note": ""}
    # decided: the edit page and a replayed confirmation both say so, and change nothing
    assert client.get(f"/approvals/{waiting.approval_id}/edit").status_code == 409
    replayed = _confirm(client, waiting.approval_id, fresh)
    assert replayed.status_code == 409
    assert _request(conn, waiting.approval_id)[1] == {"cents": 90, "note": ""}


def test_bad_edits_are_refused_and_decide_nothing(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=700)
    client = client_as(dsn, "dash_approver")
    not_json = _review(client, waiting.approval_id, "{cents: 1")
    assert not_json.status_code == 422 and "not JSON" in not_json.text
    assert "{cents: 1</textarea>" in not_json.text  # the person's text is given back
    not_object = _review(client, waiting.approval_id, "[1, 2]")
    assert not_object.status_code == 422 and "must be a JSON object" in not_object.text
    for hostile in (
        '{"cents": 1, "note": "\\u0000"}',  # JSON may say U+0000; jsonb cannot hold it
        '{"cents": 1, "note": ' + "[" * 70 + "]" * 70 + "}",  # past the nesting limit
        '{"cents": 1, "note": ' + "[" * 100_000 + "]" * 100_000 + "}",  # past the parser's
    ):
        answer = _review(client, waiting.approval_id, hostile)
        assert answer.status_code == 422, answer.text[:300]
    # an edit that names another tool, session or argument: the engine refuses it (UL024)
    other = '{"cents": 1, "note": "", "tool_name": "drop_db", "session_id": "x"}'
    review = _review(client, waiting.approval_id, other)
    refused = _confirm(client, waiting.approval_id, review)
    assert refused.status_code == 422, refused.text
    assert "must name the same arguments" in html.unescape(refused.text)
    state, approved, _, _, args, tool = _request(conn, waiting.approval_id)
    assert (state, approved, args, tool) == ("pending", None, {"cents": 700, "note": ""}, "pay")


def test_agents_and_operators_cannot_edit(dsn: str, conn: Conn, passwords_checked: bool) -> None:
    waiting = waiting_session(dsn, cents=300)
    for login in ("dash_agent", "dash_operator"):
        client = client_as(dsn, login)
        assert client.get(f"/approvals/{waiting.approval_id}/edit").status_code == 403
        page = client.get("/sessions")
        answer = client.post(
            f"/approvals/{waiting.approval_id}/edit",
            data={"csrf": csrf_of(page.text), "args": '{"cents": 1, "note": ""}'},
        )
        assert answer.status_code == 403, login
    # a login that is agent and approver both cannot edit-approve its own call
    own = waiting_session(dsn, "dash_both", cents=300)
    client = client_as(dsn, "dash_both")
    review = _review(client, own.approval_id, '{"cents": 1, "note": ""}')
    assert _confirm(client, own.approval_id, review).status_code == 403
    assert _request(conn, waiting.approval_id)[0] == "pending"
    assert _request(conn, own.approval_id)[0] == "pending"


def test_html_in_edited_args_is_shown_escaped(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=100, note=XSS)
    client = client_as(dsn, "dash_approver")
    page = client.get(f"/approvals/{waiting.approval_id}/edit")
    edited = json.dumps({"cents": 100, "note": XSS + "</textarea><b>x</b>"})
    review = _review(client, waiting.approval_id, edited, reason=XSS)
    for text in (page.text, review.text):
        assert "<script>" not in text and "<img" not in text and "<b>x" not in text
    assert "&lt;script&gt;" in review.text
    assert _confirm(client, waiting.approval_id, review).status_code == 303
    assert _request(conn, waiting.approval_id)[1]["note"] == XSS + "</textarea><b>x</b>"
    assert _request(conn, waiting.approval_id)[3] == XSS
    # the decisions page shows what ran instead of what was asked, escaped too
    decisions = client.get("/decisions")
    assert decisions.status_code == 200
    row = decisions.text.split(f'id="decision-{waiting.approval_id}"', 1)[1].split("</tr>")[0]
    assert "approved with edited arguments" in row
    assert "&lt;/textarea&gt;&lt;b&gt;x&lt;/b&gt;" in row and "<b>x" not in row


# --- in a real browser ------------------------------------------------------------------


@pytest.fixture
def site(dsn: str, passwords_checked: bool) -> Iterator[str]:
    with served_dashboard(create_app(without_user(dsn))) as base:
        yield base


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):  # pragma: no cover
        pytest.fail("Chromium and its driver are missing: make deps installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path}",
    ):
        options.add_argument(flag)  # fmt: skip
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.get("about:blank")
        driver.quit()


def test_a_person_edits_reads_the_diff_and_confirms_in_a_browser(
    dsn: str, conn: Conn, site: str, browser: webdriver.Chrome
) -> None:
    waiting = waiting_session(dsn, cents=80_000, note=XSS)
    browser.get(f"{site}/login")
    browser.find_element(By.ID, "login").send_keys("dash_approver")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "login-submit").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "whoami"))
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, f"edit-{waiting.approval_id}"))
    browser.find_element(By.ID, f"edit-{waiting.approval_id}").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "edit-args"))
    box = browser.find_element(By.ID, "edit-args")
    assert json.loads(box.get_attribute("value") or "") == {"cents": 80_000, "note": XSS}
    box.clear()
    box.send_keys(json.dumps({"cents": 8_000, "note": XSS}))
    browser.find_element(By.ID, "edit-reason").send_keys("ten times too much")
    browser.find_element(By.ID, "edit-review").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "edit-changes"))
    # the diff is text on the page: the HTML in the args is shown, never run
    assert browser.find_elements(By.CSS_SELECTOR, "#edit-changes script") == []
    assert browser.find_elements(By.CSS_SELECTOR, "#edit-changes img") == []
    assert XSS in browser.find_element(By.ID, "edit-diff").text
    change = browser.find_element(By.ID, "change-1").text
    assert "cents" in change and "80000" in change and "8000" in change
    assert browser.find_elements(By.ID, "change-2") == []
    assert _request(conn, waiting.approval_id)[0] == "pending"
    browser.find_element(By.ID, "confirm-approve").click()
    WebDriverWait(browser, 5).until(lambda b: "/approvals" in b.current_url)
    WebDriverWait(browser, 5).until(lambda _: _request(conn, waiting.approval_id)[0] != "pending")
    state, approved, by, reason, args, _ = _request(conn, waiting.approval_id)
    assert (state, approved, by, reason) == (
        "approved",
        {"cents": 8_000, "note": XSS},
        "dash_approver",
        "ten times too much",
    )
    assert args == {"cents": 80_000, "note": XSS}
