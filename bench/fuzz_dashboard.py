"""A stateful fuzz of ``undolog dashboard``: hostile visitors over raw HTTP (httpx and raw
sockets) against one real dashboard process, while real agents journal calls of every
journaled tier with hostile text in them; after every step the dashboard's promises are
checked.

The cast, each with its own cookies: a ``visitor`` with no login, an ``approver``, a
second approver (``approver2``), an ``operator``, and ``agentweb``, the agent login
trying the dashboard. Beside them two agent logins (``agent``, ``agent2``) journal calls
in-process through the engine (a COMPENSABLE ``book``, an IRREVERSIBLE ``pay``; SAFE
calls are never journaled, so there is nothing of them to show), with HTML, scripts,
look-alike and invisible characters and huge values in their arguments, results, agent
names and purposes; they make the same call again once a person decided, end their
sessions or fail them, and a worker pass (the fuzz's superuser) walks what failed, a
compensation failing once now and then so that sessions halt for an operator.

Every step is one move drawn at random: every page (inbox, its fragment, decisions and
their filters, sessions and their filters, counts, a session, a payload, an export, tools,
maintenance, the latest anchor, notifications, metrics, the event stream, a signed link,
static files, a page that does not exist) read by any client; and every form (approve,
confirmed or not, reject, bulk, edit-then-approve, rollback, undo-to, resume, retry,
abandon, expire, maintenance run/ensure/anchor/recover/drop, tools register/retire,
channels add/remove, notify-retry, login, logout), sent right and wrong: without a CSRF
token, with another login's, after logout; another login's confirmation replayed; a
confirmation used twice, or twice at once; stale forms (the request decided, the session
moved on); wrong methods and shapes (garbage ids, NUL characters, huge reasons, JSON or
gzip bodies, 2 MiB bodies, chunked bodies without a length); another client's cookie with
and without its token; signed links tampered with or expired; odd Host, Origin and
X-Forwarded-For headers; half a request then silence, pipelined and malformed requests.
Checked after every step:

- the dashboard process is alive and answered; no answer is a 500; every tenth step a
  fresh client's login page and a logged-in approver's inbox load;
- every response carries the security headers the dashboard promises (CSP, nosniff,
  DENY, no-referrer, no-store); a redirect goes to a path of the dashboard only;
- no HTML page holds markup from a value the fuzz wrote (an agent's, or a form's): no
  script without a /static source, no on* attribute, none of the tags and attributes
  the hostile values carry, no javascript: link;
- what a login sees is what its role may see: the visitor no id of any session, call or
  request (but those it sent); an agent login none of another login's sessions, calls,
  requests, undo entries or tools, and 403 on the staff pages;
- nothing is decided, rolled back, undone, resumed, retried, abandoned, registered,
  retired, added, removed, expired, maintained or anchored but by a step that sent a
  valid form (the login's live web session, its CSRF token, a fresh confirmation where
  one is asked, and a role that may) for that very thing; a decision is never changed
  once made; a ``pay`` runs only approved, once; a compensation completes once;
- a known browser is never locked out of its login by others' failed logins.

At the end every request left is rejected and every halted session abandoned through the
dashboard, agents end their sessions, worker passes walk what failed: then no session is
left in a state nobody can end, the history chains verify (undolog.chain.verify) and the
dashboard's log holds no traceback.

    .venv/bin/python bench/fuzz_dashboard.py --seed 7 --steps 300
    .venv/bin/python bench/fuzz_dashboard.py --seconds 1800            # seeds one after another
    .venv/bin/python bench/fuzz_dashboard.py --seed 7 --steps 300 --trace  # replay one

Each seed runs in a database of its own, on a throwaway cluster (tools/pgcluster.py, whose
pg_hba.conf asks the members of undolog_password_logins for their password) or on --dsn's
server (a superuser's; its pg_hba.conf must ask that group for a password too), with a
dashboard process of its own. tests/dashboard/test_dashboard_fuzz.py runs a short seed in
the suite (docs/development.md, "The dashboard's fuzz").
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime
import gzip
import html.parser
import json
import logging
import random
import re
import secrets
import socket
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tools"), str(ROOT / "bench")]

# one way to make its databases, and one command line
from fuzz_common import ChildServer, Seeds, fuzz_arguments  # noqa: E402
from undolog.names import is_unseen  # noqa: E402

PASSWORD_GROUP = "undolog_password_logins"  # tools/pgcluster.py asks them for a password
# The logins, cluster-wide (created once, their password set by each run).
LOGINS = {
    "approver": ("fuzzdash_approver", "undolog_approver"),
    "approver2": ("fuzzdash_approver2", "undolog_approver"),
    "operator": ("fuzzdash_operator", "undolog_operator"),
    "agent": ("fuzzdash_agent", "undolog_agent"),
    "agent2": ("fuzzdash_agent2", "undolog_agent"),
}
STAFF = {"approver", "approver2", "operator"}
# The web clients and the login each logs in as (None: the visitor never does).
WEB = {
    "visitor": None,
    "approver": "approver",
    "approver2": "approver2",
    "operator": "operator",
    "agentweb": "agent",
}
LINK_SECRET = "fuzz-dashboard-link-secret-0123456789"
# The actions a session's page posts (/sessions/<id>/<action>)
SESSION_ACTIONS = ("rollback", "undo-to", "resume", "retry", "abandon", "notify-retry")
SECURITY = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
TIMEOUT = 30.0
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# What a hostile value may carry: each would leave a tag or attribute the checker looks
# for (fuzzx, fuzzattr, on*, a script without /static source, javascript:) if a page
# wrote it unescaped.
HOSTILE = (
    "<script>alert('fuzz')</script>",
    '<img src=x onerror="alert(1)" fuzzattr=1>',
    '"><fuzzx fuzzattr="1">',
    "'><svg onload=alert(1)>",
    "</textarea><fuzzx>",
    "</title><fuzzx fuzzattr>",
    '<a href="javascript:alert(1)" fuzzattr>x</a>',
    "<iframe src=//evil.example></iframe>",
    '<meta http-equiv="refresh" content="0;url=//evil.example">',
    "{{ 7*7 }} {% raw %}",
    "\u0430\u0441\u0441t-\u0440ay",  # Cyrillic a, es, es, er
    "acct-\U0001d7f7\U0001d7f8",  # mathematical digits
    "pay\u202eyap",  # a bidi override
    "acc\u200bt\u2060",  # zero-width
    "\u0131\u0307d",
    "line\nbreak\r\n\t",
    "\U0001f4b8\ufe0f" * 3,
    "a\u0300\u0301\u0302\u0303\u0304\u0305",  # zalgo
    "\\u003cscript\\u003e",
)
# How often each move is drawn, against 1.
WEIGHTS = {
    "agent_begin": 6,
    "agent_call": 6,
    "agent_again": 5,
    "agent_end": 3,
    "worker": 3,
    "read": 14,
    "login": 2,
    "bad_login": 2,
    "logout": 1,
    "approve": 6,
    "reject": 4,
    "bulk": 2,
    "edit": 3,
    "double": 2,
    "foreign": 4,
    "stale": 3,
    "rollback": 3,
    "undo_to": 2,
    "halted": 4,
    "maintenance": 3,
    "tools": 2,
    "channels": 2,
    "expire": 1,
    "steal": 3,
    "shape": 5,
    "method": 2,
    "body": 3,
    "raw": 3,
    "link": 2,
    "devices": 1,
}
# What only an operator does (docs/dashboard.md, What each role sees).
OPERATORS = ("resume", "retry", "abandon", "expire", "maint", "drop", "tool", "channel", "notify")
PAYLOADS = ("args", "result", "approved", "x")
TERMINAL = ("completed", "compensated", "abandoned")
# A login, a reason, a tool's name holding a line of the dashboard's log: written as it
# is, it would forge that line.
FORGED = "x\nFORGED undolog.dashboard: INFO fuzzdash_operator logged in"


def shape_of(text: str) -> str:
    """A message with its ids and numbers taken out: the kinds seen."""
    text = UUID_RE.sub("ID", text)
    text = re.sub(r"[A-Za-z0-9_-]{30,}", "TOKEN", text)
    return re.sub(r"\d+", "N", text)[:160]


class Tags(html.parser.HTMLParser):
    """Every start tag of a page with its attributes, for the markup checks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def injected(page: str) -> list[str]:
    """The markup in ``page`` that none of the dashboard's templates writes and a hostile
    value carries: what escaping let through."""
    parser = Tags()
    try:
        parser.feed(page)
        parser.close()
    except Exception as exc:  # html.parser raises little; a page it cannot read is news
        return [f"the page does not parse: {exc}"]
    found: list[str] = []
    for tag, attrs in parser.tags:
        names = {name.lower(): (value or "") for name, value in attrs}
        if tag in ("fuzzx", "iframe", "svg", "object", "embed", "img", "math", "base"):
            found.append(f"<{tag}>")
        if tag == "script" and not names.get("src", "").startswith("/static/"):
            found.append(f"<script {names}>")
        if tag == "meta" and "http-equiv" in names:
            # the signed link's page goes on by itself, to a path of the dashboard
            target = names.get("content", "").partition("url=")[2].strip()
            if not target.startswith("/") or target.startswith("//"):
                found.append(f"<meta {names}>")
        for name, value in names.items():
            if name.startswith("on") or name == "fuzzattr":
                found.append(f"<{tag} {name}=...>")
            if name in ("href", "src", "action", "formaction") and value.strip().lower().startswith(
                "javascript:"
            ):
                found.append(f"<{tag} {name}={value[:40]}>")
    return found


def hidden_fields(page: str, form_id: str | None = None) -> dict[str, list[str]]:
    """The hidden fields of a form (by id), or of the whole page."""
    scope = page
    if form_id is not None:
        found = re.search(rf'<form[^>]*id="{re.escape(form_id)}"[^>]*>(.*?)</form>', page, re.S)
        if found is None:
            return {}
        scope = found.group(1)
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', scope):
        fields.setdefault(html.unescape(name), []).append(html.unescape(value))
    return fields


@dataclass
class Web:
    """One browser: its own cookie jar, the login it logs in as, its last CSRF token."""

    name: str
    who: str | None  # a key of LOGINS, or None for the visitor
    http: httpx.Client
    csrf: str | None = None
    own_failures: int = 0  # failed logins of its own since its last success
    known_for: str | None = None  # the login its undolog_known cookie was given for

    @property
    def login(self) -> str | None:
        return LOGINS[self.who][0] if self.who else None

    @property
    def role(self) -> str:
        return LOGINS[self.who][1] if self.who else "visitor"

    def sid(self) -> str | None:
        for cookie in self.http.cookies.jar:
            if cookie.name == "undolog_session":
                return cookie.value
        return None


@dataclass
class AgentSession:
    sid: uuid.UUID
    who: str  # agent or agent2
    step: int = 0
    pay: tuple[int, dict[str, Any]] | None = None  # the pay call waiting: step, args
    ended: bool = False


class Dashboard(ChildServer):
    """``undolog dashboard`` as a child process, its log in a file."""

    def __init__(self, dsn: str, log: Path) -> None:
        super().__init__(
            "dashboard",
            ["dashboard", "--dsn", dsn],
            lambda port: ["--port", str(port)],
            log,
            {"UNDOLOG_LINK_SECRET": LINK_SECRET, "UNDOLOG_METRICS_TOKEN": None},
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Dead(Exception):
    """The dashboard process is gone: nothing more to fuzz."""


class Fuzz:
    def __init__(self, dsn: str, seed: int, workdir: Path, trace: bool = False) -> None:
        from undolog.walk import CompensationCall

        self.dsn = dsn
        self.seed = seed
        self.rng = random.Random(seed)
        self.trace = trace
        self.workdir = workdir
        self.violations: list[str] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[str] = collections.Counter()
        self.known: collections.Counter[str] = collections.Counter()  # counted apart
        self.step_no = 0
        self.started = time.monotonic()
        self.password = secrets.token_urlsafe(12)
        self.db = psycopg.connect(dsn, autocommit=True)
        self._logins()
        # requests expire while the fuzz runs: the inbox's "Close (expired)", the
        # operator's "Close every request past its deadline" and the worker's sweep
        self.db.execute(
            sql.SQL("ALTER DATABASE {} SET undolog.approval_timeout = '20 seconds'").format(
                sql.Identifier(self.db.info.dbname)
            )
        )
        # two old months, for the operator's forms that drop months to take
        for months in (14, 15):
            self.db.execute(
                "SELECT undolog.create_month_partitions("
                "((now() AT TIME ZONE 'UTC') - %s * interval '1 month')::date)",
                (months,),
            )
        self.agent_conns = {
            who: psycopg.connect(self.as_login(LOGINS[who][0]), autocommit=True)
            for who in ("agent", "agent2")
        }
        for who in self.agent_conns:
            self.register_tools(who)
        self.sessions: dict[uuid.UUID, AgentSession] = {}
        # pay's ledger: approval id -> times its body ran; compensations: undo id -> done
        self.paid: collections.Counter[uuid.UUID] = collections.Counter()
        self.undone: collections.Counter[uuid.UUID] = collections.Counter()
        self.attempts: collections.Counter[uuid.UUID] = collections.Counter()

        def unbook(call: CompensationCall) -> None:
            self.attempts[call.undo_id] += 1
            note = str(call.call_args.get("item", ""))
            if "HALT" in note and self.attempts[call.undo_id] == 1:
                raise ConnectionError("the booking service is down (fuzz)")
            self.undone[call.undo_id] += 1

        self.compensations: dict[str, Callable[..., Any]] = {"unbook": unbook}
        dash_dsn = conninfo_to_dict(dsn)
        for key in ("user", "password"):
            dash_dsn.pop(key, None)
        self.dashboard = Dashboard(
            make_conninfo(**{k: str(v) for k, v in dash_dsn.items() if v is not None}),
            workdir / "dashboard.log",
        )
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        self.bare = httpx.Client(base_url=self.dashboard.url, timeout=TIMEOUT)
        self.webs = {name: Web(name, who, self.client()) for name, who in WEB.items()}
        self.sid_login: dict[str, str] = {}  # a web session's cookie -> its login
        self.silent: list[tuple[socket.socket, int]] = []
        self.allow: set[tuple[str, str, str]] = set()  # (what, which, login) this step may do
        self.confirms: list[tuple[str, str, dict[str, list[str]]]] = []  # (web, path, form)
        for web in self.webs.values():
            if web.who is not None:
                self.log_in(web)

    # --- plumbing -----------------------------------------------------------------------

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.dashboard.url, timeout=TIMEOUT, follow_redirects=False)

    def as_login(self, login: str) -> str:
        params = conninfo_to_dict(self.dsn)
        params.update(user=login, password=self.password)
        return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})

    def _logins(self) -> None:
        for role in (PASSWORD_GROUP, "undolog_agent", "undolog_approver", "undolog_operator"):
            if self.db.execute("SELECT to_regrole(%s)", (role,)).fetchone() == (None,):
                with contextlib.suppress(psycopg.errors.DuplicateObject):
                    self.db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        for login, group in LOGINS.values():
            if self.db.execute("SELECT to_regrole(%s)", (login,)).fetchone() == (None,):
                with contextlib.suppress(psycopg.errors.DuplicateObject):
                    self.db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
            self.db.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(self.password)
                )
            )
            for g in (group, PASSWORD_GROUP):
                self.db.execute(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(g), sql.Identifier(login))
                )

    def register_tools(self, who: str) -> None:
        from undolog import engine

        conn = self.agent_conns[who]
        with contextlib.suppress(Exception):
            engine.register_tool(conn, "book", "compensable", self.book_descriptor())
        with contextlib.suppress(Exception):
            engine.register_tool(conn, "pay", "irreversible", None)

    @staticmethod
    def book_descriptor() -> dict[str, Any]:
        from undolog import CompensationDescriptor

        return dict(CompensationDescriptor.new("unbook", max_attempts=1).to_json())

    def violation(self, what: str) -> None:
        text = f"step {self.step_no}: {what}"
        self.violations.append(text)
        if self.trace:
            print("  !", text, flush=True)

    def hostile(self, p: float = 0.5) -> str:
        if self.rng.random() < p:
            return self.rng.choice(HOSTILE) + f" fz{self.rng.randrange(1000)}"
        return f"v{self.rng.randrange(1000)}"

    # --- the checks of every response ---------------------------------------------------

    def owners(self) -> dict[str, str]:
        """Every id a page could show (sessions, calls, requests, undo entries, tools,
        deliveries), lower case, with the login it belongs to."""
        rows = self.db.execute(
            """
            SELECT session_id::text, owner_role FROM undolog.undolog_sessions
            UNION ALL
            SELECT e.effect_id::text, s.owner_role FROM undolog.undolog_effect_log e
            JOIN undolog.undolog_sessions s USING (session_id)
            UNION ALL
            SELECT a.approval_id::text, s.owner_role FROM undolog.undolog_approval_requests a
            JOIN undolog.undolog_sessions s USING (session_id)
            UNION ALL
            SELECT u.undo_id::text, s.owner_role FROM undolog.undolog_undo_stack u
            JOIN undolog.undolog_sessions s USING (session_id)
            UNION ALL
            SELECT tool_id::text, owner_role FROM undolog.undolog_tools
            """
        ).fetchall()
        return {str(i).lower(): str(o) for i, o in rows}

    def check(
        self,
        r: httpx.Response,
        viewer: str | None,
        asked: str,
        what: str,
    ) -> None:
        """The promises of every answer: headers, no 500, a local redirect, no markup of
        the fuzz's, and only what ``viewer`` (a login, None: nobody) may see. ``asked`` is
        what the request itself held (its ids are not the page's to hide)."""
        self.statuses[f"{shape_of(what)} {r.status_code}"] += 1
        if r.status_code >= 500 and r.status_code != 503:
            self.violation(f"{what}: {r.status_code} {r.text[:300]!r}")
        for name, value in SECURITY.items():
            if r.headers.get(name) != value:
                self.violation(f"{what}: {r.status_code} without {name}: {value} ({r.headers})")
                break
        location = r.headers.get("location")
        if location is not None and (
            not location.startswith("/") or location.startswith("//") or "\\" in location
        ):
            self.violation(f"{what}: redirected off the dashboard, to {location!r}")
        kind = r.headers.get("content-type", "")
        if "text/html" in kind:
            bad = injected(r.text)
            if bad:
                self.violation(f"{what}: markup let through: {bad[:5]}")
            # characters no reader sees are written out (\u202e), but what the request
            # itself typed (a reason, a filter), which goes back as typed
            unseen = {c for c in set(r.text) if not " " <= c <= "~" and is_unseen(c)}
            unseen -= set(urllib.parse.unquote(asked))
            if unseen:
                self.violation(f"{what}: the page holds unseen characters {sorted(unseen)!r}")
        self.visible(r.text, viewer, asked, what)

    def visible(self, text: str, viewer: str | None, asked: str, what: str) -> None:
        if viewer is not None and viewer not in (LOGINS["agent"][0], LOGINS["agent2"][0]):
            return  # staff see every session
        ids = {i.lower() for i in UUID_RE.findall(text)} - {
            i.lower() for i in UUID_RE.findall(urllib.parse.unquote(asked))
        }
        if not ids:
            return
        owners = self.owners()
        for i in ids:
            owner = owners.get(i)
            if owner is not None and owner != viewer:
                self.violation(
                    f"{what}: {viewer or 'a visitor'} was shown {i}, of {owner}: {text[:200]!r}"
                )
                return

    # --- requests -----------------------------------------------------------------------

    def viewer_of(self, web: Web) -> str | None:
        sid = web.sid()
        return self.sid_login.get(sid) if sid else None

    def send(
        self,
        web: Web,
        method: str,
        path: str,
        what: str,
        *,
        data: dict[str, Any] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        cookie: str | None = None,
    ) -> httpx.Response | None:
        """One request of ``web`` (or, given ``cookie``, of a bare client sending that
        cookie: another's), checked."""
        asked = path + json.dumps(data, default=str, ensure_ascii=False) if data else path
        client = web.http if cookie is None else self.bare
        hdrs = dict(headers or {})
        viewer = self.viewer_of(web)
        if cookie is not None:
            hdrs["cookie"] = f"undolog_session={cookie}"
            viewer = self.sid_login.get(cookie)
        try:
            if content is not None:
                r = client.request(method, path, content=content, headers=hdrs)
            elif data is not None:
                body = urllib.parse.urlencode(data, doseq=True).encode()
                hdrs.setdefault("content-type", "application/x-www-form-urlencoded")
                r = client.request(method, path, content=body, headers=hdrs)
            else:
                r = client.request(method, path, headers=hdrs)
        except httpx.HTTPError as exc:
            self.violation(f"{what}: {method} {path[:80]} not answered: {exc!r}")
            return None
        self.check(r, viewer, asked, what)
        return r

    def page(self, web: Web, path: str, what: str) -> httpx.Response | None:
        """A GET of ``web``; its CSRF token learned from the page."""
        r = self.send(web, "GET", path, what)
        if r is not None and r.status_code == 200 and not path.startswith("/login"):
            found = re.search(r'name="csrf" value="([^"]+)"', r.text)
            if found:
                web.csrf = html.unescape(found.group(1))
        return r

    def log_in(self, web: Web, password: str | None = None, login: str | None = None) -> bool:
        """The login form, then its POST: whether ``web`` is logged in after."""
        assert web.who is not None or login is not None
        name = login or web.login
        assert name is not None
        r = self.send(web, "GET", "/login", f"{web.name} login page")
        if r is None:
            return False
        if r.status_code == 303:  # already logged in: log out first, as a person would
            self.page(web, "/sessions", f"{web.name} page")
            if web.csrf:
                self.send(web, "POST", "/logout", f"{web.name} logout", data={"csrf": web.csrf})
            r = self.send(web, "GET", "/login", f"{web.name} login page")
            if r is None:
                return False
        token = re.search(r'name="csrf" value="([^"]+)"', r.text)
        if token is None:
            self.violation(f"{web.name}: the login page has no token: {r.status_code}")
            return False
        right = password is None
        r = self.send(
            web,
            "POST",
            "/login",
            f"{web.name} login",
            data={
                "csrf": html.unescape(token.group(1)),
                "login": name,
                "password": self.password if right else password,
            },
        )
        if r is None:
            return False
        if r.status_code == 303 and right:
            sid = web.sid()
            if sid is None:
                self.violation(f"{web.name}: logged in without a cookie")
                return False
            self.sid_login[sid] = name
            web.own_failures = 0
            web.known_for = name
            self.page(web, "/sessions", f"{web.name} page")
            return True
        if r.status_code == 303:
            self.violation(f"{web.name}: logged in as {name} with a wrong password")
            return True
        if r.status_code == 429 and right and web.own_failures < 5 and name == web.known_for:
            # a browser that logged in as this login before counts its own failures only
            self.violation(f"{web.name}: locked out of {name} by others' failures: {r.text[:200]}")
        if not right:
            web.own_failures += 1
        return False

    def ready(self, web: Web) -> bool:
        """``web`` logged in with a CSRF token (logging in again when its web session
        ended: logged out, replaced, idle)."""
        if web.who is None:
            return False
        r = self.page(web, "/sessions", f"{web.name} page")
        if r is not None and r.status_code == 200 and web.csrf:
            return True
        return self.log_in(web)

    def may(self, web: Web, *actions: str) -> bool:
        """Whether ``web``'s role may do what ``actions`` name (docs/dashboard.md, What
        each role sees)."""
        role = web.role
        for action in actions:
            if action in ("decide", "edit") and role != "undolog_approver":
                return False
            if action in ("rollback", "rollback_to") and role not in (
                "undolog_approver",
                "undolog_operator",
            ):
                return False
            if action in OPERATORS and role != "undolog_operator":
                return False
        return True

    def grant(self, web: Web, what: str, which: str) -> None:
        """This step may do ``what`` to ``which`` ('*': any) as ``web``'s login, when its
        role may."""
        if web.login is not None and self.may(web, what):
            self.allow.add((what, which, web.login))

    # --- what the database says ---------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        q = self.db.execute
        return {
            "approvals": {
                str(a): (s, r, e)
                for a, s, r, e in q(
                    "SELECT approval_id, state, decided_role, approved_args IS NOT NULL "
                    "FROM undolog.undolog_approval_requests"
                ).fetchall()
            },
            "actions": {
                (str(s), int(i)): (str(a), str(r))
                for s, i, a, r in q(
                    "SELECT session_id, action_id, action, actor "
                    "FROM undolog.undolog_operator_actions"
                ).fetchall()
            },
            "tools": {
                str(t): (str(b), r)
                for t, b, r in q(
                    "SELECT tool_id, registered_by, retired_actor FROM undolog.undolog_tools"
                ).fetchall()
            },
            "channels": {
                str(c): (str(b), r)
                for c, b, r in q(
                    "SELECT channel_id, created_role, removed_role "
                    "FROM undolog.undolog_notification_channels"
                ).fetchall()
            },
            "anchors": q("SELECT count(*) FROM undolog.undolog_chain_anchors").fetchone(),
            "partitions": sorted(
                str(n)
                for (n,) in q(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n "
                    "ON n.oid = p.relnamespace WHERE n.nspname = 'undolog'"
                ).fetchall()
            ),
            "retries": {
                str(d): (int(a), str(n))
                for d, a, n in q(
                    "SELECT delivery_id, attempts, next_attempt_at "
                    "FROM undolog.undolog_notification_deliveries"
                ).fetchall()
            },
        }

    def allowed(self, what: str, which: str, login: str) -> bool:
        return (what, which, login) in self.allow or (what, "*", login) in self.allow

    def compare(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        """Every change a person's login made this step was one the step's valid forms
        asked for; no decision changed once made."""
        people = {LOGINS[w][0] for w in LOGINS}
        staff = {LOGINS[w][0] for w in STAFF}
        for aid, now in after["approvals"].items():
            was = before["approvals"].get(aid)
            if was is None or was == now:
                continue
            if was[0] != "pending":
                self.violation(f"approval {aid} decided again: {was} -> {now}")
                continue
            login = now[1]
            if now[0] == "expired" and login not in staff:
                continue  # past its deadline: the engine's, whoever read it then
            if login in people:
                asked = self.allowed("decide", aid, login) or (
                    now[0] == "expired" and self.allowed("expire", aid, login)
                )
                if not asked:
                    self.violation(f"approval {aid} {now[0]} by {login} without a valid form")
                if now[2] and not self.allowed("edit", aid, login):
                    self.violation(f"approval {aid} approved with edited args by {login} unasked")
        for key, (action, actor) in after["actions"].items():
            if key in before["actions"] or actor not in people:
                continue
            if not self.allowed(action, key[0], actor):
                self.violation(f"session {key[0]}: {action} by {actor} without a valid form")
        for kind in ("tools", "channels"):
            for key, (made, gone) in after[kind].items():
                was = before[kind].get(key)
                who = made if was is None else (gone if was[1] != gone else None)
                if who in staff and not self.allowed(kind[:-1], key, who):
                    self.violation(f"{kind[:-1]} {key} changed by {who} without a valid form")
        maintained = (
            after["anchors"] != before["anchors"] or after["partitions"] != before["partitions"]
        )
        if maintained and not any(w == "maint" for w, _, _ in self.allow):
            self.violation(
                f"maintenance without a valid form: anchors {before['anchors']} -> "
                f"{after['anchors']}, partitions {before['partitions']} -> {after['partitions']}"
            )
        gone = set(before["partitions"]) - set(after["partitions"])
        if gone and not any(w == "drop" for w, _, _ in self.allow):
            self.violation(f"months dropped without their confirmation: {sorted(gone)[:5]}")
        for key, now in after["retries"].items():
            was = before["retries"].get(key)
            if (
                was is not None
                and was != now
                and not any(w in ("notify", "channel") for w, _, _ in self.allow)
            ):
                self.violation(f"delivery {key} due again without a valid form: {was} -> {now}")
        for aid, times in self.paid.items():
            state = after["approvals"].get(str(aid), ("?",))[0]
            if times > 1 or state != "approved":
                self.violation(f"pay of approval {aid} ran {times} time(s), the request {state}")
        for undo_id, times in self.undone.items():
            if times > 1:
                self.violation(f"undo entry {undo_id} compensated {times} times")

    def states(self) -> dict[uuid.UUID, str]:
        """Each session's state; a halted one an operator abandoned is 'abandoned'."""
        return {
            uuid.UUID(str(s)): str(st)
            for s, st in self.db.execute(
                "SELECT session_id, CASE WHEN state = 'halted' AND resolved_at IS NOT NULL "
                "THEN 'abandoned' ELSE state END FROM undolog.undolog_sessions"
            ).fetchall()
        }

    def pending(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """The pending requests: (approval id, session id)."""
        return [
            (uuid.UUID(str(a)), uuid.UUID(str(s)))
            for a, s in self.db.execute(
                "SELECT approval_id, session_id FROM undolog.undolog_approval_requests "
                "WHERE state = 'pending' ORDER BY requested_at"
            ).fetchall()
        ]

    def pick_session(self, *states: str) -> uuid.UUID | None:
        found = [s for s, st in self.states().items() if st in states]
        return self.rng.choice(found) if found else None

    def pick_web(self, *, staff: bool | None = None) -> Web:
        webs = [w for w in self.webs.values() if staff is None or (w.who in STAFF) == staff]
        return self.rng.choice(webs)

    # --- the agents ---------------------------------------------------------------------

    def agent_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"item": self.hostile(0.6), "note": self.hostile()}
        if self.rng.random() < 0.15:
            args["item"] += " HALT"  # its compensation fails once: the walk halts
        roll = self.rng.random()
        if roll < 0.05:
            args["pad"] = "\u0440" * self.rng.choice((3000, 200_000))  # Cyrillic er
        elif roll < 0.1:
            deep: Any = "bottom <fuzzx>"
            for _ in range(40):
                deep = [deep]
            args["deep"] = deep
        elif roll < 0.15:
            args["amount"] = "\u0661\u0660\u0660\u0660"  # Arabic-Indic digits
        elif roll < 0.2:
            args["note"] = FORGED
        return args

    def agent_call(self, s: AgentSession, tool: str) -> str:
        from undolog import engine

        conn = self.agent_conns[s.who]
        args = self.agent_args()
        if tool == "pay":
            args["cents"] = self.rng.choice((1, 500, 10**9))
        comp = self.book_descriptor() if tool == "book" else None
        tier = "compensable" if tool == "book" else "irreversible"
        step = s.step
        try:
            call = engine.intercept(conn, s.sid, step, tool, tier, args, comp)
        except Exception as exc:
            self.known[f"agent {tool} refused: {shape_of(str(exc).splitlines()[0])}"] += 1
            if "UL017" in str(getattr(exc, "sqlstate", "")) or "not registered" in str(exc):
                self.register_tools(s.who)
            return f"{s.who} {tool} refused: {type(exc).__name__}"
        s.step += 1
        if call.action == "execute" and call.effect_id is not None:
            engine.commit(conn, call.effect_id, {"booking": self.hostile(), "tool": tool})
            return f"{s.who} {tool} at {step} done"
        if call.action == "await_approval":
            s.pay = (step, args)
            return f"{s.who} {tool} at {step} waits for a person"
        return f"{s.who} {tool} at {step}: {call.action}"

    def m_agent_begin(self) -> str:
        from undolog import engine

        who = self.rng.choice(("agent", "agent2"))
        conn = self.agent_conns[who]
        purpose = self.hostile(0.7)
        if self.rng.random() < 0.1:
            purpose += "\u0440" * 5000
        try:
            sid = engine.begin_session(
                conn,
                None,
                self.hostile(0.5)[:200],
                {"purpose": purpose, "<fuzzx>": "<fuzzx fuzzattr>"},
                datetime.timedelta(hours=1),
            )
        except Exception as exc:
            self.known[f"agent begin refused: {shape_of(str(exc).splitlines()[0])}"] += 1
            return f"{who} begin refused"
        s = AgentSession(sid, who)
        self.sessions[sid] = s
        said = [f"{who} began {sid}"]
        for _ in range(self.rng.randrange(1, 4)):
            said.append(self.agent_call(s, "book"))
        if self.rng.random() < 0.6:
            said.append(self.agent_call(s, "pay"))
        return "; ".join(said)

    def live(self, *states: str) -> list[AgentSession]:
        now = self.states()
        return [s for s in self.sessions.values() if now.get(s.sid) in states and not s.ended]

    def m_agent_call(self) -> str:
        found = self.live("active")
        if not found:
            return self.m_agent_begin()
        s = self.rng.choice(found)
        return self.agent_call(s, self.rng.choice(("book", "book", "pay")))

    def m_agent_again(self) -> str:
        """An agent makes its waiting call again: it runs once approved (with the edited
        arguments, when edited), fails the session once rejected."""
        from undolog import engine

        waiting = [s for s in self.sessions.values() if s.pay is not None and not s.ended]
        if not waiting:
            return self.m_agent_call()
        s = self.rng.choice(waiting)
        assert s.pay is not None
        step, args = s.pay
        conn = self.agent_conns[s.who]
        try:
            call = engine.intercept(conn, s.sid, step, "pay", "irreversible", args)
        except Exception as exc:
            self.known[f"agent again refused: {shape_of(str(exc).splitlines()[0])}"] += 1
            if self.states().get(s.sid) not in ("active", "awaiting_approval"):
                s.pay = None
            return f"{s.who} pay again refused: {type(exc).__name__}"
        if call.action == "execute" and call.effect_id is not None:
            row = self.db.execute(
                "SELECT approval_id FROM undolog.undolog_approval_requests WHERE effect_id = %s",
                (call.effect_id,),
            ).fetchone()
            if row is None:
                self.violation(f"pay {call.effect_id} runs with no approval request")
            else:
                self.paid[uuid.UUID(str(row[0]))] += 1
            engine.commit(conn, call.effect_id, {"paid": True})
            s.pay = None
            s.step = max(s.step, step + 1)
            return f"{s.who} pay at {step} ran"
        if call.action == "rejected":
            s.pay = None
            with contextlib.suppress(Exception):
                if engine.session_state(conn, s.sid) == "active":
                    engine.fail_session(conn, s.sid, "rejected: the agent gives up")
            return f"{s.who} pay at {step} rejected"
        if call.action == "replay":
            s.pay = None
        return f"{s.who} pay at {step}: {call.action}"

    def m_agent_end(self) -> str:
        from undolog import engine

        found = self.live("active")
        if not found:
            return "no active session"
        s = self.rng.choice(found)
        conn = self.agent_conns[s.who]
        try:
            if self.rng.random() < 0.5:
                state = engine.complete_session(conn, s.sid)
            else:
                state = engine.fail_session(conn, s.sid, self.hostile())
        except Exception as exc:
            return f"{s.who} end refused: {type(exc).__name__}"
        s.ended = True
        return f"{s.who} ended {s.sid}: {state}"

    def m_worker(self) -> str:
        from undolog import walk

        try:
            done = walk.work(self.db, self.compensations, wait=0.0)
        except Exception as exc:
            self.known[f"worker: {shape_of(str(exc).splitlines()[0])}"] += 1
            return f"worker raised {type(exc).__name__}"
        return f"worker walked {len(done)}"

    # --- reading pages ------------------------------------------------------------------

    def paths(self) -> list[str]:
        sid = self.pick_session(*collections.Counter(self.states().values())) or uuid.uuid4()
        row = self.db.execute(
            "SELECT effect_id FROM undolog.undolog_effect_log WHERE session_id = %s LIMIT 1",
            (sid,),
        ).fetchone()
        effect = row[0] if row else uuid.uuid4()
        pending = self.pending()
        aid = self.rng.choice(pending)[0] if pending else uuid.uuid4()
        hostile = urllib.parse.quote(self.hostile(0.8))
        return [
            "/",
            "/approvals",
            "/approvals?fragment=1",
            "/decisions",
            f"/decisions?today=1&mine=1&tz={hostile}",
            "/decisions?tz=Europe/Paris&after=garbage",
            "/sessions",
            f"/sessions?q={hostile}&agent={hostile}&state=active",
            f"/sessions?since={hostile}&state={hostile}",
            "/sessions?agent=%00",
            "/sessions/counts",
            f"/sessions/{sid}",
            f"/sessions/{sid}?fragment=1",
            f"/sessions/{str(sid).upper()}",
            f"/sessions/{hostile}",
            f"/sessions/{sid}/calls/{effect}/{self.rng.choice(PAYLOADS)}",
            f"/sessions/{sid}/export",
            f"/approvals/{aid}/edit",
            "/tools",
            f"/tools?all=1&owner={hostile}",
            "/maintenance",
            "/maintenance/anchor/latest",
            "/notifications",
            f"/notifications?all=1&deliveries={hostile}",
            "/metrics",
            "/static/dashboard.js",
            "/static/../app.py",
            f"/nowhere/{hostile}",
            "/login",
        ]

    def m_read(self) -> str:
        web = self.rng.choice(list(self.webs.values()))
        if self.rng.random() < 0.1:
            return self.events(web)
        path = self.rng.choice(self.paths())
        method = "HEAD" if self.rng.random() < 0.05 else "GET"
        r = self.send(web, method, path, f"{web.name} {method} {path[:60]}")
        if r is None:
            return f"{web.name} {path[:60]}: no answer"
        viewer = self.viewer_of(web)
        self.expect_role(web, viewer, path, r)
        return f"{web.name} {method} {path[:60]}: {r.status_code}"

    def expect_role(self, web: Web, viewer: str | None, path: str, r: httpx.Response) -> None:
        """Staff pages refuse an agent (403) and send a visitor to the login page."""
        staff_only = (
            "/approvals",
            "/decisions",
            "/maintenance",
            "/notifications",
            "/metrics",
        )
        bare = path.split("?", 1)[0]
        is_staff_page = bare.startswith(staff_only) or bare.endswith("/export")
        agents = (LOGINS["agent"][0], LOGINS["agent2"][0])
        if (
            viewer is None
            and r.status_code == 200
            and bare not in ("/login",)
            and not (bare.startswith(("/static/", "/open/")))
        ):
            self.violation(f"{web.name}: a visitor was shown {path[:80]} ({r.status_code})")
        if viewer in agents and is_staff_page and r.status_code == 200:
            self.violation(f"{web.name}: the agent login {viewer} was shown {path[:80]}")
        if (
            viewer in agents
            and r.status_code == 200
            and "text/html" in r.headers.get("content-type", "")
        ):
            for form in ("run-form", "register-form", "decide-form", "rollback-reason"):
                if f'id="{form}"' in r.text:
                    self.violation(f"{web.name}: the agent login was shown the form {form}")
        approvers = (LOGINS["approver"][0], LOGINS["approver2"][0])
        if viewer in approvers and r.status_code == 200:
            for form in ("run-form", "register-form", "add-webhook-form", "expire-form"):
                if f'id="{form}"' in r.text:
                    self.violation(f"{web.name}: an approver was shown the operator's {form}")
        if viewer == LOGINS["operator"][0] and 'class="pick"' in r.text:
            self.violation(f"{web.name}: an operator was shown an approver's checkboxes")

    def events(self, web: Web) -> str:
        view = self.rng.choice(("inbox", "session", "nonsense"))
        sid = self.pick_session("active", "awaiting_approval") or uuid.uuid4()
        path = f"/events?view={view}&id={sid}&since=x"
        try:
            with web.http.stream("GET", path, timeout=5) as r:
                self.statuses[f"events {r.status_code}"] += 1
                for name, value in SECURITY.items():
                    if r.headers.get(name) != value:
                        self.violation(f"events: {r.status_code} without {name}")
                        break
                if r.status_code == 200:
                    first = next(r.iter_bytes(), b"")
                    if not first.startswith(b"retry:"):
                        self.violation(f"events: the stream began {first[:80]!r}")
                    if self.viewer_of(web) is None:
                        self.violation("events: a visitor got a stream")
        except httpx.HTTPError as exc:
            self.violation(f"events {path}: {exc!r}")
        return f"{web.name} events {view}"

    # --- deciding -----------------------------------------------------------------------

    def confirm_page(self, web: Web, aid: uuid.UUID) -> dict[str, list[str]] | None:
        """The first click of Approve: the confirmation page's form, None when none."""
        r = self.send(
            web,
            "POST",
            "/approvals/decide",
            f"{web.name} approve {aid}",
            data={"csrf": web.csrf or "", "approve_one": str(aid)},
        )
        if r is None or r.status_code != 200:
            return None
        return hidden_fields(r.text, "confirm-form") or None

    def used(self, web: Web, path: str, fields: dict[str, list[str]]) -> None:
        """A confirmation sent: replayed later, it must do nothing."""
        self.confirms.append((web.name, path, fields))
        del self.confirms[:-20]

    def m_approve(self) -> str:
        web = self.pick_web(staff=True) if self.rng.random() < 0.9 else self.webs["agentweb"]
        pending = self.pending()
        if not pending or not self.ready(web):
            return f"{web.name}: nothing to approve"
        aid, _ = self.rng.choice(pending)
        fields = self.confirm_page(web, aid)
        if fields is None:
            return f"{web.name} approve {aid}: no confirmation page"
        self.grant(web, "decide", str(aid))
        r = self.send(web, "POST", "/approvals/decide", f"{web.name} confirm {aid}", data=fields)
        self.used(web, "/approvals/decide", fields)
        return f"{web.name} approved {aid}: {r.status_code if r else '-'}"

    def m_reject(self) -> str:
        web = self.pick_web(staff=True) if self.rng.random() < 0.9 else self.webs["agentweb"]
        pending = self.pending()
        if not pending or not self.ready(web):
            return f"{web.name}: nothing to reject"
        aid, sid = self.rng.choice(pending)
        reason = self.rng.choice((self.hostile(), "", "   ", "x" * 9000, "nul\x00here"))
        if reason.strip() and "\x00" not in reason:
            self.grant(web, "decide", str(aid))
        where = self.rng.choice(("/approvals", f"/sessions/{sid}", "//evil.example", "/\\evil"))
        r = self.send(
            web,
            "POST",
            "/approvals/decide",
            f"{web.name} reject {aid}",
            data={
                "csrf": web.csrf or "",
                "reject_one": str(aid),
                f"reason_{aid}": reason,
                "next": where,
            },
        )
        return f"{web.name} rejected {aid}: {r.status_code if r else '-'}"

    def m_bulk(self) -> str:
        web = self.pick_web(staff=True)
        pending = self.pending()
        if not pending or not self.ready(web):
            return f"{web.name}: nothing in bulk"
        chosen = [str(a) for a, _ in self.rng.sample(pending, min(len(pending), 3))]
        ids = chosen + self.rng.choice(([], [chosen[0]], [str(uuid.uuid4())], ["<fuzzx>"]))
        action = self.rng.choice(("approve", "reject", "<fuzzx>"))
        data: list[tuple[str, str]] = [("csrf", web.csrf or ""), ("action", action)]
        data += [("ids", i) for i in ids]
        data.append(("reason", self.hostile()))
        if action == "reject":
            for i in chosen:
                self.grant(web, "decide", i)
        r = self.send(web, "POST", "/approvals/decide", f"{web.name} bulk {action}", data=data)
        said = f"{web.name} bulk {action} {len(ids)}: {r.status_code if r else '-'}"
        if action == "approve" and r is not None and r.status_code == 200:
            fields = hidden_fields(r.text, "confirm-form")
            if fields and self.rng.random() < 0.7:
                for i in chosen:
                    self.grant(web, "decide", i)
                r = self.send(
                    web, "POST", "/approvals/decide", f"{web.name} bulk confirm", data=fields
                )
                said += f", confirmed: {r.status_code if r else '-'}"
        return said

    def m_edit(self) -> str:
        web = self.pick_web(staff=True)
        pending = self.pending()
        if not pending or not self.ready(web):
            return f"{web.name}: nothing to edit"
        aid, _ = self.rng.choice(pending)
        r = self.page(web, f"/approvals/{aid}/edit", f"{web.name} edit page")
        if r is None or r.status_code != 200:
            return f"{web.name} edit {aid}: {r.status_code if r else '-'}"
        args = {"cents": 1, "item": self.hostile(), "note": "edited"}
        text = self.rng.choice(
            (json.dumps(args), "[1]", "{", '{"a": "\\u0000"}', "{" * 100 + "}" * 100)
        )
        path = f"/approvals/{aid}/edit"
        r = self.send(
            web,
            "POST",
            path,
            f"{web.name} edit {aid}",
            data={"csrf": web.csrf or "", "args": text, "reason": self.hostile()},
        )
        if r is None or r.status_code != 200:
            return f"{web.name} edit {aid}: {r.status_code if r else '-'}"
        fields = hidden_fields(r.text, "confirm-form")
        if not fields:
            return f"{web.name} edit {aid}: no confirmation"
        variant = self.rng.choice(("right", "right", "other_args", "twice", "no_csrf"))
        if variant == "other_args":
            fields["args"] = [json.dumps({**args, "cents": 10**6})]
        elif variant == "no_csrf":
            fields.pop("csrf", None)
        else:
            self.grant(web, "decide", str(aid))
            self.grant(web, "edit", str(aid))
        r = self.send(web, "POST", path, f"{web.name} edit confirm {variant}", data=fields)
        if variant != "no_csrf":
            self.used(web, path, fields)
        said = f"{web.name} edit {aid} {variant}: {r.status_code if r else '-'}"
        if variant == "twice":
            self.allow.discard(("decide", str(aid), web.login or ""))
            before = self.snapshot()["approvals"].get(str(aid))
            r = self.send(web, "POST", path, f"{web.name} edit confirm again", data=fields)
            after = self.snapshot()["approvals"].get(str(aid))
            if before != after:
                self.violation(f"approval {aid}: an edit's confirmation used twice changed it")
            self.allow.add(("decide", str(aid), web.login or ""))
            said += f", again {r.status_code if r else '-'}"
        return said

    def m_double(self) -> str:
        """One confirmation sent twice at once: one decision at most."""
        web = self.pick_web(staff=True)
        pending = self.pending()
        if not pending or not self.ready(web):
            return f"{web.name}: nothing to double"
        aid, _ = self.rng.choice(pending)
        fields = self.confirm_page(web, aid)
        if fields is None:
            return f"{web.name} double {aid}: no confirmation"
        self.grant(web, "decide", str(aid))
        futures = [
            self.pool.submit(
                self.send, web, "POST", "/approvals/decide", f"{web.name} double {aid}", data=fields
            )
            for _ in range(2)
        ]
        answers = [f.result() for f in futures]
        self.used(web, "/approvals/decide", fields)
        codes = [r.status_code if r is not None else 0 for r in answers]
        return f"{web.name} double confirm {aid}: {codes}"

    def m_foreign(self) -> str:
        """A form sent with a token that is not the login's own: none, another login's,
        after a logout, another login's confirmation, a confirmation used before."""
        web = self.pick_web(staff=True)
        other = self.rng.choice([w for w in self.webs.values() if w is not web and w.who])
        pending = self.pending()
        if not self.ready(web) or not self.ready(other):
            return "not logged in"
        variant = self.rng.choice(("none", "other", "garbage", "confirm_other", "confirm_used"))
        aid = self.rng.choice(pending)[0] if pending else uuid.uuid4()
        token = {
            "none": None,
            "other": other.csrf,
            "garbage": self.rng.choice(("", "x" * 5000, "\u00e9\U0001f4b8", "<fuzzx>")),
        }
        if variant in token:
            data: dict[str, Any] = {
                "reject_one": str(aid),
                f"reason_{aid}": "foreign",
                "approve_one": str(aid),
            }
            if token[variant] is not None:
                data["csrf"] = token[variant]
            sid = self.pick_session("active") or uuid.uuid4()
            # every form of the dashboard, each in turn: each checks the token itself (in
            # posted()), and one that stopped checking is caught only if sent there; the
            # refusal must be the token's ("Form expired"), not a role's 403 (an approver
            # posting an operator's form), which would hide a form that took the token
            targets = (
                "/approvals/decide",
                f"/approvals/{aid}/edit",
                *(f"/sessions/{sid}/{action}" for action in SESSION_ACTIONS),
                "/maintenance/anchor",
                "/maintenance/run",
                "/maintenance/ensure",
                "/maintenance/recover",
                "/maintenance/drop",
                "/approvals/expire",
                "/tools/retire",
                "/tools/register",
                "/notifications/remove",
                "/notifications/add/webhook",
                "/notifications/add/email",
                "/logout",
            )
            data["reason"] = "foreign"
            codes = []
            for target in targets:
                r = self.send(
                    web, "POST", target, f"{web.name} {variant} token {target}", data=data
                )
                codes.append(r.status_code if r else 0)
                if r is not None and not (
                    r.status_code == 401 or (r.status_code == 403 and "Form expired" in r.text)
                ):
                    self.violation(
                        f"{web.name}: a form with a {variant} token to {target} answered "
                        f"{r.status_code}"
                    )
            return f"{web.name} {variant} token to every form: {codes}"
        if variant == "confirm_other" and pending:
            fields = self.confirm_page(other, aid)
            if fields is None:
                return "no confirmation to steal"
            fields["csrf"] = [web.csrf or ""]  # the thief's own token, the other's nonce
            r = self.send(
                web, "POST", "/approvals/decide", f"{web.name} stolen confirm", data=fields
            )
            return f"{web.name} another's confirmation: {r.status_code if r else '-'}"
        used = [(n, p, f) for n, p, f in self.confirms if n == web.name]
        if used:
            _, path, fields = self.rng.choice(used)
            fields = {**fields, "csrf": [web.csrf or ""]}
            # granted only when the nonce was never used: the dashboard takes it once
            r = self.send(web, "POST", path, f"{web.name} confirmation replayed", data=fields)
            return f"{web.name} replayed a confirmation: {r.status_code if r else '-'}"
        return "nothing to replay"

    def m_stale(self) -> str:
        """A confirmation read, the request decided by another meanwhile, then sent."""
        pending = self.pending()
        a, b = self.webs["approver"], self.webs["approver2"]
        if self.rng.random() < 0.5:
            a, b = b, a
        if not pending or not self.ready(a) or not self.ready(b):
            return "nothing stale"
        aid, _ = self.rng.choice(pending)
        fields = self.confirm_page(a, aid)
        if fields is None:
            return f"stale {aid}: no confirmation"
        self.grant(b, "decide", str(aid))
        r = self.send(
            b,
            "POST",
            "/approvals/decide",
            f"{b.name} reject first",
            data={"csrf": b.csrf or "", "reject_one": str(aid), f"reason_{aid}": "first"},
        )
        self.grant(a, "decide", str(aid))  # the engine refuses it: decided once is checked
        r2 = self.send(a, "POST", "/approvals/decide", f"{a.name} stale confirm", data=fields)
        self.used(a, "/approvals/decide", fields)
        if r2 is not None and r is not None and r.status_code == 303 and r2.status_code == 303:
            self.violation(f"approval {aid}: a stale confirmation after a rejection was a success")
        return f"stale {aid}: {r.status_code if r else '-'} then {r2.status_code if r2 else '-'}"

    # --- sessions: rollback, undo-to, the halted ones -----------------------------------

    def m_rollback(self) -> str:
        web = self.rng.choice(list(self.webs.values()))
        sid = self.pick_session("active", "awaiting_approval") or uuid.uuid4()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        reason = self.rng.choice((self.hostile(), "", "y" * 9000))
        if reason.strip() and len(reason) <= 8192:
            self.grant(web, "rollback", str(sid))
            if web.login is not None and self.may(web, "rollback"):
                # rolling back a session that waits for a person closes its request
                for aid, of in self.pending():
                    if of == sid:
                        self.allow.add(("decide", str(aid), web.login))
        r = self.send(
            web,
            "POST",
            f"/sessions/{sid}/rollback",
            f"{web.name} rollback",
            data={"csrf": web.csrf or "", "reason": reason},
        )
        return f"{web.name} rollback {sid}: {r.status_code if r else '-'}"

    def m_undo_to(self) -> str:
        web = self.rng.choice([w for w in self.webs.values() if w.who])
        sid = self.pick_session("active")
        if sid is None or not self.ready(web):
            return "nothing to undo"
        steps = self.db.execute(
            "SELECT step_index FROM undolog.undolog_effect_log WHERE session_id = %s",
            (sid,),
        ).fetchall()
        step = self.rng.choice([s for (s,) in steps] or [0]) if self.rng.random() < 0.9 else -1
        path = f"/sessions/{sid}/undo-to"
        r = self.send(
            web, "POST", path, f"{web.name} undo-to", data={"csrf": web.csrf or "", "step": step}
        )
        if r is None or r.status_code != 200:
            return f"{web.name} undo-to {sid}: {r.status_code if r else '-'}"
        fields = hidden_fields(r.text, "undo-to-form")
        if not fields:
            return f"{web.name} undo-to {sid}: no confirmation"
        variant = self.rng.choice(("right", "right", "no_reason", "agent_moves", "twice"))
        fields["reason"] = [self.hostile() if variant != "no_reason" else ""]
        if variant == "agent_moves":
            s = self.sessions.get(sid)
            if s is not None:
                self.agent_call(s, "book")
        if variant != "no_reason":
            self.grant(web, "rollback_to", str(sid))
        r = self.send(web, "POST", path, f"{web.name} undo-to confirm {variant}", data=fields)
        if variant != "no_reason":
            self.used(web, path, fields)
        said = f"{web.name} undo-to {sid} {variant}: {r.status_code if r else '-'}"
        if variant == "twice":
            before = self.snapshot()["actions"]
            self.send(web, "POST", path, f"{web.name} undo-to confirm again", data=fields)
            if len(self.snapshot()["actions"]) != len(before):
                self.violation(f"session {sid}: an undo-to's confirmation worked twice")
        return said

    def m_halted(self) -> str:
        """An operator (or not) resumes, retries or abandons a halted session, from a page
        read now or before the session moved on."""
        sid = self.pick_session("halted")
        if sid is None:
            return self.m_worker()
        web = self.webs["operator"] if self.rng.random() < 0.8 else self.pick_web()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        r = self.page(web, f"/sessions/{sid}", f"{web.name} halted page")
        seen = None
        if r is not None:
            found = re.search(r'name="seen" value="([^"]*)"', r.text)
            seen = html.unescape(found.group(1)) if found else None
        action = self.rng.choice(("resume", "retry", "abandon", "nonsense"))
        undo = self.db.execute(
            "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s "
            "AND state = 'compensation_failed' LIMIT 1",
            (sid,),
        ).fetchone()
        data: dict[str, Any] = {"csrf": web.csrf or "", "reason": self.hostile()}
        if seen is not None and self.rng.random() < 0.9:
            data["seen"] = seen
        elif self.rng.random() < 0.5:
            data["seen"] = self.rng.choice(("2020-01-01T00:00:00+00:00", "garbage", "2020-01-01"))
        if action == "retry":
            data["undo_id"] = str(undo[0]) if undo else str(uuid.uuid4())
        if self.rng.random() < 0.3:  # the session moves on meanwhile: the form is stale
            self.m_worker()
        if "seen" in data:
            now = self.db.execute(
                "SELECT updated_at FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
            ).fetchone()
            try:
                fresh = now is not None and now[0] == datetime.datetime.fromisoformat(data["seen"])
            except ValueError:
                fresh = False
            if fresh:
                self.grant(web, action, str(sid))
        else:
            self.grant(web, action, str(sid))  # a post without it (a script) acts as before
        r = self.send(web, "POST", f"/sessions/{sid}/{action}", f"{web.name} {action}", data=data)
        return f"{web.name} {action} {sid}: {r.status_code if r else '-'}"

    # --- the operator's pages -----------------------------------------------------------

    def m_maintenance(self) -> str:
        web = self.webs["operator"] if self.rng.random() < 0.7 else self.pick_web()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        action = self.rng.choice(("run", "ensure", "anchor", "recover", "drop", "run_retention"))
        data: dict[str, Any] = {"csrf": web.csrf or ""}
        path = f"/maintenance/{action}"
        if action == "run_retention":
            path = "/maintenance/run"
            data["retention_months"] = self.rng.choice(("1", "0", "x", "1200", "<fuzzx>"))
            data["months_ahead"] = self.rng.choice(("", "3", "121", "-1"))
        elif action == "drop":
            this_month = datetime.datetime.now(datetime.UTC).strftime("%Y-%m")
            data["before"] = self.rng.choice(
                (this_month, "2020-01", "2999-01", "<fuzzx>", "2020-13")
            )
            data["detach"] = self.rng.choice(("1", "0"))
        if action in ("run", "ensure", "anchor", "recover", "run_retention"):
            # a retention that drops no month runs at once; one that drops asks first
            self.grant(web, "maint", "*")
        if action == "run":
            # the setting's retention (12 months) runs at once, as the page's plan shows:
            # the two old months go (docs/dashboard.md, Run maintenance now)
            self.grant(web, "drop", "*")
        r = self.send(web, "POST", path, f"{web.name} maintenance {action}", data=data)
        said = f"{web.name} {action}: {r.status_code if r else '-'}"
        if r is not None and r.status_code == 200 and action in ("drop", "run_retention"):
            form = "drop-confirm-form" if action == "drop" else "run-confirm-form"
            fields = hidden_fields(r.text, form)
            if fields:
                self.grant(web, "maint", "*")
                self.grant(web, "drop", "*")
                r = self.send(web, "POST", path, f"{web.name} {action} confirm", data=fields)
                said += f", confirmed: {r.status_code if r else '-'}"
        return said

    def m_tools(self) -> str:
        web = self.webs["operator"] if self.rng.random() < 0.7 else self.pick_web()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        if self.rng.random() < 0.5:
            data = {
                "csrf": web.csrf or "",
                "tool_name": self.rng.choice(("fz_tool", self.hostile(0.8)[:60], "")),
                "owner": self.rng.choice((LOGINS["agent"][0], LOGINS["agent2"][0], "<fuzzx>")),
                "tier": self.rng.choice(("compensable", "irreversible", "safe")),
                "compensation": self.rng.choice(('{"name": "unbook"}', "", "{", "[]")),
                "on_reject": self.rng.choice(("fail_session", "continue", "")),
            }
            self.grant(web, "tool", "*")
            r = self.send(web, "POST", "/tools/register", f"{web.name} register", data=data)
            return f"{web.name} register: {r.status_code if r else '-'}"
        row = self.db.execute(
            "SELECT tool_id FROM undolog.undolog_tools WHERE retired_at IS NULL "
            "AND tool_name NOT IN ('book', 'pay') ORDER BY random() LIMIT 1"
        ).fetchone()
        tool = str(row[0]) if row else str(uuid.uuid4())
        r = self.send(
            web,
            "POST",
            "/tools/retire",
            f"{web.name} retire",
            data={"csrf": web.csrf or "", "tool_id": tool},
        )
        said = f"{web.name} retire {tool}: {r.status_code if r else '-'}"
        if r is not None and r.status_code == 200:
            fields = hidden_fields(r.text, "retire-form")
            fields["reason"] = [self.hostile()]
            if fields.get("confirm"):
                self.grant(web, "tool", tool)
                r = self.send(
                    web, "POST", "/tools/retire", f"{web.name} retire confirm", data=fields
                )
                said += f", confirmed {r.status_code if r else '-'}"
        return said

    def m_channels(self) -> str:
        web = self.webs["operator"] if self.rng.random() < 0.7 else self.pick_web()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        roll = self.rng.random()
        if roll < 0.2:
            row = self.db.execute(
                "SELECT d.delivery_id, a.session_id FROM undolog.undolog_notification_deliveries d "
                "JOIN undolog.undolog_approval_requests a USING (approval_id) "
                "ORDER BY random() LIMIT 1"
            ).fetchone()
            sid = (
                str(row[1]) if row else str(self.pick_session("awaiting_approval") or uuid.uuid4())
            )
            delivery = str(row[0]) if row and self.rng.random() < 0.8 else str(uuid.uuid4())
            self.grant(web, "notify", delivery)
            r = self.send(
                web,
                "POST",
                f"/sessions/{sid}/notify-retry",
                f"{web.name} notify-retry",
                data={"csrf": web.csrf or "", "delivery_id": delivery},
            )
            return f"{web.name} notify-retry: {r.status_code if r else '-'}"
        if roll < 0.6:
            data = {
                "csrf": web.csrf or "",
                "name": self.rng.choice((f"ch{self.rng.randrange(9)}", self.hostile(0.9)[:50])),
                "url": self.rng.choice(
                    ("https://hooks.example/x", "javascript:alert(1)", "http://<fuzzx>/")
                ),
                "secret": self.hostile(),
                "slack": self.rng.choice(("1", "")),
            }
            self.grant(web, "channel", "*")
            r = self.send(web, "POST", "/notifications/add/webhook", f"{web.name} add", data=data)
            return f"{web.name} add channel: {r.status_code if r else '-'}"
        row = self.db.execute(
            "SELECT channel_name FROM undolog.undolog_notification_channels "
            "WHERE removed_at IS NULL ORDER BY random() LIMIT 1"
        ).fetchone()
        name = str(row[0]) if row else "nothing"
        r = self.send(
            web,
            "POST",
            "/notifications/remove",
            f"{web.name} remove",
            data={"csrf": web.csrf or "", "name": name},
        )
        said = f"{web.name} remove {name[:30]!r}: {r.status_code if r else '-'}"
        if r is not None and r.status_code == 200:
            fields = hidden_fields(r.text, "remove-form")
            if fields.get("confirm"):
                self.grant(web, "channel", "*")
                r = self.send(
                    web, "POST", "/notifications/remove", f"{web.name} remove confirm", data=fields
                )
                said += f", confirmed {r.status_code if r else '-'}"
        return said

    def m_expire(self) -> str:
        web = self.pick_web()
        if not self.ready(web) and web.who is not None:
            return "not logged in"
        self.grant(web, "expire", "*")
        r = self.send(
            web, "POST", "/approvals/expire", f"{web.name} expire", data={"csrf": web.csrf or ""}
        )
        return f"{web.name} expire: {r.status_code if r else '-'}"

    # --- logins -------------------------------------------------------------------------

    def m_login(self) -> str:
        web = self.rng.choice([w for w in self.webs.values() if w.who])
        if web.name == "agentweb" and self.rng.random() < 0.3:
            web.who = "agent2" if web.who == "agent" else "agent"
        old = web.csrf if self.ready(web) else None
        ok = self.log_in(web)
        pending = self.pending()
        if ok and old and old != web.csrf and pending:
            # the token of the web session this login replaced acts no more
            aid = pending[0][0]
            r = self.send(
                web,
                "POST",
                "/approvals/decide",
                f"{web.name} old token",
                data={"csrf": old, "reject_one": str(aid), f"reason_{aid}": "old token"},
            )
            if r is not None and r.status_code != 403:
                self.violation(
                    f"{web.name}: the token of its last web session answered {r.status_code}"
                )
        return f"{web.name} logs in as {web.login}: {ok}"

    def m_bad_login(self) -> str:
        """Wrong passwords, blank ones, NULs, long logins, a missing or foreign login
        token: none logs in."""
        web = self.rng.choice(list(self.webs.values()))
        variant = self.rng.choice(("wrong", "blank", "nul", "long", "token", "no_token"))
        target = self.rng.choice(
            [v[0] for v in LOGINS.values()] + ["postgres", "<fuzzx>", FORGED, "\x1b[2J\x1b[31mx"]
        )
        headers = {"x-forwarded-for": f"10.{self.rng.randrange(256)}.0.{self.rng.randrange(256)}"}
        r = self.send(web, "GET", "/login", f"{web.name} login page", headers=headers)
        token = ""
        if r is not None:
            found = re.search(r'name="csrf" value="([^"]+)"', r.text)
            token = html.unescape(found.group(1)) if found else ""
        password = {"wrong": "nope", "blank": "  ", "nul": f"{self.password}\x00x"}.get(
            variant, self.password
        )
        login = "l" * 300 if variant == "long" else target
        if variant == "token":
            token = secrets.token_urlsafe(32)
        data = {"login": login, "password": password}
        if variant != "no_token":
            data["csrf"] = token
        r = self.send(
            web, "POST", "/login", f"{web.name} bad login {variant}", data=data, headers=headers
        )
        if web.who is not None and target == web.login and variant in ("wrong", "blank", "nul"):
            web.own_failures += 1
        if r is not None and r.status_code == 303:
            self.violation(f"{web.name}: a {variant} login of {login[:40]} logged in")
            sid = web.sid()
            if sid:
                self.sid_login[sid] = login
        return f"{web.name} bad login {variant}: {r.status_code if r else '-'}"

    def m_logout(self) -> str:
        web = self.rng.choice([w for w in self.webs.values() if w.who])
        if not self.ready(web):
            return "not logged in"
        sid, csrf = web.sid(), web.csrf
        variant = self.rng.choice(("right", "no_token", "get"))
        if variant == "get":
            r = self.send(web, "GET", "/logout", f"{web.name} GET logout")
        else:
            data = {"csrf": csrf or ""} if variant == "right" else {}
            r = self.send(web, "POST", "/logout", f"{web.name} logout {variant}", data=data)
        if variant == "right" and sid:
            # the old cookie and token act no more
            pending = self.pending()
            if pending:
                aid = pending[0][0]
                self.send(
                    web,
                    "POST",
                    "/approvals/decide",
                    f"{web.name} after logout",
                    data={"csrf": csrf or "", "reject_one": str(aid), f"reason_{aid}": "gone"},
                    cookie=sid,
                )
        return f"{web.name} logout {variant}: {r.status_code if r else '-'}"

    def m_devices(self) -> str:
        """More browsers of one login: past 4 the oldest web session is logged out."""
        who = self.rng.choice(("approver", "operator", "agent"))
        extra = [
            Web(f"{who}-device{i}", who, self.client()) for i in range(self.rng.randrange(1, 6))
        ]
        for web in extra:
            self.log_in(web)
        for web in extra:
            web.http.close()
        return f"{len(extra)} more browsers of {who}"

    # --- hostile shapes -----------------------------------------------------------------

    def m_steal(self) -> str:
        """Another client's cookie: with the thief's token it acts as no one; with the
        owner's token too it acts as the owner (a stolen cookie is the owner's)."""
        thief = self.rng.choice(list(self.webs.values()))
        victim = self.rng.choice([w for w in self.webs.values() if w.who and w is not thief])
        if not self.ready(victim):
            return "no victim"
        self.ready(thief)
        cookie = victim.sid()
        pending = self.pending()
        if cookie is None or not pending:
            return "nothing to steal"
        aid, _ = self.rng.choice(pending)
        whole = self.rng.random() < 0.3
        token = victim.csrf if whole else (thief.csrf or "")
        if whole:
            self.grant(victim, "decide", str(aid))
        r = self.send(
            thief,
            "POST",
            "/approvals/decide",
            f"{thief.name} with {victim.name}'s cookie",
            data={"csrf": token or "", "reject_one": str(aid), f"reason_{aid}": "stolen"},
            cookie=cookie,
        )
        return (
            f"{thief.name} steals {victim.name}'s cookie ({whole}): {r.status_code if r else '-'}"
        )

    def m_shape(self) -> str:
        """Forms of wrong shapes from a logged-in staff member: garbage ids, several
        values of one field, NULs, huge reasons, a next off the site."""
        web = self.pick_web(staff=True)
        if not self.ready(web):
            return "not logged in"
        pending = self.pending()
        aid = str(pending[0][0]) if pending else str(uuid.uuid4())
        csrf = web.csrf or ""
        kind = self.rng.choice(
            (
                "pick_garbage",
                "two_tokens",
                "nul_reason",
                "huge_reason",
                "ids_garbage",
                "no_action",
                "undo_step",
                "retry_foreign",
                "session_garbage",
                "upper_id",
                "edit_garbage",
            )
        )
        path = "/approvals/decide"
        data: list[tuple[str, str]] = [("csrf", csrf)]
        if kind == "pick_garbage":
            data += [("pick", "approve:<fuzzx>"), ("pick", f"reject:{aid}"), ("pick", ":")]
        elif kind == "two_tokens":
            # the form's own token after a wrong one: Starlette reads the last, a filter in
            # front may read the first; refused as a bad token (nothing granted)
            data = [("csrf", "wrong"), ("csrf", csrf), ("reject_one", aid), (f"reason_{aid}", "x")]
        elif kind == "nul_reason":
            data += [("reject_one", aid), (f"reason_{aid}", "a\x00b")]
        elif kind == "huge_reason":
            data += [("reject_one", aid), (f"reason_{aid}", "z" * 300_000)]
        elif kind == "ids_garbage":
            data += [("action", "reject"), ("ids", "<fuzzx>"), ("ids", ""), ("reason", "x")]
        elif kind == "no_action":
            data += [("ids", aid)]
        elif kind == "undo_step":
            sid = self.pick_session("active") or uuid.uuid4()
            path = f"/sessions/{sid}/undo-to"
            data += [("step", self.rng.choice(("-1", "99999999999", "x", "1e3")))]
        elif kind == "retry_foreign":
            # an undo entry of another session: retried as this session's, never
            sid = self.pick_session("halted") or uuid.uuid4()
            other = self.db.execute(
                "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id <> %s LIMIT 1",
                (sid,),
            ).fetchone()
            path = f"/sessions/{sid}/retry"
            data += [("undo_id", str(other[0]) if other else "x"), ("reason", "foreign entry")]
        elif kind == "session_garbage":
            path = f"/sessions/{urllib.parse.quote(self.hostile(1.0))}/rollback"
            data += [("reason", "x")]
        elif kind == "upper_id":
            self.grant(web, "decide", aid)
            data += [("reject_one", aid.upper()), (f"reason_{aid.upper()}", "upper")]
        elif kind == "edit_garbage":
            path = f"/approvals/{urllib.parse.quote(self.hostile(1.0)[:20])}/edit"
            data += [("args", "{}")]
        r = self.send(web, "POST", path, f"{web.name} shape {kind}", data=data)
        if kind == "two_tokens" and r is not None and r.status_code not in (401, 403):
            self.violation(f"{web.name}: a form with two csrf fields answered {r.status_code}")
        return f"{web.name} shape {kind}: {r.status_code if r else '-'}"

    def m_method(self) -> str:
        web = self.rng.choice(list(self.webs.values()))
        self.ready(web)
        method = self.rng.choice(("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "GET", "HEAD"))
        path = self.rng.choice(
            (
                "/approvals/decide",
                "/logout",
                "/maintenance/run",
                "/maintenance/drop",
                "/tools/retire",
                f"/sessions/{self.pick_session('active') or uuid.uuid4()}/rollback",
                "/approvals",
                "/login",
            )
        )
        r = self.send(web, method, path, f"{web.name} {method} {path[:40]}")
        return f"{web.name} {method} {path[:40]}: {r.status_code if r else '-'}"

    def m_body(self) -> str:
        """Bodies that are no form: 2 MiB, gzip, JSON, chunked without a length,
        multipart; a lying Content-Length."""
        web = self.pick_web(staff=True)
        if not self.ready(web):
            return "not logged in"
        pending = self.pending()
        aid = str(pending[0][0]) if pending else str(uuid.uuid4())
        form = {"csrf": web.csrf or "", "reject_one": aid, f"reason_{aid}": "body"}
        encoded = urllib.parse.urlencode(form).encode()
        kind = self.rng.choice(("huge", "gzip", "json", "chunked", "multipart", "huge_chunked"))
        headers = {"content-type": "application/x-www-form-urlencoded"}
        content: bytes | Iterator[bytes]
        if kind == "huge":
            content = encoded + b"&pad=" + b"x" * (2 << 20)
        elif kind == "gzip":
            content = gzip.compress(encoded)
            headers["content-encoding"] = "gzip"
        elif kind == "json":
            content = json.dumps(form).encode()
            headers["content-type"] = "application/json"
        elif kind in ("chunked", "huge_chunked"):
            size = 1 if kind == "chunked" else 40

            def chunks() -> Iterator[bytes]:
                yield encoded
                for _ in range(size):
                    yield b"&pad=" + b"y" * 65536

            content = chunks()
        else:
            boundary = "fuzzboundary"
            parts = [
                f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                for k, v in form.items()
            ]
            content = ("".join(parts) + f"--{boundary}--\r\n").encode()
            headers["content-type"] = f"multipart/form-data; boundary={boundary}"
            self.grant(web, "decide", aid)  # a browser may send a form so
        if kind == "chunked":
            self.grant(web, "decide", aid)  # 64 KiB: a form all the same
        try:
            r = web.http.post("/approvals/decide", content=content, headers=headers)
        except httpx.HTTPError as exc:
            if not kind.startswith("huge"):
                self.violation(f"{web.name} body {kind}: not answered: {exc!r}")
            else:  # answered 413 before the upload ended, and closed: the client's loss
                self.known[f"a huge body's upload cut short: {type(exc).__name__}"] += 1
            return f"{web.name} body {kind}: no answer"
        self.check(r, self.viewer_of(web), aid, f"{web.name} body {kind}")
        if kind.startswith("huge") and r.status_code != 413:
            self.violation(f"{web.name}: a body of {kind} answered {r.status_code}, not 413")
        return f"{web.name} body {kind}: {r.status_code}"

    def raw(self, data: bytes, wait: float = 5.0) -> bytes:
        with socket.create_connection(("127.0.0.1", self.dashboard.port), timeout=wait) as s:
            s.sendall(data)
            got = b""
            with contextlib.suppress(OSError):
                while chunk := s.recv(65536):
                    got += chunk
            return got

    def raw_responses(self, got: bytes, what: str, viewer: str | None) -> None:
        """The responses of a raw exchange: each carries the headers (uvicorn's own 400
        for bytes that are no HTTP too: `undolog dashboard`'s server adds them)."""
        for head in re.findall(rb"HTTP/1\.[01] \d{3}[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n", got):
            status = int(head.split(b" ", 2)[1])
            names = {
                line.split(b":", 1)[0].strip().lower().decode(): line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")[1:]
                if b":" in line
            }
            self.statuses[f"{what} {status}"] += 1
            if status >= 500 and status != 503:
                self.violation(f"{what}: {status}")
            if "content-security-policy" not in names:
                self.violation(f"{what}: {status} without the security headers: {head[:300]!r}")
        body = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
        self.visible(body.decode("utf-8", "replace"), viewer, "", what)

    def m_raw(self) -> str:
        port = self.dashboard.port
        kind = self.rng.choice(
            (
                "half",
                "pipelined",
                "host",
                "origin",
                "http10",
                "garbage",
                "slow_head",
                "lying_length",
            )
        )
        if kind == "half":
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                b"POST /approvals/decide HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100\r\n\r\ncsrf="
            )
            self.silent.append((s, self.step_no + self.rng.randrange(1, 8)))
            return "half a request, silent"
        if kind == "slow_head":
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /approvals HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            self.silent.append((s, self.step_no + self.rng.randrange(1, 8)))
            return "half a head, silent"
        web = self.rng.choice(list(self.webs.values()))
        sid = web.sid()
        cookie = f"Cookie: undolog_session={sid}\r\n".encode() if sid else b""
        viewer = self.sid_login.get(sid) if sid else None
        if kind == "pipelined":
            one = b"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + cookie + b"\r\n"
            last = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            got = self.raw(one + one + last)
        elif kind == "host":
            host = self.rng.choice((b"evil.example", b"", b"a b", b"127.0.0.1:1\r\nHost: x"))
            got = self.raw(
                b"GET /login HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
            )
        elif kind == "origin":
            got = self.raw(
                b"POST /logout HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n"
                + cookie
                + b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )
        elif kind == "http10":
            got = self.raw(b"GET /sessions HTTP/1.0\r\n" + cookie + b"\r\n")
        elif kind == "lying_length":
            got = self.raw(
                b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n"
                b"Connection: close\r\n\r\n"
            )
        else:
            got = self.raw(bytes(self.rng.randrange(256) for _ in range(200)) + b"\r\n\r\n")
        self.raw_responses(got, f"raw {kind}", viewer)
        return f"raw {kind}: {got[:20]!r}"

    def m_link(self) -> str:
        """A notification's signed link: right, tampered with, expired, another key's."""
        from undolog import links

        web = self.rng.choice(list(self.webs.values()))
        pending = self.pending()
        aid = self.rng.choice(pending)[0] if pending else uuid.uuid4()
        exp = int(time.time()) + 600
        variant = self.rng.choice(("right", "tampered", "expired", "other_key", "no_sig", "go"))
        key = LINK_SECRET if variant != "other_key" else "another-key-0123456789abcdef"
        if variant == "expired":
            exp = int(time.time()) - 10
        sig = links.signature(key, aid, exp)
        if variant == "tampered":
            sig = sig[:-1] + ("0" if sig[-1] != "0" else "1")
        path = f"{links.PATH}/{aid}" + ("/go" if variant == "go" else "")
        query = f"?exp={exp}" + ("" if variant == "no_sig" else f"&sig={sig}")
        r = self.send(web, "GET", path + query, f"{web.name} link {variant}")
        if r is None:
            return "no answer"
        expect = {"right": (200,), "go": (303, 404), "expired": (410,)}.get(variant, (403,))
        if r.status_code not in expect:
            self.violation(f"{web.name}: a link {variant} answered {r.status_code}, not {expect}")
        return f"{web.name} link {variant}: {r.status_code}"

    # --- the run ------------------------------------------------------------------------

    def probe(self) -> None:
        """A fresh client's login page, and a logged-in approver's inbox, load."""
        if self.dashboard.process.poll() is not None:
            self.violation(f"the dashboard exited with {self.dashboard.process.returncode}")
            raise Dead
        with self.client() as fresh:
            try:
                r = fresh.get("/login")
                if r.status_code != 200 or 'name="csrf"' not in r.text:
                    self.violation(f"a fresh login page answered {r.status_code}")
            except httpx.HTTPError as exc:
                self.violation(f"a fresh login page was not answered: {exc!r}")
        web = self.webs["approver"]
        if self.ready(web):
            r2 = self.page(web, "/approvals", "probe inbox")
            if r2 is None or r2.status_code != 200 or 'id="nav-approvals"' not in r2.text:
                self.violation(f"the approver's inbox answered {r2.status_code if r2 else '-'}")
        else:
            self.violation("the approver cannot log in")

    def step(self) -> None:
        self.step_no += 1
        moves = list(WEIGHTS)
        move = self.rng.choices(moves, [WEIGHTS[m] for m in moves])[0]
        before = self.snapshot()
        self.allow = set()
        said = getattr(self, f"m_{move}")()
        self.counts[move] += 1
        if self.trace:
            print(
                f"{self.step_no:5} {time.monotonic() - self.started:6.1f}s {move}: {said}",
                flush=True,
            )
        self.compare(before, self.snapshot())
        for s, until in list(self.silent):
            if until <= self.step_no:
                s.close()
                self.silent.remove((s, until))
        if self.dashboard.process.poll() is not None:
            self.violation(f"the dashboard exited with {self.dashboard.process.returncode}")
            raise Dead
        if self.step_no % 10 == 0:
            self.probe()
        if self.step_no % 200 == 0:
            self.verify_chain()

    def run(self, steps: int, deadline: float | None = None) -> None:
        try:
            while self.step_no < steps:
                if deadline is not None and time.monotonic() > deadline:
                    break
                self.step()
            self.probe()
            self.finish()
        except Dead:
            pass
        finally:
            self.close()

    def verify_chain(self) -> None:
        from undolog import chain

        report = chain.verify(self.db)
        for finding in report.findings[:5]:
            self.violation(f"verify_chain: {finding}")

    def finish(self) -> None:
        """Every request left rejected and every halted session abandoned through the
        dashboard, the agents' sessions ended, worker passes: no session is left in a
        state nobody can end."""
        from undolog import engine

        for sock, _ in self.silent:
            sock.close()
        self.silent.clear()
        approver, operator = self.webs["approver"], self.webs["operator"]
        for _ in range(8):
            self.allow = set()
            before = self.snapshot()
            if self.ready(approver):
                for aid, _sid in self.pending():
                    self.grant(approver, "decide", str(aid))
                    self.send(
                        approver,
                        "POST",
                        "/approvals/decide",
                        "end: reject",
                        data={
                            "csrf": approver.csrf or "",
                            "reject_one": str(aid),
                            f"reason_{aid}": "the fuzz ends",
                        },
                    )
            for s in self.sessions.values():
                if s.pay is not None:
                    self.m_agent_again_of(s)
                with contextlib.suppress(Exception):
                    if self.states().get(s.sid) == "active":
                        engine.complete_session(self.agent_conns[s.who], s.sid)
            self.m_worker()
            if self.ready(operator):
                for sid, state in self.states().items():
                    if state != "halted":
                        continue
                    r = self.page(operator, f"/sessions/{sid}", "end: halted page")
                    found = re.search(r'name="seen" value="([^"]*)"', r.text if r else "")
                    self.grant(operator, "abandon", str(sid))
                    self.send(
                        operator,
                        "POST",
                        f"/sessions/{sid}/abandon",
                        "end: abandon",
                        data={
                            "csrf": operator.csrf or "",
                            "reason": "the fuzz ends",
                            "seen": html.unescape(found.group(1)) if found else "",
                        },
                    )
            self.compare(before, self.snapshot())
            if all(st in TERMINAL for st in self.states().values()):
                break
        for sid, state in self.states().items():
            if state not in TERMINAL:
                left = self.sessions.get(sid)
                who = left.who if left else "?"
                self.violation(f"session {sid} ({who}) is {state} at the end")
        self.verify_chain()
        code = self.dashboard.stop()
        if code not in (0, None):
            self.violation(f"the dashboard exited with {code} when stopped")
        log = self.dashboard.logfile.read_text(encoding="utf-8", errors="replace")
        if "Traceback" in log or "Exception in ASGI application" in log:
            at = log.find("Traceback")
            self.violation(f"the dashboard's log holds a traceback: {log[max(at, 0) :][:1500]}")
        for line in log.split("\n"):
            if line.startswith("FORGED") or not all(c.isprintable() for c in line):
                self.violation(
                    f"the dashboard's log holds a line an agent or visitor wrote: {line!r}"
                )
                break

    def m_agent_again_of(self, s: AgentSession) -> None:
        from undolog import engine

        assert s.pay is not None
        step, args = s.pay
        conn = self.agent_conns[s.who]
        with contextlib.suppress(Exception):
            call = engine.intercept(conn, s.sid, step, "pay", "irreversible", args)
            if call.action == "rejected":
                s.pay = None
                if engine.session_state(conn, s.sid) == "active":
                    engine.fail_session(conn, s.sid, "rejected at the end")
            elif call.action == "execute" and call.effect_id is not None:
                row = self.db.execute(
                    "SELECT approval_id FROM undolog.undolog_approval_requests "
                    "WHERE effect_id = %s",
                    (call.effect_id,),
                ).fetchone()
                if row is not None:
                    self.paid[uuid.UUID(str(row[0]))] += 1
                engine.commit(conn, call.effect_id, {"paid": True})
                s.pay = None

    def close(self) -> None:
        for s, _ in self.silent:
            s.close()
        self.dashboard.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for web in self.webs.values():
            web.http.close()
        self.bare.close()
        for conn in self.agent_conns.values():
            conn.close()
        self.db.close()


def fuzz(
    dsn: str, seed: int, steps: int, trace: bool = False, deadline: float | None = None
) -> Fuzz:
    """One seed's run against the engine at ``dsn`` (a database of its own)."""
    # the walks' own log of a compensation that fails on purpose, quiet for the run only:
    # the suite runs this in a worker whose later tests read undolog's log (caplog)
    logger = logging.getLogger("undolog")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with tempfile.TemporaryDirectory(prefix="fuzz-dash-") as tmp:
            f = Fuzz(dsn, seed, Path(tmp), trace)
            f.run(steps, deadline)
            if f.violations and trace:
                print((Path(tmp) / "dashboard.log").read_text()[-20000:])
            return f
    finally:
        logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    seeds = Seeds(fuzz_arguments((__doc__ or "").split("\n\n")[0], 300, argv), "fuzzdash")
    counts: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[str] = collections.Counter()
    known: collections.Counter[str] = collections.Counter()
    for f in seeds.run(fuzz):
        counts.update(f.counts)
        statuses.update(f.statuses)
        known.update(f.known)
    print("moves:", dict(sorted(counts.items())))
    print("answers, by request and status:")
    for kind, n in sorted(statuses.items()):
        print(f"  {n:5} {kind}")
    print("counted apart:")
    for kind, n in known.most_common():
        print(f"  {n:5} {kind}")
    return seeds.done()


if __name__ == "__main__":
    sys.exit(main())
