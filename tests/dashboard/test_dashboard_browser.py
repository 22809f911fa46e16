"""The dashboard in a real browser: Debian's Chromium, driven by Selenium (headless),
against the real server (uvicorn) on a real PostgreSQL, with a real agent process
waiting on a human's decision. Screenshots go to .tmp/screenshots/ (git-ignored);
UNDOLOG_DOCS_SCREENSHOT=1 also writes docs/img/dashboard.png (make dashboard-screenshot).
"""

from __future__ import annotations

import contextlib
import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from dashboard_helpers import (
    PASSWORD,
    active_session,
    as_login,
    halted_session,
    served_dashboard,
    waiting_session,
    without_user,
)
from undolog import links
from undolog.dashboard import create_app

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".tmp" / "screenshots"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
Conn = psycopg.Connection[Any]

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):  # pragma: no cover
    pytest.fail(
        "Chromium and its driver are missing: make deps installs them "
        "(apt-get install chromium chromium-driver)",
        pytrace=False,
    )


def _chromium(profile: Path, javascript: bool = True) -> webdriver.Chrome:
    """A headless Chromium of its own profile; with JavaScript switched off unless
    `javascript`."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        "--lang=en-US",  # the time zone names the tests read ("GMT+9")
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    driver = _chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.implicitly_wait(0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


LINK_SECRET = "browser-link-secret-" + uuid.uuid4().hex


@pytest.fixture
def with_link_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """The links' key in the environment, where create_app reads it: ask for it before
    ``site``."""
    monkeypatch.setenv(links.SECRET_ENV, LINK_SECRET)
    return LINK_SECRET


@pytest.fixture
def site(dsn: str, passwords_checked: bool, browser: webdriver.Chrome) -> Iterator[str]:
    """The real server (uvicorn, in a thread) on a free port; answers its base URL."""
    with serve(create_app(without_user(dsn)), browser) as base:
        yield base


@contextlib.contextmanager
def serve(app: Any, browser: webdriver.Chrome) -> Iterator[str]:
    """``app`` on the real server (served_dashboard): its base URL; the browser leaves
    the page first (closing its event stream) so that the server stops at once."""
    with served_dashboard(app, timeout_graceful_shutdown=1) as base:
        try:
            yield base
        finally:
            browser.get("about:blank")


def log_in(browser: webdriver.Chrome, site: str, login: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{site}/login")
    browser.find_element(By.ID, "login").send_keys(login)
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "login-submit").click()
    # a bound, not a wait: a login opens two connections, a loaded machine's in seconds
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "whoami"))
    assert browser.find_element(By.ID, "whoami").text == login


# Seconds a decision may take to show on the page after its click (a loaded machine).
DECIDED_WITHIN = 40


def shot(browser: webdriver.Chrome, name: str) -> None:
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def start_agent(dsn: str, ledger: Path) -> tuple[subprocess.Popen[str], uuid.UUID]:
    agent = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "dashboard_agent.py"), dsn, str(ledger)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None
    line = agent.stdout.readline().split()
    assert line[:1] == ["waiting"], line
    return agent, uuid.UUID(line[1])


def finish(agent: subprocess.Popen[str]) -> list[str]:
    out, _ = agent.communicate(timeout=30)
    assert agent.returncode == 0, out
    return out.split()


def appears(browser: webdriver.Chrome, element_id: str, timeout: float = 5.0) -> float:
    """Seconds until the element is on the page (which must not reload meanwhile)."""
    started = time.monotonic()
    WebDriverWait(browser, timeout, poll_frequency=0.05).until(
        lambda b: b.find_elements(By.ID, element_id)
    )
    assert browser.execute_script("return window.undologMarker") == "not reloaded"
    return time.monotonic() - started


def settled(browser: webdriver.Chrome, quiet: float = 0.5, timeout: float = 10.0) -> None:
    """Until the live fragment has not been swapped for ``quiet`` seconds: one change can
    bring several refreshes (the request, then its session's move), and a swap between
    finding a button and clicking it moves what lies under the click."""
    last, since = None, time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        now = browser.find_element(By.ID, "live").get_attribute("data-refreshed")
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)
    raise AssertionError(f"the live fragment kept changing for {timeout} s")


def click_until(
    browser: webdriver.Chrome,
    element_id: str,
    shown: str,
    took: Callable[[], bool],
    within: float = DECIDED_WITHIN,
) -> None:
    """The pointer's own click on the element, until the page shows ``shown``. A click
    that lands while the live fragment settles after a swap (dashboard.js) is swallowed,
    as a person's would be, and a person clicks again: so does this, unless ``took()``
    says the click before did take (then only the page is waited for). The page's
    messages are in the failure."""
    deadline = time.monotonic() + within
    while True:
        found = browser.find_elements(By.ID, element_id)
        if found and not took():
            with contextlib.suppress(WebDriverException):  # swapped under it: again
                ActionChains(browser).move_to_element(found[0]).click().perform()
        with contextlib.suppress(TimeoutException):
            WebDriverWait(browser, 3).until(lambda b: shown in b.page_source)
            return
        if time.monotonic() > deadline:
            said = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".flash")]
            raise AssertionError(f"{shown!r} not shown within {within} s; the page says {said}")


def test_approver_sees_a_request_live_approves_it_and_rejects_another(
    browser: webdriver.Chrome, site: str, dsn: str, conn: Conn, tmp_path: Path
) -> None:
    agent_dsn = as_login(without_user(dsn), "dash_agent")
    ledger = tmp_path / "ledger.txt"
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 hour'")
    log_in(browser, site, "dash_approver")
    browser.get(f"{site}/approvals")
    assert browser.find_elements(By.ID, "inbox-empty")
    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    browser.execute_script("window.undologMarker = 'not reloaded'")

    agent, approval_id = start_agent(agent_dsn, ledger)
    waited = appears(browser, f"req-{approval_id}")
    print(f"request appeared live after {waited:.2f}s")
    assert waited < 3.0
    row = browser.find_element(By.ID, f"req-{approval_id}")
    assert "<img src=x onerror=alert(1)>" in row.text  # shown as text, not markup
    assert "book" in row.text  # what the session did before
    countdown = row.find_element(By.CLASS_NAME, "countdown").text
    assert re.fullmatch(r"expires in (1h 0m 0s|59m \d+s)", countdown), countdown
    shot(browser, "inbox")
    if os.environ.get("UNDOLOG_DOCS_SCREENSHOT") == "1":
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copy(SHOTS / "inbox.png", ROOT / "docs" / "img" / "dashboard.png")

    # One click only asks: a page restates the call, and a second button approves it.
    browser.find_element(By.ID, f"approve-{approval_id}").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "confirm-approve"))
    asked = browser.find_element(By.ID, f"confirm-{approval_id}").text
    assert "pay" in asked and "4200" in asked and "<img src=x onerror=alert(1)>" in asked
    assert "dash_agent" in asked and "browser-agent" in asked and "agent's own claim" in asked
    assert not browser.find_elements(By.CSS_SELECTOR, "main img")  # the argument is text
    shot(browser, "confirm")
    decided = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert decided == ("pending",)
    assert not ledger.exists() or ledger.read_text() == ""  # not paid yet
    browser.find_element(By.ID, "confirm-approve").click()
    WebDriverWait(browser, DECIDED_WITHIN).until(
        lambda b: "approved by dash_approver" in b.page_source
    )
    assert finish(agent)[-2:] == ["approved", "done"]
    assert ledger.read_text().splitlines() == ["paid 4200"]  # the call ran, once

    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    browser.execute_script("window.undologMarker = 'not reloaded'")
    agent, second = start_agent(agent_dsn, ledger)
    appears(browser, f"req-{second}")
    settled(browser)
    browser.find_element(By.ID, f"reason-{second}").send_keys("not this month")

    def rejected() -> bool:
        state = conn.execute(
            "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
            (second,),
        ).fetchone()
        return state != ("pending",)

    click_until(browser, f"reject-{second}", "rejected by dash_approver", rejected)
    assert finish(agent)[-2:] == ["rejected", "done"]
    assert ledger.read_text().splitlines() == ["paid 4200"]  # not paid again
    row2 = conn.execute(
        "SELECT state, decided_by, reason FROM undolog.undolog_approval_requests "
        "WHERE approval_id = %s",
        (second,),
    ).fetchone()
    assert row2 == ("rejected", "dash_approver", "not this month")
    shot(browser, "inbox-after")

    # both decisions, on the page of past decisions, filtered to the approver's own
    browser.find_element(By.ID, "nav-decisions").click()
    browser.find_element(By.ID, "f-mine").click()
    browser.find_element(By.ID, "f-today").click()
    browser.find_element(By.ID, "f-apply").click()
    WebDriverWait(browser, 5).until(lambda b: "mine=1" in b.current_url)
    shown = {
        r.get_attribute("data-approval"): r.text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.decision")
    }
    assert set(shown) == {str(approval_id), str(second)}
    assert "Approved" in shown[str(approval_id)] and "Rejected" in shown[str(second)]
    assert "not this month" in shown[str(second)]
    assert "<img src=x onerror=alert(1)>" in shown[str(approval_id)]
    assert not browser.find_elements(By.CSS_SELECTOR, "main img")
    shot(browser, "decisions-mine")


def test_operator_resumes_a_halted_session_and_rolls_back_a_live_one(
    browser: webdriver.Chrome, site: str, dsn: str, conn: Conn
) -> None:
    halted = halted_session(dsn)
    live = active_session(without_user(dsn))
    log_in(browser, site, "dash_operator")

    browser.get(f"{site}/sessions/{halted}")
    assert "booking API down" in browser.find_element(By.ID, "halted").text
    shot(browser, "halted")
    browser.find_element(By.ID, "resume-reason").send_keys("cancelled by phone")
    browser.find_element(By.ID, "resume").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "operator-actions"))
    assert "resume by dash_operator" in browser.find_element(By.ID, "operator-actions").text
    assert not browser.find_elements(By.ID, "resume")
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (halted,)
    ).fetchone()
    assert state is not None and state[0] in ("compensating", "compensated")

    browser.get(f"{site}/sessions/{live}")
    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    browser.execute_script("window.undologMarker = 'not reloaded'")
    # The agent makes another call: the open page shows it without a reload.
    with psycopg.connect(as_login(without_user(dsn), "dash_agent"), autocommit=True) as agent:
        from undolog import engine

        engine.intercept(agent, live, 1, "book", "compensable", {"item": "second"}, {"name": "x"})
    waited = appears(browser, "call-1")
    print(f"session page updated live after {waited:.2f}s")
    browser.find_element(By.ID, "rollback-reason").send_keys("the customer cancelled")
    browser.find_element(By.ID, "rollback").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(By.ID, "operator-actions"))
    assert "rollback by dash_operator" in browser.find_element(By.ID, "operator-actions").text
    assert not browser.find_elements(By.ID, "rollback")
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (live,)
    ).fetchone()
    assert state == ("failed",)
    shot(browser, "rolled-back")


def test_an_agent_login_sees_only_its_sessions_and_no_decision_buttons(
    browser: webdriver.Chrome, site: str, dsn: str
) -> None:
    own = waiting_session(without_user(dsn), login="dash_agent")
    other = waiting_session(without_user(dsn), login="dash_agent2")
    log_in(browser, site, "dash_agent")
    browser.get(f"{site}/sessions")
    listed = {
        r.get_attribute("data-session")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.session-row")
    }
    assert listed == {str(own.session_id)}
    assert not browser.find_elements(By.ID, "nav-approvals")
    browser.get(f"{site}/sessions/{own.session_id}")
    assert "pending" in browser.find_element(By.ID, f"approval-{own.approval_id}").text
    assert not browser.find_elements(By.CSS_SELECTOR, "button.approve, button.reject")
    assert not browser.find_elements(By.CSS_SELECTOR, "#rollback, #resume, #abandon")
    shot(browser, "agent-session")
    browser.get(f"{site}/sessions/{other.session_id}")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text


def test_a_live_page_says_so_when_the_persons_connection_is_killed(
    browser: webdriver.Chrome, site: str, conn: Conn
) -> None:
    log_in(browser, site, "dash_approver")
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    browser.execute_script("window.undologMarker = 'not reloaded'")
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE usename = 'dash_approver' AND application_name = 'undolog-dashboard'"
    )
    appears(browser, "live-status")
    note = browser.find_element(By.ID, "live-status")
    assert "connection to the database was closed" in note.text and "Log in again" in note.text
    shot(browser, "connection-lost")


def test_the_fifth_login_elsewhere_logs_the_oldest_page_out_and_says_why(
    browser: webdriver.Chrome, site: str
) -> None:
    """The browser's web session is the oldest: four more logins of the same person (other
    devices) replace it, its open page goes to the login page, which says why. The page
    reads the database twice a second, and on a loaded machine the replacement landed
    while a read was in flight on the connection it closed: the fourth login was refused
    ("the database cannot be reached"), or the page said its connection was lost (see
    test_dashboard's test_a_web_session_ends_after_the_read_on_its_connection_not_under_it).
    The bounds below are a loaded machine's, not waits: each ends when the page shows it."""
    import httpx

    from dashboard_helpers import csrf_of
    from undolog.dashboard.websessions import MAX_SESSIONS_PER_LOGIN

    log_in(browser, site, "dash_approver")
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 20).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    # httpx's own bound is 5 s: a login, two connections with password authentication
    # and the replaced one's closing, took longer on a loaded machine
    elsewhere = [
        httpx.Client(base_url=site, timeout=DECIDED_WITHIN) for _ in range(MAX_SESSIONS_PER_LOGIN)
    ]
    try:
        for client in elsewhere:
            token = csrf_of(client.get("/login").text)
            answer = client.post(
                "/login", data={"csrf": token, "login": "dash_approver", "password": PASSWORD}
            )
            assert answer.status_code == 303
        WebDriverWait(browser, DECIDED_WITHIN).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, "#login-notice, #live-status")
        )
        # not a page that says its updates stopped, rather than that it was logged out
        stopped = browser.find_elements(By.ID, "live-status")
        assert not stopped, stopped[0].text
        notice = browser.find_element(By.ID, "login-notice").text
        assert "logged out here because dash_approver logged in somewhere else" in notice
        shot(browser, "replaced")
        browser.get(f"{site}/approvals")  # the old cookie no longer works
        assert browser.current_url.endswith("/login")
        for client in elsewhere:
            assert client.get("/approvals").status_code == 200
    finally:
        for client in elsewhere:
            client.close()


def test_times_are_shown_in_the_viewers_time_zone(
    browser: webdriver.Chrome, site: str, dsn: str
) -> None:
    waiting = waiting_session(without_user(dsn))
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    try:
        log_in(browser, site, "dash_approver")
        browser.get(f"{site}/sessions/{waiting.session_id}")
        stamp = browser.find_element(By.CSS_SELECTOR, "#session-states time")
        utc = stamp.get_attribute("datetime")
        assert utc is not None
        shown = stamp.text
        assert shown.endswith("GMT+9"), shown
        utc_hour = int(utc[11:13])
        assert int(shown[11:13]) == (utc_hour + 9) % 24, (utc, shown)
        assert (stamp.get_attribute("title") or "").endswith("UTC")  # the original, on hover
        history = browser.find_element(By.CSS_SELECTOR, "pre.history").text
        assert "GMT+9" in history, history
        # "decided today" is the viewer's day: the page sends its zone
        browser.get(f"{site}/decisions")
        browser.find_element(By.ID, "f-today").click()
        browser.find_element(By.ID, "f-apply").click()
        WebDriverWait(browser, 5).until(lambda b: "tz=Asia" in b.current_url)
        scope = browser.find_element(By.ID, "decisions-scope").text
        assert "the start of today, Asia/Tokyo" in scope and "GMT+9" in scope
        shot(browser, "decisions")
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def test_a_click_just_as_the_list_changes_lands_on_nothing(
    browser: webdriver.Chrome, site: str, dsn: str, conn: Conn
) -> None:
    """A new request moves the inbox's rows: for a moment after the swap (dashboard.js
    settle; 5 s here, 400 ms in use) a click on a button decides nothing, so a click aimed
    at one row cannot reject the row that moved under it. Then the same click works."""
    first = waiting_session(without_user(dsn), cents=101)
    log_in(browser, site, "dash_approver")
    browser.get(f"{site}/approvals")
    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-live") == "open"
    )
    browser.execute_script("document.getElementById('live').dataset.settleMs = '5000'")
    swapped = browser.find_element(By.ID, "live").get_attribute("data-refreshed")
    second = waiting_session(without_user(dsn), cents=202)
    WebDriverWait(browser, 10).until(
        lambda b: (
            b.find_element(By.ID, "live").get_attribute("data-refreshed") != swapped
            and b.find_elements(By.ID, f"req-{second.approval_id}")
        )
    )
    assert browser.find_element(By.ID, "live").get_attribute("data-settling") == "1"
    # the pointer's own click at the button (WebDriver's element click refuses a button
    # that would not take it)
    ActionChains(browser).move_to_element(
        browser.find_element(By.ID, f"reject-{first.approval_id}")
    ).click().perform()
    time.sleep(0.5)  # a form sent would be on its way
    pending = conn.execute(
        "SELECT count(*) FROM undolog.undolog_approval_requests WHERE state = 'pending'"
    ).fetchone()
    assert pending == (2,)
    assert browser.find_elements(By.ID, f"req-{first.approval_id}")
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "live").get_attribute("data-settling") is None
    )
    # a later swap (a slow machine's) settles in the page's own 400 ms again
    browser.execute_script("delete document.getElementById('live').dataset.settleMs")
    click_until(browser, f"approve-{first.approval_id}", 'id="confirm-approve"', lambda: False)
    assert "101" in browser.find_element(By.ID, f"confirm-{first.approval_id}").text


def test_the_two_step_approval_works_without_javascript(
    site: str, dsn: str, conn: Conn, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Chromium with JavaScript switched off: both steps are plain forms, and times read
    in UTC."""
    plain = _chromium(tmp_path_factory.mktemp("chromium-nojs"), javascript=False)
    try:
        waiting = waiting_session(without_user(dsn), cents=777)
        log_in(plain, site, "dash_approver")
        plain.get(f"{site}/approvals")
        time.sleep(0.5)
        # the page's script never ran: it would have opened the live stream
        assert plain.find_element(By.ID, "live").get_attribute("data-live") is None
        plain.get(f"{site}/sessions/{waiting.session_id}")
        stamp = plain.find_element(By.CSS_SELECTOR, "#session-states time")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp.text), stamp.text
        plain.get(f"{site}/approvals")
        plain.find_element(By.ID, f"approve-{waiting.approval_id}").click()
        WebDriverWait(plain, 10).until(lambda b: b.find_elements(By.ID, "confirm-approve"))
        assert "777" in plain.find_element(By.ID, f"confirm-{waiting.approval_id}").text
        state = conn.execute(
            "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
            (waiting.approval_id,),
        ).fetchone()
        assert state == ("pending",)
        plain.find_element(By.ID, "confirm-approve").click()
        WebDriverWait(plain, 5).until(lambda b: "approved by dash_approver" in b.page_source)
        state = conn.execute(
            "SELECT state, decided_by FROM undolog.undolog_approval_requests "
            "WHERE approval_id = %s",
            (waiting.approval_id,),
        ).fetchone()
        assert state == ("approved", "dash_approver")
    finally:
        plain.get("about:blank")
        plain.quit()


@pytest.fixture
def mail_client() -> Iterator[Callable[[str], str]]:
    """A page of ANOTHER site (localhost, where the dashboard is 127.0.0.1) holding a
    link, as a mail client or a chat shows it: mail_client(link) -> the page's URL."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def page(link: str) -> str:
        path = f"/mail-{len(pages)}.html"
        pages[path] = (
            f'<html><body><a id="open" href="{html.escape(link, quote=True)}">Open the '
            "request in the dashboard</a></body></html>"
        ).encode()
        return f"http://localhost:{server.server_address[1]}{path}"

    yield page
    server.shutdown()
    server.server_close()


def click_from_mail(browser: webdriver.Chrome, mail: str) -> None:
    browser.get(mail)
    browser.find_element(By.ID, "open").click()


def test_a_signed_link_clicked_in_a_mail_opens_the_request_for_a_person_logged_in(
    with_link_secret: str,
    site: str,
    dsn: str,
    conn: Conn,
    browser: webdriver.Chrome,
    mail_client: Callable[[str], str],
) -> None:
    """The click comes from another site, so the SameSite=Strict session cookie is not
    sent with it: the dashboard's own page goes on, and the person, already logged in,
    lands on the request (not on the login page), then decides with the page's form."""
    waiting = waiting_session(without_user(dsn), cents=4242)
    link = links.signed_url(site, waiting.approval_id, with_link_secret, links.expiry(600))
    log_in(browser, site, "dash_approver")
    click_from_mail(browser, mail_client(link))
    WebDriverWait(browser, 10).until(
        lambda b: f"/sessions/{waiting.session_id}#approval-{waiting.approval_id}" in b.current_url
    )
    assert browser.find_element(By.ID, "whoami").text == "dash_approver"
    shot(browser, "signed-link")
    # the link opened the page; the request still waits for the person's decision
    state = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (waiting.approval_id,),
    ).fetchone()
    assert state == ("pending",)
    row = browser.find_element(By.ID, f"approval-{waiting.approval_id}")
    row.find_element(By.CSS_SELECTOR, "button.approve").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "confirm-approve"))
    browser.find_element(By.ID, "confirm-approve").click()
    WebDriverWait(browser, 5).until(lambda b: "approved by dash_approver" in b.page_source)

    # logged out: the login page first, then the request
    browser.delete_all_cookies()
    other = waiting_session(without_user(dsn), cents=99)
    click_from_mail(
        browser,
        mail_client(links.signed_url(site, other.approval_id, with_link_secret, links.expiry(600))),
    )
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "login"))
    browser.find_element(By.ID, "login").send_keys("dash_approver")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "login-submit").click()
    WebDriverWait(browser, 10).until(
        lambda b: f"/sessions/{other.session_id}#approval-{other.approval_id}" in b.current_url
    )
    assert browser.find_element(By.ID, "whoami").text == "dash_approver"


def test_a_tampered_or_expired_link_opens_nothing_and_says_what_to_do(
    with_link_secret: str,
    site: str,
    dsn: str,
    browser: webdriver.Chrome,
    mail_client: Callable[[str], str],
) -> None:
    waiting = waiting_session(without_user(dsn))
    log_in(browser, site, "dash_approver")
    good = links.signed_url(site, waiting.approval_id, with_link_secret, links.expiry(600))
    bad = {
        "tampered": (good[:-1] + ("0" if good[-1] != "0" else "1"), "Link not valid"),
        "wrong key": (
            links.signed_url(
                site, waiting.approval_id, "another-key-0123456789", links.expiry(600)
            ),
            "Link not valid",
        ),
        "expired": (
            links.signed_url(site, waiting.approval_id, with_link_secret, int(time.time()) - 1),
            "Link expired",
        ),
    }
    for what, (link, title) in bad.items():
        click_from_mail(browser, mail_client(link))
        WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "problem"))
        assert browser.find_element(By.TAG_NAME, "h1").text == title, what
        text = browser.find_element(By.ID, "problem").text
        assert "opens nothing" in text and "log in and find" in text, (what, text)
        assert str(waiting.session_id) not in browser.page_source, what
        assert "4242" not in browser.page_source and "pay" not in text, what


def test_a_live_page_refused_its_stream_says_why_and_refreshes_itself(
    browser: webdriver.Chrome,
    dsn: str,
    passwords_checked: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Agent-only logins hold every live stream they may (the dashboard's cap on live
    pages, here from a small open-file limit): an agent's page is refused its stream.
    It says why, in the server's words, and fetches its fresh fragment every Retry-After
    seconds instead (1 s here, 30 in use), so a new call still shows without a reload."""
    import httpx

    from dashboard_helpers import csrf_of
    from undolog import engine
    from undolog.dashboard import app as dashboard_app

    monkeypatch.setattr(dashboard_app, "LIVE_RETRY_SECONDS", 1)
    dashboard = dashboard_app.Dashboard(without_user(dsn), nofile=568)
    agents_share = dashboard.live_caps.agents
    assert agents_share <= dashboard_app.MAX_STREAMS  # one web session fills it
    mine = active_session(without_user(dsn), "dash_agent")
    theirs = active_session(without_user(dsn), "dash_agent2")
    with (
        serve(dashboard.app(), browser) as base,
        httpx.Client(base_url=base, timeout=DECIDED_WITHIN) as other,
        contextlib.ExitStack() as streams,
    ):
        token = csrf_of(other.get("/login").text)
        login = {"csrf": token, "login": "dash_agent2", "password": PASSWORD}
        assert other.post("/login", data=login).status_code == 303
        for _ in range(agents_share):
            stream = streams.enter_context(other.stream("GET", f"/events?view=session&id={theirs}"))
            assert stream.status_code == 200
        log_in(browser, base, "dash_agent")
        browser.get(f"{base}/sessions/{mine}")
        browser.execute_script("window.undologMarker = 'not reloaded'")
        appears(browser, "live-status", DECIDED_WITHIN)
        note = browser.find_element(By.ID, "live-status").text
        assert "Live updates refused" in note and "without a staff role" in note, note
        assert "refreshes itself every 1 s" in note, note
        assert browser.find_element(By.ID, "live").get_attribute("data-live") == "polling"
        shot(browser, "live-refused")
        # the agent makes another call: the page shows it, refreshed by itself
        with psycopg.connect(as_login(without_user(dsn), "dash_agent"), autocommit=True) as agent:
            engine.intercept(
                agent, mine, 1, "book", "compensable", {"item": "second"}, {"name": "x"}
            )
        appears(browser, "call-1", DECIDED_WITHIN)
