"""The arguments an edited approval ran with, read on the dashboard: an approver edits a
call's arguments, then approves (the call then runs with the edited ones); the session's
page and Past decisions show them on the approval, cut like the calls' payloads with
"…", their length and a link to the whole value, which only those who may see the
session read. Over HTTP (Starlette's TestClient), on a real PostgreSQL with real logins."""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

import psycopg
from starlette.testclient import TestClient
from test_dashboard_edit import client_as

from dashboard_helpers import confirm_form, csrf_of, waiting_session

Conn = psycopg.Connection[Any]
LONG_NOTE = "n" * 400  # jsonb orders keys by length: "cents" comes after the 400 n's
XSS = "<script>alert(1)</script>"


def _hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found is not None, name
    return html.unescape(found.group(1))


def edit_then_approve(client: TestClient, approval_id: uuid.UUID, args: dict[str, Any]) -> None:
    """The approval page's "Edit, then approve": the edit, then its confirmation."""
    page = client.get(f"/approvals/{approval_id}/edit")
    review = client.post(
        f"/approvals/{approval_id}/edit",
        data={"csrf": csrf_of(page.text), "args": json.dumps(args), "reason": "cap it"},
    )
    assert review.status_code == 200, review.text[:500]
    done = client.post(
        f"/approvals/{approval_id}/edit",
        data={
            "csrf": csrf_of(review.text),
            "args": _hidden(review.text, "args"),
            "reason": "cap it",
            "confirm": _hidden(review.text, "confirm"),
        },
    )
    assert done.status_code == 303, done.text[:500]


def approval_row(page: str, approval_id: uuid.UUID) -> str:
    found = re.search(rf'<tr id="approval-{approval_id}">(.*?)</tr>', page, re.S)
    assert found is not None, "no row for the approval"
    return found.group(1)


def decision_row(page: str, approval_id: uuid.UUID) -> str:
    found = re.search(rf'<tr class="decision" id="decision-{approval_id}"(.*?)</tr>', page, re.S)
    assert found is not None, "no row for the decision"
    return found.group(1)


def changed(row: str) -> list[tuple[str, str, str]]:
    """The (argument, asked, approved) a row lists as the edit's changes."""
    return [
        (html.unescape(name), html.unescape(before), html.unescape(after))
        for name, before, after in re.findall(
            r'<li><code class="arg-name">(.*?)</code>: (?:<del><code class="json">(.*?)'
            r'</code></del>|<span class="muted">\(not asked\)</span>) → (?:<ins><code '
            r'class="json">(.*?)</code></ins>|<span class="muted">\(dropped\)</span>)</li>',
            row,
        )
    ]


def effect_of(conn: Conn, approval_id: uuid.UUID) -> uuid.UUID:
    row = conn.execute(
        "SELECT effect_id FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def test_the_session_page_and_past_decisions_show_the_edited_arguments_whole_on_a_link(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=500, note=LONG_NOTE)
    approver = client_as(dsn, "dash_approver")
    edit_then_approve(approver, waiting.approval_id, {"cents": 987654, "note": LONG_NOTE})
    effect = effect_of(conn, waiting.approval_id)
    whole = f"/sessions/{waiting.session_id}/calls/{effect}/approved"
    (length,) = conn.execute(
        "SELECT length(approved_args::text) FROM undolog.undolog_approval_requests"
        " WHERE approval_id = %s",
        (waiting.approval_id,),
    ).fetchone() or (0,)
    assert length > 300

    # the session's page: on the approval's row, its head, cut, the whole on a link, and
    # what the edit changed (the edited key falls past the head's cut)
    row = approval_row(approver.get(f"/sessions/{waiting.session_id}").text, waiting.approval_id)
    assert "approved with edited arguments" in row
    assert f'href="{whole}"' in row and f"See it whole ({length} characters)" in row
    head = re.search(r'<code class="json approved-args">(.*?)</code>…', row, re.S)
    assert head is not None and "987654" not in head.group(1)
    assert changed(row) == [("cents", "500", "987654")]  # note: not changed, not listed
    # Past decisions: the same, where it showed the first 300 characters unmarked
    row = decision_row(approver.get("/decisions").text, waiting.approval_id)
    assert "approved with edited arguments" in row
    assert f'href="{whole}"' in row and f"See it whole ({length} characters)" in row
    head = re.search(r'<code class="json approved-args">(.*?)</code>…', row, re.S)
    assert head is not None and "987654" not in head.group(1)
    assert changed(row) == [("cents", "500", "987654")]
    # the link: the arguments the call ran with, whole
    page = approver.get(whole)
    assert page.status_code == 200
    assert "987654" in page.text and LONG_NOTE in page.text
    assert "approved arguments (edited)" in page.text
    assert "500" not in html.unescape(page.text.split('id="payload"')[1])  # not the asked


def test_the_sessions_agent_reads_them_and_no_one_else(
    dsn: str, conn: Conn, passwords_checked: bool
) -> None:
    waiting = waiting_session(dsn, cents=500, note=LONG_NOTE)
    edit_then_approve(
        client_as(dsn, "dash_approver"), waiting.approval_id, {"cents": 987654, "note": "x"}
    )
    effect = effect_of(conn, waiting.approval_id)
    whole = f"/sessions/{waiting.session_id}/calls/{effect}/approved"
    # the session's own agent: on its page (short: whole, no link), and by the link
    agent = client_as(dsn, "dash_agent")
    row = approval_row(agent.get(f"/sessions/{waiting.session_id}").text, waiting.approval_id)
    assert "approved with edited arguments" in row
    assert '{"note": "x", "cents": 987654}' in html.unescape(row)
    # each value listed cut at 120 characters of its JSON, marked
    note = '"' + LONG_NOTE[:119] + "…"
    assert changed(row) == [("cents", "500", "987654"), ("note", note, '"x"')]
    assert (
        "See it whole" not in row
        and 'approved-args">{&#34;note&#34;: &#34;x&#34;, &#34;cents&#34;: 987654}</code></p>'
        in row
    )
    assert "987654" in agent.get(whole).text
    # another agent reads neither
    other = client_as(dsn, "dash_agent2")
    assert other.get(f"/sessions/{waiting.session_id}").status_code == 404
    answer = other.get(whole)
    assert answer.status_code == 404 and "987654" not in answer.text
    # the id must be the session's: another session's id in the address finds nothing
    mine = waiting_session(dsn, login="dash_agent2")
    answer = other.get(f"/sessions/{mine.session_id}/calls/{effect}/approved")
    assert answer.status_code == 404 and "987654" not in answer.text
    # a call approved as asked has no edited arguments: nothing to show
    plain = waiting_session(dsn)
    staff = client_as(dsn, "dash_approver")
    token = csrf_of(staff.get("/approvals").text)
    asked = staff.post(
        "/approvals/decide", data={"csrf": token, "approve_one": str(plain.approval_id)}
    )
    done = staff.post("/approvals/decide", data=confirm_form(asked.text))
    assert done.status_code == 303, done.text[:500]
    plain_effect = effect_of(conn, plain.approval_id)
    answer = staff.get(f"/sessions/{plain.session_id}/calls/{plain_effect}/approved")
    assert answer.status_code == 404
    row = approval_row(staff.get(f"/sessions/{plain.session_id}").text, plain.approval_id)
    assert "edited arguments" not in row


def test_edited_arguments_are_shown_escaped(dsn: str, conn: Conn, passwords_checked: bool) -> None:
    waiting = waiting_session(dsn, cents=500)
    approver = client_as(dsn, "dash_approver")
    edit_then_approve(approver, waiting.approval_id, {"cents": 1, "note": XSS})
    effect = effect_of(conn, waiting.approval_id)
    for path in (
        f"/sessions/{waiting.session_id}",
        "/decisions",
        f"/sessions/{waiting.session_id}/calls/{effect}/approved",
    ):
        page = approver.get(path)
        assert page.status_code == 200, path
        assert "<script>alert" not in page.text, path
        assert "&lt;script&gt;alert(1)" in page.text, path
