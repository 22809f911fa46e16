"""The dashboard's twin of `undolog export`: GET /sessions/{id}/export downloads a
session's history rows with their hash chain, byte for byte what the command writes, for
`undolog verify --file` to check offline. Staff only (as the session page's History
chain section); read whole in one snapshot into a spool, then sent from it with no
transaction open: a slow client holds no lock and not the person's connection. Against
a real PostgreSQL, with real logins."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from starlette.types import Message, Scope
from test_dashboard import log_in

from dashboard_helpers import csrf_of, waiting_session
from undolog import chain
from undolog.dashboard import app as dashboard_app
from undolog.dashboard import queries as dashboard_queries
from undolog.queries import QUERIES

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
        assert got.headers["content-length"] == str(len(got.content))
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


def test_batches_of_any_size_make_the_same_bytes_sent_in_bounded_chunks(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read a few rows at a time (fewer when the lines are long) and sent at most
    EXPORT_CHUNK_BYTES at a time: the whole export is never one string, and its bytes
    are still the command's."""
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    records = len(expected.splitlines()) - 1
    assert records >= 4
    fetched: list[int] = []
    real_fetchmany = psycopg.AsyncServerCursor.fetchmany

    async def fetchmany(self: Any, size: int = 0) -> Any:
        fetched.append(size)
        return await real_fetchmany(self, size)

    monkeypatch.setattr(psycopg.AsyncServerCursor, "fetchmany", fetchmany)
    # (rows a batch, bytes a batch, the batches asked for): batches of `rows` lines;
    # lines longer than a batch's bytes, one a batch after the first
    for rows, chunk_bytes, batches in [
        (1, 1 << 20, [1] * (records + 1)),
        (2, 1 << 20, [2] * (-(-records // 2) + 1)),
        (3, 1, [3] + [1] * (records - 3 + 1)),
        (500, 1 << 20, [500, 500]),
        (500, 100, None),
    ]:
        monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", rows)
        monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", chunk_bytes)
        fetched.clear()
        sent = asgi_get(web, f"/sessions/{session}/export")
        bodies = [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]
        assert b"".join(bodies) == expected, rows
        assert batches is None or fetched == batches, (rows, chunk_bytes, fetched)
        assert len(bodies) == -(-len(expected) // chunk_bytes), (rows, chunk_bytes)
        assert all(len(body) <= chunk_bytes for body in bodies)
        assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def request_scope(web: TestClient, path: str) -> Scope:
    """A GET of `path` by the client's logged-in person, as a server hands it over."""
    cookie = web.cookies.get("undolog_session")
    assert cookie
    return {
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


async def asgi_fetch(
    web: TestClient,
    path: str,
    sent: list[Message],
    *,
    cut_after: int | None = None,
    pauses: dict[int, Callable[[], Awaitable[None]]] | None = None,
) -> None:
    """GET `path` straight through the ASGI app, on the running event loop, keeping in
    `sent` every message the app sends (a real server's view of a streamed body). With
    `cut_after`, the client goes away after that many body messages (the send fails, as
    a closed socket's); `pauses[n]`, when the client has taken n body messages, is
    awaited before it takes the next (a slow client, reading nothing meanwhile), and
    what it raises is raised here."""

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        body = message["type"] == "http.response.body"
        bodies = sum(m["type"] == "http.response.body" for m in sent)
        if body and cut_after is not None and bodies >= cut_after:
            raise OSError("the client went away")
        if body and pauses and bodies in pauses:
            try:
                await pauses.pop(bodies)()
            except Exception as exc:
                failed.append(exc)  # (a TimeoutError is an OSError: the client's leaving)
                raise
        sent.append(message)

    failed: list[Exception] = []
    try:
        await web.app(request_scope(web, path), receive, send)
    except OSError:
        pass
    except Exception as exc:  # Starlette's ClientDisconnect, from the OSError
        if type(exc).__name__ != "ClientDisconnect":
            raise
    if failed:
        raise failed[0]


def asgi_get(
    web: TestClient,
    path: str,
    *,
    sent: list[Message] | None = None,
    cut_after: int | None = None,
    pauses: dict[int, Callable[[], Awaitable[None]]] | None = None,
) -> list[Message]:
    """asgi_fetch on the client's own event loop: the messages sent (into `sent`, if
    given, which keeps them when the app raises)."""
    got: list[Message] = [] if sent is None else sent
    assert web.portal is not None
    web.portal.call(partial(asgi_fetch, web, path, got, cut_after=cut_after, pauses=pauses))
    return got


def spools(monkeypatch: pytest.MonkeyPatch) -> list[tempfile.SpooledTemporaryFile[bytes]]:
    """The spools the exports make from now on (tempfile.SpooledTemporaryFile's)."""
    made: list[tempfile.SpooledTemporaryFile[bytes]] = []
    real = tempfile.SpooledTemporaryFile

    def recorded(*args: Any, **kwargs: Any) -> tempfile.SpooledTemporaryFile[bytes]:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", recorded)
    return made


def test_nothing_is_locked_and_the_connection_is_free_while_the_file_is_sent(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is read whole, its transaction ended, before its first byte is sent: a
    client that takes it slowly (here nothing after the headers for a while, then
    nothing after its first chunk) holds no lock on the journal, so partition
    maintenance and migrations get their ACCESS EXCLUSIVE lock at once (and agents'
    calls do not queue behind them), and the person's other pages load meanwhile."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)  # many reads: none of them last
    monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", 64)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    meanwhile: list[str] = []

    async def slow_client() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
            await other.execute("SET lock_timeout = '1s'")
            async with other.transaction(force_rollback=True):
                await other.execute(
                    "LOCK TABLE undolog.undolog_effect_log IN ACCESS EXCLUSIVE MODE"
                )
        page: list[Message] = []
        await asyncio.wait_for(asgi_fetch(web, f"/sessions/{session}", page), 5)
        assert page[0]["type"] == "http.response.start" and page[0]["status"] == 200
        meanwhile.append("locked and loaded")

    sent = asgi_get(web, f"/sessions/{session}/export", pauses={0: slow_client, 1: slow_client})
    assert meanwhile == ["locked and loaded"] * 2  # both pauses came, mid-download
    start = sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-length"] == str(len(expected)).encode()
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert b"".join(bodies) == expected and len(bodies) > 3
    assert len(made) == 1 and made[0].closed  # the spool is gone with the response


def test_a_large_export_spills_to_a_temporary_file_with_the_same_bytes(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond EXPORT_MEMORY_BYTES the spool is a temporary file: the bytes are the same,
    and the file is closed (deleted) when the download ends."""
    monkeypatch.setattr(dashboard_app, "EXPORT_MEMORY_BYTES", 256)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    assert len(expected) > 256
    got = logged_in(web, "dash_operator").get(f"/sessions/{session}/export")
    assert got.status_code == 200 and got.content == expected
    assert len(made) == 1 and not isinstance(made[0]._file, io.BytesIO)  # on disk
    assert made[0].closed


def test_a_download_cut_short_leaves_the_connection_usable(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client leaves mid-download: the spool is closed, and the person's connection
    is theirs, for reading and writing (not left read-only)."""
    monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", 64)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    sent = asgi_get(web, f"/sessions/{session}/export", cut_after=2)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert len(sent) == 3  # the start, then two chunks: the rest was not sent
    assert len(made) == 1 and made[0].closed
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200 and 'id="chain-export"' in page.text
    # a write on the same connection: an anchor (read-only would refuse it, 25006)
    done = web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303, done.text
    assert "anchor" in web.get(done.headers["location"]).text.lower()
    assert web.get(f"/sessions/{session}/export").content == cli_export(dsn, session)


def test_an_export_that_fails_midway_sends_an_error_never_part_of_the_file(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole file is read before its first byte is sent: a failure after some lines
    is a 500 page, no download at all (a truncated file cannot look whole)."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    lines: list[str] = []
    real = chain.export_line

    def failing(row: Any) -> str:
        if lines:
            raise RuntimeError("broke midway")
        lines.append(real(row))
        return lines[-1]

    monkeypatch.setattr(chain, "export_line", failing)
    sent: list[Message] = []
    with pytest.raises(RuntimeError, match="broke midway"):
        asgi_get(web, f"/sessions/{session}/export", sent=sent)
    assert lines  # it failed midway, after a line
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 500
    assert b"content-disposition" not in dict(sent[0]["headers"])
    assert all(chain.EXPORT_FORMAT.encode() not in m.get("body", b"") for m in sent)
    assert len(made) == 1 and made[0].closed
    monkeypatch.setattr(chain, "export_line", real)
    assert web.get(f"/sessions/{session}").status_code == 200  # the connection is free


def test_a_database_error_midway_is_a_refusal_page_not_a_download(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows' query fails after a few rows (fetched in batches of one): the person
    gets the database's words on a page, no part of the file, and their connection is
    usable (the export's transaction rolled back, read-only undone)."""
    monkeypatch.setattr(dashboard_app, "EXPORT_ROWS", 1)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    logged_in(web, "dash_operator")
    rows = QUERIES["session_chain_events"]
    failing = (
        "SELECT seq, prev, hash, table_name, row_key, at, canonical FROM ("
        " SELECT e.*, row_number() OVER () AS n FROM (" + rows + ") e) q"
        " WHERE q.n < 3 OR 1 / (q.n - q.n) = 1"
    )
    monkeypatch.setattr(dashboard_app, "QUERIES", {**QUERIES, "session_chain_events": failing})
    lines: list[str] = []
    real = chain.export_line

    def counted(row: Any) -> str:
        lines.append(real(row))
        return lines[-1]

    monkeypatch.setattr(chain, "export_line", counted)
    got = web.get(f"/sessions/{session}/export")
    assert got.status_code != 200 and "content-disposition" not in got.headers
    assert got.headers["content-type"].startswith("text/html")
    assert "Export refused" in got.text and "division by zero" in got.text
    assert len(lines) == 2  # it failed midway, after two rows
    assert chain.EXPORT_FORMAT not in got.text
    assert len(made) == 1 and made[0].closed
    monkeypatch.setattr(dashboard_app, "QUERIES", QUERIES)
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200
    done = web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303, done.text
    assert web.get(f"/sessions/{session}/export").content == cli_export(dsn, session)


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
        str(uuid.UUID(int=1)),  # no such session (not random: pytest-xdist's workers
        # must collect the same test ids)
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


def test_a_request_cancelled_while_the_file_is_read_leaves_the_connection_usable(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request is cancelled (the server gives it up) while the export's query waits
    on the database: the read goes on to its end in a task of its own (psycopg closes a
    connection whose query is cancelled midway, and this one is the person's), then its
    spool is closed; the person's web session and connection go on."""
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    path = f"/sessions/{session}/export"

    async def until(check: Callable[[], Awaitable[bool]]) -> None:
        for _ in range(100):
            if await check():
                return
            await asyncio.sleep(0.05)
        raise AssertionError("not in 5 s")

    async def cancelled_midway() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:

            async def waiting() -> bool:
                cur = await other.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE usename = 'dash_operator' AND wait_event_type = 'Lock'"
                )
                return (await cur.fetchone()) == (1,)

            async with other.transaction():
                await other.execute(
                    "LOCK TABLE undolog.undolog_effect_log IN ACCESS EXCLUSIVE MODE"
                )
                request = asyncio.ensure_future(asgi_fetch(web, path, []))
                await until(waiting)  # the export's query waits for the lock
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
                assert len(made) == 1 and not made[0].closed  # still reading
            # the lock is gone: the read ends, and nobody will send its spool

            async def closed() -> bool:
                return made[0].closed

            await until(closed)

    assert web.portal is not None
    web.portal.call(cancelled_midway)
    page = web.get(f"/sessions/{session}")
    assert page.status_code == 200
    done = web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303, done.text
    assert web.get(path).content == expected


def test_a_download_that_stalls_is_cut_off_and_its_spool_closed(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reads nothing for EXPORT_STALL_SECONDS (a paused download) is given
    up: the response is cut short (never ended as if whole), its spool closed, and the
    export's place given back (the person exports again at once)."""
    monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", 64)
    monkeypatch.setattr(dashboard_app, "EXPORT_STALL_SECONDS", 0.2)
    monkeypatch.setattr(dashboard_app, "EXPORT_PER_SESSION", 1)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    paused: list[str] = []

    async def paused_download() -> None:
        paused.append("paused")
        await asyncio.sleep(30)  # far beyond the limit: cancelled at it
        paused.append("resumed")

    started = time.monotonic()
    sent = asgi_get(web, f"/sessions/{session}/export", pauses={1: paused_download})
    took = time.monotonic() - started
    assert paused == ["paused"] and took < 10
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert len(sent) == 2  # the start and the first chunk: no end of the body
    assert all(m.get("more_body", True) for m in sent[1:])
    assert len(made) == 1 and made[0].closed
    got = web.get(f"/sessions/{session}/export")  # its place is free again
    assert got.status_code == 200 and got.content == expected


def test_one_person_sends_two_exports_at_once_and_the_process_a_bounded_number(
    dsn: str, web: TestClient, passwords_checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each export holds a spool until it ends: while a person's two are being sent, a
    third is refused (429, a page saying one is still being sent), and allowed once one
    of them ends. Beyond EXPORT_MAX in the whole process: 503 with Retry-After."""
    monkeypatch.setattr(dashboard_app, "EXPORT_CHUNK_BYTES", 64)
    made = spools(monkeypatch)
    session = hostile_session(dsn)
    expected = cli_export(dsn, session)
    logged_in(web, "dash_operator")
    path = f"/sessions/{session}/export"

    async def three() -> None:
        go = [asyncio.Event(), asyncio.Event()]
        first: list[list[Message]] = [[], []]

        def until_set(event: asyncio.Event) -> Callable[[], Awaitable[None]]:
            async def wait() -> None:
                await event.wait()

            return wait

        fetches = [
            asyncio.ensure_future(asgi_fetch(web, path, first[i], pauses={1: until_set(go[i])}))
            for i in range(2)
        ]
        for _ in range(100):
            if all(len(f) == 2 for f in first):
                break
            await asyncio.sleep(0.05)
        assert all(len(f) == 2 for f in first), first  # both paused, mid-download
        third: list[Message] = []
        await asyncio.wait_for(asgi_fetch(web, path, third), 5)
        assert third[0]["status"] == 429
        headers = dict(third[0]["headers"])
        assert b"content-disposition" not in headers
        text = b"".join(m.get("body", b"") for m in third).decode()
        assert "still being sent" in text and "try again when one of them ends" in text
        assert len(made) == 2  # the refused one made no spool
        go[0].set()
        await asyncio.wait_for(fetches[0], 5)
        assert b"".join(m.get("body", b"") for m in first[0]) == expected
        assert made[0].closed and not made[1].closed
        again: list[Message] = []
        await asyncio.wait_for(asgi_fetch(web, path, again), 5)
        assert again[0]["status"] == 200
        assert b"".join(m.get("body", b"") for m in again) == expected
        # the process's cap: one export open, at most one in all
        monkeypatch.setattr(dashboard_app, "EXPORT_MAX", 1)
        busy: list[Message] = []
        await asyncio.wait_for(asgi_fetch(web, path, busy), 5)
        assert busy[0]["status"] == 503
        assert dict(busy[0]["headers"])[b"retry-after"] == b"30"
        go[1].set()
        await asyncio.wait_for(fetches[1], 5)
        assert all(spool.closed for spool in made)

    assert web.portal is not None
    web.portal.call(three)
    assert web.get(path).content == expected  # every place given back
