"""Tool names and agent names as an approver reads them (app.shown_name, the ``name``
filter): a name that reads like another is never shown as if it were it. "pay" written
with Cyrillic letters is marked, each such character with its code point, and a badge
says "non-ASCII"; white space HTML would collapse ("pay", a newline, a tab, a space) is
spelled out. On a real PostgreSQL with real logins (the fixtures of test_dashboard.py)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
from starlette.testclient import TestClient
from test_dashboard import app_dsn, log_in

from dashboard_helpers import as_login, csrf_of
from undolog import engine
from undolog.dashboard.app import lookalike_note, shown_name

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn"]  # a fixture shared with test_dashboard
LOOKALIKE = "\u0440\u0430y"  # Cyrillic er, Cyrillic a, Latin y: renders as "pay"


def ask(app_dsn: str, tool: str, agent: str = "agent") -> tuple[uuid.UUID, uuid.UUID]:
    """An irreversible call of dash_agent's new session: (session, request)."""
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as conn:
        session = engine.begin_session(conn, None, agent, {}, timedelta(hours=1))
        hit = engine.intercept(conn, session, 0, tool, "irreversible", {"cents": 500}, None)
    assert hit.approval_id is not None
    return session, hit.approval_id


def test_a_lookalike_tool_or_agent_name_is_marked_for_the_approver(
    web: TestClient, app_dsn: str
) -> None:
    ask(app_dsn, "pay")
    session, lookalike = ask(app_dsn, LOOKALIKE, agent="b\u043eb")
    log_in(web, "dash_approver")
    inbox = web.get("/approvals")
    row = inbox.text[inbox.text.index(f'id="req-{lookalike}"') :]
    row = row[: row.index("</tr>")]
    assert '<strong class="tool"><mark class="non-ascii" title="U+0440 CYRILLIC SMALL' in row
    assert '<span class="badge non-ascii" title="not plain ASCII: U+0440' in row
    assert 'b<mark class="non-ascii" title="U+043E CYRILLIC SMALL LETTER O">' in row
    confirm = web.post(
        "/approvals/decide", data={"csrf": csrf_of(inbox.text), "approve_one": str(lookalike)}
    )
    pages = {
        "inbox": inbox,
        "fragment": web.get("/approvals?fragment=1"),
        "confirm": confirm,
        "edit": web.get(f"/approvals/{lookalike}/edit"),
        "session": web.get(f"/sessions/{session}"),
        "sessions": web.get("/sessions"),
    }
    for name, page in pages.items():
        assert page.status_code == 200, name
        assert LOOKALIKE not in page.text and "b\u043eb" not in page.text, name
        assert 'class="badge non-ascii"' in page.text, name


def test_a_tool_name_with_white_space_is_told_from_the_plain_one(
    web: TestClient, app_dsn: str
) -> None:
    """check_tool accepts any non-blank text: "pay\\n\\t " is another tool than "pay",
    which HTML would show alike."""
    ask(app_dsn, "pay")
    ask(app_dsn, "pay\n\t ")
    log_in(web, "dash_approver")
    page = web.get("/approvals").text
    assert '<strong class="tool">pay</strong>' in page
    assert '<strong class="tool">pay\\n\\t\\u0020</strong>' in page


def test_shown_name_spells_and_marks_a_name() -> None:
    cases = {
        "pay": "pay",
        "pay now": "pay now",
        " pay": "\\u0020pay",
        "pay  now": "pay\\u0020\\u0020now",
        "pay\\n": "pay\\\\n",  # a backslash of the name's own is not an escape
        "pay\r\x1b": "pay\\r\\u001b",
        "<b>": "&lt;b&gt;",
        "pay\u00a0now": 'pay\\u00a0now <span class="badge non-ascii" title="not plain ASCII: '
        'U+00A0 NO-BREAK SPACE">non-ASCII</span>',
        "\u00fcber": '<mark class="non-ascii" title="U+00FC LATIN SMALL LETTER U WITH '
        'DIAERESIS">\u00fc</mark>ber <span class="badge non-ascii" title="not plain ASCII: '
        'U+00FC LATIN SMALL LETTER U WITH DIAERESIS">non-ASCII</span>',
    }
    assert {name: str(shown_name(name)) for name in cases} == cases
    assert str(shown_name(None)) == "-"


def test_lookalikes_in_arguments_and_purpose_are_marked_and_listed(
    web: TestClient, app_dsn: str
) -> None:
    """An argument's look-alike characters (mathematical digits in "acct-1234", the
    Cyrillic er of "pay") are shown as they are, each run marked, and listed under the
    arguments with their code points; a Russian word is ordinary text, not marked. The
    marks are written on the escaped text: an agent's "<script>" and bidi override stay
    text and an escape."""
    digits = "\U0001d7f7\U0001d7f8\U0001d7f9\U0001d7fa"
    args = {"to": f"acct-{digits}", "memo": "<script>alert(1)</script>\u202e\u0440ay"}
    args["city"] = "\u041c\u043e\u0441\u043a\u0432\u0430"
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as conn:
        purpose = {"purpose": "refund g\u03bfogle"}
        session = engine.begin_session(conn, None, "agent", purpose, timedelta(hours=1))
        hit = engine.intercept(conn, session, 0, "pay", "irreversible", args, None)
    log_in(web, "dash_approver")
    page = web.get("/approvals").text
    row = page[page.index(f'id="req-{hit.approval_id}"') :]
    row = row[: row.index("</tr>")]
    mark = '<mark class="lookalike" title="look-alike: U+{}">{}</mark>'
    assert 'acct-<mark class="lookalike" title="look-alike: U+1D7F7 MATHEMATICAL MONO' in row
    assert f"{digits}</mark>" in row
    assert mark.format("0440 CYRILLIC SMALL LETTER ER", "\u0440") + "ay" in row
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e<mark" in row
    assert "<script>" not in row and "\u202e" not in row
    assert "\u041c\u043e\u0441\u043a\u0432\u0430" in row  # not marked
    assert "CYRILLIC CAPITAL LETTER EM" not in row
    # in the order of the arguments as shown (their keys sorted: memo before to)
    note = (
        '<span class="lookalikes">Look-alike characters: \u0440 U+0440 CYRILLIC SMALL LETTER'
        " ER, \U0001d7f7 U+1D7F7 MATHEMATICAL MONOSPACE DIGIT ONE, \U0001d7f8 U+1D7F8"
    )
    assert note in row
    assert mark.format("03BF GREEK SMALL LETTER OMICRON", "\u03bf") in row  # the purpose
    assert "\u03bf U+03BF GREEK SMALL LETTER OMICRON</span>" in row
    # the calls table: the arguments in the database's order (to first), cut at 300
    session_page = web.get(f"/sessions/{session}").text
    assert f"{digits}</mark>" in session_page
    note = '<span class="lookalikes">Look-alike characters: \U0001d7f7 U+1D7F7 MATHEMATICAL'
    assert note in session_page


def test_the_line_under_values_lists_each_apart() -> None:
    """lookalike_note's values are not read as one text: "acct" then "\\u04401" (a
    Cyrillic er and a 1: no identifier of look-alikes on its own) were joined into one
    word, a Latin word with a Cyrillic letter in it."""
    assert str(lookalike_note("acct", "\u04401")) == ""
    assert "U+0440" in str(lookalike_note("acct", "\u0440ay"))


def test_a_purpose_shown_with_its_own_quotes_marks_no_quote_lookalike(
    web: TestClient, app_dsn: str
) -> None:
    """A session's purpose is shown as the agent wrote it, its own double quotes as they
    are (arguments are JSON text: their quotes are shown \\"). The characters drawn as a
    double quote (rule (e): the modifier letter double prime, the fullwidth quotation
    mark) draw nothing in a purpose that its own quotes could not, and marking them there
    was noise: a transliteration's hard sign (ob\u02bayavlenie) was "a look-alike". The
    purpose's other look-alikes are marked, and so are the quotes' in the arguments."""
    purpose = 'post the ob\u02bayavlenie "as is", \uff02now\uff02, to acct-\U0001d7f7'
    args = {"memo": "x\u02ba, \u02bato\u02ba: \u02baevil"}
    with psycopg.connect(as_login(app_dsn, "dash_agent"), autocommit=True) as conn:
        session = engine.begin_session(
            conn, None, "agent", {"purpose": purpose}, timedelta(hours=1)
        )
        hit = engine.intercept(conn, session, 0, "pay", "irreversible", args, None)
    log_in(web, "dash_approver")
    inbox = web.get("/approvals").text
    confirm = web.post(
        "/approvals/decide", data={"csrf": csrf_of(inbox), "approve_one": str(hit.approval_id)}
    ).text
    pages = {"inbox": inbox, "confirm": confirm, "session": web.get(f"/sessions/{session}").text}
    for name, page in pages.items():
        start = page.index('<span class="purpose claim">')
        ends = [at for at in (page.find("</p>", start), page.find("</dd>", start)) if at > 0]
        shown = page[start : min(ends)]  # the purpose, and the line under it
        assert "ob\u02bayavlenie &#34;as is&#34;, \uff02now\uff02" in shown, name  # unmarked
        assert "U+02BA" not in shown and "U+FF02" not in shown, name
        assert 'title="look-alike: U+1D7F7 MATHEMATICAL MONOSPACE DIGIT ONE"' in shown, name
        assert "Look-alike characters: \U0001d7f7 U+1D7F7" in shown, name
    for name in ("inbox", "confirm"):  # the arguments' are marked
        assert '<mark class="lookalike" title="look-alike: U+02BA' in pages[name], name
