"""The dashboard's twin of `undolog export`: GET /sessions/{id}/export downloads a
session's history rows with their hash chain, byte for byte what the command writes, for
`undolog verify --file` to check offline. Staff only (as the session page's History
chain section); streamed in batches, on the person's connection, which a download cut
short gives back. Against a real PostgreSQL, with real logins."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from starlette.types import Message
from test_dashboard import log_in

from dashboard_helpers import csrf_of, waiting_session
from undolog import chain
from undolog.dashboard import app as dashboard_app
from undolog.dashboard import queries as dashboard_queries

Conn = psycopg.Connection[Any]
# what an agent may write into its calls: the export carries it as JSON data
HOSTILE_ITEM = "<img src=x onerror=alert(1)>"
HOSTILE_NOTE = '</script><script>alert("pwned")</script><b>bold</b>'


def cli_export(dsn: str, session: uuid.UUID) -> bytes:
    """What `undolog export SESSION` writes on stdout, as bytes."""
    done = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "export", str(session), "--dsn", dsn],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def hostile_session(dsn: str) -> uuid.UUID:
    """A session of dash_agent: a booking whose item is markup, then a payout with a
    markup note that waits for approval (rows of session, effect and approval tables)."""
    return waiting_session(dsn, "dash_agent", item=HOSTILE_ITEM, note=HOSTILE_NOTE).session_id


def logged_in(web: TestClient, login: str) -> TestClient:
    web.cookies.clear()
    assert log_in(web, login).status_code == 303
    return web


def test_the_download_is_the_cli_export_and_verifies(
    dsn: str, web: TestClient, passwords_checked: bool
) -> None:
    session = hostile_session(dsn)
    for login in ("dash_operator", "dash_approver"):
        got = logged_in(web, login).get(f"/sessions/{session}/export")
        assert got.status_code == 200, (login, got.text)
        assert got.headers["content-type"] == "application/x-ndjson"
        assert got.headers["content-disposition"] == (
            f'attachment; filename="session-{session}.jsonl"'
        )
        assert got.headers["x-content-type-options"] == "nosniff"
        assert got.content == cli_export(dsn, session), login
        report = chain.verify_export(got.content.decode("utf-8").splitlines())
        assert report.ok and report.rows == len(got.content.splitlines()) - 1 >= 3
    # the agent's markup is data in the JSON, never a page's markup
    lines = [json.loads(line) for line in got.content.splitlines()]
    assert lines[0]["format"] == chain.EXPORT_FORMAT and lines[0]["session_id"] == str(session)
    args = [line["record"].get("args") for line in lines[1:]]
    assert {"item": HOSTILE_ITEM, "note": ""} in args
    assert {"cents": 500, "note": HOSTILE_NOTE} in args
    assert "text/html" not in got.headers["content-type"]


def test_a_session_tampered_behind_the_triggers_shows_in_a_fresh_export(
    dsn: str, conn: Conn, web: TestClient, passwords_checked: bool
) -> None:
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    assert chain.verify_export(web.get(f"/sessions/{session}/export").text.splitlines()).ok
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            'UPDATE undolog.undolog_effect_log SET result_snapshot = \'{"booking": "B-x"}\''
            " WHERE session_id = %s AND committed_at IS NOT NULL",
            (session,),
        )
    fresh = web.get(f"/sessions/{session}/export")
    assert fresh.status_code == 200 and fresh.content == cli_export(dsn, session)
    report = chain.verify_export(fresh.text.splitlines())
    assert [f.problem for f in report.findings] == ["altered"]
    assert report.findings[0].table == "undolog_effect_log"


def test_batches_of_any_size_make_the_same_bytes_in_several_chunks(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read and sent a few rows at a time: the body arrives as several chunks (the whole
    export is never one string), and their bytes are still the command's."""
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    records = len(expected.splitlines()) - 1
    assert records >= 4
    # (rows a batch, bytes a batch, chunks): the header's line, then batches of `rows`
    # lines; lines longer than a batch's bytes, one a batch after the first
    for rows, chunk_bytes, chunks in [
        (1, 1 << 20, 1 + records),
        (2, 1 << 20, 1 + -(-records // 2)),
        (3, 1, 1 + 1 + (records - 3)),
        (500, 1 << 20, 2),
    ]:
        monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", rows)
        monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", chunk_bytes)
        sent = asgi_get(web, f"/sessions/{session}/export")
        bodies = [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]
        assert b"".join(bodies) == expected, rows
        assert len(bodies) == chunks, (rows, chunk_bytes)
        assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def asgi_get(
    web: TestClient,
    path: str,
    *,
    cut_after: int | None = None,
    stall_after: int | None = None,
    stall_seconds: float = 0.0,
) -> list[Message]:
    """GET `path` as the client's logged-in person, straight through the ASGI app on the
    client's own event loop, answering every message sent (a real server's view of a
    streamed body). With `cut_after`, the client goes away after that many body
    messages (the send fails, as a closed socket's); with `stall_after`, it then reads
    nothing for `stall_seconds`."""
    sent: list[Message] = []
    cookie = web.cookies.get("undolog_session")
    assert cookie
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"cookie", f"undolog_session={cookie}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        body = message["type"] == "http.response.body"
        bodies = sum(m["type"] == "http.response.body" for m in sent)
        if body and cut_after is not None and bodies >= cut_after:
            raise OSError("the client went away")
        if body and bodies == stall_after:
            await asyncio.sleep(stall_seconds)
        sent.append(message)

    async def run() -> None:
        try:
            await web.app(scope, receive, send)
        except OSError:
            pass
        except Exception as exc:  # Starlette's ClientDisconnect, from the OSError
            if type(exc).__name__ != "ClientDisconnect":
                raise

    assert web.portal is not None
    web.portal.call(run)
    return sent


def test_a_download_cut_short_gives_the_person_their_connection_back(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client leaves mid-download: the export's transaction ends and the person's
    connection is theirs again, for reading and writing (not left read-only)."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    sent = asgi_get(web, f"/sessions/{session}/export", cut_after=2)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert len(sent) == 3  # the start, then two lines: the rest was not sent
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200 and 'id="chain-export"' in page.text
    # a write on the same connection: an anchor (read-only would refuse it, 25006)
    done = web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303, done.text
    assert "anchor" in web.get(done.headers["location"]).text.lower()
    assert web.get(f"/sessions/{session}/export").content == cli_export(dsn, session)


def test_a_client_that_stops_reading_is_given_up(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download whose client takes nothing for EXPORT_STALL_SECONDS frees the person's
    connection, and the response is cut short, never ended as if whole."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)
    monkeypatch.setattr(dashboard_app, "EXPORT_STALL_SECONDS", 0.2)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    with pytest.raises(RuntimeError, match="stopped before its end: cut"):
        asgi_get(web, f"/sessions/{session}/export", stall_after=2, stall_seconds=1.0)
    assert web.get(f"/sessions/{session}").status_code == 200


def test_an_export_that_fails_midway_is_cut_short_not_ended_whole(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated file must not look like a whole one: an error after the first lines
    aborts the response instead of ending it."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    made: list[str] = []
    real = chain.export_line

    def failing(row: Any) -> str:
        if made:
            raise RuntimeError("broke midway")
        made.append(real(row))
        return made[-1]

    monkeypatch.setattr(chain, "export_line", failing)
    with pytest.raises(RuntimeError, match="broke midway"):
        asgi_get(web, f"/sessions/{session}/export")
    monkeypatch.setattr(chain, "export_line", real)
    assert web.get(f"/sessions/{session}").status_code == 200  # the connection is free


@pytest.mark.parametrize("login", ["dash_agent", "dash_agent2"])
def test_an_agent_login_is_refused_its_own_session_and_others(
    dsn: str, web: TestClient, passwords_checked: bool, login: str
) -> None:
    session = hostile_session(dsn)  # dash_agent's
    got = logged_in(web, login).get(f"/sessions/{session}/export")
    assert got.status_code == 403
    assert got.headers["content-type"].startswith("text/html")
    assert chain.EXPORT_FORMAT not in got.text and "onerror" not in got.text
    page = web.get(f"/sessions/{session}")
    assert 'id="chain-export"' not in page.text  # no link to it either
    # what an agent can already read: its own session's page, not another login's
    assert page.status_code == (200 if login == "dash_agent" else 404)


def test_a_visitor_who_is_not_logged_in_goes_to_the_login_page(
    dsn: str, web: TestClient, passwords_checked: bool
) -> None:
    session = hostile_session(dsn)
    got = web.get(f"/sessions/{session}/export")
    assert got.status_code == 303 and got.headers["location"] == "/login"
    assert chain.EXPORT_FORMAT not in got.text


@pytest.mark.parametrize(
    "given",
    [
        str(uuid.uuid4()),  # no such session
        "<script>alert(1)<script>",
        "<img src=x onerror=alert(1)>",
        "0' OR '1'='1",
        "not-a-uuid",
    ],
)
def test_an_unknown_or_malformed_session_id_is_not_found(
    web: TestClient, passwords_checked: bool, given: str
) -> None:
    got = logged_in(web, "dash_operator").get(f"/sessions/{given}/export")
    assert got.status_code == 404
    assert got.headers["content-type"].startswith("text/html")
    assert "content-disposition" not in got.headers
    assert "<script>alert" not in got.text and "onerror" not in got.text
    assert "' OR '" not in got.text and "0&#39; OR" not in got.text  # not echoed at all
    assert "No session with that id that you may see." in got.text


def test_the_session_page_links_the_export_for_staff(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = hostile_session(dsn)
    link = f'<a href="/sessions/{session}/export" class="export">'
    page = logged_in(web, "dash_approver").get(f"/sessions/{session}")
    assert 'id="chain-status"' in page.text and link in page.text
    # a chain too long to verify on each view: the section still links its export
    monkeypatch.setattr(dashboard_queries, "VERIFIED_ON_VIEW", 0)
    page = web.get(f"/sessions/{session}")
    assert "too many to verify on each view" in page.text and link in page.text


def test_a_post_to_the_export_path_is_no_action(
    dsn: str, web: TestClient, passwords_checked: bool
) -> None:
    """The GET route sits beside the session's POST actions: posting to it does
    nothing (an unknown action), whatever the form."""
    session = hostile_session(dsn)
    page = logged_in(web, "dash_operator").get(f"/sessions/{session}")
    got = web.post(f"/sessions/{session}/export", data={"csrf": csrf_of(page.text)})
    assert got.status_code == 404 and "No action with that id" in got.text
    assert chain.EXPORT_FORMAT not in got.text
