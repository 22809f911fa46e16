"""Server-side web sessions: who is logged in, and their own database connections.

A person logs in with their PostgreSQL login and password. The dashboard opens two
connections as them at once: one for reads and decisions, one that only LISTENs (so a
page can be woken the moment an approval request appears or is decided). The password
is handed to libpq for those two connections and never stored, logged or written by
the dashboard; a connection that breaks ends the web session (log in again), so the
password is never needed later. The browser holds only a random opaque id (cookie).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from undolog._conninfo import apin_search_path, with_connect_timeout
from undolog.queries import QUERIES

log = logging.getLogger("undolog.dashboard")

ROLES = ("undolog_agent", "undolog_approver", "undolog_operator")
# Seconds a login waits for the database to answer its connection (a DSN or
# PGCONNECT_TIMEOUT that sets one wins).
CONNECT_TIMEOUT = 5
# Web sessions one login may hold at once (a person's browsers and devices): without it one
# login, say an agent's whose password sits in its environment, logging in again and again
# would take every one of the dashboard's max_sessions and lock the approvers out. One more
# login replaces that login's oldest web session (logged out) rather than being refused: a
# person who closed four tabs without logging out must not wait for the idle timeout.
# Several agent logins together still could (25 fill 100): a person of the staff who finds
# the dashboard full takes the place of the oldest agent-only web session (login()).
MAX_SESSIONS_PER_LOGIN = 4
# Cookies of web sessions that a newer login replaced, kept (bounded) only so that the
# login page can tell that browser why it was logged out.
REPLACED_MEMORY = 1000
# The confirmation page of an irreversible approval hands out a one-time nonce, kept here
# and nowhere else: only a page the dashboard served can make the second click, and only
# once, for exactly the requests it restated, and not long after the person read it (a
# page left open overnight asks again rather than approving what may have changed).
CONFIRM_TTL = 600.0
# Confirmation pages one web session may hold open at once; one more forgets the oldest.
MAX_CONFIRMS = 20
# Seconds the end of a web session waits for the query its connection is running (a live
# page's read, a decision, an export), which it has asked the server to cancel, before it
# leaves the connection to be closed at that query's end (WebSession.close).
CLOSE_WAIT = 5.0


# Connections left to be closed when their query ends (WebSession.close, once it gave up
# waiting), until done: the event loop holds only a weak reference to a task. Not awaited
# at shutdown: such a query may never end.
_CLOSING: set[asyncio.Task[None]] = set()


def _in_background(closing: Coroutine[Any, Any, None], name: str) -> None:
    task = asyncio.get_running_loop().create_task(closing, name=name)
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


class LoginRefused(Exception):
    """The database refused the login, or the login holds no UndoLog role."""


@dataclass(frozen=True)
class Roles:
    agent: bool
    approver: bool
    operator: bool

    @property
    def staff(self) -> bool:
        return self.approver or self.operator


@dataclass(eq=False)
class WebSession:
    # Its repr (a log line, a test's failure report) names the person, not the cookie's
    # id, the tokens or the connections: a connection's repr asks libpq about it, and a
    # failure report is written by another thread than the server's, which may be using
    # that connection at that moment (libpq's connections are not thread-safe).
    sid: str = field(repr=False)
    login: str
    roles: Roles
    conn: psycopg.AsyncConnection[Any] = field(repr=False)
    listener: psycopg.AsyncConnection[Any] = field(repr=False)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    last_seen: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: set[asyncio.Event] = field(default_factory=set)
    exports: int = 0  # exports being read or sent (app.EXPORT_PER_SESSION)
    listen_task: asyncio.Task[None] | None = None
    counts: tuple[float, dict[str, int]] | None = None  # (when, sessions per state)
    closed: bool = False
    # nonce of a confirmation page: (the approval ids it restated, when it expires)
    confirms: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict, repr=False)

    @contextlib.asynccontextmanager
    async def db(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The person's connection, one request at a time; none once the web session has
        ended (a request that waited for the connection meanwhile is told that, as a
        request on a closed connection is: psycopg.OperationalError)."""
        async with self.lock:
            if self.closed:
                raise psycopg.OperationalError("the connection is closed: the web session ended")
            yield self.conn

    def confirm_nonce(self, approval_ids: list[str]) -> str:
        """A new one-time nonce for a confirmation page restating ``approval_ids``."""
        now = time.monotonic()
        self.confirms = {k: v for k, v in self.confirms.items() if v[1] > now}
        while len(self.confirms) >= MAX_CONFIRMS:
            del self.confirms[next(iter(self.confirms))]
        nonce = secrets.token_urlsafe(32)
        self.confirms[nonce] = (frozenset(approval_ids), now + CONFIRM_TTL)
        return nonce

    def take_confirm(self, nonce: object, approval_ids: list[str]) -> bool:
        """Whether ``nonce`` is this web session's, unexpired, for exactly ``approval_ids``.
        It is used up either way: a nonce that failed once never works later."""
        if not isinstance(nonce, str):
            return False
        entry = self.confirms.pop(nonce, None)
        if entry is None:
            return False
        ids, expires = entry
        return time.monotonic() < expires and ids == frozenset(approval_ids)

    def wake(self) -> None:
        for event in self.waiters:
            event.set()

    async def close(self) -> None:
        """End the web session: its pages are woken (to say so), and its connections
        closed, never under a query. psycopg's C code holds a connection's libpq handle
        while its query waits for the server, and reads it again each time the waiting
        task wakes (every 0.1 s): a connection closed meanwhile by another task (a newer
        login replacing this web session, a logout in another tab, the idle reaper) was
        read after libpq had freed it, which crashed the process or read another
        connection's bytes as its own. So a query in flight (a live page's read, a
        decision, an export: whoever holds :attr:`lock`) is asked to cancel, and the
        connection is closed once it has ended, within CLOSE_WAIT seconds; a server that
        answers neither leaves it to be closed when that query ends."""
        self.closed = True
        self.wake()
        if self.listen_task is not None:
            self.listen_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.listen_task
        with contextlib.suppress(Exception):
            await self.listener.close()  # only the listening task (ended) read it
        if self.conn.closed:
            return
        if self.lock.locked():
            with contextlib.suppress(Exception):
                await self.conn.cancel_safe(timeout=CLOSE_WAIT)
        try:
            async with asyncio.timeout(CLOSE_WAIT):
                await self._close_conn()
        except TimeoutError:
            log.warning(
                "%s: the database answers neither a query nor its cancel: the connection "
                "is closed when that query ends",
                self.login,
            )
            _in_background(self._close_conn(), f"undolog-close-{self.login}")

    async def _close_conn(self) -> None:
        async with self.lock:  # no query of another task's runs on it any more
            with contextlib.suppress(Exception):
                await self.conn.close()


# What a person's connection takes of the dashboard's DSN: its user and password (and
# where libpq would find one: passfile, service) are the dashboard's, not the person's; a
# client certificate (sslcert, sslkey, its sslpassword) or a Kerberos service
# (krbsrvname) would let the server authenticate the dashboard's host, not the person,
# and a visitor typing the login they name would get in with any password.
NOT_THE_PERSONS = (
    "user",
    "password",
    "passfile",
    "service",
    "sslcert",
    "sslkey",
    "sslpassword",
    "krbsrvname",
)
# libpq 16 and later: sslcertmode=disable offers no client certificate at all, not even
# libpq's default ~/.postgresql/postgresql.crt of whoever runs the dashboard.
SSLCERTMODE_SINCE = 160000


def person_conninfo(dsn: str, login: str, password: str) -> str:
    """The dashboard's DSN (host, port, database) with the person's own credentials, and
    nothing else that could authenticate them: an empty password file (libpq, given no
    password, would otherwise read the one of whoever runs the dashboard, PGPASSFILE or
    ~/.pgpass, and log a visitor in with a password they never typed), no client
    certificate and no Kerberos service (:data:`NOT_THE_PERSONS`). SessionStore.login
    checks, once connected, that the server did ask for the password (so GSSAPI
    encryption, the DSN's gssencmode, is left as it is: it authenticates no one).

    Raises LoginRefused when libpq would not read the login, password and password file
    back as given (a NUL in one ends the string libpq reads: what follows, the password
    and passfile included, would never reach it)."""
    params = conninfo_to_dict(dsn)
    for key in NOT_THE_PERSONS:
        params.pop(key, None)
    extra = {"application_name": "undolog-dashboard"}
    if psycopg.pq.version() >= SSLCERTMODE_SINCE:
        extra["sslcertmode"] = "disable"
    base = with_connect_timeout(
        make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}),
        CONNECT_TIMEOUT,
        **extra,
    )
    own = {"user": login, "password": password, "passfile": os.devnull}
    try:
        conninfo = make_conninfo(base, **own)
        parsed = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:  # a login or password libpq cannot be given
        raise LoginRefused("login refused: wrong login or password") from exc
    if any(parsed.get(key) != value for key, value in own.items()):
        raise LoginRefused("login refused: wrong login or password")
    return conninfo


class LoginThrottle:
    """Failed logins slow the next attempts down, per login and per client address: after
    FREE failures each further one locks the key out for twice as long as the last (up to
    MAX_LOCKOUT seconds). A lockout expires by itself, so a real user is never locked out
    for good, and a success clears the login's and the address's count."""

    FREE = 5
    MAX_LOCKOUT = 300.0
    FORGET_AFTER = 3600.0  # a key with no failure for this long starts afresh

    def __init__(self) -> None:
        self.failures: dict[str, tuple[int, float, float]] = {}  # key: count, until, last
        # one attempt at a time per login: concurrent guesses otherwise all pass the
        # check before the first failure is counted
        self.locks: dict[str, asyncio.Lock] = {}

    def lock(self, login: str) -> asyncio.Lock:
        if len(self.locks) > 10_000:
            self.locks = {k: v for k, v in self.locks.items() if v.locked()}
        return self.locks.setdefault(login, asyncio.Lock())

    def wait_left(self, *keys: str) -> float:
        now = time.monotonic()
        left = 0.0
        for key in keys:
            entry = self.failures.get(key)
            if entry is None:
                continue
            if now - entry[2] > self.FORGET_AFTER:
                del self.failures[key]
                continue
            left = max(left, entry[1] - now)
        return left

    def failed(self, *keys: str) -> None:
        now = time.monotonic()
        if len(self.failures) > 100_000:
            self.failures = {
                k: v for k, v in self.failures.items() if now - v[2] <= self.FORGET_AFTER
            }
        for key in keys:
            count = self.failures.get(key, (0, 0.0, 0.0))[0] + 1
            until = now
            if count >= self.FREE:
                until = now + min(2.0 ** (count - self.FREE), self.MAX_LOCKOUT)
            self.failures[key] = (count, until, now)

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self.failures.pop(key, None)


class KnownBrowsers:
    """The browsers each login logged in from (a random token in a cookie, kept here with
    its login): a browser that logged in as a login is throttled on its own token, not
    by that login's and its address's failures. Those are anyone's to cause: an agent
    reads its requests' decided_by (its approvers' logins), and a wrong password every few
    minutes, from anywhere, kept an approver out of the dashboard for as long as it liked.
    A token lasts SECONDS and dies with the process (the person then logs in as before).
    A login keeps its PER_LOGIN latest tokens; past MAX tokens in all, a new browser is
    not remembered: no login's logins (an agent may log in here too) forget another's."""

    MAX = 10_000
    PER_LOGIN = 20
    SECONDS = 30 * 24 * 3600.0

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, float]] = {}  # token: login, when it was made

    def login_of(self, token: str | None) -> str | None:
        """The login a browser's token was made for, None when it is none of ours (any
        more)."""
        entry = self.tokens.get(token) if token else None
        if entry is None or token is None:
            return None
        if time.monotonic() - entry[1] > self.SECONDS:
            del self.tokens[token]
            return None
        return entry[0]

    def remember(self, login: str, token: str | None) -> str | None:
        """The token of a browser that just logged in as ``login``: its own when it
        already has one for that login, else a new one (None: none can be kept now)."""
        now = time.monotonic()
        if token is not None and self.login_of(token) == login:
            self.tokens[token] = (login, now)  # 30 days from its latest login, as its cookie
            return token
        if len(self.tokens) >= self.MAX:
            self.tokens = {k: v for k, v in self.tokens.items() if now - v[1] <= self.SECONDS}
        mine = [k for k, (who, _) in self.tokens.items() if who == login]
        for old in mine[: max(0, len(mine) - self.PER_LOGIN + 1)]:
            del self.tokens[old]  # this login's oldest
        if len(self.tokens) >= self.MAX:
            return None
        made = secrets.token_urlsafe(32)
        self.tokens[made] = (login, now)
        return made


class SessionStore:
    """Web sessions in this process's memory, closed after ``idle_timeout`` seconds."""

    def __init__(self, dsn: str, idle_timeout: float, max_sessions: int = 100) -> None:
        # NaN would never log anyone out, 0 or less would log everyone out at once
        if not (idle_timeout > 0 and math.isfinite(idle_timeout)):
            raise ValueError(f"idle_timeout must be a positive number of seconds: {idle_timeout}")
        self.dsn = dsn
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self.sessions: dict[str, WebSession] = {}
        # Web sessions ending (SessionStore.end): each closes in a task of its own, which
        # close_all awaits at shutdown.
        self.closing: set[asyncio.Task[None]] = set()
        self.replaced: dict[str, str] = {}  # sid of a replaced web session: why it ended
        # Counting the sessions and adding one must be one step: concurrent logins each
        # counted the others' sessions before any was added, and all got in.
        self._admit = asyncio.Lock()

    async def login(self, login: str, password: str) -> WebSession:
        # (checked again below, once the database said who this is: a login that holds
        # web sessions already replaces its own oldest one even when the dashboard is full)
        holds_some = any(ws.login == login for ws in self.sessions.values())
        if (
            len(self.sessions) >= self.max_sessions
            and not holds_some
            and self._oldest_agent_only() is None
        ):
            raise LoginRefused("too many people are logged in to this dashboard; try later")
        try:
            conninfo = person_conninfo(self.dsn, login, password)
            del password  # only libpq holds it now, for these two connections
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        except psycopg.ProgrammingError as exc:  # what libpq could not be given as typed
            log.info("login refused for %r (not a login libpq reads as typed)", login)
            raise LoginRefused("login refused: wrong login or password") from exc
        except psycopg.OperationalError as exc:
            text = str(exc)
            # the server answered and refused this login (FATAL from PostgreSQL itself)
            refused = (
                "authentication failed",
                "does not exist",
                "not permitted to log in",
                "no password supplied",  # libpq's own words for an empty password
            )
            if any(words in text for words in refused):
                log.info("login refused for %r", login)
                raise LoginRefused("login refused: wrong login or password") from exc
            # not the person's fault: say so (the message names host and port, no secret)
            log.warning("cannot reach the database: %s", text.splitlines()[0] if text else exc)
            raise LoginRefused("the database cannot be reached right now; try again later") from exc
        try:
            self._check_password_used(conn, login)
            await apin_search_path(conn)
            row = await (
                await conn.execute(
                    QUERIES["dashboard_login_roles"],
                    {"agent": ROLES[0], "approver": ROLES[1], "operator": ROLES[2]},
                )
            ).fetchone()
            assert row is not None
            roles = Roles(agent=bool(row[1]), approver=bool(row[2]), operator=bool(row[3]))
            if not (roles.agent or roles.staff):
                raise LoginRefused(
                    f"login {row[0]} holds none of the roles {', '.join(ROLES)}: "
                    "the dashboard has nothing to show it"
                )
            async with self._admit:
                held = [other for other in self.sessions.values() if other.login == row[0]]
                full = len(self.sessions) >= self.max_sessions
                if full and not held:
                    # Agent logins together (a host holding several agents' passwords) may
                    # fill the dashboard, each within its own cap: a person of the staff
                    # then takes the place of the oldest agent-only web session, so that
                    # agents never lock the approvers and operators out of it. Nobody
                    # takes a person's place, and an agent takes nobody's.
                    oldest_agent = self._oldest_agent_only() if roles.staff else None
                    if oldest_agent is None:
                        raise LoginRefused(
                            "too many people are logged in to this dashboard; try later"
                        )
                    # (the notice names nobody: which approver logged in, and when, is
                    # not the agent's to learn)
                    self._replace(
                        oldest_agent,
                        f"You were logged out here to make room for a person of the staff: "
                        f"this dashboard holds at most {self.max_sessions} web sessions, "
                        f"and one of them logged in when all were taken.",
                    )
                elif len(held) >= MAX_SESSIONS_PER_LOGIN or full:
                    # the same count is kept (one out, one in), so this never refuses
                    self._replace(min(held, key=lambda other: other.started))
                listener = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
                try:
                    self._check_password_used(listener, login)
                    # The engine's channel for new requests and decisions (approvals.CHANNEL):
                    # a notification is only a wake-up, pages re-read what changed through
                    # the views, as the person.
                    await listener.execute(QUERIES["listen_approvals"])
                except BaseException:
                    await listener.close()
                    raise
                sid = secrets.token_urlsafe(32)
                ws = WebSession(
                    sid=sid, login=str(row[0]), roles=roles, conn=conn, listener=listener
                )
                self.sessions[sid] = ws
        except BaseException:
            await conn.close()
            raise
        ws.listen_task = asyncio.create_task(self._relay(ws), name=f"undolog-listen-{sid[:6]}")
        log.info("%s logged in", ws.login)
        return ws

    @staticmethod
    def _check_password_used(conn: psycopg.AsyncConnection[Any], login: str) -> None:
        """Raise LoginRefused unless the server asked ``conn`` for the password
        (PQconnectionUsedPassword): under pg_hba.conf's trust, peer, ident, cert or gss
        the server lets the login in without it, and a visitor who typed that login with
        any password would be in. The caller closes ``conn``."""
        if not conn.pgconn.used_password:
            log.warning(
                "login refused for %r: the server let it in without asking for its password "
                "(pg_hba.conf: trust, peer, ident, cert or gss?); a dashboard login needs "
                "password authentication (scram-sha-256, md5 or password)",
                login,
            )
            raise LoginRefused("login refused: wrong login or password")

    def _oldest_agent_only(self) -> WebSession | None:
        """The oldest web session of a login that holds no staff role, if any."""
        agents = [ws for ws in self.sessions.values() if not ws.roles.staff]
        return min(agents, key=lambda ws: ws.started) if agents else None

    def _replace(self, old: WebSession, why: str | None = None) -> None:
        """Log ``old`` out for a newer login of the same person, or (``why`` saying so)
        to make room for a person of the staff: its cookie stops working at once, its
        open pages are told they were logged out, and its login page says why."""
        self.sessions.pop(old.sid, None)
        if len(self.replaced) >= REPLACED_MEMORY:
            del self.replaced[next(iter(self.replaced))]
        self.replaced[old.sid] = why or (
            f"You were logged out here because {old.login} logged in somewhere else with "
            f"{MAX_SESSIONS_PER_LOGIN} web sessions already open (the oldest one ends)."
        )
        self.end(old)
        log.info(
            "%s: oldest web session replaced by a new login%s",
            old.login,
            " (the dashboard was full: room made for the staff)" if why else "",
        )

    def end(self, ws: WebSession) -> None:
        """End ``ws`` now (its cookie opens nothing, a request waiting for its connection
        is told it ended, its pages are woken) and close its connections in the
        background: WebSession.close waits up to twice CLOSE_WAIT for a database that
        answers neither a query nor its cancel, and the person logging in or out, the
        newer login replacing it, or the reaper, must not wait for that."""
        self.sessions.pop(ws.sid, None)
        if ws.closed:
            return  # ended already (a page's request that saw it end logs it out again)
        ws.closed = True
        ws.wake()
        task = asyncio.get_running_loop().create_task(ws.close(), name=f"undolog-close-{ws.login}")
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)

    @staticmethod
    async def _relay(ws: WebSession) -> None:
        """Wake the person's open pages on every notification (its payload is ignored)."""
        try:
            async for _ in ws.listener.notifies():
                ws.wake()
        except psycopg.Error:
            log.warning("%s: the listening connection broke; pages fall back to polling", ws.login)

    def get(self, sid: str | None) -> WebSession | None:
        if not sid:
            return None
        ws = self.sessions.get(sid)
        if ws is None or ws.closed:
            return None
        if time.monotonic() - ws.last_seen > self.idle_timeout or ws.conn.closed:
            self.end(ws)
            return None
        return ws

    def touch(self, ws: WebSession) -> None:
        ws.last_seen = time.monotonic()

    async def logout(self, ws: WebSession) -> None:
        self.end(ws)
        log.info("%s logged out", ws.login)

    async def reap(self) -> None:
        """End idle web sessions (their connections close in the background: one stuck
        close must not hold up the others, nor the next reap)."""
        now = time.monotonic()
        for ws in list(self.sessions.values()):
            if now - ws.last_seen > self.idle_timeout or ws.conn.closed:
                self.end(ws)
                log.info("%s: web session ended (idle)", ws.login)

    async def close_all(self) -> None:
        """At shutdown: end every web session, and wait for every closing (each at most
        twice CLOSE_WAIT, all at once) so that no connection is left to the process's end."""
        for ws in list(self.sessions.values()):
            self.end(ws)
        while self.closing:
            await asyncio.gather(*self.closing, return_exceptions=True)
