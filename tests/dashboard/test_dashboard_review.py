"""A second hostile review of the dashboard, on a real PostgreSQL with real logins: a
form's token of any characters, an undo the engine refuses, characters a browser does
not show as themselves, an agent's purpose of a megabyte, an undo stack of thousands,
and the operator's closing of requests past their deadline."""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import re
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard import app_dsn, approval_row, log_in
from test_dashboard_hostile import serving

from dashboard_helpers import (
    PASSWORD,
    as_login,
    book,
    confirm_form,
    csrf_of,
    session_state,
    waiting_session,
)
from expiry_support import expired_per_transaction, expiry_refused, in_sweep_order, past_deadline
from undolog import UndoLog, engine
from undolog.dashboard import queries
from undolog.dashboard.app import Dashboard
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn"]  # a fixture shared with test_dashboard


# --- a token of any characters --------------------------------------------------------


def test_a_form_token_of_any_characters_is_refused_not_a_500(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """hmac.compare_digest raises TypeError for a str with a non-ASCII character: a post
    whose token held one was a 500 instead of the 'form expired' page."""
    waiting = waiting_session(app_dsn)
    for token in ("é", "\u202e", "💥" * 40):
        page = web.get("/login")
        assert csrf_of(page.text)
        refused = web.post("/login", data={"csrf": token, "login": "x", "password": "y"})
        assert refused.status_code == 403, repr(token)
        assert "login form expired" in refused.text
    log_in(web, "dash_approver")
    posts = {
        "/approvals/decide": {"approve_one": str(waiting.approval_id)},
        f"/approvals/{waiting.approval_id}/edit": {"args": '{"cents": 1}'},
        "/approvals/expire": {},
        f"/sessions/{waiting.session_id}/rollback": {"reason": "r"},
        "/logout": {},
    }
    for path, data in posts.items():
        for token in ("é", "\u202e", "💥" * 40):
            refused = web.post(path, data={**data, "csrf": token})
            assert refused.status_code == 403, (path, token)
            assert "nothing was written" in refused.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    assert session_state(conn, waiting.session_id) == "awaiting_approval"
    assert web.get("/approvals").status_code == 200  # still logged in


# --- an undo the engine refuses -------------------------------------------------------


def live_session(app_dsn: str) -> tuple[uuid.UUID, psycopg.Connection[Any]]:
    """A live session of dash_agent with two committed bookings, and the agent's
    connection (open: the test ends the session with it)."""
    agent = psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True)
    sid = engine.begin_session(agent, None, "travel", {}, timedelta(hours=1))
    for step, item in enumerate(("flight", "hotel")):
        call = engine.intercept(
            agent, sid, step, "book", "compensable", {"item": item}, {"name": "cancel_booking"}
        )
        assert call.effect_id is not None
        engine.commit(agent, call.effect_id, {"booking": f"B-{item}"})
    return sid, agent


def form_fields(page: str, form_id: str) -> dict[str, str]:
    found = re.search(rf'<form[^>]*id="{form_id}"[^>]*>(.*?)</form>', page, re.S)
    assert found, f"no form {form_id}"
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found[1]))


def test_an_undo_the_engine_refuses_is_said_and_the_web_session_goes_on(
    app_dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    """The refusal's page was rendered while the person's connection was still held, and
    the page takes it again: the lock is not reentrant, so the request (and every later
    one of that web session: pages, live updates) waited for ever. A stale confirmation
    (the session finished between the two clicks) and an unknown session both did it."""
    sid, agent = live_session(app_dsn)
    with (
        agent,
        serving(Dashboard(app_dsn)) as base,
        httpx.Client(base_url=base, timeout=10) as web,
    ):
        token = csrf_of(web.get("/login").text)
        login = {"csrf": token, "login": "dash_operator", "password": PASSWORD}
        assert web.post("/login", data=login).status_code == 303
        token = csrf_of(web.get(f"/sessions/{sid}").text)

        unknown = web.post(f"/sessions/{uuid.uuid4()}/undo-to", data={"csrf": token, "step": "0"})
        assert unknown.status_code == 404 and "No session with that id" in unknown.text
        too_big = web.post(f"/sessions/{sid}/undo-to", data={"csrf": token, "step": "9" * 12})
        assert too_big.status_code == 404 and "No step of this session" in too_big.text

        plan = web.post(f"/sessions/{sid}/undo-to", data={"csrf": token, "step": "0"})
        assert plan.status_code == 200 and 'id="undo-to-confirm"' in plan.text
        engine.complete_session(agent, sid)  # the page is stale now: nothing to undo
        stale = web.post(
            f"/sessions/{sid}/undo-to",
            data={**form_fields(plan.text, "undo-to-form"), "reason": "wrong bookings"},
        )
        assert stale.status_code == 409, stale.text[-500:]
        assert 'class="flash error outcome"' in stale.text and "completed" in stale.text
        # the web session goes on: its pages and its live updates answer
        assert web.get(f"/sessions/{sid}").status_code == 200
        with web.stream("GET", f"/events?view=session&id={sid}") as events:
            assert events.status_code == 200
            assert next(events.iter_lines()).startswith("retry:")
    assert session_state(conn, sid) == "completed"


# --- characters a browser does not show as themselves ---------------------------------

# U+202E turns the rest of its line around: the text "4321-tcca" reads "acct-1234"
FLIPPED = "\u202e4321-tcca"
# invisible: a zero-width space, a tag character (a hidden "A"), a line separator, a
# variation selector supplement (a byte smuggled behind a letter), a Hangul filler
HIDDEN = "pay\u200b\U000e0041\u2028\U000e0172\u3164"
UNSEEN = re.compile("[\u202e\u200b\u2028\U000e0041\U000e0172\u3164]")


def test_characters_a_browser_does_not_show_are_spelled_out_on_every_page(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """An approver reads what an irreversible call will do: a bidi override in an
    argument showed another account than the one sent, and invisible characters hid
    text. Each is written out as JSON's escape (the same value, in JSON) everywhere an
    agent's text is shown; what a person typed goes back as typed."""
    waiting = waiting_session(
        app_dsn,
        agent=f"finance-bot {FLIPPED}",
        metadata={"purpose": f"refund {HIDDEN}"},
        cents=4200,
        note=FLIPPED,
    )
    other = waiting_session(app_dsn, cents=1)
    log_in(web, "dash_approver")
    inbox = web.get("/approvals")
    token = csrf_of(inbox.text)
    asked = web.post(
        "/approvals/decide",
        data={
            "csrf": token,
            "pick": [f"approve:{waiting.approval_id}", f"reject:{other.approval_id}"],
            f"reason_{other.approval_id}": f"no {FLIPPED}",
        },
    )
    assert 'id="confirm-approve"' in asked.text
    edit = web.get(f"/approvals/{waiting.approval_id}/edit")
    pages = {
        "inbox": inbox,
        "fragment": web.get("/approvals?fragment=1"),
        "confirm": asked,
        "edit": edit,
        "session": web.get(f"/sessions/{waiting.session_id}"),
        "session fragment": web.get(f"/sessions/{waiting.session_id}?fragment=1"),
        "sessions": web.get("/sessions"),
    }
    for name, page in pages.items():
        assert page.status_code == 200, name
        assert not UNSEEN.search(page.text.replace(f"no {FLIPPED}", "")), name
    assert "\\u202e4321-tcca" in pages["confirm"].text
    assert "refund pay\\u200b\\udb40\\udc41\\u2028\\udb40\\udd72\\u3164" in pages["confirm"].text
    assert "finance-bot \\u202e4321-tcca" in pages["inbox"].text

    # the edit page's JSON, spelled out, is the same arguments: approved unchanged
    args = re.search(r'<textarea name="args"[^>]*>(.*?)</textarea>', edit.text, re.S)
    assert args is not None and "\\u202e" in args[1]
    shown = web.post(
        f"/approvals/{waiting.approval_id}/edit",
        data={"csrf": token, "args": html.unescape(args[1]), "reason": "as asked"},
    )
    assert shown.status_code == 200 and 'id="edit-no-change"' in shown.text, shown.text[-800:]
    assert not UNSEEN.search(shown.text)

    # what the person typed (a reason) is sent back as typed, not spelled out
    done = web.post("/approvals/decide", data=confirm_form(asked.text))
    assert done.status_code == 303
    assert approval_row(conn, other.approval_id)[3] == f"no {FLIPPED}"


# --- bounds: a purpose of a megabyte, an undo stack of thousands ----------------------


def test_an_agents_long_purpose_is_cut_in_the_inbox_and_the_confirmation(
    web: TestClient, app_dsn: str
) -> None:
    """A purpose may be up to the engine's payload limit (1 MiB): shown whole for each of
    up to 200 requests, one agent made the inbox hundreds of megabytes, re-sent at every
    live change."""
    purpose = "refund " + "x" * 300_000
    waiting = waiting_session(app_dsn, metadata={"purpose": purpose})
    log_in(web, "dash_approver")
    inbox = web.get("/approvals")
    confirm = web.post(
        "/approvals/decide",
        data={"csrf": csrf_of(inbox.text), "approve_one": str(waiting.approval_id)},
    )
    for page in (inbox, web.get("/approvals?fragment=1"), confirm):
        assert page.status_code == 200
        assert len(page.text) < 50_000, len(page.text)
        assert "the whole purpose (300007 characters)" in page.text
        assert f'href="/sessions/{waiting.session_id}#purpose"' in page.text
    session = web.get(f"/sessions/{waiting.session_id}")
    assert purpose in session.text  # its session's page shows it whole


def deep_halt(dsn: str, calls: int, failing: int) -> uuid.UUID:
    """A session (of the installer's login) with ``calls`` bookings whose undo walk
    halted at booking number ``failing`` (its compensation failed for good), far down
    the stack."""
    ul = UndoLog(dsn, walk_wait=0.0)

    @ul.compensation("cancel_booking")
    def cancel_booking(call: CompensationCall) -> None:
        if call.call_args.get("item") == f"item-{failing}":
            raise ConnectionError("booking API down")

    sid = uuid.uuid4()
    quiet = logging.getLogger("undolog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        with contextlib.suppress(RuntimeError), ul.session(sid, agent="travel"):
            for i in range(calls):
                book(f"item-{i}")
            raise RuntimeError("the trip is off")
    finally:
        quiet.setLevel(level)
    return sid


def test_the_undo_stack_shown_is_bounded_and_keeps_the_entry_to_act_on(
    web: TestClient, dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry per compensable call: 100,000 calls made a 37 MB session page that took
    3.3 s to render, at every live change. The top entries are shown, and the one the
    walk halted at (with its Retry) wherever it is."""
    monkeypatch.setattr(queries, "MAX_UNDO_SHOWN", 10)
    sid = deep_halt(dsn, calls=40, failing=5)
    assert session_state(conn, sid) == "halted"
    halt = conn.execute(
        "SELECT halt_undo_id FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert halt is not None and halt[0] is not None
    log_in(web, "dash_operator")
    page = web.get(f"/sessions/{sid}")
    assert page.status_code == 200
    assert page.text.count('<tr id="undo-') == 11  # the top 10, and the halted entry
    assert f'<tr id="undo-{halt[0]}">' in page.text
    assert f'id="retry-{halt[0]}"' in page.text
    assert "40 entries: the top 11 shown" in page.text


# --- parity: the operator closes the requests past their deadline ---------------------


def test_an_operator_closes_the_requests_past_their_deadline(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """undolog.expire_approvals (the operator's, from cron) from the inbox: before, an
    operator could only wait for cron; an approver closes one at a time."""
    conn.execute(
        f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '300 milliseconds'"
    )
    late = waiting_session(app_dsn)
    time.sleep(0.4)
    log_in(web, "dash_approver")  # an approver is not offered it, and is refused
    inbox = web.get("/approvals")
    assert 'id="expire-late"' not in inbox.text
    refused = web.post("/approvals/expire", data={"csrf": csrf_of(inbox.text)})
    assert refused.status_code == 403 and "only an operator" in refused.text
    assert approval_row(conn, late.approval_id)[0] == "pending"
    web.post("/logout", data={"csrf": csrf_of(inbox.text)})

    log_in(web, "dash_operator")
    inbox = web.get("/approvals")
    assert 'id="expire-late"' in inbox.text and "(1 below)" in inbox.text
    done = web.post("/approvals/expire", data={"csrf": csrf_of(inbox.text)})
    assert done.status_code == 303 and done.headers["location"] == "/approvals"
    after = web.get("/approvals")
    assert "1 request(s) past their deadline closed as expired by dash_operator" in after.text
    assert 'id="expire-late"' not in after.text
    assert approval_row(conn, late.approval_id)[0] == "expired"
    again = web.post("/approvals/expire", data={"csrf": csrf_of(after.text)})
    assert again.status_code == 303
    assert "nothing was closed" in web.get("/approvals").text


def test_an_operator_closes_a_backlog_in_transactions_of_50(web: TestClient, conn: Conn) -> None:
    """A backlog is closed 50 to a transaction (aapprovals.SWEEP_BATCH), each committed
    before the next: when one is refused, the page says how many were closed before it."""
    due = past_deadline(conn, 70)
    log_in(web, "dash_operator")
    inbox = web.get("/approvals")
    with expiry_refused(conn, in_sweep_order(conn, due)[59]):
        refused = web.post("/approvals/expire", data={"csrf": csrf_of(inbox.text)})
    assert "refused by the test" in refused.text
    assert "(50 request(s) were closed as expired before it)" in refused.text
    assert expired_per_transaction(conn, due) == [50]
    done = web.post("/approvals/expire", data={"csrf": csrf_of(inbox.text)})
    assert done.status_code == 303
    after = web.get("/approvals").text
    assert "20 request(s) past their deadline closed as expired by dash_operator" in after
    assert expired_per_transaction(conn, due) == [50, 20]


def test_a_live_refresh_between_an_action_and_its_page_leaves_the_message(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """What was done is said once, on the next page: a live page's fragment fetched in
    between (the action changed what it shows, so it refreshes at once) took the message,
    and the person saw nothing."""
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    done = web.post(
        "/approvals/decide",
        data={
            "csrf": token,
            "reject_one": str(waiting.approval_id),
            f"reason_{waiting.approval_id}": "no",
        },
    )
    assert done.status_code == 303
    assert web.get("/approvals?fragment=1").status_code == 200  # the old page's refresh
    assert web.get("/sessions/counts").status_code == 200
    page = web.get("/approvals")
    assert f"{waiting.approval_id}: rejected by dash_approver" in page.text
    assert approval_row(conn, waiting.approval_id)[0] == "rejected"


def test_the_confirmation_shows_the_arguments_whole(
    web: TestClient, app_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox cuts long arguments; the page that approves for good does not: padded,
    they would push the argument that matters past the cut, out of the approver's sight.
    Rendered off the event loop (Dashboard.render_whole): marking the look-alikes of a
    MiB of arguments takes seconds, which stalled every other request."""
    on_loop: dict[str, bool] = {}
    render = Dashboard.render

    def recording(self: Dashboard, request: Any, name: str, *args: Any, **kw: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop[name] = True
        except RuntimeError:  # a worker thread's
            on_loop[name] = False
        return render(self, request, name, *args, **kw)

    monkeypatch.setattr(Dashboard, "render", recording)
    waiting = waiting_session(app_dsn, cents=777_777, note="n" * 5000)
    log_in(web, "dash_approver")
    inbox = web.get("/approvals")
    assert "cut at 2000" in inbox.text
    confirm = web.post(
        "/approvals/decide",
        data={"csrf": csrf_of(inbox.text), "approve_one": str(waiting.approval_id)},
    )
    assert confirm.status_code == 200
    assert "cut at" not in confirm.text
    assert "777777" in confirm.text and "n" * 5000 in confirm.text
    assert (on_loop["inbox.html"], on_loop["confirm.html"]) == (True, False)
