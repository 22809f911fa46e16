"""The dashboard's ASGI application (Starlette, server-rendered Jinja2 pages).

Every read and every decision runs on the logged-in person's own database connection,
so the engine's grants and row-level security decide what they see and may do; the
dashboard holds no login of its own. Pages update live: a small script listens to
/events (server-sent events), which wakes on the engine's NOTIFY or a short poll and
tells the page to fetch its fresh fragment.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import difflib
import functools
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import tempfile
import time
import unicodedata
import uuid
import zoneinfo
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import jinja2
import markupsafe
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from undolog import (
    _serving,
    _version,
    aapprovals,
    asaga,
    chain,
    engine_check,
    errors,
    links,
    partitions,
    walk,
)
from undolog import metrics as undolog_metrics
from undolog._conninfo import apin_search_path
from undolog.dashboard import labels, queries
from undolog.dashboard.websessions import (
    KnownBrowsers,
    LoginRefused,
    LoginThrottle,
    SessionStore,
    WebSession,
)
from undolog.engine import SESSION_STATES
from undolog.names import (
    LOOKALIKES_LABEL,
    code_points,
    is_unseen,
    lookalike_list,
    lookalike_runs,
    spell_name,
    spell_unseen,
)
from undolog.queries import QUERIES
from undolog.signature import NotAsTyped, canonical_json, check_storable, loads_as_typed

T = TypeVar("T")

log = logging.getLogger("undolog.dashboard")
HERE = Path(__file__).parent
COOKIE = "undolog_session"
LOGIN_CSRF_COOKIE = "undolog_login_csrf"
# Where a signed link was going when it met the login page: the login goes on there.
NEXT_COOKIE = "undolog_next"
NEXT_SECONDS = 15 * 60
# A browser this login logged in from (websessions.KnownBrowsers): its failed logins are
# throttled apart from everyone else's for that login.
KNOWN_COOKIE = "undolog_known"
# PostgreSQL's longest role name (NAMEDATALEN - 1): a longer login is no login, and the
# throttle keeps no key of its text (a megabyte each).
LOGIN_MAX_BYTES = 63
# The engine's limit on a decision's or an operator action's reason (decide_approval,
# rollback_session); resume and retry would cut a longer one silently, so the dashboard
# refuses it for them too.
REASON_LIMIT = 8192
# An operator's action on a session page: the binding's function, given the session's id
# (the undo entry's for retry), the person's login and their reason; answers the state.
OPERATOR_ACTIONS: dict[
    str, Callable[[psycopg.AsyncConnection[Any], uuid.UUID, str, str], Awaitable[str]]
] = {
    "retry": asaga.retry_compensation,
    "resume": asaga.resume_session,
    "abandon": asaga.abandon_session,
    "rollback": asaga.rollback_session,
}
# The operator's actions on a halted session whose forms say which state of it the page
# showed (`seen`): refused (409) when the session changed since.
SEEN_ACTIONS = frozenset({"resume", "retry", "abandon"})
POLL_SECONDS = 0.5
# What a 404 adds: where the things of that kind the person may see are listed (the CLI's
# hint for an unknown id names the command that lists them).
_ON_THE_SESSION_PAGE = "The session's page lists them: read it again."
NOT_FOUND_WHERE = {
    "session": "Sessions lists the sessions you may see (`undolog sessions list`).",
    "approval request": "Approvals lists the requests waiting, Decisions the decided ones, "
    "and a session's page every request of that session.",
    "call": _ON_THE_SESSION_PAGE,
    "undo entry of this session": _ON_THE_SESSION_PAGE,
    "notification of this session": _ON_THE_SESSION_PAGE,
    "step of this session": _ON_THE_SESSION_PAGE,
    "tool registration": "Tools lists the registrations (`undolog tools list`).",
    "live notification channel": "Notifications lists the channels (`undolog notifications list`).",
}
# The sessions a recovery run names in its message (the sessions page lists them all).
RECOVER_SHOWN = 10
# The largest step index (a PostgreSQL integer): a larger one names no call of a session.
PG_INT_MAX = 2**31 - 1
# A call's payloads read whole (GET /sessions/{id}/calls/{effect}/{which}), by what the
# page calls them: the requested arguments, the result, the arguments an edit approved.
PAYLOADS = {"args": "args", "result": "result", "approved": "approved arguments (edited)"}
# Live streams one web session may hold open: each re-reads the views every POLL_SECONDS
# on the person's one connection, so a script opening hundreds would swamp it (and the
# database). A person's tabs need a few; a browser opens six at most per site anyway.
MAX_STREAMS = 16
# Live streams the whole dashboard process holds open, at most (LiveCaps): each holds a
# descriptor (its connection) for as long as its page is open, and the caps above let
# one agent-only login hold 4 web sessions x 16 of them; about a dozen such logins used up
# the usual 1,024 (RLIMIT_NOFILE), after which the process accepted no connection, the
# staff's login page included. The cap is what the descriptor limit leaves after the HTTP
# server's connections not being answered (_serving.unanswered_share), the web sessions'
# database connections at their cap (WEB_SESSION_CONNECTIONS each) and LIVE_MARGIN; never
# fewer than LIVE_FLOOR.
WEB_SESSION_CONNECTIONS = 2  # the person's connection and its listening one
# What else the process holds: its listening sockets, standard streams and log files,
# the metrics login's connection, EXPORT_MAX exports' spools, the requests being answered
# at a given moment, a replaced web session's connections while they close (CLOSE_WAIT).
LIVE_MARGIN = 64
# One person's tabs, however small the descriptor limit (the dashboard then warns at start).
LIVE_FLOOR = 16
# Web sessions of agent-only logins (no staff role) hold at most 1/AGENT_LIVE_SHARE of the
# live streams together: whatever agents hold (a host may hold several agents'
# passwords), the rest stays for the approvers and operators, whose live inbox is where
# requests get decided.
AGENT_LIVE_SHARE = 2
# Seconds a page whose stream was refused waits before it fetches its fragment again
# (Retry-After; static/dashboard.js refreshes the page this often instead of live), and
# between two log records of refused streams.
LIVE_RETRY_SECONDS = 30
COUNTS_SECONDS = 5.0
# A session's export (GET /sessions/{id}/export, as `undolog export`) is read whole in
# one snapshot, as fast as the database gives it, into a spool: in memory up to
# EXPORT_MEMORY_BYTES, then a temporary file; its rows are fetched in batches of at most
# EXPORT_ROWS, fewer when its lines are long (about EXPORT_CHUNK_BYTES a batch), so a
# session of a million records is never held whole. Only then, its transaction ended and
# the person's connection free, is the spool sent, EXPORT_CHUNK_BYTES at a time: a client
# that takes the file slowly holds no lock on the journal and no connection. A client
# that takes nothing for EXPORT_STALL_SECONDS (a paused download) is cut off, its spool
# closed. A web session sends at most EXPORT_PER_SESSION exports at once (429 beyond),
# the dashboard process EXPORT_MAX (503 beyond): each holds a spool until it ends.
EXPORT_ROWS = 500
EXPORT_CHUNK_BYTES = 1024 * 1024
EXPORT_MEMORY_BYTES = 8 * 1024 * 1024
EXPORT_STALL_SECONDS = 60.0
EXPORT_PER_SESSION = 2
EXPORT_MAX = 8
EXPORT_RETRY_SECONDS = 30
EXPORT_MEDIA_TYPE = "application/x-ndjson"

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Every response forbids inline scripts, framing and caching: agent-written text on
    these pages is hostile, and escaping is the first line, this the second."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self.no_websocket(scope, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)

    @staticmethod
    async def no_websocket(scope: Scope, send: Send) -> None:
        """The dashboard serves no WebSocket: a request to open one (which uvicorn hands
        over as one, where a WebSocket library is installed) is refused with the headers
        too. Starlette's refusal (websocket.close) made uvicorn answer a bare 403."""
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1000})
            return
        body = b"This dashboard serves no WebSocket: open its pages over HTTP."
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS,
        ]
        await send({"type": "websocket.http.response.start", "status": 403, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})


class ClientGone:
    """A request whose connection closed before its body was whole (the client went
    away, or the server closed it: the cap on connections waiting for their request,
    REQUEST_TIMEOUT, shutdown) ends quietly: the endpoint's form read raises Starlette's
    ClientDisconnect, which uvicorn logged as "Exception in ASGI application" with a
    traceback of some 50 lines, one for each such connection, as fast as a flood of them
    came. There is nobody left to answer and nothing failed on this side."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            log.debug("a request's connection closed before its body was whole")


# The largest request body the dashboard reads: its biggest honest form (the inbox, one
# reason field a request, each within REASON_LIMIT) is far smaller. Starlette caps each
# form field but not their sum, nor an uploaded file, and the login form is anyone's.
MAX_BODY_BYTES = 1024 * 1024


class BodyLimit:
    """Refuses a request body over MAX_BODY_BYTES (413): by its Content-Length at once,
    or, when it has none, as soon as the bytes received pass the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
            await PlainTextResponse("request body too large", 413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    # raised inside the endpoint's form parsing: Starlette answers it
                    raise HTTPException(413, "request body too large")
            return message

        await self.app(scope, counted, send)


# --- rendering ------------------------------------------------------------------------


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _ts(value: datetime.datetime | None) -> markupsafe.Markup:
    """A time as a <time> element: UTC in the page as sent (so it reads right without
    JavaScript); the page's script rewrites it in the viewer's own time zone."""
    if value is None:
        return markupsafe.Markup("-")
    utc = value.astimezone(datetime.UTC)
    return markupsafe.Markup('<time datetime="{}">{}</time>').format(
        utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    )


def _size(value: int | None) -> str:
    """An estimated size in bytes, as a person reads it (1 KiB = 1024 bytes)."""
    if value is None or value < 0:
        return "-"
    amount = float(value)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{amount:.0f} {unit}" if unit == "bytes" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"


def _iso(value: datetime.datetime | None) -> str:
    return "" if value is None else value.astimezone(datetime.UTC).isoformat()


def _span(value: datetime.timedelta | None) -> str:
    if value is None:
        return "-"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


# Characters a browser does not show as themselves (bidi controls, zero-width and other
# format characters, every Default_Ignorable_Code_Point): escaping (HTML) does nothing to
# them, so every value a page shows has them written out instead, by the rule every face
# shares (undolog.names.spell_unseen).


def shown(value: str, *, name: bool = False) -> str:
    """``value`` with every character a browser would not show as itself (is_unseen)
    written out as its escape, ``\\u202e`` (:func:`undolog.names.spell_unseen`): in JSON
    text that is the same value (outside a string JSON holds none of them), and in plain
    text it is seen.

    ``name=True`` spells a name (a tool's, an agent's) as an approver must read it, two
    names never alike: also every white space but a single space between two other
    characters (HTML would collapse it: "pay\\n\\t " reads "pay"), written ``\\n``,
    ``\\t``, ``\\u0020``, and the backslash as ``\\\\`` (so that a written-out escape is
    never the name's own text). :func:`shown_name` marks what is not ASCII besides."""
    if not name:
        return spell_unseen(value)
    return spell_name(value, _seen_or_escape)


def _seen_or_escape(ch: str) -> str:
    if is_unseen(ch):
        return spell_unseen(ch)
    if ch.isspace():  # U+00A0, U+2003, U+3000...: all in the BMP
        return f"\\u{ord(ch):04x}"
    return ch


_NOT_ASCII = re.compile("([^\\x00-\\x7f]+)")


def shown_name(value: str | None) -> markupsafe.Markup:
    """A name (a tool's, the one an agent gives itself) as the dashboard shows it to an
    approver (the ``name`` filter): spelled by ``shown(value, name=True)``, and when it
    is not plain ASCII, each run of other characters marked (its code points on hover)
    and a "non-ASCII" badge after it, so that "pay" written with Cyrillic er and a is
    never read as the tool "pay"."""
    if value is None:
        return markupsafe.Markup("-")
    spelled = shown(value, name=True)
    if value.isascii():
        return markupsafe.escape(spelled)
    parts = [
        markupsafe.Markup('<mark class="non-ascii" title="{}">{}</mark>').format(
            code_points(run), run
        )
        if i % 2
        else markupsafe.escape(run)
        for i, run in enumerate(_NOT_ASCII.split(spelled))
    ]
    others = "".join(ch for ch in value if not ch.isascii())
    badge = markupsafe.Markup(
        ' <span class="badge non-ascii" title="not plain ASCII: {}">non-ASCII</span>'
    ).format(code_points(others))
    return markupsafe.Markup("").join(parts) + badge


@functools.lru_cache(maxsize=1024)
def _lookalike_title(run: str) -> markupsafe.Markup:
    """A run's code points, escaped, once for each run a page repeats (a page of one
    look-alike between ASCII letters named it 500,000 times)."""
    return markupsafe.escape(code_points(run))


def marked(value: str, *, quotes: bool = True) -> markupsafe.Markup:
    """A value an approver reads (arguments, edited arguments, a purpose) as the page
    shows it: spelled by :func:`shown`, escaped, and each run of look-alike characters
    (:func:`undolog.names.lookalike_runs`: mathematical digits, a Cyrillic er in "pay") marked,
    its code points on hover. The marks are added to the escaped text, never to the
    agent's own: its "<" is "&lt;" before any mark is written.

    ``quotes=False`` for a purpose, which is shown as the agent wrote it, its own double
    quotes as they are (JSON text shows them escaped, \\"): the characters drawn as a
    double quote (rule (e)) draw there no key that the purpose's own quotes could not,
    and are not marked."""
    out: list[str] = []
    for run, lookalike in lookalike_runs(shown(value), quotes=quotes):
        text = markupsafe.escape(run)
        if lookalike:  # str.format, not Markup's: a page of them is some 3x faster
            title = _lookalike_title(run)
            out.append(f'<mark class="lookalike" title="look-alike: {title}">{text}</mark>')
        else:
            out.append(text)
    return markupsafe.Markup("".join(out))


def lookalike_note(*values: str | None, quotes: bool = True) -> markupsafe.Markup:
    """The line under a value with look-alike characters (:func:`marked`, ``quotes`` as
    there): "Look-alike characters: <the character> U+1D7F7 MATHEMATICAL MONOSPACE DIGIT
    ONE, ...", or nothing. The values are listed apart: the end of one and the start of
    the next are not one word ("acct" then "\\u04401", a Cyrillic er and 1, is no Latin
    word)."""
    listed = lookalike_list("\n".join(shown(v) for v in values if v is not None), quotes=quotes)
    if not listed:
        return markupsafe.Markup("")
    return markupsafe.Markup('<span class="lookalikes">{}: {}</span>').format(
        LOOKALIKES_LABEL, listed
    )


class Verbatim(str):
    """A value sent back to the dashboard as typed (a person's reason in a hidden field,
    a filter in its box): not spelled out by :func:`shown`, which would change it."""


def _finalize(value: Any) -> Any:
    # Markup is the dashboard's own (a macro's output: its values were finalized inside)
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup | Verbatim):
        return shown(value)
    return value


def make_env() -> jinja2.Environment:
    # autoescape for every template, whatever its name: args, results, agent names and
    # reasons are written by agents and must reach the page as text, never as markup;
    # and every value's unseen characters are spelled out (_finalize).
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
    )
    env.filters.update(
        verbatim=lambda v: Verbatim(v) if isinstance(v, str) else v,
        pretty=_pretty,
        compact=lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
        ts=_ts,
        iso=_iso,
        size=_size,
        span=_span,
        short=lambda u: str(u)[:8],
        label=labels.label,
        name=shown_name,
        marked=marked,
    )
    env.globals.update(lookalike_note=lookalike_note)
    return env


@dataclass
class Outcome:
    target: str
    ok: bool
    text: str
    status: int = 200


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _args_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def args_diff(requested: Any, edited: Any) -> list[tuple[str, str]]:
    """The line diff of the two argument sets as pretty JSON: (kind, line), kind '-' for
    a requested line the edit removes, '+' for one it adds, ' ' for one it keeps."""
    lines = difflib.ndiff(pretty_json(requested).splitlines(), pretty_json(edited).splitlines())
    return [(line[0], line[2:]) for line in lines if line[:1] in ("-", "+", " ")]


# The fields a page of the dashboard sends more than once in one form: the inbox's ticked
# requests and a confirmation page's restated decisions. Any other field comes once.
MANY_VALUED = frozenset({"ids", "pick"})


def repeated_field(form: FormData) -> bool:
    """Whether ``form`` holds a field other than :data:`MANY_VALUED` more than once.
    Starlette's form.get() reads the last of them, while whatever looked at the request
    before (a proxy's filter, an audit of the raw body, a person) may have read the first:
    a decision, a confirmation nonce or a reason checked there would not be the one acted
    on here. No page of the dashboard sends that, so such a form is refused whole."""
    seen: set[str] = set()
    for key, _ in form.multi_items():
        if key in seen and key not in MANY_VALUED:
            return True
        seen.add(key)
    return False


def only_token(form: FormData) -> object:
    """The form's CSRF token when it holds exactly one, else None (refused as a missing
    one): with two, Starlette reads the last, and a forged form could carry a good token
    after whatever a checker in front of the dashboard reads first."""
    tokens = form.getlist("csrf")
    return tokens[0] if len(tokens) == 1 else None


def same_token(given: object, expected: str | None) -> bool:
    """Whether a posted token is the expected one, in constant time. Compared as bytes:
    hmac.compare_digest raises TypeError for a str holding any non-ASCII character, and
    a posted field may hold anything (a 500 instead of the 'form expired' page)."""
    if not isinstance(given, str) or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def engine_error(exc: BaseException) -> tuple[int, str]:
    """HTTP status and the engine's own words (message, detail, hint) for a refusal: a
    database error, or the binding's UndoLogError translated from one."""
    db = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(db, psycopg.Error):
        return errors.http_status_of(exc), str(exc).strip()
    if isinstance(db, psycopg.DataError) and db.sqlstate is None:
        # psycopg refused a value before sending it (a NUL character, which PostgreSQL
        # text cannot hold): the person's input is at fault, and nothing was written
        return 422, f"{str(db).strip()}: nothing was written"
    diag = db.diag
    parts = [diag.message_primary or str(db).strip()]
    parts += [p for p in (diag.message_detail, diag.message_hint) if p]
    where = labels.pages_of_commands(diag.message_hint or "")
    return errors.http_status_of(exc), " — ".join(parts) + (f" {where}" if where else "")


def refused(conn: queries.Conn, exc: Exception, target: str, *, ended: bool) -> Outcome:
    """The refusal of an action on `target`, to show the person; a connection that is
    gone, or a web session that has ended meanwhile (``ended``: its query was cancelled
    for its closing, WebSession.close), is raised again instead, for _database_error to
    say so."""
    if ended:
        raise psycopg.OperationalError("the web session ended while this was done") from exc
    if conn.closed and isinstance(exc, psycopg.OperationalError):
        raise exc
    status, text = engine_error(exc)
    return Outcome(target, False, text, status)


TOOL_TIERS = ("compensable", "irreversible")
ON_REJECTS = ("fail_session", "continue")
# What the Maintenance page's actions pass, as `undolog partitions maintain` and `ensure`
# do by default (the plan of what a run would do is undolog.partitions', as `undolog
# partitions plan` prints it).
MONTHS_AHEAD = partitions.MONTHS_AHEAD


def _names(names: list[str]) -> str:
    return ", ".join(names)


class _DropChanged(Exception):
    """The months a confirmed drop took were not those confirmed (``names``: the months
    in one set and not the other): raised inside the drop's transaction, which it rolls
    back, so nothing is dropped."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(_names(names))
        self.names = names


class _SpooledDownload(StreamingResponse):
    """A spool sent EXPORT_CHUNK_BYTES at a time, each send taken within
    EXPORT_STALL_SECONDS or the response is cut short; the spool is closed and ``done``
    called as the response ends, however it ends (the client's leaving ends the response,
    not the body's generator, which is left suspended)."""

    def __init__(
        self,
        spool: tempfile.SpooledTemporaryFile[bytes],
        done: Callable[[], None],
        *,
        media_type: str,
        headers: dict[str, str],
    ) -> None:
        self.spool, self.done = spool, done
        super().__init__(self._chunks(), media_type=media_type, headers=headers)

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await anyio.to_thread.run_sync(self.spool.read, EXPORT_CHUNK_BYTES):
            yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def timed(message: Message) -> None:
            with anyio.fail_after(EXPORT_STALL_SECONDS):
                await send(message)

        try:
            await super().__call__(scope, receive, timed)
        finally:
            self.spool.close()
            self.done()


@dataclass(frozen=True)
class LiveCaps:
    """How many live streams the dashboard process holds open at once (``all``), and of
    those the web sessions of agent-only logins (``agents``); ``short`` when the
    descriptor limit left fewer than LIVE_FLOOR (the floor is then the cap, and the
    process may run out of descriptors before it is reached)."""

    all: int
    agents: int
    short: bool = False

    @classmethod
    def of(cls, limit: int | None, max_sessions: int) -> LiveCaps:
        """The caps of a process that may hold ``limit`` descriptors (RLIMIT_NOFILE's soft
        limit; None: no limit) and ``max_sessions`` web sessions."""
        most = max_sessions * MAX_STREAMS  # what the per-web-session caps allow anyway
        if limit is None:
            left = most
        else:
            left = (
                limit
                - _serving.unanswered_share(limit)
                - max_sessions * WEB_SESSION_CONNECTIONS
                - LIVE_MARGIN
            )
        cap = min(most, max(LIVE_FLOOR, left))
        return cls(all=cap, agents=max(1, cap // AGENT_LIVE_SHARE), short=left < LIVE_FLOOR)


class Dashboard:
    def __init__(
        self,
        dsn: str,
        *,
        idle_timeout: float = 30 * 60,
        metrics_token: str | None = None,
        metrics_dsn: str | None = None,
        link_secret: str | None = None,
        nofile: int | None = None,
    ) -> None:
        self.store = SessionStore(dsn, idle_timeout)
        # The live streams open (their wake events), in all web sessions and in those of
        # agent-only logins, against self.live_caps, read once from the descriptor limit
        # (``nofile``: the process's RLIMIT_NOFILE soft limit unless given).
        self.live: set[asyncio.Event] = set()
        self.live_agents: set[asyncio.Event] = set()
        limit = nofile if nofile is not None else _serving.descriptor_limit()
        self.live_caps = LiveCaps.of(limit, self.store.max_sessions)
        self._live_refused_logged = -math.inf  # when a refused stream was last logged
        if self.live_caps.short:
            log.warning(
                "the open-file limit (%s descriptors) leaves too few for the dashboard's "
                "%s web sessions and their live pages: it may stop accepting connections. "
                "Raise it (systemd: LimitNOFILE=, a shell: ulimit -n) to 1024 or more",
                limit,
                self.store.max_sessions,
            )
        # the key of the notifications' signed links (None: /open answers that links are
        # not checked here); the delivery worker signs with the same one
        if link_secret is not None and len(link_secret) < links.MIN_SECRET:
            raise ValueError(f"link_secret must hold at least {links.MIN_SECRET} characters")
        self.link_secret = link_secret
        self.throttle = LoginThrottle()
        self.known = KnownBrowsers()
        self.exports = 0  # exports being read or sent, in all web sessions (EXPORT_MAX)
        self.env = make_env()
        self._reaper: asyncio.Task[None] | None = None
        # /metrics for a scraper: a bearer token, and the login its scrapes read as (the
        # one connection the dashboard holds that is not a person's). Both or neither.
        if (metrics_token is None) != (metrics_dsn is None):
            raise ValueError("metrics_token and metrics_dsn go together")
        if metrics_token is not None and not metrics_token.strip():
            raise ValueError("metrics_token is blank")
        self.metrics_token = metrics_token.strip().encode() if metrics_token else None
        self.metrics_dsn = metrics_dsn
        self._metrics_conn: psycopg.AsyncConnection[Any] | None = None
        self._metrics_lock = asyncio.Lock()

    # --- plumbing ---------------------------------------------------------------------

    def render(
        self,
        request: Request,
        name: str,
        ws: WebSession | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        flash: list[tuple[str, str]] = []
        # a fragment (a live refresh, the counts) shows no flash: it must not take it
        if ws is not None and not name.endswith("_fragment.html"):
            flash, ws.flash = ws.flash, []
        html = self.env.get_template(name).render(
            request=request,
            ws=ws,
            login=ws.login if ws else None,
            roles=ws.roles if ws else None,
            csrf=ws.csrf if ws else "",
            flash=flash,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    async def render_whole(
        self, request: Request, name: str, ws: WebSession | None, **context: Any
    ) -> HTMLResponse:
        """:meth:`render` in a worker thread, for the pages that show an agent's payload
        whole (the confirmation pages, "see it whole": up to the journal's 1 MiB), whose
        look-alike marks (:func:`marked`) took some 2 s a MiB of Cyrillic text (0.07 s
        now; a MiB of words each holding a look-alike, some 1.4 s): on the event loop
        that stalled every other request of the dashboard meanwhile."""
        return await anyio.to_thread.run_sync(
            functools.partial(self.render, request, name, ws, **context)
        )

    def problem(
        self, request: Request, ws: WebSession | None, status: int, title: str, text: str
    ) -> HTMLResponse:
        return self.render(request, "problem.html", ws, status, title=title, text=text)

    def _automatic(self, request: Request) -> bool:
        """Whether ``request`` is one a page's own script (static/dashboard.js) makes by
        itself, the person doing nothing: a live page's fresh fragment (``?fragment=1``,
        fetched on each 'change' event), its event stream (which reconnects by itself),
        the sessions page's counts. An open live page is not activity."""
        return request.method in ("GET", "HEAD") and (
            request.query_params.get("fragment") == "1"
            or request.scope.get("endpoint") in (self.events, self.session_counts)
        )

    def current(self, request: Request, *, touch: bool | None = None) -> WebSession | None:
        """The logged-in person's web session, or None. A request of theirs keeps it from
        idling out (``touch``), unless it is one their open page makes by itself
        (:meth:`_automatic`): an inbox left open and unattended still logs out."""
        ws = self.store.get(request.cookies.get(COOKIE))
        if ws is not None:
            if touch if touch is not None else not self._automatic(request):
                self.store.touch(ws)
            # for _database_error: the web session may end (and leave the store) while
            # this request still runs on its connection
            request.state.ws = ws
        return ws

    def staff_only(self, request: Request, title: str, text: str) -> WebSession | Response:
        """The logged-in approver or operator; anyone else gets the login page, or a 403
        page titled `title` whose `text` says where their own sessions' records are."""
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        if not ws.roles.staff:
            return self.problem(request, ws, 403, title, text)
        return ws

    async def posted(self, request: Request) -> tuple[WebSession, FormData] | HTMLResponse:
        """The logged-in person and their form, or the page that says why nothing was
        written (logged out, or a missing or stale CSRF token)."""
        ws = self.current(request)
        if ws is None:
            return self.problem(
                request,
                None,
                401,
                "Not logged in",
                "You are not logged in, or your session ended: nothing was written. "
                "Log in and try again.",
            )
        form = await request.form()
        if not same_token(only_token(form), ws.csrf):
            return self.problem(
                request,
                ws,
                403,
                "Form expired",
                "This form's security token is missing or stale: nothing was written. "
                "Reload the page and try again.",
            )
        if repeated_field(form):
            return self.form_refused(request, ws)
        return ws, form

    def form_refused(self, request: Request, ws: WebSession | None) -> HTMLResponse:
        """The page of a form that holds a field, or names a request, more than once
        (:func:`repeated_field`): nothing was read or written."""
        return self.problem(
            request,
            ws,
            400,
            "Form refused",
            "This form holds a field or a request more than once, which no page of this "
            "dashboard sends: nothing was written. Reload the page and try again.",
        )

    def not_found(self, request: Request, ws: WebSession | None, what: str) -> HTMLResponse:
        """404, and where the ones the person may see are listed, as the command's hint
        says it (`undolog sessions list`, ...)."""
        key = "name" if what == "live notification channel" else "id"
        where = NOT_FOUND_WHERE.get(what)
        return self.problem(
            request,
            ws,
            404,
            "Not found",
            f"No {what} with that {key} that you may see." + (f" {where}" if where else ""),
        )

    @staticmethod
    def _uuid(text: str) -> uuid.UUID | None:
        try:
            return uuid.UUID(text)
        except ValueError:
            return None

    @staticmethod
    def _local(path: Any, default: str) -> str:
        """Where to go after a POST: a path of this site only (no open redirect). Browsers
        read a backslash as a slash and drop tabs and newlines, so '/\\x' and '/<tab>/x'
        name another site like '//x' does: a path holding any of them is refused."""
        if (
            isinstance(path, str)
            and path.startswith("/")
            and not path.startswith("//")
            and "\\" not in path
            and all(ch.isprintable() and not ch.isspace() for ch in path)
        ):
            return path
        return default

    # --- login ------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        if self.current(request) is not None:
            return RedirectResponse("/", 303)
        notice = self.store.replaced.get(request.cookies.get(COOKIE) or "")
        return self._login_form(request, None, 200, notice)

    def _login_form(
        self, request: Request, error: str | None, status: int, notice: str | None = None
    ) -> Response:
        token = secrets.token_urlsafe(32)
        response = self.render(
            request, "login.html", None, status, error=error, token=token, notice=notice
        )
        response.set_cookie(
            LOGIN_CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/login",
        )
        return response

    async def login(self, request: Request) -> Response:
        form = await request.form()
        token, cookie = only_token(form), request.cookies.get(LOGIN_CSRF_COOKIE)
        if not same_token(token, cookie):
            return self._login_form(
                request, "The login form expired: nothing was sent. Try again.", 403
            )
        if repeated_field(form):  # the login a throttle counted is the one tried
            return self._login_form(
                request,
                "The login form holds a field more than once: nothing was sent. "
                "Reload the page and log in again.",
                400,
            )
        login, password = form.get("login"), form.get("password")
        if not isinstance(login, str) or not login.strip() or not isinstance(password, str):
            return self._login_form(request, "Give your database login and password.", 422)
        login = login.strip()
        # No role has a longer name: every such login is one to the throttle, whose keys
        # would otherwise be as long as the form allows (a megabyte each).
        too_long = len(login.encode()) > LOGIN_MAX_BYTES
        throttled_as = "(longer than any role name)" if too_long else login
        # A browser this login logged in from before is throttled by its own failures
        # only; any other by the login's and its address's (KnownBrowsers says why).
        known = request.cookies.get(KNOWN_COOKIE)
        if self.known.login_of(known) == login:
            keys: tuple[str, ...] = (f"known:{known}",)
        else:
            address = request.client.host if request.client else "?"
            keys = (f"login:{throttled_as}", f"addr:{address}")
        async with self.throttle.lock(throttled_as):
            left = self.throttle.wait_left(*keys)
            if left > 0:
                return self._login_form(
                    request,
                    f"too many failed logins, try again in {math.ceil(left)} s",
                    429,
                )
            if not password.strip() or "\x00" in password:
                # Never handed to libpq: given no password (a NUL ends one), it reads the
                # password file of whoever runs the dashboard (PGPASSFILE, ~/.pgpass),
                # which may hold this very login's password. Refused as a wrong one.
                self.throttle.failed(*keys)
                log.info("login refused for %r (no password)", login)
                return self._login_form(request, "login refused: wrong login or password", 401)
            if too_long:
                self.throttle.failed(*keys)
                log.info("login refused for a login of %d bytes", len(login.encode()))
                return self._login_form(request, "login refused: wrong login or password", 401)
            if any(unicodedata.category(c) == "Cc" for c in login):
                # Nor a login holding a control character: no role's name needs one, and
                # libpq reads a connection string only up to a NUL, so the password typed
                # and passfile=/dev/null after it would never reach libpq, which would
                # take the password file's (or PGPASSWORD). Refused as a wrong password.
                self.throttle.failed(*keys)
                log.info("login refused for %r (a control character in the login)", login)
                return self._login_form(request, "login refused: wrong login or password", 401)
            try:
                ws = await self.store.login(login, password)
            except LoginRefused as exc:
                if "wrong login or password" in str(exc):
                    self.throttle.failed(*keys)
                return self._login_form(request, str(exc), 401)
            self.throttle.succeeded(*keys)
        self.store.replaced.pop(request.cookies.get(COOKIE) or "", None)
        previous = self.store.sessions.get(request.cookies.get(COOKIE) or "")
        if previous is not None:  # this browser's earlier web session: its cookie is replaced
            await self.store.logout(previous)
        response = RedirectResponse(self._local(request.cookies.get(NEXT_COOKIE), "/"), 303)
        response.delete_cookie(NEXT_COOKIE, path="/login")
        response.set_cookie(
            COOKIE,
            ws.sid,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
        remembered = self.known.remember(login, known)
        if remembered is not None:
            response.set_cookie(
                KNOWN_COOKIE,
                remembered,
                max_age=int(KnownBrowsers.SECONDS),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path="/login",
            )
        return response

    async def logout(self, request: Request) -> Response:
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, _ = got
        await self.store.logout(ws)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def home(self, request: Request) -> Response:
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        return RedirectResponse("/approvals" if ws.roles.staff else "/sessions", 303)

    # --- signed links -----------------------------------------------------------------

    def _link_refused(self, request: Request) -> Response | None:
        """The page of a link that opens nothing (checked before the database is read,
        and saying nothing of any request), or None for a good one."""
        ws = self.current(request)
        inbox = "the approvals inbox" if ws is None or ws.roles.staff else "your sessions"
        if self.link_secret is None:
            return self.problem(
                request,
                ws,
                404,
                "Links not enabled",
                "This dashboard does not check signed links (it was started without "
                f"{links.SECRET_ENV}). Log in and find the request in {inbox}, or ask "
                "your operator to give the dashboard the links' key.",
            )
        verdict = links.check(
            self.link_secret,
            request.path_params["approval_id"],
            request.query_params.get("exp"),
            request.query_params.get("sig"),
        )
        if verdict == "expired":
            return self.problem(
                request,
                ws,
                410,
                "Link expired",
                "This link's time is up, so it opens nothing. If the request still waits, "
                f"log in and find it in {inbox}.",
            )
        if verdict != "ok":
            return self.problem(
                request,
                ws,
                403,
                "Link not valid",
                "This link is damaged, altered, or was not signed with this dashboard's "
                "key, so it opens nothing. Copy the whole link from the notification "
                f"again, or log in and find the request in {inbox}.",
            )
        return None

    def _go_path(self, request: Request) -> str:
        aid = request.path_params["approval_id"]
        exp, sig = request.query_params["exp"], request.query_params["sig"]
        return f"{links.PATH}/{aid}/go?exp={exp}&sig={sig}"

    async def open_link(self, request: Request) -> Response:
        """A notification's link: checked, then a page of this site that goes on to
        :meth:`open_go` (the cross-site click did not carry the session cookie)."""
        refused = self._link_refused(request)
        if refused is not None:
            return refused
        return self.render(
            request, "open_link.html", self.current(request), next=self._go_path(request)
        )

    async def open_go(self, request: Request) -> Response:
        """The link's request on its session's page, for a person logged in who may see
        it; the login page first (then back here) for anyone else."""
        refused = self._link_refused(request)
        if refused is not None:
            return refused
        ws = self.current(request)
        if ws is None:
            response = RedirectResponse("/login", 303)
            response.set_cookie(
                NEXT_COOKIE,
                self._go_path(request),
                max_age=NEXT_SECONDS,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path="/login",
            )
            return response
        approval_id = uuid.UUID(request.path_params["approval_id"])
        async with ws.db() as conn:
            row = await queries.one(conn, QUERIES["approval_session"], {"approval_id": approval_id})
        if row is None:
            return self.not_found(request, ws, "approval request")
        return RedirectResponse(f"/sessions/{row['session_id']}#approval-{approval_id}", 303)

    # --- approvals --------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        ws = self.staff_only(
            request,
            "Approvals",
            "Only approvers and operators read the approvals inbox; "
            "your sessions' requests are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        async with ws.db() as conn:
            pending, total = await queries.inbox(conn)
            fingerprint = await queries.inbox_fingerprint(conn)
        fragment = request.query_params.get("fragment") == "1"
        return self.render(
            request,
            "inbox_fragment.html" if fragment else "inbox.html",
            ws,
            pending=pending,
            total=total,
            fingerprint=fingerprint,
        )

    async def decide(self, request: Request) -> Response:
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        # One way of deciding a form: a confirmation page's picks, one row's button, or the
        # bulk action (only the button clicked is sent; ticked ids come with any of them).
        # Two would be read here in an order a filter in front need not share.
        if sum(key in form for key in ("pick", "approve_one", "reject_one", "action")) > 1:
            return self.form_refused(request, ws)
        back = self._local(form.get("next"), "/approvals")
        picked: list[tuple[str, str, str]] = []  # (action, id text, reason)
        # The confirmation page resends its decisions as "approve:<id>" with reason_<id>.
        for pick in form.getlist("pick"):
            action, _, picked_id = str(pick).partition(":")
            if action in ("approve", "reject"):
                text = form.get(f"reason_{picked_id}")
                picked.append((action, picked_id, text if isinstance(text, str) else ""))
        for action in ("approve", "reject") if not picked else ():
            one = form.get(f"{action}_one")
            if isinstance(one, str):
                reason = form.get(f"reason_{one}")
                picked.append((action, one, reason if isinstance(reason, str) else ""))
        if not picked:
            bulk = form.get("action")
            bulk_reason = form.get("reason")
            ids = [i for i in form.getlist("ids") if isinstance(i, str)]
            if bulk not in ("approve", "reject") or not ids:
                return self.problem(
                    request,
                    ws,
                    422,
                    "Nothing decided",
                    "Select at least one request and approve or reject it.",
                )
            text = bulk_reason if isinstance(bulk_reason, str) else ""
            picked = [(str(bulk), i, text) for i in ids]
        # A request named twice (its id as typed, or in capitals) is decided once or
        # twice, in an order of the form's: and a confirmation page would restate it
        # with its reason field twice, which that page's own post would then be refused for.
        named = [str(u) if (u := self._uuid(i)) else i for _, i, _ in picked]
        if len(set(named)) < len(named):
            return self.form_refused(request, ws)
        confirming, pending = await self._needs_confirming(ws, picked)
        if confirming:
            ids = [str(r["approval_id"]) for r in confirming]
            nonce = form.get("confirm")
            if not ws.take_confirm(nonce, ids):
                asked = set(ids)
                canonical = {i: str(u) if (u := self._uuid(i)) else i for _, i, _ in picked}
                return await self.render_whole(
                    request,
                    "confirm.html",
                    ws,
                    requests=confirming,
                    picked=picked,
                    # the rest of what the same second click sends, so it is all in view
                    rejects=[
                        (i, reason, pending.get(canonical[i]))
                        for action, i, reason in picked
                        if action == "reject"
                    ],
                    approves=[
                        (i, pending.get(canonical[i]))
                        for action, i, _ in picked
                        if action == "approve" and canonical[i] not in asked
                    ],
                    token=ws.confirm_nonce(ids),
                    # a confirmation was sent but is not (or no longer) good: say why
                    # the question is asked again
                    stale=nonce is not None,
                    back=back,
                )
        outcomes = [await self._decide_one(ws, *p) for p in picked]
        return self._after(request, ws, outcomes, back)

    async def expire(self, request: Request) -> Response:
        """An operator closes every request past its deadline (undolog.expire_approvals,
        what `expire_approvals()` from cron does): each becomes expired, and its session
        is undone (or goes on, for a tool registered on_reject="continue"). In
        transactions of at most aapprovals.SWEEP_BATCH requests each, as the command."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, _ = got
        if not ws.roles.operator:
            outcome = Outcome(
                "expire", False, "only an operator closes the requests past their deadline", 403
            )
            return self._after(request, ws, [outcome], "/approvals")
        closed = await self._sweep(
            ws,
            "expire",
            lambda conn, so_far: aapprovals.expire_approvals(conn, on_progress=so_far),
            "{} request(s) were closed as expired before it",
        )
        if isinstance(closed, Outcome):
            return self._after(request, ws, [closed], "/approvals")
        log.info("%s: expired %d request(s) past their deadline", ws.login, len(closed))
        text = (
            f"{len(closed)} request(s) past their deadline closed as expired by {ws.login}"
            if closed
            else "no request was past its deadline: nothing was closed"
        )
        return self._after(request, ws, [Outcome("expire", True, text)], "/approvals")

    async def _needs_confirming(
        self, ws: WebSession, picked: list[tuple[str, str, str]]
    ) -> tuple[list[queries.Row], dict[str, queries.Row]]:
        """The irreversible calls among those to approve: one click must not send money.
        Each is approved only from a page that restates it (tool, arguments, session,
        logins) and a second, explicit button. An id that is not pending is left to the
        engine, which says why (already decided, no such request). Also returned: every
        picked request still pending, by id, so that the page can name what else the
        second click decides."""
        approving = any(a == "approve" for a, _, _ in picked)
        ids = [u for _, i, _ in picked if (u := self._uuid(i)) is not None]
        if not approving or not ids or not ws.roles.approver:
            return [], {}
        async with ws.db() as conn:
            found = await queries.pending_of(conn, ids)
        # as the engine reads them: an id typed in capitals is the same request
        approve_ids = {str(u) for a, i, _ in picked if a == "approve" and (u := self._uuid(i))}
        # tier NULL: the call's month was dropped; what it was cannot be shown as safe.
        # An expired request, or one's own call, the engine refuses at once: no question.
        confirming = [
            r
            for r in found
            if str(r["approval_id"]) in approve_ids
            and r["tier"] != "compensable"
            and not r["expired"]
            and r["requested_by"] != ws.login
        ]
        return confirming, {str(r["approval_id"]): r for r in found}

    async def _decide_one(self, ws: WebSession, action: str, id_text: str, reason: str) -> Outcome:
        approval_id = self._uuid(id_text)
        if approval_id is None:
            return Outcome(id_text, False, "not an approval id: nothing was written", 404)
        reason_or_none = reason.strip() or None
        if action == "reject" and reason_or_none is None:
            return Outcome(
                str(approval_id), False, "a rejection needs a reason: nothing was written", 422
            )
        if not ws.roles.approver:
            return Outcome(
                str(approval_id), False, "only an approver decides approval requests", 403
            )
        decide = aapprovals.approve if action == "approve" else aapprovals.reject

        async def decided(conn: queries.Conn) -> str:
            decision = await decide(conn, approval_id, ws.login, reason_or_none)
            log.info("%s: approval %s %s", ws.login, approval_id, decision)
            return f"{decision} by {ws.login}"

        return await self._act(ws, str(approval_id), decided)

    # --- edit, then approve -------------------------------------------------------------

    async def _editable(
        self, request: Request, ws: WebSession, id_text: str
    ) -> tuple[uuid.UUID, queries.Row] | Response:
        """The pending request an approver may edit, or the page that says why not."""
        if not ws.roles.approver:
            return self.problem(
                request, ws, 403, "Approvers only", "Only an approver edits a call's arguments."
            )
        approval_id = self._uuid(id_text)
        if approval_id is None:
            return self.not_found(request, ws, "approval request")
        async with ws.db() as conn:
            found = await queries.edit_of(conn, approval_id)
        if found is None:
            return self.problem(
                request,
                ws,
                409,
                "Not pending",
                f"Approval {approval_id} is not pending (already decided, or unknown): "
                "its arguments can no longer be edited.",
            )
        return approval_id, found

    async def edit_page(self, request: Request) -> Response:
        ws = self.staff_only(
            request, "Edit, then approve", "Only approvers edit a call's arguments."
        )
        if isinstance(ws, Response):
            return ws
        got = await self._editable(request, ws, request.path_params["approval_id"])
        if isinstance(got, Response):
            return got
        _, r = got
        return self.render(
            request, "edit.html", ws, r=r, edited=pretty_json(r["args"]), reason="", error=None
        )

    async def edit_post(self, request: Request) -> Response:
        """Step one (no ``confirm``): parse the edited JSON and show what changes, with a
        one-time nonce for exactly this request and these arguments. Step two: the nonce
        and the same arguments approve the call with them (undolog.approve_edited)."""
        got_form = await self.posted(request)
        if isinstance(got_form, Response):
            return got_form
        ws, form = got_form
        got = await self._editable(request, ws, request.path_params["approval_id"])
        if isinstance(got, Response):
            return got
        approval_id, r = got
        args_field, reason_field = form.get("args"), form.get("reason")
        text = args_field if isinstance(args_field, str) else ""
        reason = reason_field if isinstance(reason_field, str) else ""
        error: str | None = None
        digest = ""
        try:  # what was typed is what is approved, as for `undolog approvals approve --args`
            edited = loads_as_typed(text)
        except NotAsTyped as exc:
            edited, error = None, f"The arguments would not be approved as typed: {exc}."
        except (ValueError, RecursionError) as exc:
            edited, error = None, f"The arguments are not JSON: {exc}"
        if error is None and not isinstance(edited, dict):
            error = "The arguments must be a JSON object."
        if error is None:
            try:  # what JSON can say but the journal cannot hold (U+0000, 65 levels deep)
                check_storable(edited)
                digest = _args_digest(edited)
            except ValueError as exc:
                error = f"The arguments cannot be journaled: {exc}"
        if error is not None:
            return self.render(
                request, "edit.html", ws, 422, r=r, edited=text, reason=reason, error=error
            )
        # The nonce is for this request with these very arguments: what was shown is
        # what is approved.
        bound = [f"{approval_id}:{digest}"]
        nonce = form.get("confirm")
        if nonce is None or not ws.take_confirm(nonce, bound):
            async with ws.db() as conn:
                changes = await queries.edit_changes(conn, approval_id, edited)
            return await self.render_whole(
                request,
                "edit_confirm.html",
                ws,
                r=r,
                edited=edited,
                edited_text=json.dumps(edited, ensure_ascii=False),
                diff=args_diff(r["args"], edited),
                changes=changes,
                reason=reason,
                token=ws.confirm_nonce(bound),
                stale=nonce is not None,
            )
        outcome = await self._approve_edited(ws, approval_id, edited, reason)
        return self._after(request, ws, [outcome], "/approvals")

    async def _approve_edited(
        self, ws: WebSession, approval_id: uuid.UUID, edited: dict[str, Any], reason: str
    ) -> Outcome:

        async def approved(conn: queries.Conn) -> str:
            decision = await aapprovals.approve(
                conn, approval_id, ws.login, reason.strip() or None, args=edited
            )
            log.info("%s: approval %s approved with edited args", ws.login, approval_id)
            return f"{decision} with edited arguments by {ws.login}"

        return await self._act(ws, str(approval_id), approved)

    @staticmethod
    async def _attempt(
        ws: WebSession, target: str, call: Callable[[queries.Conn], Awaitable[T]]
    ) -> T | Outcome:
        """Run one engine call on the person's connection: what it answers, or its
        refusal as an Outcome (the engine's words and their HTTP status; nothing was
        written). The connection is let go before the caller shows any page: the lock
        is not reentrant (a page taking it again would wait for ever)."""
        async with ws.db() as conn:
            try:
                return await call(conn)
            except (errors.UndoLogError, psycopg.Error) as exc:
                return refused(conn, exc, target, ended=ws.closed)

    async def _sweep(
        self,
        ws: WebSession,
        target: str,
        sweep: Callable[
            [queries.Conn, Callable[[int], Awaitable[object]]], Awaitable[list[uuid.UUID]]
        ],
        done_before: str,
    ) -> list[uuid.UUID] | Outcome:
        """_attempt for a sweep in batches of at most SWEEP_BATCH, each committed before
        the next (expiry, failed leases): the ids it answers, or the refusal of the batch
        that failed, which then says how many the batches before it did, for those stand
        (``done_before``, formatted with that count)."""
        committed = 0

        async def so_far(count: int) -> None:
            nonlocal committed
            committed = count

        got = await self._attempt(ws, target, lambda conn: sweep(conn, so_far))
        if isinstance(got, Outcome) and committed:
            got.text += f" ({done_before.format(committed)})"
        return got

    async def _act(
        self, ws: WebSession, target: str, call: Callable[[queries.Conn], Awaitable[str]]
    ) -> Outcome:
        """_attempt for an action whose answer is what the person is told it did."""
        done = await self._attempt(ws, target, call)
        return done if isinstance(done, Outcome) else Outcome(target, True, done)

    def _after(
        self, request: Request, ws: WebSession, outcomes: list[Outcome], back: str
    ) -> Response:
        """Post/redirect/get when everything was done; otherwise a page that says, item by
        item, what was refused and why (the engine's words), with the failure's status."""
        if all(o.ok for o in outcomes):
            ws.flash += [("ok", f"{o.target}: {o.text}") for o in outcomes]
            return RedirectResponse(back, 303)
        status = next(o.status for o in outcomes if not o.ok)
        return self.render(request, "outcome.html", ws, status, outcomes=outcomes, back=back)

    async def decisions(self, request: Request) -> Response:
        """Past decisions, newest first: all, decided today (in the viewer's time zone
        when the page's script sent it, else UTC), by the viewer's own login."""
        ws = self.staff_only(
            request,
            "Decisions",
            "Only approvers and operators read past decisions; "
            "your sessions' decisions are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        q = request.query_params
        errors: list[str] = []
        tz_name = q.get("tz", "").strip() or "UTC"
        try:
            zone = zoneinfo.ZoneInfo(tz_name)
        # OSError: a name that is a directory of the zone database (Europe), or too long
        # to be a file name
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            shown = tz_name if len(tz_name) <= 64 else tz_name[:64] + "…"
            errors.append(f"tz: no such time zone ({shown!r}); use a name like Europe/Paris")
            zone = zoneinfo.ZoneInfo("UTC")
        today = q.get("today") == "1"
        mine = q.get("mine") == "1"
        day_start = datetime.datetime.now(zone).replace(hour=0, minute=0, second=0, microsecond=0)
        after = None
        if q.get("after"):
            try:
                after = queries.decode_cursor(q["after"])
            except (ValueError, UnicodeDecodeError):
                errors.append("after: not a page cursor of this list")
        if errors:
            return self.problem(request, ws, 422, "Bad filter", "; ".join(errors))
        filters = queries.DecisionFilter(
            since=day_start if today else None, by=ws.login if mine else None, after=after
        )
        async with ws.db() as conn:
            page, cursor = await queries.decisions_page(conn, filters)
        kept = {k: v for k, v in q.items() if k != "after" and v}
        return self.render(
            request,
            "decisions.html",
            ws,
            page=page,
            cursor=cursor,
            today=today,
            mine=mine,
            tz_name=tz_name,
            day_start=day_start,
            kept=kept,
        )

    # --- sessions ---------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        q = request.query_params
        errors: list[str] = []

        def when(name: str) -> datetime.datetime | None:
            text = q.get(name, "").strip()
            if not text:
                return None
            try:
                value = datetime.datetime.fromisoformat(text)
            except ValueError:
                errors.append(f"{name}: not a date or time ({text!r})")
                return None
            return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)

        for name in ("agent", "q"):  # compared in SQL, as text: which holds no NUL
            if "\x00" in q.get(name, ""):
                errors.append(f"{name}: holds a NUL character, which no session's text holds")
        state = q.get("state") or None
        if state is not None and state not in SESSION_STATES:
            errors.append(f"state: no such state ({state!r})")
            state = None
        after = None
        if q.get("after"):
            try:
                after = queries.decode_cursor(q["after"])
            except (ValueError, UnicodeDecodeError):
                errors.append("after: not a page cursor of this list")
        filters = queries.SessionFilter(
            state=state,
            agent=q.get("agent", "").strip() or None,
            since=when("since"),
            until=when("until"),
            search=q.get("q", "").strip() or None,
            after=after,
        )
        if errors:
            return self.problem(request, ws, 422, "Bad filter", "; ".join(errors))
        async with ws.db() as conn:
            page, cursor = await queries.sessions_page(conn, filters)
        kept = {k: v for k, v in q.items() if k != "after" and v}
        return self.render(
            request,
            "sessions.html",
            ws,
            page=page,
            cursor=cursor,
            states=SESSION_STATES,
            filters=filters,
            kept=kept,
        )

    async def session_counts(self, request: Request) -> Response:
        """How many sessions the person can see in each state, each counted up to
        queries.COUNT_CAP and shown as "10,000+" past it: fetched by the sessions page
        after it is shown, so that the list never waits for them. Kept for
        COUNTS_SECONDS per person."""
        ws = self.current(request)
        if ws is None:
            return Response("not logged in", 401, media_type="text/plain")
        now = time.monotonic()
        if ws.counts is None or now - ws.counts[0] > COUNTS_SECONDS:
            async with ws.db() as conn:
                ws.counts = (now, await queries.state_counts(conn))
        return self.render(
            request,
            "counts_fragment.html",
            ws,
            counts=ws.counts[1],
            states=SESSION_STATES,
            cap=queries.COUNT_CAP,
            capped=f"{queries.COUNT_CAP:,}+",
        )

    async def session_page(self, request: Request) -> Response:
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        session_id = self._uuid(request.path_params["session_id"])
        if session_id is None:
            return self.not_found(request, ws, "session")
        return await self._show_session(request, ws, session_id)

    async def _show_session(
        self,
        request: Request,
        ws: WebSession,
        session_id: uuid.UUID,
        status: int = 200,
        outcomes: list[Outcome] | None = None,
    ) -> Response:
        async with ws.db() as conn:
            data = await queries.session(conn, session_id, ws.roles.staff)
            fingerprint = await queries.session_fingerprint(conn, session_id)
        if data is None:
            return self.not_found(request, ws, "session")
        fragment = request.query_params.get("fragment") == "1"
        return self.render(
            request,
            "session_fragment.html" if fragment else "session.html",
            ws,
            status,
            s=data,
            fingerprint=fingerprint,
            outcomes=outcomes or [],
            head_chars=queries.HEAD_CHARS,
            cell_chars=queries.CELL_CHARS,
        )

    async def payload(self, request: Request) -> Response:
        """One call's payload whole, where its cell on the session's page (or Past
        decisions) is cut: the requested ``args``, the ``result``, or the ``approved``
        arguments an edit let it run with. Read on the person's own connection (an agent
        sees its own sessions' only), and only as the session's in the address."""
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        session_id = self._uuid(request.path_params["session_id"])
        effect_id = self._uuid(request.path_params["effect_id"])
        which = request.path_params["which"]
        if session_id is None or effect_id is None or which not in PAYLOADS:
            return self.not_found(request, ws, "call")
        async with ws.db() as conn:
            row = await queries.payload(conn, session_id, effect_id, which)
        if row is None:
            return self.not_found(request, ws, "call")
        return await self.render_whole(
            request,
            "payload.html",
            ws,
            row=row,
            which=which,
            what=PAYLOADS[which],
            session_id=session_id,
        )

    async def session_export(self, request: Request) -> Response:
        """A session's history rows with their hash chain, as `undolog export` writes
        them (chain.export_header and chain.export_line: the same bytes), a download for
        `undolog verify --file` to check offline. Staff only, like the session page's
        History chain section (undolog.chain_events is granted to staff); anyone else
        gets 403, logged out the login page. Read whole in one snapshot into a spool
        (_export_chunks), then sent from it, outside any transaction (_export_stream):
        however slowly the client takes the file, it holds no lock and not the person's
        connection."""
        ws = self.staff_only(
            request,
            "Export",
            "Only approvers and operators export a session's history chain; your "
            "sessions' records are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        session_id = self._uuid(request.path_params["session_id"])
        if session_id is None:
            return self.not_found(request, ws, "session")
        if ws.exports >= EXPORT_PER_SESSION:
            return self.problem(
                request,
                ws,
                429,
                "Export refused",
                f"You have {ws.exports} exports still being sent (at most "
                f"{EXPORT_PER_SESSION} at once): try again when one of them ends.",
            )
        if self.exports >= EXPORT_MAX:
            busy = self.problem(
                request,
                ws,
                503,
                "Export refused",
                f"The dashboard is sending {self.exports} exports (at most {EXPORT_MAX} "
                f"at once): try again in a moment.",
            )
            busy.headers["retry-after"] = str(EXPORT_RETRY_SECONDS)
            return busy
        # The export's places are taken here, in the same step as the counts, and given
        # back once: when the read fails or finds nothing, or when the response ends.
        ws.exports += 1
        self.exports += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                ws.exports -= 1
                self.exports -= 1

        # The read runs in a task of its own, which nothing cancels: psycopg closes a
        # connection whose query is cancelled midway, and this one is the person's. A
        # request cancelled meanwhile leaves the read to end, and its spool is closed then.
        reading = asyncio.ensure_future(self._export_chunks(ws, session_id))

        def abandoned(task: asyncio.Future[tempfile.SpooledTemporaryFile[bytes] | None]) -> None:
            release()
            if not task.cancelled() and task.exception() is None and (got := task.result()):
                got.close()

        try:
            spool = await asyncio.shield(reading)
        except psycopg.Error as exc:
            release()
            if isinstance(exc, psycopg.OperationalError) and (ws.closed or ws.conn.closed):
                raise  # the web session or its connection is gone: _database_error says so
            status, text = engine_error(exc)
            return self.problem(request, ws, status, "Export refused", text)
        except asyncio.CancelledError:
            reading.add_done_callback(abandoned)
            raise
        except BaseException:
            release()
            raise
        if spool is None:
            release()
            return self.not_found(request, ws, "session")
        filename = f"session-{session_id}.jsonl"  # as docs/operations/audit.md names it
        try:
            return self._export_stream(spool, filename, release)
        except BaseException:
            release()
            spool.close()
            raise

    @staticmethod
    async def _export_chunks(
        ws: WebSession, session_id: uuid.UUID
    ) -> tempfile.SpooledTemporaryFile[bytes] | None:
        """Read a session's export in one REPEATABLE READ READ ONLY transaction on the
        person's connection (its head is then its last row's), as fast as the database
        gives it, into a spool (in memory up to EXPORT_MEMORY_BYTES, then a temporary
        file): the header's line, then the rows' lines, from a server-side cursor, in
        batches, so that no more than a batch is held in a string at once. The
        transaction has ended, the connection's settings are back, when this returns the
        spool (at its end; the caller closes it), or None when the person may not see the
        session; a database error is raised, the spool closed."""
        # returned open, for the response to send and close: no `with` here
        spool = tempfile.SpooledTemporaryFile(max_size=EXPORT_MEMORY_BYTES)  # noqa: SIM115
        sid = {"session_id": session_id}
        try:
            async with ws.db() as conn:
                await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
                await conn.set_read_only(True)
                try:
                    async with conn.transaction():
                        cur = conn.cursor(row_factory=dict_row)
                        await cur.execute(QUERIES["session_state"], sid)
                        if await cur.fetchone() is None:
                            spool.close()
                            return None
                        await cur.execute(QUERIES["chain_head"], sid)
                        head = await cur.fetchone()
                        header = chain.export_header(session_id, head) + "\n"
                        await anyio.to_thread.run_sync(spool.write, header.encode("utf-8"))
                        rows = conn.cursor("undolog_export", row_factory=dict_row)
                        await rows.execute(QUERIES["session_chain_events"], sid)
                        size = EXPORT_ROWS
                        while batch := await rows.fetchmany(size):
                            # the batch's text is dropped as it is encoded: one copy kept
                            data = "".join(chain.export_line(r) + "\n" for r in batch).encode(
                                "utf-8"
                            )
                            count = len(batch)
                            del batch
                            await anyio.to_thread.run_sync(spool.write, data)
                            # long lines: fewer of them in the next batch
                            fit = EXPORT_CHUNK_BYTES * count // max(len(data), 1)
                            del data
                            size = max(1, min(EXPORT_ROWS, fit))
                        await rows.close()
                finally:
                    if not conn.closed:
                        await conn.set_isolation_level(None)
                        await conn.set_read_only(None)
        except BaseException:
            spool.close()
            raise
        return spool

    @staticmethod
    def _export_stream(
        spool: tempfile.SpooledTemporaryFile[bytes], filename: str, done: Callable[[], None]
    ) -> Response:
        """The download: the spool, from its start, EXPORT_CHUNK_BYTES at a time, its
        length said up front. Read whole before the response begins, so no database
        error can cut it short. Each send must be taken within EXPORT_STALL_SECONDS: a
        client that reads nothing that long (a paused download) is given up, the
        response cut short (a TimeoutError, an OSError: as the client's leaving). The
        spool is closed (its file, if any, deleted) and `done` called as the response
        ends, however it ends: the client's leaving ends the response, not the body's
        generator, which is left suspended, so the response closes the spool."""
        size = spool.seek(0, 2)
        spool.seek(0)
        return _SpooledDownload(
            spool,
            done,
            media_type=EXPORT_MEDIA_TYPE,
            headers={
                "content-disposition": f'attachment; filename="{filename}"',
                "content-length": str(size),
            },
        )

    async def session_action(self, request: Request) -> Response:
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        session_id = self._uuid(request.path_params["session_id"])
        action = request.path_params["action"]
        if session_id is None:
            return self.not_found(request, ws, "session")
        if action == "notify-retry":
            return await self._retry_notification(request, ws, session_id, form)
        reason_field = form.get("reason")
        reason = reason_field.strip() if isinstance(reason_field, str) else ""
        target = str(session_id)
        if action == "undo-to":
            return await self._undo_to(request, ws, session_id, form)
        # The page shows these buttons only to whom the engine lets act; a post all the
        # same is told who may, as every other action is (not PostgreSQL's bare 42501)
        beyond = (
            "only an operator resumes, retries or abandons a halted session"
            if action in SEEN_ACTIONS and not ws.roles.operator
            else "only an operator or an approver rolls back a session"
            if action == "rollback" and not ws.roles.staff
            else None
        )
        if beyond is not None:
            outcome = Outcome(target, False, f"{beyond}: nothing was done", 403)
            return await self._show_session(request, ws, session_id, 403, [outcome])
        if action == "retry":
            undo_id = self._uuid(str(form.get("undo_id", "")))
            # retry_compensation takes the entry alone: the entry must be this session's,
            # or a form for one session would retry another's compensation
            if undo_id is None or not await self._undo_entry_of(ws, session_id, undo_id):
                return self.not_found(request, ws, "undo entry of this session")
            subject = undo_id
            target = f"undo entry {undo_id}"
        elif action in OPERATOR_ACTIONS:
            subject = session_id
        else:
            return self.not_found(request, ws, "action")
        if not reason:
            outcome = Outcome(target, False, f"{action}: give a reason; nothing was written", 422)
        elif len(reason) > REASON_LIMIT:
            outcome = Outcome(
                target,
                False,
                f"reason is {len(reason)} characters, over the limit of {REASON_LIMIT}: "
                "nothing was written",
                422,
            )
        else:
            # What the page showed (the session's updated_at): a halted session's forms
            # carry it, so that a choice made on a page read before another operator moved
            # the session on (resumed or retried it, and it halted again) is not applied to
            # a halt this person never saw. A post without it (a script) acts as before.
            # The check is the engine's (undolog.expect_session), in the action's own
            # transaction: it locks the session as the action does, so nobody can move it
            # between the check and the action. A value that is no instant the page could
            # have shown (no time zone) is a state the session is not in.
            field = form.get("seen") if action in SEEN_ACTIONS else None
            seen: datetime.datetime | None = None
            if isinstance(field, str):
                try:
                    seen = datetime.datetime.fromisoformat(field)
                except ValueError:
                    seen = None
                if seen is not None and seen.tzinfo is None:
                    seen = None

            async def acted(conn: queries.Conn) -> str | None:
                checked = not isinstance(field, str)
                if not checked and seen is None:
                    return None
                try:
                    async with conn.transaction():
                        if seen is not None:
                            await asaga.expect_session(conn, session_id, seen)
                            checked = True
                        state = await OPERATOR_ACTIONS[action](conn, subject, ws.login, reason)
                except errors.InvalidStateTransition:
                    if checked:
                        raise
                    return None  # changed since it was read: rolled back, nothing done
                log.info("%s: %s %s", ws.login, action, target)
                return f"{action} by {ws.login}: now {state}"

            done = await self._attempt(ws, target, acted)
            if done is None:
                outcome = Outcome(
                    target,
                    False,
                    f"{action}: the session changed since you read it (another operator "
                    "acted, or its walk moved on): nothing was done. Read it again below "
                    "and choose again.",
                    409,
                )
            else:
                outcome = done if isinstance(done, Outcome) else Outcome(target, True, done)
        if outcome.ok:
            return self._after(request, ws, [outcome], f"/sessions/{session_id}")
        return await self._show_session(request, ws, session_id, outcome.status, [outcome])

    async def _retry_notification(
        self, request: Request, ws: WebSession, session_id: uuid.UUID, form: Any
    ) -> Response:
        """An operator sends a notification of one of this session's requests again."""
        if not ws.roles.operator:  # no button for anyone else: told who may, as elsewhere
            outcome = Outcome(
                "notify-retry",
                False,
                "only an operator sends a notification again: nothing was done",
                403,
            )
            return await self._show_session(request, ws, session_id, 403, [outcome])
        delivery_id = self._uuid(str(form.get("delivery_id", "")))
        # retry_notification takes the delivery alone: it must be this session's
        async with ws.db() as conn:
            mine = delivery_id is not None and await queries.delivery_in_session(
                conn, session_id, delivery_id
            )
        if delivery_id is None or not mine:
            return self.not_found(request, ws, "notification of this session")
        target = f"notification {delivery_id}"

        async def due_again(conn: queries.Conn) -> str:
            params = {"delivery_id": delivery_id, "by": ws.login}
            await conn.execute(QUERIES["retry_notification"], params)
            log.info("%s: notify-retry %s", ws.login, delivery_id)
            return f"due again now (by {ws.login})"

        outcome = await self._act(ws, target, due_again)
        if outcome.ok:
            return self._after(request, ws, [outcome], f"/sessions/{session_id}")
        return await self._show_session(request, ws, session_id, outcome.status, [outcome])

    async def _undo_to(
        self, request: Request, ws: WebSession, session_id: uuid.UUID, form: FormData
    ) -> Response:
        """Undo from here: the first POST (a call's button) shows what will be undone, in
        which order, with a one-time confirmation; only the second, from that page, with a
        reason, undoes it. The confirmation is for that plan exactly (the entries it
        lists): if the session moved on in between, the page is shown again."""
        target = str(session_id)
        try:
            step = int(str(form.get("step", "")))
        except ValueError:
            step = -1
        if not 0 <= step <= PG_INT_MAX:  # a step index is a PostgreSQL integer
            return self.not_found(request, ws, "step of this session")
        if not ws.roles.staff:
            outcome = Outcome(target, False, "only an operator or approver undoes a session", 403)
            return await self._show_session(request, ws, session_id, 403, [outcome])
        # A refusal's page is shown once _attempt has let the connection go:
        # _show_session takes it again, and the lock is not reentrant (when it was shown
        # inside, the person's every request from then on waited for ever).
        plan = await self._attempt(
            ws, target, lambda conn: queries.rollback_to_plan(conn, session_id, step)
        )
        if isinstance(plan, Outcome):
            return await self._show_session(request, ws, session_id, plan.status, [plan])
        key = [f"undo-to:{session_id}:{step}", *(str(r["undo_id"]) for r in plan)]
        reason_field = form.get("reason")
        reason = reason_field.strip() if isinstance(reason_field, str) else ""
        nonce = form.get("confirm")
        if nonce is None or not ws.take_confirm(nonce, key) or not reason:
            return self.render(
                request,
                "undo_to.html",
                ws,
                200 if nonce is None else 409,
                session_id=session_id,
                step=step,
                plan=plan,
                token=ws.confirm_nonce(key),
                stale=nonce is not None and bool(reason),
                no_reason=nonce is not None and not reason,
            )
        if len(reason) > REASON_LIMIT:
            outcome = Outcome(target, False, f"reason over {REASON_LIMIT} characters", 422)
            return await self._show_session(request, ws, session_id, 422, [outcome])
        confirmed = [r["undo_id"] for r in plan]

        async def undo(conn: queries.Conn) -> str | None:
            # The plan was checked above, but the agent may journal another call before
            # rollback_to locks the session: a plan other than the one confirmed is rolled
            # back (None) and asked again, as `undolog sessions undo-to` refuses it.
            return await asaga.rollback_to_as_planned(
                conn, session_id, step, confirmed, reason, ws.login
            )

        state = await self._attempt(ws, target, undo)
        if isinstance(state, Outcome):  # shown with the connection let go, as above
            return await self._show_session(request, ws, session_id, state.status, [state])
        if state is None:
            plan = await self._attempt(
                ws, target, lambda conn: queries.rollback_to_plan(conn, session_id, step)
            )
            if isinstance(plan, Outcome):
                return await self._show_session(request, ws, session_id, plan.status, [plan])
            key = [f"undo-to:{session_id}:{step}", *(str(r["undo_id"]) for r in plan)]
            return self.render(
                request,
                "undo_to.html",
                ws,
                409,
                session_id=session_id,
                step=step,
                plan=plan,
                token=ws.confirm_nonce(key),
                stale=True,
                no_reason=False,
            )
        log.info("%s: undo-to step %s of %s", ws.login, step, session_id)
        done = Outcome(
            target,
            True,
            f"undo from step {step} by {ws.login}: now {state}; "
            f"the walk undoes {len(plan)} call(s), then the session goes on",
        )
        return self._after(request, ws, [done], f"/sessions/{session_id}")

    @staticmethod
    async def _undo_entry_of(ws: WebSession, session_id: uuid.UUID, undo_id: uuid.UUID) -> bool:
        async with ws.db() as conn:
            return await queries.undo_entry_in_session(conn, session_id, undo_id)

    # --- the tool registry ------------------------------------------------------------

    async def tools_page(self, request: Request) -> Response:
        """The tool registry, as `undolog tools list` shows it: what the person's login
        may read (row-level security: an agent reads its own login's tools only). An
        operator retires a live registration and registers a tool for an agent login."""
        ws = self.current(request)
        if ws is None:
            return RedirectResponse("/login", 303)
        q = request.query_params
        everything = q.get("all") == "1"
        owner = q.get("owner", "").strip() or None
        if owner is not None and "\x00" in owner:  # compared in SQL, as text
            return self.problem(
                request, ws, 422, "Bad filter", "owner: holds a NUL character, which no login holds"
            )
        async with ws.db() as conn:
            found, more = await queries.tools(conn, owner, everything)
        return self.render(
            request,
            "tools.html",
            ws,
            tools=found,
            more=more,
            everything=everything,
            owner=owner or "",
            limit=queries.TOOLS_LIMIT,
            tiers=TOOL_TIERS,
            on_rejects=ON_REJECTS,
        )

    @staticmethod
    def _retirement_asked(
        ws: WebSession, form: FormData, key: list[str], reason: str, undone: str
    ) -> tuple[str | None, int] | None:
        """The confirmation step of the Tools page's actions that retire a registration
        (Retire…, and Register with replace): the first POST writes nothing and is
        answered with a page restating what would be done and asking for the reason,
        which carries a one-time nonce bound to ``key`` (what the page restated); only a
        POST with that nonce, unused, and a reason goes through (None). Otherwise the
        problem to show on the page again (None on the first POST) and its status."""
        nonce = form.get("confirm")
        if nonce is None:
            return None, 200
        if not ws.take_confirm(nonce, key):
            return (
                f"That confirmation was already used or has expired, or what it showed "
                f"changed since: nothing was {undone}. Read it again and confirm below.",
                409,
            )
        if not reason:
            return f"Give a reason: nothing was {undone}.", 422
        if len(reason) > REASON_LIMIT:
            return f"The reason is over {REASON_LIMIT} characters: nothing was {undone}.", 422
        return None

    async def tools_retire(self, request: Request) -> Response:
        """An operator ends a live registration (undolog.retire_tool, as `undolog tools
        retire`): the first POST (the row's button) restates it and asks for a reason;
        only the second, from that page with its one-time confirmation, retires it."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        if not ws.roles.operator:
            return self._after(
                request,
                ws,
                [
                    Outcome(
                        "retire", False, "only an operator retires a tool: nothing was written", 403
                    )
                ],
                "/tools",
            )
        tool_id = self._uuid(str(form.get("tool_id", "")))
        tool: queries.Row | None = None
        if tool_id is not None:
            async with ws.db() as conn:
                tool = await queries.tool_of(conn, tool_id)
        if tool_id is None or tool is None:
            return self.not_found(request, ws, "tool registration")
        target = f"tool {tool['tool_name']} of {tool['owner_role']}"
        if not tool["live"]:
            return self._after(
                request,
                ws,
                [Outcome(target, False, "already retired: nothing was written", 409)],
                "/tools",
            )
        reason_field = form.get("reason")
        reason = reason_field.strip() if isinstance(reason_field, str) else ""
        key = [f"retire-tool:{tool_id}"]
        asked = self._retirement_asked(ws, form, key, reason, "retired")
        if asked is not None:
            problem, status = asked
            return self.render(
                request,
                "tools_retire.html",
                ws,
                status,
                t=tool,
                token=ws.confirm_nonce(key),
                problem=problem,
                reason=Verbatim(reason),
            )

        async def retire(conn: queries.Conn) -> str:
            cur = await conn.execute(
                QUERIES["retire_tool"], {"tool_id": tool_id, "by": ws.login, "reason": reason}
            )
            await cur.fetchone()
            log.info("%s: retired tool %s (%s)", ws.login, tool_id, target)
            return f"retired by {ws.login}"

        outcome = await self._act(ws, target, retire)
        return self._after(request, ws, [outcome], "/tools")

    async def tools_register(self, request: Request) -> Response:
        """An operator registers (pins) a tool for an agent login (undolog.register_tool
        with p_owner, as `undolog tools register`): its tier, compensation, on_reject.
        With "replace" checked and a reason, a live registration that differs is retired
        (recorded as by the operator's login) and this one registered in one transaction
        (undolog.replace_tool, as `undolog tools register --replace`), as Retire… does only
        after its confirmation page (_retirement_asked): the first POST shows the live
        registration and the new one side by side; the nonce is bound to both."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got

        def field(name: str, default: str = "") -> str:
            value = form.get(name)
            return value.strip() if isinstance(value, str) else default

        tool_name, owner = field("tool_name"), field("owner")
        tier, on_reject = field("tier"), field("on_reject", "fail_session") or "fail_session"
        target = f"tool {tool_name or '?'} of {owner or '?'}"
        if not ws.roles.operator:
            return self._after(
                request,
                ws,
                [
                    Outcome(
                        target, False, "only an operator registers a tool: nothing was written", 403
                    )
                ],
                "/tools",
            )
        problems: list[str] = []
        if not tool_name:
            problems.append("give the tool's name, as the agent calls it")
        if not owner:
            problems.append("give the agent login the tool is for")
        if tier not in TOOL_TIERS:
            problems.append(f"tier: {' or '.join(TOOL_TIERS)}")
        if on_reject not in ON_REJECTS:
            problems.append(f"on_reject: {' or '.join(ON_REJECTS)}")
        replace = form.get("replace") == "1"
        reason = field("reason")
        if replace and "confirm" in form:
            pass  # the reason of a confirmation: checked with its nonce, below
        elif replace and not reason:
            problems.append("give a reason: replacing retires the live registration")
        elif len(reason) > REASON_LIMIT:
            problems.append(f"the reason is over {REASON_LIMIT} characters")
        elif reason and not replace:
            problems.append("a reason goes with replacing the live registration: check it")
        compensation: Any = None
        text = field("compensation")
        if text:
            try:
                compensation = json.loads(text)
                check_storable(compensation, "compensation")
            except (ValueError, RecursionError) as exc:
                problems.append(f"the compensation is not JSON that can be stored: {exc}")
        if problems:
            outcome = Outcome(target, False, "; ".join(problems) + ": nothing was written", 422)
            return self._after(request, ws, [outcome], "/tools")
        params = {
            "tool_name": tool_name,
            "tier": tier,
            "compensation": None if compensation is None else Jsonb(compensation),
            "owner": owner,
            "on_reject": on_reject,
        }

        async def register(conn: queries.Conn) -> str | None:
            """register_tool: its id, said; with replace, None when it differs (UL018)."""
            try:
                cur = await conn.execute(QUERIES["register_tool_for"], params)
            except psycopg.Error as exc:
                if replace and exc.sqlstate == "UL018":
                    return None
                raise
            row = await cur.fetchone()
            assert row is not None
            log.info("%s: registered %s (%s)", ws.login, target, row[0])
            said = f"registered as {tier} ({row[0]}) by {ws.login}"
            if replace:
                said += "; nothing was retired (no live registration that differs)"
            return said

        if not replace or "confirm" not in form:
            # Replacing retires nothing until confirmed: first the plain registration,
            # which is all there is to do when no live registration differs (the engine
            # compares them), and the confirmation page when one does.
            said = await self._attempt(ws, target, register)
            if said is not None:
                outcome = said if isinstance(said, Outcome) else Outcome(target, True, said)
                return self._after(request, ws, [outcome], "/tools")
        async with ws.db() as conn:
            live = await queries.live_tool(conn, owner, tool_name)
        restated = json.dumps(
            [
                None if live is None else str(live["tool_id"]),
                *(owner, tool_name, tier, compensation, on_reject),
            ],
            sort_keys=True,
        )
        key = [f"replace-tool:{restated}"]
        asked = self._retirement_asked(ws, form, key, reason, "written")
        if asked is not None:
            problem, status = asked
            new: dict[str, Any] = {"tool_id": None, "registered_at": None, "tier": tier}
            new |= {"compensation": compensation, "on_reject": on_reject}
            return self.render(
                request,
                "tools_replace.html",
                ws,
                status,
                live=live,
                new=new,
                tool_name=Verbatim(tool_name),  # sent back as typed, in hidden fields
                owner=Verbatim(owner),
                compensation_text=Verbatim(text),
                token=ws.confirm_nonce(key),
                problem=problem,
                reason=Verbatim(reason),
            )

        confirmed_live = None if live is None else live["tool_id"]

        async def replace_it(conn: queries.Conn) -> str | Outcome:
            # replace_tool answers which registration it retired: any other than the one
            # confirmed (another operator's, committed since the read above) is not
            # retired in its stead, nor anything else of it kept
            async with conn.transaction():
                cur = await conn.execute(
                    QUERIES["replace_tool_for"], {**params, "by": ws.login, "reason": reason}
                )
                row = await cur.fetchone()
                assert row is not None
                tool_id, retired = row[0], row[1]
                if retired is not None and retired != confirmed_live:
                    raise psycopg.Rollback
            if retired is not None and retired != confirmed_live:
                return Outcome(
                    target,
                    False,
                    "the live registration changed since you confirmed: nothing was written; "
                    "read it again (Register with replace shows it)",
                    409,
                )
            if retired is None:
                log.info("%s: registered %s (%s), nothing to replace", ws.login, target, tool_id)
                return (
                    f"registered as {tier} ({tool_id}) by {ws.login}; "
                    "nothing was retired (no live registration that differs)"
                )
            log.info("%s: registered %s (%s), replacing %s", ws.login, target, tool_id, retired)
            return (
                f"registered as {tier} ({tool_id}) by {ws.login}, replacing {retired} "
                "(retired, with the reason given)"
            )

        done = await self._attempt(ws, target, replace_it)
        outcome = done if isinstance(done, Outcome) else Outcome(target, True, done)
        return self._after(request, ws, [outcome], "/tools")

    # --- maintenance: the month partitions and the audit anchors ----------------------

    async def anchor_download(self, request: Request) -> Response:
        """The latest anchor, to keep outside the database (`undolog anchor export`, byte
        for byte: chain.anchor_of, one line of JSON), for `undolog verify --anchor` to
        check later. Staff read it, as the page; anyone else gets 403."""
        ws = self.staff_only(
            request,
            "Anchor",
            "Only approvers and operators read the anchors of the history chains; your "
            "sessions' records are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        async with ws.db() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(QUERIES["latest_anchor"])
            row = await cur.fetchone()
        if row is None:
            return self.problem(
                request,
                ws,
                404,
                "No anchor yet",
                "No anchor yet: an operator writes one with Write an anchor now on this "
                "page (`undolog anchor write`), and partition maintenance writes one on "
                "each run.",
            )
        anchor = chain.anchor_of(row)
        return Response(
            json.dumps(anchor) + "\n",
            media_type="application/json",
            headers={
                "content-disposition": (
                    f'attachment; filename="undolog-anchor-{anchor["anchor_id"]}.json"'
                )
            },
        )

    async def maintenance_page(self, request: Request) -> Response:
        """The journal's month partitions and what maintenance would do now (as `undolog
        partitions maintain` and `undolog health` show them), and the latest anchors of
        the history chains (`undolog anchor export`). Staff read it; operators act."""
        ws = self.staff_only(
            request,
            "Maintenance",
            "Only approvers and operators read the journal's partitions and anchors; "
            "your sessions' records are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        async with ws.db() as conn:
            every = await queries.every_partition(conn)
            pending = await queries.pending_partitions(conn)
            retention = await queries.retention(conn)
            anchors, older = await queries.anchors(conn)
            worker = await queries.worker_health(conn)  # as `undolog health`
            security = await queries.security_health(conn)  # its locks and schemas
            installed = await queries.engine_version(conn)
            applied = None if installed is None else await _applied_migrations(conn)
        # the plan from every partition, as `undolog partitions plan` makes it; only the
        # table shown is cut
        plan = partitions.maintenance_plan(
            every, pending, retention["setting"], retention["month_start"]
        )
        shown = queries.PARTITIONS_LIMIT
        parts, more = every[:shown], len(every) > shown
        # the engine installed and this package (as `undolog status` and `--version` say
        # them), and whether the package's clients work with that engine (engine_check's
        # one rule: the version, and between releases the migrations applied)
        package = _version.__version__
        why, first_missing = engine_check.judgement(installed, applied, package)
        versions = {
            "installed": installed,
            "package": package,
            "mismatch": why,
            "first_missing": first_missing,
        }
        return self.render(
            request,
            "maintenance.html",
            ws,
            partitions=parts,
            more=more,
            hidden=len(every) - len(parts),
            plan=plan,
            anchors=anchors,
            older=older,
            worker=worker,
            security=security,
            versions=versions,
            partitions_limit=queries.PARTITIONS_LIMIT,
            anchors_limit=queries.ANCHORS_LIMIT,
            expired_per_pass=walk.EXPIRED_PER_PASS,
            sweep_batch=asaga.SWEEP_BATCH,
        )

    def _operator_only(self, request: Request, ws: WebSession, target: str, what: str) -> Response:
        outcome = Outcome(target, False, f"only an operator {what}: nothing was done", 403)
        return self._after(request, ws, [outcome], "/maintenance")

    async def _maintenance_call(
        self,
        ws: WebSession,
        target: str,
        call: Callable[[queries.Conn], Awaitable[str]],
    ) -> Outcome:
        """Run one maintenance action on the person's connection, in a transaction that
        waits at most queries.MAINTENANCE_LOCK_TIMEOUT for any lock (see
        docs/operations/partitions.md: a strong lock queued behind a long reader would
        stall every agent's call); the server's WARNINGs (a month kept for an unfinished
        session) are added to what it says. A refusal is the engine's words, and the
        transaction rolled back: nothing was done."""
        warnings: list[str] = []

        def heard(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized == "WARNING" and diag.message_primary:
                detail = f" ({diag.message_detail})" if diag.message_detail else ""
                warnings.append(f"{diag.message_primary}{detail}")

        async with ws.db() as conn:
            conn.add_notice_handler(heard)
            try:
                async with conn.transaction():
                    await queries.bound_lock_waits(conn)
                    text = await call(conn)
                outcome = Outcome(target, True, "; ".join([text, *warnings]))
            except (errors.UndoLogError, psycopg.Error) as exc:  # the binding's, translated
                outcome = refused(conn, exc, target, ended=ws.closed)
                if isinstance(exc, psycopg.errors.LockNotAvailable) or isinstance(
                    exc.__cause__, psycopg.errors.LockNotAvailable
                ):
                    outcome.text += (
                        f" (waited {queries.MAINTENANCE_LOCK_TIMEOUT}: another maintenance run "
                        "or a long reader of the journal holds a lock it needs; try again later)"
                    )
                outcome.text += ": nothing was done"
            finally:
                conn.remove_notice_handler(heard)
        return outcome

    async def maintenance_run(self, request: Request) -> Response:
        """An operator runs partition maintenance now (undolog.maintain_partitions, as
        `undolog partitions maintain`, with its --months-ahead and --retention-months when
        the form's fields are filled in, else their defaults): drain, retention, months
        ahead, an anchor. The flash says which months were created, dropped, kept,
        pending. A retention typed in may drop months the page's plan (at the setting)
        keeps: when it would drop any, the first POST restates them (as "Drop old months"
        does) and only the second, from that page with its one-time confirmation for
        exactly that retention and those months, runs; if the months it would take
        changed meanwhile, its transaction is rolled back and the page asks again."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        if not ws.roles.operator:
            return self._operator_only(request, ws, "maintenance", "runs partition maintenance")
        chosen: dict[str, int | None] = {"months_ahead": MONTHS_AHEAD, "retention_months": None}
        typed: dict[str, int] = {}  # the fields filled in, for the confirmation to resend
        options: list[str] = []  # what the person chose, for the flash
        for field, bounds in (
            ("months_ahead", partitions.MONTHS_AHEAD_RANGE),
            ("retention_months", partitions.RETENTION_MONTHS_RANGE),
        ):
            given = form.get(field)
            text = given if isinstance(given, str) else ""
            if not text.strip(" \t"):
                continue  # the default, as the command's without its flag
            try:
                typed[field] = partitions.months_given(text, bounds)
            except ValueError as exc:
                outcome = Outcome(
                    "maintenance",
                    False,
                    f"{field.replace('_', ' ')}: {exc}: nothing was done",
                    errors.HTTP_UNPROCESSABLE,
                )
                return self._after(request, ws, [outcome], "/maintenance")
            chosen[field] = typed[field]
            what = "{} months ahead" if field == "months_ahead" else "keeping {} months"
            options.append(what.format(chosen[field]))
        months_ahead = typed.get("months_ahead", MONTHS_AHEAD)
        retention = typed.get("retention_months")
        # The months a typed retention drops, as `undolog partitions plan --retention-months`
        # lists them: those confirmed, which the run must take exactly (None: the setting's
        # retention, which the page's own plan showed, runs at once as before).
        confirmed: list[str] | None = None
        if retention is not None:
            plan, doomed = await self._retention_plan(ws, months_ahead, retention)
            confirmed = sorted(plan["to_drop"])
            key = [f"maintain-partitions:{months_ahead}:{retention}", *confirmed]
            nonce = form.get("confirm")

            def asked(status: int, *, stale: bool = False, changed: str = "") -> Response:
                return self.render(
                    request,
                    "maintenance_confirm.html",
                    ws,
                    status,
                    plan=plan,
                    doomed=doomed,
                    typed=typed,
                    token=ws.confirm_nonce(key),
                    stale=stale,
                    changed=changed,
                )

            if confirmed and (nonce is None or not ws.take_confirm(nonce, key)):
                return asked(200 if nonce is None else 409, stale=nonce is not None)

        async def run(conn: queries.Conn) -> str:
            cur = await conn.execute(QUERIES["maintain_partitions"], chosen)
            done: dict[str, list[str]] = {}
            for action, partition in await cur.fetchall():
                done.setdefault(str(action), []).append(str(partition))
            if confirmed is not None:
                # the months of the journal the retention took (or kept for an
                # unfinished session), but for those this run's drain brought out of a
                # DEFAULT partition: exactly those confirmed, else roll it all back
                taken = {
                    name
                    for action in ("dropped", "detached", "skipped")
                    for name in done.get(action, [])
                } - set(done.get("created", []))
                # A month an unfinished session holds is answered 'skipped' for its
                # effect log's partition alone: the engine keeps the history's partitions
                # of that month with it, unsaid. Kept all the same, as the list said.
                held = [
                    p
                    for p in doomed
                    if p["parent"] == "undolog_effect_log" and p["name"] in done.get("skipped", [])
                ]
                taken |= {
                    p["name"]
                    for p in doomed
                    if p["parent"] == "undolog_effect_history"
                    and any(
                        p["lower_bound"] < h["upper_bound"] and h["lower_bound"] < p["upper_bound"]
                        for h in held
                    )
                }
                if sorted(taken) != confirmed:
                    raise _DropChanged(sorted(taken ^ set(confirmed)))
            latest, _ = await queries.anchors(conn, 1)
            said = [
                f"{label} {_names(done[action])}"
                for action, label in (
                    ("created", "created"),
                    ("dropped", "dropped"),
                    ("detached", "detached"),
                    ("skipped", "kept (an unfinished session holds it)"),
                    ("pending", "left to attach on the next run (their locks were busy)"),
                )
                if done.get(action)
            ] or ["no month to create or drop"]
            if latest:
                said.append(f"anchor #{latest[0]['anchor_id']} written")
            log.info("%s: ran partition maintenance (%s): %s", ws.login, chosen, done)
            by = f"run by {ws.login}" + (f" with {', '.join(options)}" if options else "")
            return f"{by}: " + "; ".join(said)

        try:
            outcome = await self._maintenance_call(ws, "maintenance", run)
        except _DropChanged as exc:
            assert retention is not None
            log.warning(
                "%s: the months keeping %s months would drop changed at the run: %s",
                ws.login,
                retention,
                exc,
            )
            plan, doomed = await self._retention_plan(ws, months_ahead, retention)
            key = [f"maintain-partitions:{months_ahead}:{retention}", *sorted(plan["to_drop"])]
            return asked(409, changed=_names(exc.names))
        return self._after(request, ws, [outcome], "/maintenance")

    async def _retention_plan(
        self, ws: WebSession, months_ahead: int, retention: int
    ) -> tuple[dict[str, Any], list[queries.Row]]:
        """What a maintenance run with this retention would do now (partitions'
        maintenance_plan over every partition, as `undolog partitions plan` makes it), and
        the partitions it would drop, with their estimates, for the confirmation page."""
        async with ws.db() as conn:
            every = await queries.every_partition(conn)
            pending = await queries.pending_partitions(conn)
            setting = await queries.retention(conn)
        plan = partitions.maintenance_plan(
            every, pending, setting["setting"], setting["month_start"], months_ahead, retention
        )
        dropping = set(plan["to_drop"])
        return plan, [p for p in every if p["name"] in dropping]

    async def maintenance_ensure(self, request: Request) -> Response:
        """An operator creates the coming months (undolog.ensure_partitions, as `undolog
        partitions ensure`): the current month and MONTHS_AHEAD more; drops nothing."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, _ = got
        if not ws.roles.operator:
            return self._operator_only(request, ws, "months ahead", "creates the coming months")

        async def ensure(conn: queries.Conn) -> str:
            cur = await conn.execute(QUERIES["ensure_partitions"], {"months_ahead": MONTHS_AHEAD})
            created = [str(name) for (name,) in await cur.fetchall()]
            pending = await queries.pending_partitions(conn)
            log.info("%s: created the coming months: %s", ws.login, created)
            said = (
                f"created {_names(created)} by {ws.login}"
                if created
                else f"every month through {MONTHS_AHEAD} months ahead exists: nothing was created"
            )
            if pending:
                said += (
                    f"; left to attach on the next run (their locks were busy) {_names(pending)}"
                )
            return said

        outcome = await self._maintenance_call(ws, "months ahead", ensure)
        return self._after(request, ws, [outcome], "/maintenance")

    async def maintenance_anchor(self, request: Request) -> Response:
        """An operator writes an anchor of the history chains now (undolog.write_anchor,
        as `undolog anchor write`); the flash says which, and its hash."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, _ = got
        if not ws.roles.operator:
            return self._operator_only(request, ws, "anchor", "writes an anchor")

        async def write(conn: queries.Conn) -> str:
            row = await queries.one(conn, QUERIES["dashboard_write_anchor"])
            assert row is not None
            log.info("%s: wrote anchor %s", ws.login, row["anchor_id"])
            # an anchor records at most undolog.anchor_max_heads heads: more take several
            which = (
                f"#{row['anchor_id']}"
                if row["first_id"] == row["anchor_id"]
                else f"#{row['first_id']} to #{row['anchor_id']}"
            )
            return (
                f"{which} written by {ws.login}: the heads of {row['sessions']} "
                f"session(s) whose chain moved since the previous anchor; hash {row['hash']}"
            )

        outcome = await self._maintenance_call(ws, "anchor", write)
        return self._after(request, ws, [outcome], "/maintenance")

    async def maintenance_drop(self, request: Request) -> Response:
        """An operator drops (or detaches) the months before a chosen month
        (undolog.drop_partitions, as `undolog partitions drop --older-than`, with its
        --detach and --force): the first POST restates the months it takes, with their
        estimated rows; only the second, from that page with its one-time confirmation
        for exactly those months and options, does it."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        if not ws.roles.operator:
            return self._operator_only(request, ws, "drop", "drops months")
        given = form.get("before")
        before = given.strip() if isinstance(given, str) else ""
        detach, force = form.get("detach") == "1", form.get("force") == "1"
        found = re.fullmatch(r"([0-9]{4})-([0-9]{2})", before)
        if found is None or int(found[1]) < 1 or not 1 <= int(found[2]) <= 12:
            outcome = Outcome(
                "drop",
                False,
                f"before: a month as YYYY-MM (the months before it go), not {before[:20]!r}: "
                "nothing was done",
                422,
            )
            return self._after(request, ws, [outcome], "/maintenance")
        cutoff = datetime.datetime(int(found[1]), int(found[2]), 1, tzinfo=datetime.UTC)
        async with ws.db() as conn:
            # every partition, not the page's list (cut at PARTITIONS_LIMIT, newest
            # first): what a drop takes is the oldest months, all of them
            parts = await queries.every_partition(conn)
            this_month = (await queries.retention(conn))["month_start"].astimezone(datetime.UTC)
        if cutoff > this_month:
            outcome = Outcome(
                "drop",
                False,
                f"before: at most {this_month:%Y-%m}, the current month, which is being "
                "written and is never dropped: nothing was done",
                422,
            )
            return self._after(request, ws, [outcome], "/maintenance")
        # the same rule as `undolog partitions plan`, over every partition: the page
        # lists each month it takes, and the confirmation is for exactly those
        doomed = partitions.months_to_drop(parts, cutoff)
        names = sorted(str(p["name"]) for p in doomed)
        key = [f"drop-partitions:{cutoff:%Y-%m}:{detach}:{force}", *names]
        nonce = form.get("confirm")

        def asked(status: int, *, stale: bool = False, changed: str = "") -> Response:
            return self.render(
                request,
                "partitions_drop.html",
                ws,
                status,
                doomed=doomed,
                before=f"{cutoff:%Y-%m}",
                cutoff=cutoff,
                detach=detach,
                force=force,
                verb="detach" if detach else "drop",
                done="detached" if detach else "dropped",
                token=ws.confirm_nonce(key),
                stale=stale,
                changed=changed,
            )

        if nonce is None or not doomed or not ws.take_confirm(nonce, key):
            return asked(200 if nonce is None else 409, stale=nonce is not None and bool(doomed))
        verb = "detached" if detach else "dropped"

        async def drop(conn: queries.Conn) -> str:
            params = {"older_than": cutoff, "detach_only": detach, "force": force}
            cur = await conn.execute(QUERIES["drop_partitions"], params)
            done = [str(name) for (name,) in await cur.fetchall()]
            if sorted(done) != names:
                # a month attached (or gone) since the list was read: the engine took
                # other months than those confirmed, so its transaction is rolled back
                raise _DropChanged(sorted(set(done) ^ set(names)))
            log.info("%s: %s the months before %s: %s", ws.login, verb, before, done)
            if not done:
                return f"no month ends by {cutoff:%Y-%m-%d}: nothing was {verb}"
            return f"{verb} {_names(done)} by {ws.login}"

        try:
            outcome = await self._maintenance_call(ws, "drop", drop)
        except _DropChanged as exc:
            log.warning("%s: the months before %s changed at the drop: %s", ws.login, before, exc)
            async with ws.db() as conn:
                parts = await queries.every_partition(conn)
            doomed = partitions.months_to_drop(parts, cutoff)
            names = sorted(str(p["name"]) for p in doomed)
            key = [f"drop-partitions:{cutoff:%Y-%m}:{detach}:{force}", *names]
            return asked(409, changed=_names(exc.names))
        return self._after(request, ws, [outcome], "/maintenance")

    async def maintenance_recover(self, request: Request) -> Response:
        """An operator runs recovery now (as `undolog recover`, what each pass of the
        worker does first): the active sessions whose lease expired are failed, the
        oldest first, in transactions of at most asaga.SWEEP_BATCH sessions each
        (undolog.fail_expired_sessions), walk.EXPIRED_PER_PASS at most, as a worker's
        pass: under a flood of short-lease sessions more run out than are failed, and a
        click that failed them all would never answer. The flash then says that more
        remain, which the workers (or another click) go on failing. Then undolog.recover
        (one batch more at most) names the sessions whose undo walk must run (the
        worker, which holds the application's compensations, walks them)."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, _ = got
        if not ws.roles.operator:
            return self._operator_only(request, ws, "recover", "runs recovery")
        most = walk.EXPIRED_PER_PASS
        failed = await self._sweep(
            ws,
            "recover",
            lambda conn, so_far: asaga.fail_expired_sessions(conn, most=most, on_progress=so_far),
            "{} session(s) whose lease had expired were failed before it",
        )
        if isinstance(failed, Outcome):
            return self._after(request, ws, [failed], "/maintenance")
        bounded = len(failed) >= most
        remain = (
            f"; one run fails {most} at most (the oldest first, then one batch more), and "
            "more may have expired: the workers go on failing them, or run recovery again"
            if bounded
            else ""
        )

        async def recover(conn: queries.Conn) -> str:
            # recover() fails the leases run out since the batches (or that one of them
            # skipped, held a moment), one batch at most: the active ones it then names
            # are failed now, by this run or by a worker's at the same moment (each
            # statement reads its own snapshot: who failed it is not told apart).
            found = await queries.rows(conn, QUERIES["dashboard_lease_expired"])
            due = await asaga.recover(conn, limit=asaga.SWEEP_BATCH)
            expired = {r["session_id"] for r in found}
            now_failed = len(failed) + sum(1 for s in due if s in expired)
            log.info("%s: ran recovery: %d failed, %d due", ws.login, now_failed, len(due))
            if not due:  # a worker may have walked what the batches failed already
                if not now_failed:
                    return f"run by {ws.login}: no lease had expired and no undo walk is due"
                return (
                    f"run by {ws.login}: {now_failed} session(s) whose lease had expired now "
                    f"failed; no undo walk is due{remain}"
                )
            shown = ", ".join(str(s) for s in due[:RECOVER_SHOWN])
            more = f" and {len(due) - RECOVER_SHOWN} more" if len(due) > RECOVER_SHOWN else ""
            return (
                f"run by {ws.login}: {now_failed} session(s) whose lease had expired now "
                f"failed{remain}; {len(due)} session(s) whose undo walk must run (`undolog "
                f"worker` walks them): {shown}{more}"
            )

        # in a transaction whose lock waits are bounded, as the page's other actions
        outcome = await self._maintenance_call(ws, "recover", recover)
        if not outcome.ok and failed:  # the sessions failed above stay failed
            outcome.text += (
                f"; before it, {len(failed)} session(s) whose lease had expired were failed "
                "(they stay failed)"
            )
        return self._after(request, ws, [outcome], "/maintenance")

    # --- notification channels --------------------------------------------------------

    async def channels_page(self, request: Request) -> Response:
        """The channels approval requests are announced through, as `undolog
        notifications list` shows them: never their secrets (the view holds none)."""
        ws = self.staff_only(
            request,
            "Notification channels",
            "Only approvers and operators read the notification channels; "
            "your sessions' requests' deliveries are on each session's page.",
        )
        if isinstance(ws, Response):
            return ws
        everything = request.query_params.get("all") == "1"
        # the deliveries' filter, as `undolog notifications deliveries --state`
        state = request.query_params.get("deliveries") or None
        if state is not None and state not in queries.DELIVERY_STATES:
            return self.problem(
                request,
                ws,
                422,
                "Not a filter",
                f"deliveries: one of {', '.join(queries.DELIVERY_STATES)}, not "
                f"{state[:40]!r}: leave it out for every state.",
            )
        async with ws.db() as conn:
            found, more = await queries.channels(conn, everything)
            sent = await queries.deliveries(conn, state)
        return self.render(
            request,
            "notifications.html",
            ws,
            channels=found,
            more=more,
            everything=everything,
            limit=queries.CHANNELS_LIMIT,
            deliveries=sent,
            delivery_state=state,
            delivery_states=queries.DELIVERY_STATES,
            deliveries_limit=queries.DELIVERIES_LIMIT,
        )

    async def channels_add(self, request: Request) -> Response:
        """An operator adds a webhook or an e-mail channel (undolog.add_notification_channel,
        as `undolog notifications add-webhook` / `add-email`), recorded as by their login.
        A webhook's key and an SMTP password go to the engine and are never shown."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        kind = request.path_params["kind"]
        if kind not in ("webhook", "email"):
            return self.not_found(request, ws, "kind of channel")

        def field(name: str) -> str:
            value = form.get(name)
            return value.strip() if isinstance(value, str) else ""

        name = field("name")
        target = f"channel {name or '?'}"
        if not ws.roles.operator:
            outcome = Outcome(
                target, False, "only an operator adds a channel: nothing was written", 403
            )
            return self._after(request, ws, [outcome], "/notifications")
        config: dict[str, Any]
        secret: str | None
        if kind == "webhook":
            destination = field("url")
            config = {"format": "slack" if form.get("slack") == "1" else "json"}
            given = form.get("secret")  # as typed: a key's spaces are its own
            secret = given if isinstance(given, str) else ""
        else:
            recipients = [a.strip() for a in re.split(r"[,\n]", field("to")) if a.strip()]
            destination = ",".join(recipients)
            port_text = field("smtp_port") or "25"
            try:
                port = int(port_text) if port_text.isdigit() and len(port_text) <= 5 else 0
            except ValueError:
                port = 0
            if not 1 <= port <= 65535:
                outcome = Outcome(
                    target,
                    False,
                    f"smtp_port: a port from 1 to 65535, not {port_text[:20]!r}: "
                    "nothing was written",
                    422,
                )
                return self._after(request, ws, [outcome], "/notifications")
            config = {
                "smtp_host": field("smtp_host"),
                "smtp_port": port,
                "smtp_from": field("smtp_from"),
                "starttls": form.get("starttls") == "1",
                "ssl": form.get("ssl") == "1",
            }
            if field("smtp_user"):
                config["smtp_user"] = field("smtp_user")
            given = form.get("password")
            secret = given if isinstance(given, str) and given else None
        params = {
            "name": name,
            "kind": kind,
            "target": destination,
            "config": Jsonb(config),
            "secret": secret,
            "dashboard_url": field("dashboard_url") or None,
            "by": ws.login,
        }

        async def add(conn: queries.Conn) -> str:
            cur = await conn.execute(QUERIES["add_notification_channel"], params)
            row = await cur.fetchone()
            assert row is not None
            log.info("%s: added %s channel %s", ws.login, kind, name)
            return f"{kind} channel added ({row[0]}) by {ws.login}"

        outcome = await self._act(ws, target, add)
        return self._after(request, ws, [outcome], "/notifications")

    async def channels_remove(self, request: Request) -> Response:
        """An operator removes a live channel (undolog.remove_notification_channel, as
        `undolog notifications remove`): its deliveries not yet sent are cancelled. The
        first POST restates the channel; only the second, confirmed, removes it."""
        got = await self.posted(request)
        if isinstance(got, Response):
            return got
        ws, form = got
        name_field = form.get("name")
        name = name_field.strip() if isinstance(name_field, str) else ""
        target = f"channel {name or '?'}"
        if not ws.roles.operator:
            outcome = Outcome(
                target, False, "only an operator removes a channel: nothing was written", 403
            )
            return self._after(request, ws, [outcome], "/notifications")
        channel: queries.Row | None = None
        if name and "\x00" not in name:
            async with ws.db() as conn:
                channel = await queries.live_channel(conn, name)
        if channel is None:
            return self.not_found(request, ws, "live notification channel")
        key = [f"remove-channel:{channel['channel_id']}"]
        nonce = form.get("confirm")
        if nonce is None or not ws.take_confirm(nonce, key):
            return self.render(
                request,
                "channel_remove.html",
                ws,
                200 if nonce is None else 409,
                c=channel,
                token=ws.confirm_nonce(key),
                stale=nonce is not None,
            )

        async def remove(conn: queries.Conn) -> str:
            cur = await conn.execute(
                QUERIES["remove_notification_channel"], {"name": name, "by": ws.login}
            )
            await cur.fetchone()
            log.info("%s: removed channel %s", ws.login, name)
            return f"removed by {ws.login}"

        outcome = await self._act(ws, target, remove)
        return self._after(request, ws, [outcome], "/notifications")

    # --- live updates -----------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        ws = self.current(request)
        if ws is None:
            return Response("not logged in", 401, media_type="text/plain")
        view = request.query_params.get("view")
        since = request.query_params.get("since", "")
        read: Callable[[queries.Conn], Awaitable[str]]
        if view == "inbox" and ws.roles.staff:
            read = queries.inbox_fingerprint
        elif view == "session" and (sid := self._uuid(request.query_params.get("id", ""))):

            async def read(conn: queries.Conn, sid: uuid.UUID = sid) -> str:
                return await queries.session_fingerprint(conn, sid)

        else:
            return Response("unknown view", 404, media_type="text/plain")
        if len(ws.waiters) >= MAX_STREAMS:
            return self._live_refused(
                f"too many live pages open (at most {MAX_STREAMS}): close some and reload",
                429,
            )
        if len(self.live) >= self.live_caps.all:
            self._log_live_refused(ws)
            return self._live_refused(
                f"too many live pages open on this dashboard (at most {self.live_caps.all} "
                "for everyone): reload in a while, or ask its operator to raise its "
                "open-file limit (LimitNOFILE=)",
                503,
            )
        agent_only = not ws.roles.staff
        if agent_only and len(self.live_agents) >= self.live_caps.agents:
            self._log_live_refused(ws)
            return self._live_refused(
                f"too many live pages open on this dashboard by logins without a staff "
                f"role (at most {self.live_caps.agents} for all of them together; the rest "
                "are kept for approvers and operators): close some and reload in a while",
                503,
            )
        # The stream's places are taken here, in the same step as the counts: taken only
        # when the stream starts, concurrent requests all counted before any took one.
        wake = asyncio.Event()
        ws.waiters.add(wake)
        self.live.add(wake)
        if agent_only:
            self.live_agents.add(wake)
        return StreamingResponse(
            self._stream(ws, read, since, wake),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
            background=BackgroundTask(self._stream_ended, ws, wake),
        )

    def _stream_ended(self, ws: WebSession, wake: asyncio.Event) -> None:
        """Give a stream's places back (once its generator ends, or its response does:
        a response whose client left before it started runs no generator)."""
        ws.waiters.discard(wake)
        self.live.discard(wake)
        self.live_agents.discard(wake)

    @staticmethod
    def _live_refused(text: str, status: int) -> Response:
        """A refused live stream: ``text`` says what to do. The page's script reads it
        (an EventSource reads no refusal) and refreshes the page every Retry-After
        seconds instead (static/dashboard.js)."""
        return Response(
            text,
            status,
            media_type="text/plain",
            headers={"retry-after": str(LIVE_RETRY_SECONDS)},
        )

    def _log_live_refused(self, ws: WebSession) -> None:
        """Tell the operator the dashboard's live pages are at their cap, once every
        LIVE_RETRY_SECONDS: a page refused tries again that often, and a record per
        refusal would say nothing more."""
        now = time.monotonic()
        if now - self._live_refused_logged < LIVE_RETRY_SECONDS:
            return
        self._live_refused_logged = now
        log.warning(
            "%s: a live page refused: %s live pages open (at most %s), %s of them by "
            "logins without a staff role (at most %s); the cap follows the open-file limit "
            "(systemd: LimitNOFILE=)",
            ws.login,
            len(self.live),
            self.live_caps.all,
            len(self.live_agents),
            self.live_caps.agents,
        )

    async def _stream(
        self,
        ws: WebSession,
        read: Callable[[queries.Conn], Awaitable[str]],
        since: str,
        wake: asyncio.Event,
    ) -> AsyncIterator[str]:
        """A 'change' event whenever what the page shows changed since it was rendered.

        Woken at once by a NOTIFY on the person's listening connection, and every
        POLL_SECONDS anyway: calls and the undo walk announce nothing (a NOTIFY per call
        would serialise every agent's commits on the notification queue). Each wake-up
        re-reads a small fingerprint through the views, as the person; the notification's
        payload is never used. Any login may NOTIFY the channel (PostgreSQL has no
        privilege for it), so a wake-up reads no sooner than aapprovals.MIN_READ_GAP after
        the last read, as the binding's waiters do: a flood costs a page one read per
        gap, not one per NOTIFY."""
        last = since
        try:
            yield "retry: 1000\n\n"
            while True:
                if ws.closed or self.store.get(ws.sid) is None:
                    yield "event: logout\ndata: ended\n\n"
                    return
                wake.clear()
                try:
                    current = await self._shielded(ws, read)
                except psycopg.Error as exc:
                    if ws.closed:
                        # the web session ended during the read (a newer login replaced
                        # it, a logout in another tab): its connection's query was
                        # cancelled for its closing, and the page is told it was logged
                        # out (the login page says why), not that the database failed
                        yield "event: logout\ndata: ended\n\n"
                        return
                    log.warning("%s: live update read failed: %s", ws.login, exc)
                    if ws.conn.closed:
                        # killed server-side or the server restarted: without the password
                        # (never kept) this web session cannot go on; the page says so
                        await self.store.logout(ws)
                        yield "event: lost\ndata: ended\n\n"
                    else:
                        yield "event: stale\ndata: error\n\n"
                    return
                read_at = time.monotonic()
                if current != last:
                    last = current
                    yield "event: change\ndata: changed\n\n"
                else:
                    yield ": still here\n\n"
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), POLL_SECONDS)
                gap = read_at + aapprovals.MIN_READ_GAP - time.monotonic()
                if gap > 0 and not ws.closed:  # a logout ends the stream at once
                    await asyncio.sleep(gap)
        finally:
            self._stream_ended(ws, wake)

    @staticmethod
    async def _shielded(ws: WebSession, read: Callable[[queries.Conn], Awaitable[str]]) -> str:
        """Run one read to its end even if the stream is cancelled meanwhile (the browser
        left the page): psycopg closes a connection whose query is cancelled midway, and
        that connection is the person's, which would end their web session."""

        async def once() -> str:
            async with ws.db() as conn:
                return await read(conn)

        task = asyncio.ensure_future(once())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    # --- metrics ----------------------------------------------------------------------

    async def metrics(self, request: Request) -> Response:
        """The engine's metrics for Prometheus: for a scraper with the configured bearer
        token (read as the metrics login), or a logged-in operator (read on their own
        connection). A scrape that cannot read the views answers undolog_up 0."""
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, given = header.partition(" ")
            # compare_digest: the time taken does not tell how much of a guess was right
            if (
                scheme.lower() != "bearer"
                or self.metrics_token is None
                or not hmac.compare_digest(given.strip().encode(), self.metrics_token)
            ):
                return PlainTextResponse(
                    "wrong or unconfigured bearer token\n",
                    401,
                    headers={"WWW-Authenticate": 'Bearer realm="undolog metrics"'},
                )
            return self._exposition(await self._scrape_as_metrics_login())
        ws = self.current(request)
        if ws is None:
            return PlainTextResponse(
                "log in as an operator, or send the metrics bearer token\n",
                401,
                headers={"WWW-Authenticate": 'Bearer realm="undolog metrics"'},
            )
        if not ws.roles.operator:
            return PlainTextResponse("only operators read the metrics\n", 403)
        async with ws.db() as conn:
            started = time.perf_counter()
            try:
                text = await undolog_metrics.ascrape(conn)
            except (psycopg.Error, errors.UndoLogError) as exc:
                text = undolog_metrics.failed(exc, time.perf_counter() - started)
        return self._exposition(text)

    @staticmethod
    def _exposition(text: str) -> Response:
        return Response(text, media_type=undolog_metrics.CONTENT_TYPE)

    async def _scrape_as_metrics_login(self) -> str:
        """One scrape as the metrics login, bounded as `undolog metrics` bounds its own
        (undolog.metrics.scrape_conninfo): its connection carries the server-side
        timeouts, and the whole scrape, its wait for the one before it included, gets
        undolog.metrics.SCRAPE_TIMEOUT."""
        started = time.perf_counter()
        task = asyncio.ensure_future(self._scrape_in_turn())
        # asyncio.wait, not wait_for: wait_for would wait for the cancelled scrape to end,
        # and psycopg spends up to 10 s more trying to cancel a query on a hung server
        done, _ = await asyncio.wait({task}, timeout=undolog_metrics.SCRAPE_TIMEOUT)
        if task in done:
            return task.result()
        task.cancel()  # it ends in the background: _scrape_in_turn drops its connection
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        stuck = TimeoutError(f"no answer within {undolog_metrics.SCRAPE_TIMEOUT} s")
        log.warning("metrics scrape failed: %s", stuck)
        return undolog_metrics.failed(stuck, time.perf_counter() - started)

    async def _scrape_in_turn(self) -> str:
        assert self.metrics_dsn is not None
        async with self._metrics_lock:
            started = time.perf_counter()
            try:
                if self._metrics_conn is None or self._metrics_conn.closed:
                    fresh = await psycopg.AsyncConnection.connect(
                        undolog_metrics.scrape_conninfo(self.metrics_dsn), autocommit=True
                    )
                    try:  # names resolve in pg_catalog only (_conninfo)
                        await apin_search_path(fresh)
                    except BaseException:
                        await fresh.close()
                        raise
                    self._metrics_conn = fresh
                return await undolog_metrics.ascrape(self._metrics_conn)
            except (psycopg.Error, errors.UndoLogError) as exc:
                log.warning("metrics scrape failed: %s", exc)
                if self._metrics_conn is not None and self._metrics_conn.broken:
                    await self._metrics_conn.close()
                return undolog_metrics.failed(exc, time.perf_counter() - started)
            except asyncio.CancelledError:
                # cut short midway: what the connection was doing is unknown, so the next
                # scrape opens another
                conn, self._metrics_conn = self._metrics_conn, None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                raise

    # --- the application --------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async def reap_forever() -> None:
            while True:
                await asyncio.sleep(30)
                await self.store.reap()

        self._reaper = asyncio.create_task(reap_forever(), name="undolog-dashboard-reaper")
        try:
            yield
        finally:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            await self.store.close_all()
            if self._metrics_conn is not None:
                await self._metrics_conn.close()

    def app(self) -> ASGIApp:
        routes = [
            Route("/", self.home),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/approvals", self.inbox, methods=["GET"]),
            Route("/approvals/decide", self.decide, methods=["POST"]),
            Route("/approvals/expire", self.expire, methods=["POST"]),
            Route("/approvals/{approval_id}/edit", self.edit_page, methods=["GET"]),
            Route("/approvals/{approval_id}/edit", self.edit_post, methods=["POST"]),
            Route("/decisions", self.decisions, methods=["GET"]),
            Route(links.PATH + "/{approval_id}", self.open_link, methods=["GET"]),
            Route(links.PATH + "/{approval_id}/go", self.open_go, methods=["GET"]),
            Route("/sessions", self.sessions, methods=["GET"]),
            Route("/sessions/counts", self.session_counts, methods=["GET"]),
            Route("/sessions/{session_id}", self.session_page, methods=["GET"]),
            Route(
                "/sessions/{session_id}/calls/{effect_id}/{which}", self.payload, methods=["GET"]
            ),
            Route("/sessions/{session_id}/export", self.session_export, methods=["GET"]),
            Route("/sessions/{session_id}/{action}", self.session_action, methods=["POST"]),
            Route("/tools", self.tools_page, methods=["GET"]),
            Route("/tools/retire", self.tools_retire, methods=["POST"]),
            Route("/tools/register", self.tools_register, methods=["POST"]),
            Route("/maintenance", self.maintenance_page, methods=["GET"]),
            Route("/maintenance/run", self.maintenance_run, methods=["POST"]),
            Route("/maintenance/ensure", self.maintenance_ensure, methods=["POST"]),
            Route("/maintenance/anchor", self.maintenance_anchor, methods=["POST"]),
            Route("/maintenance/anchor/latest", self.anchor_download, methods=["GET"]),
            Route("/maintenance/recover", self.maintenance_recover, methods=["POST"]),
            Route("/maintenance/drop", self.maintenance_drop, methods=["POST"]),
            Route("/notifications", self.channels_page, methods=["GET"]),
            Route("/notifications/remove", self.channels_remove, methods=["POST"]),
            Route("/notifications/add/{kind}", self.channels_add, methods=["POST"]),
            Route("/events", self.events, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        app = Starlette(
            routes=routes,
            lifespan=self.lifespan,
            exception_handlers={404: self._404, psycopg.OperationalError: self._database_error},
        )
        return ClientGone(SecurityHeaders(BodyLimit(app)))

    async def _database_error(self, request: Request, exc: Exception) -> Response:
        """A page read that the database broke off. When the person's connection is gone
        (killed server-side, the server restarted) their web session cannot go on, since
        the password was never kept: end it and say so, instead of a bare 500."""
        ws: WebSession | None = getattr(request.state, "ws", None)
        if ws is None:
            ws = self.store.sessions.get(request.cookies.get(COOKIE) or "")
        if ws is None or not (ws.closed or ws.conn.closed):
            log.warning("database error on %s: %s", request.url.path, exc)
            return self.problem(
                request, ws, 503, "Database error", f"The database said: {exc}. Try again."
            )
        if ws.closed:
            # the web session ended under this request (logged out in another tab,
            # replaced by a newer login, idle): its query was cancelled midway (or it
            # waited for the connection in vain), and the database may have done what
            # was asked all the same
            why = (
                "Your web session ended while this was being done (you logged out in "
                "another tab, a newer login replaced it, or it was idle too long)"
            )
        else:
            log.warning("%s: the database connection was closed: %s", ws.login, exc)
            why = "Your connection to the database was closed (the server ended it or restarted)"
        await self.store.logout(ws)
        response = self.problem(
            request,
            None,
            503,
            "Connection lost",
            f"{why}, so what you just asked for may not have been done. Log in again and look.",
        )
        response.delete_cookie(COOKIE, path="/")
        return response

    async def _404(self, request: Request, exc: Exception) -> Response:
        return self.problem(request, self.current(request), 404, "Not found", "No such page.")


async def _applied_migrations(conn: Any) -> list[str] | None:
    """The names of the migrations the engine has applied (engine_check's statement, as
    the clients read them), None when they cannot be read: not compared. In a savepoint,
    as queries.engine_version: a failure leaves the caller's connection usable."""
    try:
        async with conn.transaction():
            found = await queries.records(conn, engine_check.VERSION)
    except psycopg.Error:
        return None
    return str(found[0][1] or "").split() if found else None


def create_app(
    dsn: str,
    *,
    idle_timeout: float = 30 * 60,
    metrics_token: str | None = None,
    metrics_dsn: str | None = None,
    link_secret: str | None = None,
    nofile: int | None = None,
) -> ASGIApp:
    """The dashboard for the database named by ``dsn`` (host, port, database; any user
    or password in it is ignored: each person logs in as themselves). With
    ``metrics_token`` and ``metrics_dsn`` (a login holding undolog_approver or
    undolog_operator), GET /metrics also answers a scraper sending that bearer token.
    ``link_secret`` (default: the environment's UNDOLOG_LINK_SECRET) is the key of the
    notifications' signed links to requests (GET /open/...). ``nofile`` (default: the
    process's RLIMIT_NOFILE soft limit) is the descriptor limit the cap on live pages
    is derived from (LiveCaps)."""
    return Dashboard(
        dsn,
        idle_timeout=idle_timeout,
        metrics_token=metrics_token,
        metrics_dsn=metrics_dsn,
        link_secret=link_secret if link_secret is not None else links.secret_from_env(),
        nofile=nofile,
    ).app()


__all__ = ["Dashboard", "create_app"]
