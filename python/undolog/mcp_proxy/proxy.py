"""The MCP proxy: an MCP server in front of upstream MCP servers, journaling through UndoLog.

Sessions. Every MCP client session is one UndoLog session, begun at its first journaled
call. The proxy never takes a session id from a client: every proxy session belongs to the
proxy's one login, so an id a client could name would let it write into, and end, another
agent's session. Instead the proxy gives each session an unguessable handle of its own
(returned in every journaled call's result ``_meta["undolog/session"]``); a client resumes
its session by sending that handle back in a request's ``_meta["undolog/session"]``. While
the connection the handle was given to lives, only that connection may use it; after it
ended (or the proxy restarted) the handle, a secret only its client was told, resumes the
session on a new connection. The database keeps only the handle's SHA-256 (in the
session's metadata), so the proxy can recognise it after a restart. Otherwise a
handshake-era connection (stdio, or a streamable-HTTP ``Mcp-Session-Id``) gets a session of
its own, a 2026-era stdio process one session for its lifetime, and a 2026-era HTTP
request (stateless) with no handle a new session. When the connection (or the stdio
process) ends, its sessions complete; a session whose last call's outcome is unknown is
failed instead and its compensations run. A session failed from outside
(``undolog sessions rollback``) is walked by the proxy as soon as it notices (its next call
or heartbeat) and by ``undolog worker --mcp-config FILE`` in any case.

The policy may draw the boundary elsewhere (``session_boundary``): at an idle gap (the
session ends once no call came for ``session_idle_seconds``; the connection's next call
begins a new one), or per conversation (``_meta["undolog/conversation"]``, scoped to the
connection). An upstream with ``instances = "per_session"`` gets a process of its own for
each session, started at its first call and closed when the session has ended (after its
undo walk, which runs its compensations on that process).

Step index (part of the call signature, so it must come out the same when a client
replays its session after a restart): the number of times the same call (same tool, same
canonical arguments) was made before in the session. It does not depend on the order of
different calls, nor on SAFE calls. A COMPENSABLE call that failed does not use up its
number: made again, it is the same journaled call, retried. An IRREVERSIBLE call is always
number 0: making the same irreversible call again asks about the same call (its approval,
then its one execution); to do the same irreversible thing twice, vary an argument.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import logging
import re
import secrets
import select
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

import mcp_types as types
import psycopg
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from psycopg import pq
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from undolog import aapprovals, aclient, aengine, asaga, engine, walk
from undolog._conninfo import apin_search_path, pin_search_path
from undolog.approvals import CHANNEL
from undolog.client_common import _heartbeat_interval
from undolog.engine_common import check_step_index
from undolog.errors import (
    InvalidArgument,
    InvalidStateTransition,
    LateResult,
    NothingToUndo,
    PayloadTooLarge,
    PermissionDenied,
    SessionNotActive,
    SignatureError,
    UndoLogError,
    UnknownTool,
)
from undolog.mcp_proxy.metrics import ProxyMetrics, UpstreamError
from undolog.mcp_proxy.policy import (
    RESERVED_UPSTREAM,
    MappingError,
    Policy,
    ToolPolicy,
    _walk_path,
    resolve,
    result_value,
    unportable_name,
)
from undolog.mcp_proxy.upstream import (
    OutcomeUnknown,
    ResultUnreadable,
    UpstreamConnection,
    UpstreamDown,
)
from undolog.queries import QUERIES
from undolog.signature import canonical_json, check_storable, signed_call

log = logging.getLogger("undolog.mcp_proxy")

SESSION_META_KEY = "undolog/session"  # the proxy's handle, never a session id alone
# A handle is its session's id, this, then a secret: the proxy finds the session by its
# id after a restart (a lookup by hash alone read every session of its login).
HANDLE_SEPARATOR = "."
# The handles an older proxy made: secrets.token_urlsafe(32), nothing else.
UNNAMED_HANDLE = re.compile(r"[A-Za-z0-9_-]{43}")
# How often a session whose client left while a call of it waited for a person's
# decision reads its state, to end it once decided (McpProxy._end_once_decided)
DECISION_POLL_SECONDS = 1.0
# The proxy's own tool, when the policy lists it (proxy.undo_last_tool)
UNDO_LAST_TOOL = "undolog__undo_last"
# Under undo_last_tool = "irreversible", each undo is journaled as an IRREVERSIBLE call of
# this tool (registered by the proxy; a rejection keeps the session), so that it is held
# for a human's approval on the very path the upstreams' irreversible calls take.
# An upstream may not take that name (policy.RESERVED_UPSTREAM).
UNDO_LAST_UPSTREAM, UNDO_LAST_JOURNALED = RESERVED_UPSTREAM, "undo_last"
# The client's name for a conversation (session_boundary = "conversation"): scoped to its
# own connection, so naming another client's conversation reaches nothing of it.
CONVERSATION_META_KEY = "undolog/conversation"
RAW_SESSION_META_KEY = "undolog/session_id"  # refused: a client may not name a session id
UNDO_META_KEY = "undolog/undo_id"
SAFE_CALLS_SLOT = "undolog.safe_calls"  # a client's SAFE calls in flight (over HTTP)
# a client's irreversible calls ask one at a time (McpProxy._ask): its count of pending
# approval requests is then exact against proxy.max_pending_approvals_per_client
ASKING_SLOT = "undolog.asking"
PROGRESS_EVERY = 2.0  # seconds between progress notifications while a call is held
# undolog__undo_last answers within client_timeout_seconds less this share of it (at
# least UNDO_ANSWER_MARGIN s): past that, that its undo is running (it goes on), so that
# the client is answered before it gives up (and its model makes the undo again)
UNDO_ANSWER_SHARE, UNDO_ANSWER_MARGIN = 0.1, 2.0
# a walk waits for its session's late answers at most late_answer_seconds and this (the
# time to record an answer that came at the last moment)
LATE_RECORD_SECONDS = 5.0
# where a handshake-era connection's logging/setLevel is kept (server.py sets it): the
# least level of the notifications/message it is sent (none set: every level)
LOG_LEVEL_SLOT = "undolog.log_level"
LATE_NOTICE_LEVEL = "notice"
NOTICE_ARGS_LIMIT = 4096  # a late-answer notice carries the call's arguments up to this
_LOG_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # least severe first
COMPENSATION_PREFIX = "mcp:"
APPLICATION_NAME = "undolog-mcp-proxy"
POOL_SIZE = 8  # the proxy's journal connections, besides its one LISTEN connection
# A session in one of these states, its undo (if any) of the whole session, takes no call
# again: its connection's next call without a handle starts a new one (McpProxy._retire)
SESSION_OVER = frozenset({"completed", "failed", "compensating", "compensated", "halted"})
RETIRED_END_POLL = 0.05  # seconds between looks for a retired session's calls in flight
# A session end's last step (complete, or fail and walk) that the journal could not take
# (a connection broken, the database restarting) is tried again after these pauses, the
# session's heartbeat beating meanwhile; then it is kept for close() to try once more.
CONCLUDE_RETRY_PAUSES = (0.5, 1.0, 2.0)
_T = TypeVar("_T")


def _still_open(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection is still open, without a round trip: a connection the
    server ended meanwhile (a restart, ``pg_terminate_backend``) has its end of file (and
    the server's FATAL notice) waiting on its socket, read here without blocking."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.status != pq.ConnStatus.OK:
        return False
    try:
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN)
        # the FATAL notice is read first, the end of file on the next read
        for _ in range(8):
            if not poller.poll(0):
                break
            pgconn.consume_input()  # OperationalError: the server closed it
    except (psycopg.Error, OSError):
        return False
    return pgconn.status == pq.ConnStatus.OK


class JournalPool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    """The proxy's pool, which never hands out a connection the server has ended while
    it sat idle. The plain pool gave each of them to the next call, which failed: after a
    database restart, as many calls as the pool held connections were refused (and a
    result recorded on one was lost: its session was rolled back). The check costs no
    round trip (the pool's own ``check`` callback backs off a second and more after each
    dead connection, which after a restart is every one of them)."""

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        for _ in range(POOL_SIZE + 1):
            conn = await super().getconn(timeout)
            if _still_open(conn):
                return conn
            log.info("a journal connection was ended by the server: replaced")
            await conn.close()
            await self.putconn(conn)  # closed: the pool discards it and makes another
        return await super().getconn(timeout)


def compensation_name(upstream: str, tool: str) -> str:
    """The compensation's name in the journal: which upstream tool undoes the call."""
    return f"{COMPENSATION_PREFIX}{upstream}/{tool}"


def journal_name(upstream: str, tool: str) -> str:
    """The tool name journaled (and signed): stable when upstreams are added."""
    return f"{upstream}/{tool}"


def client_connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    """The SDK's Connection of a handshake-era client session (None otherwise): the SDK
    keeps one per client session but offers no public accessor from a lowlevel handler's
    context."""
    return getattr(ctx.session, "_connection", None)


class SessionCapReached(ValueError):
    """A client asked for one session more than the policy lets it have live."""


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _snapshot(result: types.CallToolResult) -> dict[str, Any]:
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("_meta", None)
    return data


def _snapshot_json(result: types.CallToolResult) -> str:
    """_snapshot's JSON, written by pydantic in one pass (the commit sends it as is)."""
    return result.model_dump_json(by_alias=True, exclude_none=True, exclude={"meta"})


def _reduced_snapshot(result: types.CallToolResult, route: Route, why: Exception) -> dict[str, Any]:
    """The journal's record of a result it cannot hold whole: a note, and as structured
    content only the values the compensation's ``result.`` paths read (a replay answers
    this). An error result, as _unreadable_result's: what it holds is not the tool's
    result, so a client must not check it against the tool's output schema (the SDKs
    refuse a success result that breaks it); its note says the call ran."""
    value = result_value(_snapshot(result))
    kept: dict[str, Any] = {}
    comp = route.policy.compensation
    for path in comp.result_paths() if comp else ():
        if not path:
            continue  # the whole result: too big to keep, the walk will say so
        try:
            found = _walk_path(value, path, "result")
        except MappingError:
            continue  # absent from the result too: the walk will say so
        target: Any = kept
        for segment in path[:-1]:
            target = target.setdefault(segment, {}) if isinstance(target, dict) else None
        if isinstance(target, dict):  # a list index is kept as a key: paths still read it
            target[path[-1]] = found
    undone = (
        "undone with its session if that is rolled back"
        if route.policy.tier == "compensable"
        else "IRREVERSIBLE: it is not undone if its session is rolled back"
    )
    shown = json.dumps(kept, ensure_ascii=False)
    note = (
        f"This call ran and took effect: it is journaled as done, and {undone}. Its result "
        f"was not journaled whole ({str(why).splitlines()[0][:200]}), so this answer to the "
        "same call made again is not that result, only the values its undo reads: "
        f"{shown if len(shown) <= 1000 else shown[:1000] + ' (cut)'}. It is not run again."
    )
    return {
        "content": [{"type": "text", "text": note}],
        "structuredContent": kept,
        "isError": True,
    }


def _undo_running(ps: ProxySession, started: int | None = None) -> types.CallToolResult:
    """undolog__undo_last's answer while an undo of the session runs: ``started``, the
    calls this very request is undoing (its answer is due before the client gives up),
    else an earlier undo's (this request undid nothing)."""
    if started is not None:
        what = (
            f"{UNDO_LAST_TOOL}: the undo of the last {started} call(s) was started and is "
            "still running (it may first wait for a late answer of a call it undoes); it "
            "goes on by itself"
        )
    else:
        what = (
            f"{UNDO_LAST_TOOL}: nothing more was undone: an undo of this session is "
            "already running (an earlier undo, which goes on even if its call timed out "
            "or was given up on)"
        )
    return _error(
        f"{what}. Do not make {UNDO_LAST_TOOL} again for it: that would undo more calls "
        "than asked. Until it ends, this session's calls that act are refused, saying the "
        "session is undoing its last calls; once such a call is no longer refused so, the "
        "undo is over: the session goes on, or, if a call could not be undone, its calls "
        "are refused saying so, and a person repairs it (undolog sessions, or the "
        "dashboard)."
    ).model_copy(update={"meta": {SESSION_META_KEY: ps.handle}})


def _texts(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _undone_once(told: types.CallToolResult) -> types.CallToolResult:
    """undolog__undo_last's answer to an approved undo asked again once it was taken up
    here: that undo's answer (``told``: undone, or why not), nothing more undone."""
    return _error(
        f"{UNDO_LAST_TOOL}: nothing was undone by this call: this very undo (same count "
        "and reason) was approved and taken up once already; it is not made twice. What "
        f"it answered then: {_texts(told)}"
    ).model_copy(update={"meta": told.meta})


def _unknown(name: str, why: str, late: float = 0.0) -> types.CallToolResult:
    """The answer to a call that may have acted without its result reaching the proxy, and
    to that same call made again in the session. ``late``: the seconds its answer is still
    awaited (0: it is not)."""
    if late > 0:
        return _error(
            f"{name}: {why}. Its outcome is unknown for now: it will not be run again. The "
            f"proxy waits up to {late:g} s more for the upstream's answer and records it if "
            "it comes: making the same call again then answers that result (or, had it "
            "failed, runs the call again); until then it gets this answer. If no answer "
            "comes, this session will be rolled back when it ends."
        )
    return _error(
        f"{name}: {why}. Its outcome is unknown: it will not be run again (making the same "
        "call again gets this answer), and this session will be rolled back when it ends."
    )


def _unreadable_refusal(exc: ResultUnreadable) -> str | None:
    """What to record when an answer that is no valid result says it is an error
    (``isError``): the upstream's refusal, as a well-formed error result is (the call did
    not act); None when it does not say so (the call ran)."""
    received = exc.received
    if not isinstance(received, dict) or received.get("isError") is not True:
        return None
    content = received.get("content")
    texts = [
        c["text"]
        for c in (content if isinstance(content, list) else [])
        if isinstance(c, dict) and isinstance(c.get("text"), str)
    ]
    said = f": {' '.join(texts)}" if texts else ""
    return f"upstream error{said} ({exc})"[:2000]


def _unreadable_result(name: str, route: Route, exc: ResultUnreadable) -> types.CallToolResult:
    """The record (and the client's answer) of a call that ran and answered what is no
    valid result: a note saying so, and as structured content what the compensation's
    ``result.`` paths read from what came, so that the call stays undoable. An error
    result, so that a client does not check the note against the tool's output schema."""
    kept: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # what came is the upstream's, of any shape
        value = result_value(exc.received)
        if isinstance(value, dict):
            shaped = types.CallToolResult(content=[], structured_content=value)
            kept = _reduced_snapshot(shaped, route, exc)["structuredContent"]
    undone = (
        "undone with its session if that is rolled back"
        if route.policy.tier == "compensable"
        else "IRREVERSIBLE: it is not undone if its session is rolled back"
    )
    note = (
        f"{name} ran, but its result could not be read: {exc}. It is journaled as done, "
        f"with this note, and {undone}. The same call made again next in this session is "
        "this call: it answers this note, without running again."
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=note)],
        structured_content=kept or None,
        is_error=True,
    )


def _told_edit(result: types.CallToolResult, edit: engine.ApprovalEdit) -> types.CallToolResult:
    """An edited call's result, with the edit first in words for the model (who changed
    what, and why) and as data in its meta."""
    note = types.TextContent(type="text", text=edit.note)
    meta = dict(result.meta or {})
    meta["undolog/edit"] = edit.as_dict()
    return result.model_copy(update={"content": [note, *result.content], "meta": meta})


def upstream_error_kind(exc: Exception) -> UpstreamError:
    """How an upstream call failed, as the metrics count it."""
    if isinstance(exc, UpstreamDown):
        return "down"
    if isinstance(exc, OutcomeUnknown):
        return "no_answer"
    return "protocol"


def _result_text(result: types.CallToolResult) -> str:
    """A result's text content, joined (at most 2,000 characters)."""
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))[:2000]


def _error_text(result: types.CallToolResult) -> str:
    """An upstream's error result as the journal records it."""
    return ("upstream error: " + _result_text(result))[:2000]


Outcome = Literal["done", "ran", "failed", "unknown"]


@dataclass
class Route:
    upstream: str
    tool: str
    policy: ToolPolicy
    listed: types.Tool


def build_routes(policy: Policy, upstream: str, tools: dict[str, types.Tool]) -> dict[str, Route]:
    """The routes of an upstream's listed tools (those it does not hide), by exposed name,
    each with its policy: at start and when the upstream lists its tools again."""
    hidden = set(policy.upstreams[upstream].hide)
    routes = {
        policy.exposed_name(upstream, name): Route(
            upstream, name, policy.tier_of(upstream, name), tool
        )
        for name, tool in tools.items()
        if name not in hidden
    }
    shadowed = routes.pop(UNDO_LAST_TOOL, None) if policy.undo_last_tool != "off" else None
    if shadowed is not None:
        # a client sees each name once, and calls by name: the proxy's own tool wins (the
        # operator turned it on), everywhere, and the upstream's is not offered
        # (only a tool of that very name, offered unprefixed: the upstream name that
        # would prefix one to it is reserved, policy.RESERVED_UPSTREAM)
        log.warning(
            "tool %r of upstream %r is not offered: the proxy's own %s (proxy.undo_last_tool "
            '= "%s") has that name, and a client must see each name once; hide it '
            '(upstreams.%s.hide = [%r]), or set undo_last_tool = "off" to offer the '
            "upstream's",
            UNDO_LAST_TOOL,
            upstream,
            UNDO_LAST_TOOL,
            policy.undo_last_tool,
            upstream,
            shadowed.tool,
        )
    for exposed, route in routes.items():
        if (why := unportable_name(exposed)) is not None:
            log.warning(
                "tool %r: some MCP clients and model APIs refuse this name (%s), and may "
                "then refuse every tool of the proxy; hide it (upstreams.%s.hide = [%r]) "
                "or give the upstream a shorter name",
                exposed,
                why,
                upstream,
                route.tool,
            )
    return routes


@dataclass
class ProxySession:
    session_id: uuid.UUID
    # what the client sends back to resume it: its session id, then a secret (the
    # journal keeps the whole handle's hash); empty when made: a new one is drawn
    handle: str = ""
    # the live client connection the handle was given to (None: stdio process, stateless
    # HTTP, or no connection holds it now)
    owner: Any = None
    occurrences: dict[str, int] = field(default_factory=dict)
    began: bool = False
    bindings: int = 0
    holds: int = 0  # irreversible calls of this session held open now
    # its irreversible calls ask one at a time when it has no client (resumed by its
    # handle): McpProxy._ask
    asking: asyncio.Lock = field(default_factory=asyncio.Lock)
    beat: asyncio.Task[None] | None = None
    walking: asyncio.Task[None] | None = None
    begin_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # calls whose outcome is unknown (key -> step): made again, they are the same call
    unknown: dict[str, int] = field(default_factory=dict)
    # the session's own upstream processes (instances = "per_session"), started lazily
    instances: dict[str, UpstreamConnection] = field(default_factory=dict)
    instances_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    retiring: asyncio.Task[None] | None = None
    # the idle boundary: calls running now, when the last one ended, its watcher
    inflight: int = 0
    last_call: float = field(default_factory=time.monotonic)
    idle: asyncio.Task[None] | None = None
    # no longer its connection's current session (it ended at an idle gap, or was rolled
    # back or ended from outside: McpProxy._retire): the next call without a handle starts
    # a new one, and it no longer counts against proxy.max_sessions_per_client
    retired: bool = False
    # whose session it is, for the per-client cap: its connection's state, the stdio
    # process's, or (stateless HTTP, no client identity) the proxy's HTTP slot
    client: Any = None
    ended: bool = False  # ended and not resumed since: not counted, pruned when settled
    # The COMPENSABLE calls' results being recorded while their clients already have the
    # answers (McpProxy._record_later; one task each: a client may run calls of one
    # session in parallel), and what to tell the session's next call when one could not
    # be: that call is then not run.
    recordings: set[asyncio.Task[None]] = field(default_factory=set)
    unrecorded: str | None = None
    # The journaled work of calls whose client gave up on them (notifications/cancelled,
    # or it left) while they ran: it goes on to its end (McpProxy._finish), so that the
    # journal learns what the upstream did; the session's end waits for it. given_up:
    # a COMPENSABLE call's key -> its step and work, so that the same call made again
    # is that call (its recorded result replayed), not a second execution.
    finishing: set[asyncio.Future[Any]] = field(default_factory=set)
    given_up: dict[str, tuple[int, asyncio.Future[Any]]] = field(default_factory=dict)
    # Calls of unknown outcome whose upstream answer is still awaited in the background
    # (McpProxy._late_answer, at most proxy.late_answer_seconds each): the session's end
    # and its walk wait for them, so that an answer that comes is recorded first.
    late: set[asyncio.Task[None]] = field(default_factory=set)
    late_until: dict[str, float] = field(default_factory=dict)  # key -> monotonic deadline
    # the watch of a session its client left undecided (McpProxy._end_once_decided)
    deciding: asyncio.Future[None] | None = None
    # undolog__undo_last's undos in flight here, each a task of the proxy's (from the
    # safe undo's start, or the approval's execute, to its walk's end): another undo
    # asked meanwhile is told at once that one runs, rather than waiting for the journal
    # (the session's row, which the first undo's rollback_last may be waiting for)
    undoing: set[asyncio.Future[Any]] = field(default_factory=set)
    # the answers of the approved undos run here, by the key of their asked arguments:
    # the same undo asked again (its client gave up on it) is told that answer; the
    # journal would otherwise hand the approved call out to run a second time
    undone: dict[str, types.CallToolResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.handle:
            self.handle = f"{self.session_id}{HANDLE_SEPARATOR}{secrets.token_urlsafe(32)}"


class McpProxy:
    """The proxy's state: upstream connections, the tool table, sessions, the journal."""

    def __init__(self, policy: Policy, dsn: str, upstreams: dict[str, UpstreamConnection]) -> None:
        self.policy = policy
        self.dsn = dsn
        self.upstreams = upstreams
        self.routes: dict[str, Route] = {}
        for up_name, up in upstreams.items():
            for exposed, route in build_routes(policy, up_name, up.tools).items():
                if exposed in self.routes:
                    raise ValueError(f"two upstream tools would both be called {exposed!r}")
                self.routes[exposed] = route
        self.sessions: dict[uuid.UUID, ProxySession] = {}
        self.metrics = ProxyMetrics(tuple(upstreams))
        self.metrics.sessions = lambda: sum(1 for ps in self.sessions.values() if ps.began)
        self.by_handle: dict[str, ProxySession] = {}
        # lookups of handles issued before they named their session, one at a time
        self._unnamed_lookup = asyncio.Lock()
        # journal name -> the registration's tool_id, for intercept_tool (see _register)
        self._tool_ids: dict[str, uuid.UUID] = {}
        # a 2026-era stdio process's sessions (no connection object to keep them on)
        self.process_state: dict[str, Any] = {}
        self.http_state: dict[str, Any] = {}  # stateless HTTP's sessions, counted together
        # set by the passthrough: wire a per-session process (roots, notifications) before
        # it starts, as the shared ones are
        self.wire_instance: Callable[[ProxySession, UpstreamConnection], None] | None = None
        self.http = False  # served over streamable HTTP (set by the server)
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = JournalPool(
            dsn,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True, "application_name": APPLICATION_NAME},
            # names resolve in pg_catalog alone (_conninfo): another agent's function in
            # public must not run as this proxy's login
            configure=apin_search_path,
            open=False,
        )
        # One LISTEN connection wakes every held call: a connection per hold let one client
        # open as many PostgreSQL connections as it made irreversible calls at once.
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listening: asyncio.Task[None] | None = None
        self._listen_lock = asyncio.Lock()
        self._held: set[aapprovals.Wakeup] = set()
        self._refreshing: dict[str, asyncio.Lock] = {}  # upstream -> its refresh_lock
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pruning: set[asyncio.Task[None]] = set()
        # every session's late-answer waiters (bounded by proxy.max_late_answers), and the
        # session ends put off until theirs are over
        self._late: set[asyncio.Task[None]] = set()
        self._ending: set[asyncio.Future[Any]] = set()
        # the notices of late results being sent (_tell_late), cancelled by close()
        self._telling: set[asyncio.Task[None]] = set()
        self.closing = False
        # Only the policy's compensations can run: the walk takes the name from the
        # registration the proxy made at start (open), and an upstream tool no policy
        # names as a compensation (a payout, say) is never one, whatever a journal says.
        self.compensations: dict[str, Callable[..., Any]] = {
            compensation_name(r.upstream, r.policy.compensation.tool): UpstreamCompensation(
                self, r.upstream, r.policy.compensation.tool
            )
            for r in self.routes.values()
            if r.policy.tier == "compensable" and r.policy.compensation is not None
        }

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.pool.open(wait=True, timeout=30)
        await self.register_tools()

    async def register_tools(self) -> None:
        """Register every journaled tool of the policy for the proxy's login, with the
        policy's tier and compensation: intercept refuses unregistered tools, and the walk
        runs the registered compensation. A policy that changed a tool's tier or
        compensation is refused (ToolRegistrationMismatch) until an operator retires the
        old registration."""
        async with self.pool.connection() as conn:
            for route in self.routes.values():
                await self._register(conn, route)
            if self.policy.undo_last_tool == "irreversible":
                await self._register(conn, self._undo_route())

    async def _register(self, conn: psycopg.AsyncConnection[Any], route: Route) -> None:
        """Register the route's tool; the answered tool_id is what its calls name
        (intercept_tool), so the engine checks the tool once, not on every call."""
        if route.policy.tier == "safe":
            return
        name = journal_name(route.upstream, route.tool)
        self._tool_ids[name] = await aengine.register_tool(
            conn,
            name,
            route.policy.tier,
            self._descriptor(route) if route.policy.tier == "compensable" else None,
            # a rejection of a tell_model tool keeps the session active
            "continue" if route.policy.on_reject == "tell_model" else "fail_session",
        )

    def refresh_lock(self, upstream: str) -> asyncio.Lock:
        """Held while an upstream's routes follow a listing of its tools: listings are
        followed one at a time, in order, so that an older one (its handling awaits the
        journal) never undoes what a newer one decided."""
        return self._refreshing.setdefault(upstream, asyncio.Lock())

    async def refresh_routes(self, upstream: str, listed: dict[str, types.Tool]) -> None:
        """reroute() under the upstream's refresh_lock."""
        async with self.refresh_lock(upstream):
            await self.reroute(upstream, listed)

    async def reroute(self, upstream: str, listed: dict[str, types.Tool]) -> None:
        """(The caller holds refresh_lock(upstream).)
        The upstream listed its tools again: a tool the policy names keeps its tier; a
        new one gets the policy's default tier (registered in the journal as those at
        start are); a tool gone is no longer offered. A COMPENSABLE tool's compensation
        is checked again, as at start, against the new listing (the tool's schema, or its
        compensation's, may have changed): one that no longer fits is not offered (a call
        would be journaled with an undo that fails on the day it is needed), until a
        listing fits again."""
        schemas = {
            name: {"inputSchema": tool.input_schema, "outputSchema": tool.output_schema}
            for name, tool in listed.items()
        }
        for exposed, route in list(self.routes.items()):
            if route.upstream == upstream and route.tool not in listed:
                del self.routes[exposed]
        for exposed, route in build_routes(self.policy, upstream, listed).items():
            known = self.routes.get(exposed)
            if known is not None and known.upstream != upstream:
                continue  # another upstream's tool has the name
            if route.policy.tier == "compensable" and (
                problems := self.policy.compensation_problems(upstream, route.tool, schemas)
            ):
                if known is not None:
                    del self.routes[exposed]
                log.warning(
                    "tool %s: %s: its compensation no longer fits what upstream %r lists: %s",
                    exposed,
                    "withdrawn, no longer offered" if known is not None else "still not offered",
                    upstream,
                    "; ".join(problems),
                )
                continue
            if known is not None:
                known.listed = route.listed
                continue
            try:
                # a COMPENSABLE tool offered again was registered at start: the same again
                async with self.pool.connection() as conn:
                    await self._register(conn, route)
            except Exception as exc:
                log.warning("new tool %s: not offered, not registered: %s", exposed, exc)
                continue
            if route.policy.tier == "compensable":
                log.warning(
                    "tool %s: offered (again): its compensation fits what upstream %r lists",
                    exposed,
                    upstream,
                )
            self.routes[exposed] = route

    async def close(self) -> None:
        self.closing = True
        # Late answers are not awaited past the proxy's life: their calls stay of unknown
        # outcome (nothing is recorded for them), and the session ends put off for them
        # run now, as without the wait.
        waiting = set(self._late)
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)
        telling = set(self._telling)
        for task in telling:
            task.cancel()
        if telling:
            await asyncio.gather(*telling, return_exceptions=True)
        while self._ending:
            await asyncio.gather(*set(self._ending), return_exceptions=True)
        for ps in list(self.sessions.values()):
            await self.end_session(ps)
        for ps in list(self.sessions.values()):  # a prune may forget one meanwhile
            if ps.walking is not None:
                with contextlib.suppress(Exception):
                    await ps.walking
            if ps.retiring is not None:
                with contextlib.suppress(BaseException):
                    await ps.retiring
            for up in ps.instances.values():  # started after the session's end began
                with contextlib.suppress(Exception):
                    await up.close()
        if self._listening is not None:
            self._listening.cancel()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self.pool.close()

    async def _listen(self) -> None:
        """Start the one LISTEN connection (again, after it broke); holds poll meanwhile."""
        async with self._listen_lock:
            if self._listening is not None and not self._listening.done():
                return
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, application_name=APPLICATION_NAME
                )
                await conn.execute(f"LISTEN {CHANNEL}")
            except Exception as exc:
                log.warning("cannot listen for approval decisions (holds poll): %s", exc)
                return
            self._listener = conn
            self._listening = asyncio.create_task(self._relay(conn))

    async def _relay(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            async for _ in conn.notifies():
                for wake in list(self._held):
                    wake.set()
        except Exception as exc:
            log.warning("the approvals LISTEN connection broke: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                await conn.close()

    # -- the tool list -----------------------------------------------------------------

    def list_tools(self) -> list[types.Tool]:
        out = []
        for exposed, route in self.routes.items():
            tier = route.policy.tier
            note = {
                "safe": "UndoLog tier: SAFE (forwarded as is, not journaled).",
                "compensable": (
                    "UndoLog tier: COMPENSABLE (journaled; undone by "
                    f"{route.policy.compensation.tool if route.policy.compensation else '?'} "
                    "if the session is rolled back)."
                ),
                "irreversible": (
                    "UndoLog tier: IRREVERSIBLE (runs only after a human approves it; "
                    "it may answer that it awaits approval: make the same call again later)."
                ),
            }[tier]
            description = f"{route.listed.description or ''}\n\n{note}".strip()
            out.append(
                route.listed.model_copy(update={"name": exposed, "description": description})
            )
        if self.policy.undo_last_tool != "off":
            out.append(self._undo_route().listed)
        return out

    def _undo_route(self) -> Route:
        """The proxy's own undolog__undo_last, as listed (its description says its tier)
        and, under "irreversible", as journaled."""
        tier = {
            "safe": "UndoLog tier: SAFE (answered by the proxy at once).",
            "irreversible": (
                "UndoLog tier: IRREVERSIBLE (runs only after a human approves it; it may "
                "answer that it awaits approval: make the same call again later; a "
                "rejection undoes nothing and the session goes on)."
            ),
        }.get(self.policy.undo_last_tool, "")
        listed = types.Tool(
            name=UNDO_LAST_TOOL,
            description=(
                "Undo this session's last `count` journaled calls, the latest first, "
                "with their compensations; the session then goes on (a call made "
                "again afterwards is a new call). Stops at an irreversible call "
                f"that may have acted. {tier}"
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "reason": {"type": "string", "minLength": 1, "maxLength": 8192},
                },
                "required": ["count", "reason"],
            },
        )
        # tell_model: registered on_reject "continue", a rejected undo keeps the session
        held = ToolPolicy("irreversible", on_reject="tell_model")
        return Route(UNDO_LAST_UPSTREAM, UNDO_LAST_JOURNALED, held, listed)

    async def _undo_last(
        self, ctx: ServerRequestContext[Any, Any], args: dict[str, Any]
    ) -> types.CallToolResult:
        """undolog__undo_last: rollback_last on the caller's session, then its walk here
        (as for a session failed from outside), answering the session's state."""
        client = self.policy.client_timeout_seconds
        answer_by = time.monotonic() + client - max(UNDO_ANSWER_MARGIN, UNDO_ANSWER_SHARE * client)
        count, reason = args.get("count"), args.get("reason")
        if not isinstance(count, int) or isinstance(count, bool) or not isinstance(reason, str):
            return _error(f"{UNDO_LAST_TOOL}: give count (a whole number) and reason (text)")
        # the bounds the tool lists (as rollback_last has them), checked before a person
        # is asked to approve an undo that could never run
        listed = self._undo_route().listed.input_schema["properties"]
        most, longest = listed["count"]["maximum"], listed["reason"]["maxLength"]
        out_of_bounds = _error(
            f"{UNDO_LAST_TOOL}: nothing was undone: count is how many calls to undo, "
            f"from 1 to {most}, and reason a text of 1 to {longest} characters, not "
            f"blank (given: count {count}, a reason of {len(reason)} characters)"
        )
        if not 1 <= count <= most or len(reason) > longest:
            return out_of_bounds
        # blank as the journal says it (a zero-width space is, which strip() keeps): the
        # journal is asked, which alone defines it
        try:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(QUERIES["is_blank"], {"text": reason})).fetchone()
        except (UndoLogError, psycopg.Error) as exc:
            return _error(f"{UNDO_LAST_TOOL}: nothing was undone: {exc}")
        if row is None or row[0]:
            return out_of_bounds
        try:
            ps = await self.session_for(ctx)
        except (ValueError, UndoLogError, psycopg.Error) as exc:
            return _error(f"{UNDO_LAST_TOOL}: {exc}")
        if not ps.began:
            return _error(f"{UNDO_LAST_TOOL}: this session made no journaled call to undo")
        if ps.undoing or (ps.walking is not None and not ps.walking.done()):
            return _undo_running(ps)
        ps.inflight += 1
        try:
            if self.policy.undo_last_tool == "irreversible":
                result = await self._approved_undo(ctx, ps, count, reason, answer_by)
            else:
                # The undo (rollback_last, then its walk) is a task of the proxy's, which
                # nothing cancels and close() awaits: cut off once rollback_last was sent
                # (the client's notifications/cancelled, its leaving), the request's own
                # task left the session compensating with no walk, every call of its
                # client refused until a worker walked it. Awaited here only until the
                # client's timeout is near: it is answered then that the undo is running.
                undo = self._undo_task(ps, self._undo(ps, count, count, reason, None))
                ps.undoing.add(undo)  # now, not once it runs: a second undo is told
                undo.add_done_callback(ps.undoing.discard)
                if not await self._await_walk(ctx, ps, undo, answer_by):
                    return _undo_running(ps, started=count)
                result = undo.result()
        finally:
            ps.inflight -= 1
            ps.last_call = time.monotonic()
        return result.model_copy(
            update={"meta": {**(result.meta or {}), SESSION_META_KEY: ps.handle}}
        )

    def _undo_task(self, ps: ProxySession, work: Awaitable[_T]) -> asyncio.Future[_T]:
        """An undolog__undo_last's work as a task of the proxy's (_in_background) that the
        session's end waits for too, as for a call whose client gave up on it: ended
        meanwhile, the session would be completed under an undo not yet over."""
        task = self._in_background(work)
        ps.finishing.add(task)
        task.add_done_callback(ps.finishing.discard)
        return task

    async def _undo(
        self,
        ps: ProxySession,
        calls: int,
        count: int,
        reason: str,
        edit: engine.ApprovalEdit | None,
    ) -> types.CallToolResult:
        """(in the background) The undo of ``count`` calls (``calls`` entries of the
        stack for rollback_last, _undo_span) to its end, and its answer: the session's
        state after the walk, or why nothing was undone."""
        refused = await self._undo_to_its_end(ps, calls, reason)
        if isinstance(refused, NothingToUndo):
            return _error(
                f"{UNDO_LAST_TOOL}: nothing was undone: this session has fewer than "
                f"{count} calls left to undo"
            )
        if refused is not None:
            if (await self._standing(ps))[0] == "compensating":
                return _undo_running(ps)  # an undo began meanwhile (or from outside)
            return _error(f"{UNDO_LAST_TOOL}: nothing was undone: {refused}")
        state = await self._state(ps)
        words = {
            "active": f"undid the last {count} call(s); the session goes on",
            "halted": "the undo stopped at a call nothing can undo: a person must act, "
            "and new calls are refused until then",
            "compensating": "the undo is still running (the worker finishes it): new calls "
            "are refused until it has",
        }.get(state, f"the session is {state}")
        result = types.CallToolResult(content=[types.TextContent(type="text", text=words)])
        return result if edit is None else _told_edit(result, edit)

    async def _undo_to_its_end(
        self, ps: ProxySession, calls: int, reason: str
    ) -> UndoLogError | psycopg.Error | None:
        """(undolog__undo_last's, in the background) rollback_last of the session's last
        ``calls``, then the walk, awaited to its end (as the session's walk task, after
        the late answers awaited for the session: a result that comes is the one the
        compensation reads); the journal's refusal instead, nothing undone by it. A
        session found compensating after a refusal is walked too: rollback_last may have
        committed with its answer lost (a connection broken), or another undo began."""
        try:
            async with self.pool.connection() as conn:
                await asaga.rollback_last(conn, ps.session_id, calls, reason)
        except (UndoLogError, psycopg.Error) as exc:
            if (await self._standing(ps))[0] == "compensating":
                self.walk_soon(ps)
            return exc
        await asyncio.wait({self._walk_now(ps)})  # never raises the walk's error
        return None

    async def _approved_undo(
        self,
        ctx: ServerRequestContext[Any, Any],
        ps: ProxySession,
        count: int,
        reason: str,
        answer_by: float,
    ) -> types.CallToolResult:
        """undo_last_tool = "irreversible": the undo journaled as an IRREVERSIBLE call and
        held for a human, as any irreversible call is, then run once approved; the answer
        for the model (undone; held, rejected, refused: nothing undone). Each ask of the
        journal, and once it says execute the undo itself, is a task of the proxy's
        (_asked_undo): a client that gives up on the call once its approval was taken
        (notifications/cancelled, its timeout) cut the request's task off with the
        approved undo not yet begun, never run and, asked again, handed out a second
        time. The request awaits the undo only until ``answer_by`` (it goes on)."""
        route, args = self._undo_route(), {"count": count, "reason": reason}
        key = _call_key(UNDO_LAST_TOOL, args)
        if key is not None and (told := ps.undone.get(key)) is not None:
            # taken up here already: the journal would refuse it in its own words (its
            # entry undone by the rollback it carried), not saying what it did
            return _undone_once(told)
        for _ in range(3):  # await_approval -> (decision) -> execute, at most
            begun: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            asked = self._undo_task(ps, self._asked_undo(ps, route, args, key, begun))
            # (asyncio.wait: a request cancelled here leaves the task running)
            either: set[asyncio.Future[Any]] = {asked, begun}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not asked.done() and not await self._await_walk(ctx, ps, asked, answer_by):
                return _undo_running(ps, started=begun.result())
            icpt = asked.result()
            if isinstance(icpt, types.CallToolResult):
                return icpt
            if icpt.action == "rejected":
                return await self._undo_rejected(icpt.approval_id)
            if icpt.action != "await_approval":  # in_progress, replay: never a second undo
                if key is not None and (told := ps.undone.get(key)) is not None:
                    return _undone_once(told)
                return _error(
                    f"{UNDO_LAST_TOOL}: nothing was undone: this very undo (same count and "
                    f"reason) is {icpt.action.replace('_', ' ')}: it is not made twice"
                )
            assert icpt.approval_id is not None
            if ps.holds >= self.policy.max_holds_per_client:
                return _error(
                    f"NOT UNDONE YET, NOT HELD: the undo waits for a human to approve it "
                    f"(approval {icpt.approval_id}), and this client already has as many "
                    "calls held open as it may (proxy.max_holds_per_client). Make the very "
                    "same call again later to learn the decision."
                )
            ps.holds += 1
            try:
                decision = await self._hold(ctx, icpt.approval_id)
            finally:
                ps.holds -= 1
            if decision is None:
                return _error(
                    f"NOT UNDONE YET: {UNDO_LAST_TOOL} is irreversible here and waits for a "
                    f"human to approve it (approval {icpt.approval_id}). Nothing was undone. "
                    "Make the very same call again (same count and reason) after the "
                    "decision: if approved the undo runs then, once; if rejected you are "
                    "told why. Until the decision, this session's calls that act are "
                    f"refused. (Approvers: undolog approvals approve {icpt.approval_id} "
                    "--by NAME)"
                )
            if decision != "approved":
                return await self._undo_rejected(icpt.approval_id)
        return _error(f"{UNDO_LAST_TOOL}: the journal's answers did not settle; ask again")

    async def _asked_undo(
        self,
        ps: ProxySession,
        route: Route,
        args: dict[str, Any],
        key: str | None,
        begun: asyncio.Future[int],
    ) -> engine.Interception | types.CallToolResult:
        """(in the background) The irreversible undo's intercept: unless the journal says
        execute, what it said (or its refusal, as the answer); approved (execute), the
        undo itself to its end and its answer, kept in ps.undone. ``begun`` is given the
        count of calls being undone once rollback_last is about to be asked."""
        icpt = await self._ask(ps, UNDO_LAST_TOOL, route, args)
        if isinstance(icpt, types.CallToolResult):
            # the journal's refusal (no upstream was asked): its own words
            return _error(f"{UNDO_LAST_TOOL}: nothing was undone: {_result_text(icpt)}")
        if icpt.action != "execute":
            return icpt
        # approved: from here the undo runs once, whatever its client does; the session's
        # other undos asked meanwhile are told it runs
        this = asyncio.current_task()
        assert this is not None
        ps.undoing.add(this)
        this.add_done_callback(ps.undoing.discard)
        if key is not None and (told := ps.undone.get(key)) is not None:
            return _undone_once(told)  # run here already: the journal hands it out again
        answer = await self._approved_undo_run(ps, icpt, args, begun)
        if key is not None:
            ps.undone[key] = answer
        return answer

    async def _approved_undo_run(
        self,
        ps: ProxySession,
        icpt: engine.Interception,
        args: dict[str, Any],
        begun: asyncio.Future[int],
    ) -> types.CallToolResult:
        """The approved undo (the journal said execute) to its end: how many of the
        stack's entries rollback_last is to take (those above the undo's own, the undo's
        own entry, then the approved count of calls), with the approver's edit of the
        count and reason when they made one (what the person approved is what runs, as
        for any edited call); its answer."""
        assert icpt.effect_id is not None
        count, reason = args["count"], args["reason"]
        edit = None
        if icpt.approval_id is not None:  # a person edited the count or reason
            edit = await self._edit(ps, icpt.effect_id)
            refused = await self._undo_edit_refused(icpt.approval_id, edit)
            if refused is not None:
                await self._record(icpt.effect_id, refused)
                return _error(refused)
            assert edit is not None
            count, reason = edit.approved_args["count"], edit.approved_args["reason"]
        span = await self._undo_span(ps, icpt.effect_id, count)
        if isinstance(span, types.CallToolResult):
            return span
        begun.set_result(count)
        return await self._undo(ps, span, count, reason, edit)

    async def _undo_edit_refused(
        self, approval_id: uuid.UUID, edit: engine.ApprovalEdit | None
    ) -> str | None:
        """Why an undo approved with edited arguments is not run (None: it is): its edit
        could not be read, or its count or reason is outside the tool's bounds, a blank
        reason too, as the journal says it, as of an asked undo (the journal checks that
        an edit names the same arguments, not their values)."""
        if edit is None:
            return (
                f"{UNDO_LAST_TOOL} was approved with edited arguments (approval "
                f"{approval_id}) that could not be read: nothing was undone; make the very "
                "same call again"
            )
        listed = self._undo_route().listed.input_schema["properties"]
        count, reason = edit.approved_args.get("count"), edit.approved_args.get("reason")
        if (
            not isinstance(count, int)
            or isinstance(count, bool)
            or not 1 <= count <= listed["count"]["maximum"]
            or not isinstance(reason, str)
            or not 1 <= len(reason) <= listed["reason"]["maxLength"]
            or await self._blank(reason)
        ):
            return (
                f"{UNDO_LAST_TOOL} was approved with edited arguments (approval "
                f"{approval_id}) outside the tool's bounds (count from 1 to "
                f"{listed['count']['maximum']}, a reason of 1 to "
                f"{listed['reason']['maxLength']} characters, not blank): nothing was undone, "
                "and the same call again would find the same approval; to undo, ask with another "
                "reason (a new request)"
            )
        return None

    async def _blank(self, reason: str) -> bool:
        """Whether ``reason`` is blank to the journal (which alone defines it; True when
        it cannot say: an undo's reason must be shown not blank before it runs)."""
        try:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(QUERIES["is_blank"], {"text": reason})).fetchone()
        except (UndoLogError, psycopg.Error):
            return True
        return row is None or bool(row[0])

    async def _undo_span(
        self, ps: ProxySession, effect_id: uuid.UUID, count: int
    ) -> int | types.CallToolResult:
        """The approved undo's own entry is no call to undo: reported as not acting (so
        the walk passes it, and the same undo asked again is refused as undone). What
        ``rollback_last`` counts are calls still to undo (the plan's rows not marked
        ``skip``): those above the entry (calls made after the approval), then ``count``
        below it."""
        await self._record(
            effect_id,
            "approved; the undo itself is the rollback_last that follows, this entry only "
            "carries its approval",
        )
        try:
            async with self.pool.connection() as conn:
                plan = await asaga.rollback_to_plan(conn, ps.session_id, 0)
        except (UndoLogError, psycopg.Error) as exc:
            return _error(f"{UNDO_LAST_TOOL}: nothing was undone: {exc}")
        above = next((i for i, p in enumerate(plan) if p.effect_id == effect_id), None)
        if above is None:
            return _error(f"{UNDO_LAST_TOOL}: nothing was undone: its journal entry is gone")
        return sum(1 for p in plan[:above] if p.action != "skip") + count

    async def _undo_rejected(self, approval_id: uuid.UUID | None) -> types.CallToolResult:
        decision = None
        if approval_id is not None:
            with contextlib.suppress(UndoLogError, psycopg.Error):
                async with self.pool.connection() as conn:
                    decision = await aengine.approval_decision(conn, approval_id)
        if decision is not None and decision.decision == "expired":
            what = "nobody approved it in time (its approval request expired)"
        else:
            who = decision.decided_by if decision is not None else None
            what = f"{who or 'a human'} rejected it"
        reason = decision.reason if decision is not None else None
        why = f"; reason: {reason}" if reason else "; no reason was given"
        return _error(
            f"REJECTED: {UNDO_LAST_TOOL} was not run: {what}{why} (approval {approval_id}). "
            "Nothing was undone; the session goes on and its calls stand."
        )

    # -- sessions ----------------------------------------------------------------------

    async def session_for(self, ctx: ServerRequestContext[Any, Any]) -> ProxySession:
        """The UndoLog session of this request (see the module's docstring)."""
        meta = ctx.meta or {}
        meta = meta if isinstance(meta, dict) else {}
        if RAW_SESSION_META_KEY in meta:
            raise ValueError(
                f"_meta[{RAW_SESSION_META_KEY!r}] is refused: the proxy does not take session "
                f"ids from clients; send back the handle it gave you in _meta[{SESSION_META_KEY!r}]"
            )
        handle = meta.get(SESSION_META_KEY)
        conversation = meta.get(CONVERSATION_META_KEY)
        if self.policy.session_boundary != "conversation":
            conversation = None  # the operator did not let clients draw the boundary
        elif conversation is not None and (
            not isinstance(conversation, str) or not 1 <= len(conversation) <= 200
        ):
            raise ValueError(
                f"_meta[{CONVERSATION_META_KEY!r}] must be a string of 1 to 200 characters "
                "naming the conversation (the same for all of its calls)"
            )
        connection = None
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            connection = client_connection(ctx)
        if handle is not None:
            ps = await self._by_handle(handle)
            if ps.owner is not None and ps.owner is not connection:
                # the handle is in use by a live connection: a second one presenting it
                # learned it from somewhere else
                raise ValueError(
                    "this session handle belongs to another client connection; it is refused"
                )
        elif connection is not None:
            ps = self._current(connection.state, conversation)
        elif self.http:
            # stateless HTTP: the client sends the handle back
            ps = self._new_session(client=self.http_state)
        else:
            ps = self._current(self.process_state, conversation)
        if connection is not None and ps.owner is None:
            ps.owner = connection
            ps.bindings += 1
            connection.exit_stack.push_async_callback(self._unbind, ps)
        return ps

    def _current(self, state: dict[str, Any], conversation: str | None) -> ProxySession:
        """The connection's (or stdio process's) current session, or its conversation's:
        a new one when there is none yet or the last one ended at an idle gap."""
        slot = "undolog.session" if conversation is None else f"undolog.conv:{conversation}"
        ps: ProxySession | None = state.get(slot)
        if ps is None or ps.retired:
            ps = state[slot] = self._new_session(client=state)
        return ps

    def current_session(self, ctx: ServerRequestContext[Any, Any]) -> ProxySession | None:
        """The session this request's tool calls would be in, if it exists already (never
        a new one): where a read of a per-session upstream goes."""
        meta = ctx.meta if isinstance(ctx.meta, dict) else {}
        connection = None
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            connection = client_connection(ctx)
        handle = meta.get(SESSION_META_KEY)
        if isinstance(handle, str):
            ps = self.by_handle.get(handle)
            if ps is None or (ps.owner is not None and ps.owner is not connection):
                return None
            return ps
        conversation = meta.get(CONVERSATION_META_KEY)
        if self.policy.session_boundary != "conversation" or not isinstance(conversation, str):
            conversation = None
        slot = "undolog.session" if conversation is None else f"undolog.conv:{conversation}"
        if connection is not None:
            state = connection.state
        elif self.http:
            return None  # stateless: only a handle names a session
        else:
            state = self.process_state
        found: ProxySession | None = state.get(slot)
        return None if found is None or found.retired else found

    def _new_session(self, sid: uuid.UUID | None = None, client: Any = None) -> ProxySession:
        if client is not None:
            # a retired session is ending (its walk, late answers awaited): it takes no
            # call again, so it holds no place (its processes count under
            # proxy.max_upstream_processes until they are closed)
            live = sum(
                1
                for ps in self.sessions.values()
                if ps.client is client and not ps.ended and not ps.retired
            )
            cap = self.policy.max_sessions_per_client
            if live >= cap:
                raise SessionCapReached(
                    f"this client already has {live} live sessions, the most it may "
                    "(proxy.max_sessions_per_client): continue one of them by sending its "
                    f"handle back in _meta[{SESSION_META_KEY!r}], reuse a conversation name, "
                    "or end sessions first (close the connection; with session_boundary = "
                    '"idle" a session ends after session_idle_seconds without a call)'
                )
        ps = ProxySession(sid or uuid.uuid4(), client=client)
        self.sessions[ps.session_id] = ps
        self.by_handle[ps.handle] = ps
        return ps

    def _prune_soon(self, ps: ProxySession) -> None:
        task = asyncio.create_task(self._prune(ps))
        self._pruning.add(task)
        task.add_done_callback(self._pruning.discard)

    async def _prune(self, ps: ProxySession) -> None:
        """Forget an ended session once its walk and its processes are done: its handle
        still resumes it (the journal holds the handle's hash)."""
        for task in (ps.walking, ps.retiring):
            if task is not None:
                with contextlib.suppress(BaseException):
                    await task
        if not ps.ended or ps.inflight or ps.instances or ps.began:
            return  # resumed meanwhile
        if self.sessions.get(ps.session_id) is ps:
            del self.sessions[ps.session_id]
        if self.by_handle.get(ps.handle) is ps:
            del self.by_handle[ps.handle]
        if isinstance(ps.client, dict):
            for slot, held in list(ps.client.items()):
                if held is ps:
                    del ps.client[slot]
        log.info("session %s: ended and forgotten (its handle still resumes it)", ps.session_id)

    async def _by_handle(self, handle: Any) -> ProxySession:
        """The session a handle names: one this proxy issued, or (after a restart) one whose
        metadata holds the handle's hash. Anything else is refused, with no hint why."""
        unknown = ValueError(
            f"unknown session handle in _meta[{SESSION_META_KEY!r}]: send back only the "
            "handle the proxy returned to you, or none to start a new session"
        )
        if not isinstance(handle, str) or not 20 <= len(handle) <= 200:
            raise unknown
        ps = self.by_handle.get(handle)
        if ps is not None:
            return ps
        named, separator, _ = handle.partition(HANDLE_SEPARATOR)
        try:
            named_sid = uuid.UUID(named) if separator else None
        except ValueError:
            raise unknown from None
        hashed = {"handle_sha256": _handle_hash(handle)}
        if named_sid is not None:  # one primary-key probe
            async with self.pool.connection() as conn:
                found = await conn.execute(
                    QUERIES["session_of_handle"], {**hashed, "session_id": named_sid}
                )
                row = await found.fetchone()
        else:  # a handle from before they named their session: a scan, one at a time
            if not UNNAMED_HANDLE.fullmatch(handle):  # not one an older proxy made
                raise unknown
            if self._unnamed_lookup.locked():  # none queue behind a flood of made-up ones
                raise ValueError(
                    f"the proxy is looking up another session handle of the old form in "
                    f"_meta[{SESSION_META_KEY!r}]: send the call again in a moment"
                )
            async with self._unnamed_lookup, self.pool.connection() as conn:
                found = await conn.execute(QUERIES["session_of_unnamed_handle"], hashed)
                row = await found.fetchone()
        if row is None:
            raise unknown
        sid = uuid.UUID(str(row[0]))
        ps = self.sessions.get(sid)
        if ps is None:
            ps = ProxySession(sid, handle=handle)
            self.sessions[sid] = ps
        self.by_handle[handle] = ps
        return ps

    async def _unbind(self, ps: ProxySession) -> None:
        """The connection holding the session went away (a connection exit callback):
        its end runs in a task of the proxy's, not here. The SDK runs a connection's exit
        callbacks under a bound of its own (5 s) and cancels what outlasts it, and an
        end waits for the session's calls given up on, its partial walk, its results
        being recorded: cut short, the session was left active with nobody to end it,
        its heartbeat stopped (the lease's expiry failing it, a worker undoing every
        call its client kept), or forgotten. close() awaits these ends."""
        ps.owner = None
        ps.bindings -= 1
        if ps.bindings <= 0:
            self._in_background(self.end_session(ps, left=True))

    def _in_background(self, ending: Awaitable[_T]) -> asyncio.Future[_T]:
        """A session's end (or the wait before it, or an undolog__undo_last's undo) as a
        task of the proxy's, which nothing cancels and close() awaits."""
        task = asyncio.ensure_future(ending)
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        return task

    async def begin(self, ps: ProxySession) -> None:
        async with ps.begin_lock:
            if ps.began:
                return
            async with self.pool.connection() as conn:
                await aengine.begin_session(
                    conn,
                    ps.session_id,
                    agent=self.policy.agent,
                    metadata={
                        "face": "mcp-proxy",
                        "policy": str(self.policy.path),
                        "handle_sha256": _handle_hash(ps.handle),
                    },
                    lease=_lease(self.policy),
                )
            ps.began = True
            ps.ended = False
            ps.beat = asyncio.create_task(self._heartbeat(ps))

    async def _heartbeat(self, ps: ProxySession) -> None:
        """The binding's heartbeat (aclient.beat), for a session that spans many requests;
        a session failed from outside is walked here as soon as a beat finds it gone."""
        every = _heartbeat_interval(_lease(self.policy))
        while True:
            await asyncio.sleep(every)
            try:
                async with self.pool.connection() as conn:
                    beaten = await aclient.beat(conn, ps.session_id)
            except Exception as exc:  # no connection now: the next beat tries again
                log.warning("session %s: heartbeat failed: %s", ps.session_id, exc)
                continue
            if beaten == "gone":
                self.walk_soon(ps)
                return

    async def end_session(self, ps: ProxySession, left: bool = False) -> None:
        """The client is gone (or the session's idle gap passed): complete its session, or
        fail it and undo its work when the outcome of one of its calls is unknown. Its own
        upstream processes close once its walk, if any, is over.

        A session with calls whose late answer is still awaited ends once they are over
        (in the background, at most proxy.late_answer_seconds): an answer that comes is
        recorded first, so that the session completes if it was the only unknown. Not
        when the proxy is closing: the waits are cancelled then.

        ``left``: the end of a connection that went away (_unbind), which stands down when
        another connection resumed the session (its handle) while this end waited: that
        connection's end ends it."""
        if ps.late and not self.closing:
            self._in_background(self._end_after_late(ps, ps.last_call))
            return
        stood_down = False
        try:
            stood_down = await self._end(ps, left)
        finally:
            if not stood_down:
                self._ended(ps)

    def _ended(self, ps: ProxySession) -> None:
        """(end_session's) Its idle watch stopped, its processes closed after its walk,
        and it is forgotten once that is over."""
        if ps.idle is not None and ps.idle is not asyncio.current_task():
            ps.idle.cancel()
        ps.idle = None
        if ps.instances and (ps.retiring is None or ps.retiring.done()):
            ps.retiring = asyncio.create_task(self._close_instances(ps, dict(ps.instances)))
        ps.ended = True
        if not self.closing:
            self._prune_soon(ps)

    @staticmethod
    async def _late_answers_over(ps: ProxySession, within: float | None = None) -> None:
        """Until no late answer of the session is awaited any more, or ``within`` seconds
        passed (None: no bound)."""
        deadline = None if within is None else time.monotonic() + within
        while ps.late:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                log.warning(
                    "session %s: its walk waited %g s for late answers: it goes on",
                    ps.session_id,
                    within,
                )
                return
            await asyncio.wait(set(ps.late), timeout=left)

    async def _end_after_late(self, ps: ProxySession, last_call: float) -> None:
        await self._late_answers_over(ps)
        while ps.inflight and not self.closing:  # a call resumed it: its answer first
            await asyncio.sleep(RETIRED_END_POLL)
        if not self.closing and ps.last_call != last_call and self._taken_over(ps):
            return  # resumed meanwhile: its next end ends it
        await self.end_session(ps)

    @staticmethod
    def _taken_over(ps: ProxySession) -> bool:
        """Whether a call that resumed the session while its end waited handed the end
        to someone: a live connection holds the session (its end ends it), or the idle
        boundary watches it. A call with no connection of its own (a 2026-era request,
        stateless HTTP) does not: the end still due is the waiting one's."""
        return ps.owner is not None or (ps.idle is not None and not ps.idle.done())

    async def _close_instances(
        self, ps: ProxySession, ending: dict[str, UpstreamConnection]
    ) -> None:
        """Close the processes the session had when it ended, after its walk (which runs
        its compensations on them); a process a resumed session started since stays."""
        if ps.walking is not None:
            with contextlib.suppress(BaseException):
                await ps.walking
        async with ps.instances_lock:
            for name, up in ending.items():
                if ps.instances.get(name) is up:
                    del ps.instances[name]
        for up in ending.values():
            with contextlib.suppress(Exception):
                await up.close()

    async def _end(self, ps: ProxySession, left: bool = False) -> bool:
        """(end_session's) True when it stood down: the connection whose leaving called
        it (``left``) was replaced by another, which resumed the session meanwhile."""
        # the heartbeat goes on while the end waits: a call given up on may run for up to
        # call_timeout_seconds, past the lease, whose expiry would fail the session and
        # have a worker undo every call its client kept
        await self._partial_walk_over(ps)
        while ps.finishing:  # calls whose client gave up on them, run to their end
            await asyncio.wait(set(ps.finishing))
        await self._settle(ps)  # the last result recorded (or known not to be) first
        if left and ps.owner is not None and not self.closing:
            # resumed by another connection while this end waited: completed (or failed,
            # its calls in flight undone) under that connection, it was ended; its own
            # leaving ends it
            return True
        if not ps.began:
            return False
        # the heartbeat beats until the journal has the session's end: an end that fails
        # is tried again, and a session kept for close() must not expire meanwhile (its
        # lease's expiry fails it and a worker undoes every call its client kept)
        beat, ps.beat = ps.beat, None
        ps.began = False  # a later call of the same session id begins it again
        try:
            # the journal's word, shielded: cut short once began is cleared, the session
            # would be left active, forgotten, with nobody to end it
            concluded = await asyncio.shield(self._conclude_retrying(ps))
        finally:
            if beat is not None:
                beat.cancel()
        if concluded is None:
            return True  # resumed by another connection meanwhile: its end ends it
        if not concluded and not ps.began and not self.closing:
            # Kept: still begun, so neither pruned nor begun again by a call resuming it,
            # its heartbeat beating; close() (or the end of a connection that resumes it)
            # tries again. (Closing, there is nobody left to keep it: its lease runs out.)
            ps.began = True
            ps.beat = asyncio.create_task(self._heartbeat(ps))
        return False

    async def _conclude_retrying(self, ps: ProxySession) -> bool | None:
        """_conclude, tried again after each of CONCLUDE_RETRY_PAUSES while the journal
        cannot take it; False when it never could (the session is still active, or
        waits for its walk), logged with what an operator can do; None when a connection
        resumed the session during a pause (it stands down). Once the proxy is
        closing, tried once: a journal that is down makes each try wait for a connection
        (up to the pool's timeout), and the proxy's stop waits for every session's."""
        pauses = () if self.closing else CONCLUDE_RETRY_PAUSES
        last_call = ps.last_call
        tries = 1
        for pause in pauses:
            if await self._conclude(ps):
                return True
            tries += 1
            await asyncio.sleep(pause)
            if self.closing:
                break  # the proxy began to stop meanwhile: one last try, as above
            resumed = ps.began or ps.inflight or ps.last_call != last_call
            if resumed and self._taken_over(ps) and not self.closing:
                # A call sent the session's handle on a new connection meanwhile (it may
                # still be beginning it again, waiting for the session's row as this end
                # did): the session is that connection's, whose end ends it. Tried again
                # now, the end completed it under that connection's calls, or, one of
                # them still executing, failed it and undid every call its client kept.
                log.info(
                    "session %s: resumed by a new connection while its end was tried "
                    "again: that connection's end ends it",
                    ps.session_id,
                )
                return None
        if await self._conclude(ps):
            return True
        rollback = f"`undolog sessions rollback {ps.session_id} --by NAME --reason '...'`"
        if self.closing:
            what = (
                "the proxy is stopping: once the session's lease runs out, `undolog worker "
                f"--mcp-config` fails it and undoes its calls; to undo them now: {rollback}"
            )
        else:
            what = (
                "this proxy keeps its lease and tries again when it stops (SIGTERM): once "
                "the database answers again, stop the proxy to end the session as it should "
                f"end; to end it now by undoing its calls: {rollback}"
            )
        log.error(
            "session %s: its end could not be recorded after %d attempt(s) (the error is "
            "logged above): it stays active; %s (`undolog sessions show %s` shows its calls)",
            ps.session_id,
            tries,
            what,
            ps.session_id,
        )
        return False

    async def _conclude(self, ps: ProxySession, walked: bool = False) -> bool:
        """(_end's) Complete the session, fail and walk it, or keep it until decided;
        False when the journal could not be asked or could not answer (tried again:
        every step reads the session's state first, so a step that took effect with its
        answer lost is not taken twice)."""
        partial_walk = False
        try:
            async with self.pool.connection() as conn:
                for _ in range(2):  # read again once: the state moved between read and act
                    row = await (
                        await conn.execute(QUERIES["session_halt"], {"session_id": ps.session_id})
                    ).fetchone()
                    state, partial = ("unknown", False) if row is None else (str(row[0]), row[3])
                    if state != "active":
                        break
                    try:
                        await aengine.complete_session(conn, ps.session_id)
                        return True
                    except (InvalidStateTransition, SessionNotActive) as exc:
                        # a call whose outcome is unknown (still executing): failed, so
                        # that the walk compensates it, as the binding's sessions do; not
                        # active any more (a partial undo committed meanwhile): read again
                        if await aclient.fail_if_active(conn, ps.session_id, str(exc)):
                            break
                if state == "active":
                    pass  # failed above: its walk below
                elif _undecided(state, bool(partial)) and not self.closing:
                    if state == "compensating":
                        self.walk_soon(ps)  # a partial undo's walk, if none runs here yet
                    self._end_once_decided(ps)
                    return True
                elif state == "compensating" and partial and not walked:
                    # the proxy closing: the partial undo's walk now, then the end (after
                    # the walk the session is active again, with nobody left to end it)
                    partial_walk = True
                elif state not in ("failed", "compensating"):
                    return True
            self.walk_soon(ps)
            if partial_walk and ps.walking is not None:
                await asyncio.wait({ps.walking})
                return await self._conclude(ps, walked=True)
        except (UndoLogError, psycopg.Error, PoolTimeout) as exc:
            log.warning("session %s: ending it failed: %s", ps.session_id, exc)
            return False
        except Exception:
            log.exception("session %s: ending it failed", ps.session_id)
            return False
        return True

    def _end_once_decided(self, ps: ProxySession) -> None:
        """The client left while its session cannot be completed yet: a call of it waits
        for a person's decision (awaiting_approval), or a partial undo of it
        (undolog__undo_last, an operator's rollback_to) is being walked, or halted for a
        person. The session stays this proxy's, its heartbeat kept, and ends once decided:
        completed after an approval (the held call, given up on, did not run) or once the
        partial walk put it back to active (the calls it left standing kept), walked
        after a rejection. It was forgotten, its heartbeat stopped: an approval (or the
        walk's end) put it back to active with no owner, recover() failed it at its
        lease's expiry and a worker undid every call the client had kept
        (bench/fuzz_mcp_proxy.py). A call resuming the session meanwhile from a new
        connection takes it over: that connection's end ends it (not a call with no
        connection: _taken_over). Not while the proxy is closing (as for a proxy that
        crashed, the lease runs out)."""
        ps.began = True  # still begun: neither pruned nor begun again by a resuming call
        ps.beat = asyncio.create_task(self._heartbeat(ps))
        if ps.deciding is None or ps.deciding.done():  # else the watch running goes on
            ps.deciding = self._in_background(self._end_after_decision(ps, ps.last_call))

    async def _end_after_decision(self, ps: ProxySession, last_call: float) -> None:
        while not self.closing:
            await asyncio.sleep(DECISION_POLL_SECONDS)
            if ps.inflight:
                continue  # a call resumed it: looked at again once it answered
            if ps.last_call != last_call and self._taken_over(ps):
                return  # resumed meanwhile: its next end ends it
            state, partial, _ = await self._standing(ps)
            if state == "compensating" and partial:
                self.walk_soon(ps)  # the partial undo's walk, if none runs here yet
            if not _undecided(state, partial) and state != "unknown":
                await self.end_session(ps)
                return

    async def _partial_walk_over(self, ps: ProxySession) -> None:
        """Until the walk running for the session is over, while the session is
        compensating (its heartbeat still beating): an undolog__undo_last walk puts it
        back to active when done, and ending it meanwhile as a whole-session walk would
        leave it active with no owner (recover() failing it at its lease's expiry, a
        worker undoing every call the agent kept). Bounded as the walk is (its late
        answers awaited at most proxy.late_answer_seconds, the walk's own bounds)."""
        while ps.began and ps.walking is not None and not ps.walking.done():
            if await self._state(ps) != "compensating":
                return
            await asyncio.wait({ps.walking})  # never raises the walk's error

    def walk_soon(self, ps: ProxySession) -> None:
        """Run the failed session's undo walk here, in the background (once at a time)."""
        if ps.walking is None or ps.walking.done():
            ps.walking = asyncio.create_task(self._walk_after_late(ps))

    def _walk_now(self, ps: ProxySession) -> asyncio.Task[None]:
        """A walk of what the session has to undo now (undolog__undo_last's), as its walk
        task: after the walk running, if any (which may have passed what is now to undo)."""
        running = ps.walking
        if running is None or running.done():
            ps.walking = asyncio.create_task(self._walk_after_late(ps))
        else:
            ps.walking = asyncio.create_task(self._walk_after(ps, running))
        return ps.walking

    async def _walk_after(self, ps: ProxySession, running: asyncio.Task[None]) -> None:
        # the earlier walk over (its error never raised here); this task's own
        # cancellation is passed on, not swallowed into a walk run anyway
        await asyncio.wait({running})
        await self._walk_after_late(ps)

    async def _await_walk(
        self,
        ctx: ServerRequestContext[Any, Any],
        ps: ProxySession,
        walking: asyncio.Future[Any],
        until: float,
    ) -> bool:
        """Until the walk is over (True), or the monotonic time ``until`` (False), with
        progress notifications every PROGRESS_EVERY s to a client that asked for them (a
        progressToken), as a held call gets (a client may start its request timeout again
        on them; the TypeScript SDK does only with resetTimeoutOnProgress). The walk is
        shielded from this wait: over, or cancelled (the client gave up), asyncio.wait
        leaves the walk running, as the session's."""
        began = time.monotonic()
        while True:
            left = until - time.monotonic()
            if left > 0:
                await asyncio.wait({walking}, timeout=min(PROGRESS_EVERY, left))
            if walking.done():
                return True
            if time.monotonic() >= until:
                return False
            said = (
                "waiting for a late answer of this session before undoing "
                f"(at most {self.policy.late_answer_seconds + LATE_RECORD_SECONDS:g} s)"
                if ps.late
                else "undoing"
            )
            with contextlib.suppress(Exception):  # a client gone meanwhile: the walk goes on
                await ctx.session.report_progress(round(time.monotonic() - began, 1), None, said)

    async def _walk_after_late(self, ps: ProxySession) -> None:
        """The walk, once the late answers still awaited for the session are over: a
        result recorded before the walk takes its call is the one its compensation reads
        (taken, the engine keeps it in the effect's history only, as 'late'). Every walk
        the proxy runs (the session's end, a rollback from outside, undolog__undo_last)
        waits here, at most proxy.late_answer_seconds and the time to record what came:
        each answer awaited is given up on by then."""
        within = self.policy.late_answer_seconds + LATE_RECORD_SECONDS
        await self._late_answers_over(ps, within)
        await self._walk(ps.session_id, self._undoers(ps))

    def _undoers(self, ps: ProxySession) -> dict[str, Callable[..., Any]]:
        """The compensations of this session's walk: a per-session upstream's run on the
        session's own process while it lives (its state is there), else on the shared one."""
        if all(u.instances == "shared" for u in self.policy.upstreams.values()):
            return self.compensations
        return {
            compensation_name(r.upstream, r.policy.compensation.tool): UpstreamCompensation(
                self, r.upstream, r.policy.compensation.tool, instances=ps.instances
            )
            for r in self.routes.values()
            if r.policy.tier == "compensable" and r.policy.compensation is not None
        }

    async def _walk(
        self, session_id: uuid.UUID, compensations: dict[str, Callable[..., Any]]
    ) -> None:
        wait = self.policy.walk_wait_seconds

        def in_thread() -> str | None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                pin_search_path(conn)  # names resolve in pg_catalog only (_conninfo)
                try:
                    return walk.run_walk(conn, session_id, compensations, wait=wait)
                except PermissionDenied:
                    log.warning(
                        "session %s: this login may not run undo walks; "
                        "`undolog worker --mcp-config` (operator role) will",
                        session_id,
                    )
                    return None

        try:
            state = await asyncio.to_thread(in_thread)
            log.info("session %s: undo walk ended %s", session_id, state)
        except Exception:
            log.exception("session %s: undo walk failed", session_id)

    # -- calls -------------------------------------------------------------------------

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], name: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        if name == UNDO_LAST_TOOL and self.policy.undo_last_tool != "off":
            return await self._undo_last(ctx, args)
        route = self.routes.get(name)
        if route is None:
            return _error(f"unknown tool {name!r}")
        if not (self.http and route.policy.tier == "safe"):
            return await self._routed(ctx, name, route, args)
        # over HTTP, where clients share the proxy and its upstreams, a client's SAFE
        # calls in flight are bounded (its journaled calls are, by the journal's pool,
        # its sessions and its holds): past the bound nothing is sent
        state = self._client_state(ctx)
        running: int = state.get(SAFE_CALLS_SLOT, 0)
        cap = self.policy.max_safe_calls_per_client
        if running >= cap:
            self.metrics.call("safe", "refused")
            return _error(
                f"NOT RUN: {name} was not sent: this client already has {running} SAFE calls "
                f"in flight, the most it may (proxy.max_safe_calls_per_client = {cap}). "
                "Nothing was done. Make the call again once one of them has answered."
            )
        state[SAFE_CALLS_SLOT] = running + 1
        try:
            return await self._routed(ctx, name, route, args)
        finally:
            state[SAFE_CALLS_SLOT] -= 1

    def _client_state(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """Where the proxy keeps what is per client (as for max_sessions_per_client): a
        handshake-era connection's state, else the stateless HTTP requests' (one client),
        else the 2026-era stdio process's."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            connection = client_connection(ctx)
            if connection is not None:
                state: dict[str, Any] = connection.state
                return state
        return self.http_state if self.http else self.process_state

    async def _routed(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        route: Route,
        args: dict[str, Any],
    ) -> types.CallToolResult:
        shared = self.policy.upstreams[route.upstream].instances == "shared"
        if shared:
            upstream = self.upstreams[route.upstream]
            if route.policy.tier == "safe":
                return await self._safe(name, route, upstream, args)
            try:
                await upstream.ensure_connected()  # nothing is journaled for a call not sent
            except UpstreamDown as exc:
                # with the handle of the session the call is in, when it has one (no
                # session is begun for a call that cannot be sent), as every other answer
                # of a journaled call carries it
                refused = _error(f"{name} was not run: {exc}")
                current = self.current_session(ctx)
                if current is None:
                    return refused
                return refused.model_copy(update={"meta": {SESSION_META_KEY: current.handle}})
        try:
            ps = await self.session_for(ctx)
        except (ValueError, UndoLogError, psycopg.Error) as exc:
            return _error(f"{name} was not run: {exc}")
        # counted from here, with no await before: the idle watcher never ends a session
        # with a call on its way in
        ps.inflight += 1
        try:
            down: UpstreamDown | None = None
            if not shared:
                try:
                    upstream = await self._instance(ps, route.upstream)
                except UpstreamDown as exc:
                    down = exc
            if down is not None:
                result = _error(f"{name} was not run: {down}")
            elif route.policy.tier == "safe":
                result = await self._safe(name, route, upstream, args)
            elif (unfit := self._unfit(route, upstream)) is not None:
                result = _error(f"{name} was not run: {unfit}")
            else:
                try:
                    await self._finish(ps, self.begin(ps))
                except (UndoLogError, psycopg.Error) as exc:
                    return _error(f"{name} was not run: {exc}")
                if route.policy.tier == "compensable":
                    result = await self._compensable(ps, name, route, upstream, args)
                else:
                    result = await self._irreversible(ctx, ps, name, route, upstream, args)
        finally:
            ps.inflight -= 1
            ps.last_call = time.monotonic()
            self._watch_idle(ps)
        # the handle is how this client (and only it) resumes the session
        return result.model_copy(
            update={"meta": {**(result.meta or {}), SESSION_META_KEY: ps.handle}}
        )

    def _unfit(self, route: Route, upstream: UpstreamConnection) -> str | None:
        """Why a COMPENSABLE call is not to be journaled on ``upstream``: what it lists now
        (a restart, a session's own process) changed the tool away from what its
        compensation reads; None when the tool is as offered, or its compensation still
        fits. Checked before anything is journaled: a call would run with an undo that
        fails on the day it is needed."""
        if route.policy.tier != "compensable":
            return None
        now = upstream.tools.get(route.tool)
        if now is not None and (now.input_schema, now.output_schema) == (
            route.listed.input_schema,
            route.listed.output_schema,
        ):
            return None
        problems = self.policy.compensation_problems(route.upstream, route.tool, upstream.listing())
        if not problems:
            return None
        return (
            f"upstream {route.upstream!r} now lists {route.tool} so that its compensation "
            f"cannot be filled ({'; '.join(problems)}): nothing was done, and the tool is no "
            "longer offered until the upstream lists it as before"
        )[:2000]

    async def _safe(
        self, name: str, route: Route, upstream: UpstreamConnection, args: dict[str, Any]
    ) -> types.CallToolResult:
        """A SAFE call: forwarded as is, nothing journaled."""
        try:
            result = await upstream.call(route.tool, args)
        except (UpstreamDown, OutcomeUnknown, MCPError) as exc:
            self.metrics.call("safe", "failed")
            self.metrics.upstream_error(route.upstream, upstream_error_kind(exc))
            return _error(f"{name}: {exc}")
        self.metrics.call("safe", "relayed")
        if result.is_error:
            self.metrics.upstream_error(route.upstream, "error_result")
        return result

    async def _instance(self, ps: ProxySession, upstream: str) -> UpstreamConnection:
        """The session's own process of a per-session upstream, started at its first call
        (UpstreamDown when it will not start)."""
        async with ps.instances_lock:
            conn = ps.instances.get(upstream)
            if conn is None:
                running = sum(len(s.instances) for s in self.sessions.values())
                cap = self.policy.max_upstream_processes
                if running >= cap:
                    raise UpstreamDown(
                        f"{running} per-session upstream processes are running, the most "
                        "the proxy may start (proxy.max_upstream_processes): try again once "
                        "other sessions ended, or ask the operator to raise the cap"
                    )
                conn = UpstreamConnection(
                    self.policy.upstreams[upstream], self.policy.call_timeout_seconds
                )
                if self.wire_instance is not None:
                    self.wire_instance(ps, conn)
                await conn.connect()
                ps.instances[upstream] = conn
                log.info("session %s: started its own %s", ps.session_id, upstream)
        await conn.ensure_connected()
        return conn

    def _watch_idle(self, ps: ProxySession) -> None:
        if self.policy.session_idle_seconds is None:
            return
        if ps.idle is None or ps.idle.done():
            ps.idle = asyncio.create_task(self._idle_watch(ps, self.policy.session_idle_seconds))

    async def _idle_watch(self, ps: ProxySession, gap: float) -> None:
        """End the session once no call came for ``gap`` seconds: the next call without a
        handle starts a new one. A session waiting for a human's decision is kept (the
        client is to ask again after it)."""
        while True:
            await asyncio.sleep(max(ps.last_call + gap - time.monotonic(), 0.05))
            if ps.inflight or time.monotonic() - ps.last_call < gap:
                continue
            if ps.began and await self._state(ps) == "awaiting_approval":
                await asyncio.sleep(min(gap, 5.0))
                continue
            if ps.inflight or time.monotonic() - ps.last_call < gap:
                continue  # a call came while the state was read
            ps.retired = True
            log.info("session %s: ended after %g s without a call", ps.session_id, gap)
            await self.end_session(ps)
            return

    def _descriptor(self, route: Route) -> dict[str, Any]:
        comp = route.policy.compensation
        assert comp is not None
        out: dict[str, Any] = {
            "name": compensation_name(route.upstream, comp.tool),
            "args": {k: v.to_json() for k, v in comp.args.items()},
        }
        if comp.max_attempts is not None:
            out["max_attempts"] = comp.max_attempts
        return out

    async def _intercept_settling(
        self,
        ps: ProxySession,
        step: int,
        route: Route,
        args: dict[str, Any],
    ) -> engine.Interception | types.CallToolResult:
        """The intercept of a call sent while the session's previous result is still being
        recorded, on another connection: the two round trips overlap (the client's next
        call commonly comes before the previous commit's answer). Answers once both
        are done, so that the caller knows whether that result was recorded before this
        call runs."""
        sent = asyncio.ensure_future(self._intercept(ps, step, route, args))
        try:
            await self._settle(ps)
        except BaseException:
            sent.cancel()
            raise
        return await sent

    async def _intercept(
        self,
        ps: ProxySession,
        step: int,
        route: Route,
        args: dict[str, Any],
        signed: tuple[str, str] | None = None,
    ) -> engine.Interception | types.CallToolResult:
        """intercept_tool(), or the tool error to answer when the journal refuses the call.
        The binding's pipelined path (engine.HotCall): the tool named by its registration,
        the args' canonical JSON cut from the bytes signed, a prepared statement, no
        adaptation of the parameters. ``signed``: signed_call()'s answer for these args
        when the caller computed it already (an irreversible call's pending check)."""
        tool = journal_name(route.upstream, route.tool)
        try:
            check_step_index(step)
            signature, args_json = signed or signed_call(ps.session_id, step, tool, args)
            check_storable(args)

            def call_of(tool_id: uuid.UUID) -> engine.HotCall:
                return engine.HotCall(ps.session_id, tool_id, step, args_json, signature)

            async with self.pool.connection() as conn:
                if tool not in self._tool_ids:
                    await self._register(conn, route)
                try:
                    return await aengine.intercept_hot(conn, call_of(self._tool_ids[tool]))
                except UnknownTool:
                    # retired by an operator since: registered again once, as the
                    # decorator does (a changed definition is refused, not replaced)
                    await self._register(conn, route)
                    return await aengine.intercept_hot(conn, call_of(self._tool_ids[tool]))
        except SessionNotActive as exc:
            state, partial, stopped = await self._standing(ps)
            if state in ("failed", "compensating"):
                self.walk_soon(ps)
            if state in SESSION_OVER and not partial:
                # rolled back (a rejection, an operator) or ended: it takes no call again
                self._retire(ps, f"{state}, a call refused")
                what = {
                    "completed": "it ended",
                    "compensated": "it was rolled back: its undoable calls are undone",
                    "halted": "it was rolled back, and its undo stopped at a call nothing "
                    "can undo (a person must act on it)",
                }.get(state, "it was stopped and its work is being undone")
                # why it was stopped (a rejection's who and reason, an operator's why):
                # the model may not have seen the answer that said so
                why = f" (stopped: {' '.join(stopped.split())[:500]})" if stopped else ""
                return _error(
                    f"not run: session {ps.session_id} is {state}: {what}; it takes no new "
                    f"calls{why}. Your next call made without this session's handle starts "
                    "a new session: make this call again then if it is still wanted."
                )
            if state == "compensating":  # a partial walk: the session goes on after it
                return _error(
                    f"not run: session {ps.session_id} is undoing its last calls "
                    f"({UNDO_LAST_TOOL}); the session goes on once the undo is over: make "
                    "the call again then"
                )
            if state == "awaiting_approval":
                return _error(
                    f"not run: session {ps.session_id} waits for a human to decide on an "
                    "irreversible call; until then its calls that act are refused (make that "
                    "call again to learn the decision)"
                )
            return _error(f"not run: {exc}")
        except SignatureError as exc:
            return _error(f"not run: the arguments cannot be journaled exactly: {exc}")
        except (UndoLogError, psycopg.Error) as exc:
            return _error(f"not run: the journal refused or could not record the call: {exc}")

    async def _ask(
        self, ps: ProxySession, name: str, route: Route, args: dict[str, Any]
    ) -> engine.Interception | types.CallToolResult:
        """An IRREVERSIBLE call's intercept, which asks a person the first time. Every
        client shares the proxy's login, and the engine bounds that login's pending
        requests as a whole (undolog.max_pending_approvals): a client whose sessions have
        proxy.max_pending_approvals_per_client requests pending asks nobody more, so that
        it cannot use up the bound of every other client (its requests stay pending when
        it leaves). A call asked already still finds its own request (made again, it
        learns the decision). The client's calls ask one at a time: the count stays
        exact between two of them asking at once."""
        client = ps.client
        lock = ps.asking if client is None else client.setdefault(ASKING_SLOT, asyncio.Lock())
        async with lock:
            try:  # signed once, for the pending check and the intercept
                signed = signed_call(
                    ps.session_id, 0, journal_name(route.upstream, route.tool), args
                )
            except SignatureError:
                return await self._intercept(ps, 0, route, args)  # which says why
            refused = await self._pending_cap_reached(ps, name, signed[0])
            if refused is not None:
                return refused
            return await self._intercept(ps, 0, route, args, signed)

    async def _pending_cap_reached(
        self, ps: ProxySession, name: str, signature: str
    ) -> types.CallToolResult | None:
        """The answer to an irreversible call not asked because its client's sessions
        have as many requests pending as proxy.max_pending_approvals_per_client, None
        when it may ask (or was asked already: the call's ``signature`` has a request)."""
        cap = self.policy.max_pending_approvals_per_client
        theirs = [ps.session_id]
        if ps.client is not None:
            theirs += [
                other.session_id
                for other in self.sessions.values()
                if other.client is ps.client and other is not ps
            ]
        try:
            async with self.pool.connection() as conn:
                row = await (
                    await conn.execute(
                        QUERIES["client_pending_approvals"],
                        {
                            "session_ids": theirs,
                            "session_id": ps.session_id,
                            "call_signature": signature,
                        },
                    )
                ).fetchone()
        except (UndoLogError, psycopg.Error) as exc:
            return _error(f"not run: the journal could not be read: {exc}")
        assert row is not None
        pending, asked = int(row[0]), bool(row[1])
        if asked or pending < cap:
            return None
        return _error(
            f"NOT RUN, NOT ASKED: {name} is irreversible and needs a human's approval, but "
            f"this client already has {pending} approval requests pending, the most it may "
            f"(proxy.max_pending_approvals_per_client = {cap}). Nothing was done and nobody "
            "was asked. Make this call again once some of them are decided (make those "
            "calls again to learn their decisions)."
        )

    async def _state(self, ps: ProxySession) -> str:
        try:
            async with self.pool.connection() as conn:
                return await aengine.session_state(conn, ps.session_id)
        except Exception:
            return "unknown"

    async def _execute(
        self,
        ps: ProxySession,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
        *,
        wait: bool = True,
        key: str | None = None,
        step: int = 0,
    ) -> tuple[types.CallToolResult, Outcome]:
        """Forward a journaled call and record its outcome; ``wait`` False: a result is
        not recorded here, the outcome is "ran" (the caller records it, _record_later).
        A call that does not answer in time is awaited in the background for
        proxy.late_answer_seconds more (``key`` and ``step``: the call's, in its
        session), within proxy.max_late_answers such calls at once. An answer that is no
        valid result is journaled as done (whatever ``wait``), with a note
        (_unreadable_result), its number given back so that the same call made next is
        this one; or as failed when it says it is an error. Any other failure once the
        call may have been sent leaves its outcome unknown."""
        late = self.policy.late_answer_seconds
        bound = late > 0 and key is not None and len(self._late) >= self.policy.max_late_answers
        if key is None or bound:
            late = 0.0
        try:
            result = await upstream.call(route.tool, args, late_seconds=late)
        except ResultUnreadable as exc:
            # It answered, so it acted (unless what came says it refused): journaled as
            # done with a note, never of unknown outcome, and never run again.
            self.metrics.upstream_error(route.upstream, "protocol")
            if (refused := _unreadable_refusal(exc)) is not None:
                await self._record(effect_id, refused)
                return _error(f"{name}: {refused}"), "failed"
            result = _unreadable_result(name, route, exc)
            ran_unread = True
        except OutcomeUnknown as exc:
            # It may have acted: the effect stays executing, so the walk compensates it
            # (unless its late answer comes: _late_answer records it).
            self.metrics.upstream_error(route.upstream, "no_answer")
            if bound and exc.timed_out:  # past proxy.max_late_answers: not awaited
                self.metrics.late_answer("bound")
            waited = 0.0
            if (
                exc.late is not None
                and key is not None
                and self._await_late(ps, key, step, effect_id, name, route, exc.late)
            ):
                waited = late
            return _unknown(name, str(exc), waited), "unknown"
        except (UpstreamDown, MCPError) as exc:
            self.metrics.upstream_error(route.upstream, upstream_error_kind(exc))
            await self._record(effect_id, f"not run: {exc}"[:2000])
            return _error(f"{name} was not run: {exc}"), "failed"
        except Exception as exc:
            # Anything else, once the call may have been sent: it may have acted, so its
            # outcome is unknown (the effect stays executing; the same call made again is
            # that call, never run twice), as for a call that got no answer.
            log.exception("effect %s: %s: its call failed unexpectedly", effect_id, name)
            self.metrics.upstream_error(route.upstream, "protocol")
            why = f"its answer could not be handled ({type(exc).__name__}: {exc})"[:1000]
            return _unknown(name, why), "unknown"
        else:
            ran_unread = False
        if result.is_error and not ran_unread:
            self.metrics.upstream_error(route.upstream, "error_result")
            await self._record(effect_id, _error_text(result))
            return result, "failed"
        if not wait and not ran_unread:
            return result, "ran"
        unknown = await self._commit(ps, effect_id, name, route, result, answered=False)
        if unknown is None and ran_unread and key is not None:
            # answered with an error, the call is likely made again: made again next, it
            # is this call (its note replayed, not run again), as a call given up on is
            _give_back(ps, key, step)
        return (result, "done") if unknown is None else (unknown, "unknown")

    def _await_late(
        self,
        ps: ProxySession,
        key: str,
        step: int,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        answer: asyncio.Future[types.CallToolResult],
    ) -> bool:
        """Await a timed-out call's answer in the background; False (and the answer given
        up on) past proxy.max_late_answers, or when the proxy is closing."""
        if self.closing or len(self._late) >= self.policy.max_late_answers:
            answer.cancel()
            if not self.closing:
                self.metrics.late_answer("bound")
            return False
        self.metrics.late_answer("awaited")
        # the connection the call came on, the one to tell (if it still owns the session)
        told = ps.owner
        task = asyncio.create_task(
            self._late_answer(ps, key, step, effect_id, name, route, answer, told)
        )
        for tasks in (self._late, ps.late):
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        ps.late_until[key] = time.monotonic() + self.policy.late_answer_seconds
        task.add_done_callback(lambda _: ps.late_until.pop(key, None))
        return True

    @staticmethod
    def _still_unknown(ps: ProxySession, name: str, key: str) -> types.CallToolResult:
        """The answer to a call made again while an identical one is of unknown outcome."""
        until = ps.late_until.get(key)
        left = 0.0 if until is None else max(until - time.monotonic(), 0.1)
        return _unknown(name, "an earlier identical call got no answer", round(left, 1))

    async def _late_answer(
        self,
        ps: ProxySession,
        key: str,
        step: int,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        answer: asyncio.Future[types.CallToolResult],
        connection: Any = None,
    ) -> None:
        """The answer of a call that did not answer in time, recorded if it comes: an
        error result, or a JSON-RPC error (the upstream refused the call: "not run", as
        on the normal path), as the call not having acted (fail), a result committed.
        The engine takes it while the effect is executing (its session active, or failed
        but not yet walked past it): the call is then no longer of unknown outcome, and
        the same call made again replays its result (or, failed, runs again). Once the
        walk has taken the call, the engine keeps what came in the effect's history
        ('late', flagging the session for an operator). No answer in time, the connection
        lost, or the proxy closing: nothing is recorded, the outcome stays unknown. An
        answer that is no valid result is handled as in time (_execute): it acted, so it
        is committed with a note (_unreadable_result), or failed when it says it is an
        error (_unreadable_refusal)."""
        refused: MCPError | None = None
        unreadable: ResultUnreadable | None = None
        try:
            result = await answer
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except MCPError as exc:  # a JSON-RPC error the upstream answered: nothing done
            refused = exc
        except ResultUnreadable as exc:  # it answered (before OutcomeUnknown, its base)
            unreadable = exc
        except Exception as exc:
            log.info("effect %s: no late answer from %s: %s", effect_id, route.upstream, exc)
            self.metrics.late_answer("expired")
            return
        if self.closing:
            return
        if unreadable is not None:
            self.metrics.upstream_error(route.upstream, "protocol")
            if (said := _unreadable_refusal(unreadable)) is not None:
                recorded = await self._record(effect_id, said)
                outcome = "failed"
            else:
                result = _unreadable_result(name, route, unreadable)
                unrecorded = await self._commit(ps, effect_id, name, route, result, answered=False)
                recorded = unrecorded is None
                outcome = "committed"
        elif refused is not None:
            self.metrics.upstream_error(route.upstream, upstream_error_kind(refused))
            recorded = await self._record(effect_id, f"not run: {refused}"[:2000])
            outcome = "failed"
        elif result.is_error:
            self.metrics.upstream_error(route.upstream, "error_result")
            recorded = await self._record(effect_id, _error_text(result))
            outcome = "failed"
        else:
            # (answered=False: what the client was answered is that the outcome is unknown)
            unrecorded = await self._commit(ps, effect_id, name, route, result, answered=False)
            recorded = unrecorded is None
            outcome = "committed"
        if recorded:
            self.metrics.late_answer(outcome)
        log.info(
            "effect %s: the late answer of %s came and was %s",
            effect_id,
            name,
            "recorded" if recorded else "not recorded (see the journal's effect history)",
        )
        if recorded and ps.unknown.get(key) == step:
            del ps.unknown[key]  # the same call made again is that call, now known
        if recorded and connection is not None:
            # Told in a task of its own: this wait's slot (proxy.max_late_answers, and the
            # session's, which its end and its walks wait for) is free as it returns; the
            # proxy's close cancels a notice still being sent.
            telling = asyncio.create_task(
                self._tell_late(ps, connection, key, step, effect_id, name, outcome)
            )
            self._telling.add(telling)
            telling.add_done_callback(self._telling.discard)

    async def _tell_late(
        self,
        ps: ProxySession,
        connection: Any,
        key: str,
        step: int,
        effect_id: uuid.UUID,
        name: str,
        outcome: str,
    ) -> None:
        """Tell the client, while its MCP session is still open, that a call it was
        answered "outcome unknown" got its late answer, recorded: a notifications/message
        (the MCP logging notification, which a client hears through its logging
        callback) at level notice, on the connection's own stream. Only a handshake-era
        connection has a stream to be told on after its request was answered (a 2026-era
        client's log messages ride the request's own answer); a client gone, or one
        whose logging/setLevel asked for less, is not told, and nothing else changes.
        Only ``connection``, the one the call came on, is told, and only while it still
        owns the session (not a connection that took the session over since)."""
        if ps.owner is not connection:
            return
        with contextlib.suppress(Exception):
            wanted = connection.state.get(LOG_LEVEL_SLOT)
            if wanted is not None and _LOG_LEVELS.index(wanted) > _LOG_LEVELS.index(
                LATE_NOTICE_LEVEL
            ):
                return
        state = await self._state(ps)
        if state in ("failed", "compensating"):
            # A rollback may take the whole session or (undolog__undo_last) its last calls
            # only: what it does to this call is not known yet, so it is not said.
            if outcome == "failed":
                then = (
                    "it answered an error, recorded as the call not having acted (nothing "
                    f"of it to undo); the session is {state}, being rolled back"
                )
            else:
                then = (
                    f"its result is now recorded; the session is {state}, being rolled "
                    "back (the whole session, or its last calls): if the rollback reaches "
                    "this call, it is undone with this result; if not, the call stands"
                )
        elif outcome == "failed":
            then = (
                "it answered an error, recorded as the call not having acted: making the "
                "same call again (same tool, same arguments, in this session) runs it again"
            )
        else:
            then = (
                "its result is now recorded: making the same call again (same tool, same "
                "arguments, in this session) returns it, without running it again"
            )
            if state != "active":
                then += f" (the session is {state} now)"
        data: dict[str, Any] = {
            "message": (
                f"Late result: the call of {name} you were answered 'outcome unknown' "
                f"(journal entry {effect_id}, this session's handle in 'session') got its "
                f"answer after all; {then}."
            ),
            "tool": name,
            "effect_id": str(effect_id),
            "step": step,
            "session": ps.handle,
            "outcome": outcome,
        }
        arguments = key.partition("\x00")[2]  # the call's canonical JSON
        if arguments and len(arguments) <= NOTICE_ARGS_LIMIT:
            data["arguments"] = json.loads(arguments)
        params = {"level": LATE_NOTICE_LEVEL, "logger": "undolog.mcp_proxy", "data": data}
        try:
            await asyncio.wait_for(connection.notify("notifications/message", params), 10.0)
        except Exception as exc:  # the client went away meanwhile: it is not told
            log.info("effect %s: the client was not told of its late answer: %s", effect_id, exc)

    async def _commit(
        self,
        ps: ProxySession,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        result: types.CallToolResult,
        *,
        answered: bool,
    ) -> types.CallToolResult | None:
        """Record a call's result: None, or the answer that its outcome is unknown
        (``answered``: the client already has the result)."""
        try:
            try:
                async with self.pool.connection() as conn:
                    # the pipelined path: a prepared statement, the JSON written once
                    await aengine.send_result(
                        conn,
                        "commit",
                        ps.session_id,
                        effect_id,
                        _snapshot_json(result),
                        asynchronous=False,
                        wait=True,
                    )
            except (PayloadTooLarge, InvalidArgument) as exc:
                # It ran and its result is known, but the journal cannot hold it whole
                # (over the payload limit, or a U+0000 jsonb refuses): keep what the
                # compensation reads, so that the call stays undoable, not unknown.
                async with self.pool.connection() as conn:
                    await aengine.commit(conn, effect_id, _reduced_snapshot(result, route, exc))
        except Exception as exc:
            self.metrics.unrecorded_result(
                "late" if isinstance(exc, LateResult) else "error", answered
            )
            return _unknown(name, f"it ran, but the journal could not record its result ({exc})")
        return None

    async def _record_later(
        self,
        ps: ProxySession,
        key: str,
        step: int,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        result: types.CallToolResult,
    ) -> None:
        """The COMPENSABLE call's commit, while its answer is already on its way to the
        client. When it cannot be recorded, the call's outcome is unknown to the journal:
        the same call made again is that call (never run twice), the session's next call
        is refused with the reason, and the session is rolled back when it ends (its
        effect stays executing)."""
        unknown = await self._commit(ps, effect_id, name, route, result, answered=True)
        if unknown is not None:
            ps.unknown[key] = step
            _give_back(ps, key, step)
            ps.unrecorded = f"the result of an earlier call of this session: {_error_text(unknown)}"

    @staticmethod
    async def _settle(ps: ProxySession) -> None:
        """Wait until every COMPENSABLE result of the session sent so far is recorded (or
        known not to be). Shielded: a waiter cancelled meanwhile (its client gave up on
        its own call) does not cancel another call's recording."""
        while ps.recordings:  # each task leaves the set when done (_compensable_call)
            await asyncio.shield(asyncio.gather(*ps.recordings, return_exceptions=True))

    @staticmethod
    async def _finish(ps: ProxySession, work: Awaitable[_T]) -> _T:
        """Journaled work (a begin, an intercept, the upstream call and its record) that
        runs to its end even when the client gives up on its call meanwhile (the SDK then
        cancels the handler): cut short, the journal would keep a call executing whose
        result the upstream gave, or a decision nobody acted on. The session's end waits
        for it."""
        task = asyncio.ensure_future(work)
        ps.finishing.add(task)
        task.add_done_callback(ps.finishing.discard)
        return await asyncio.shield(task)

    async def _unrecorded(self, ps: ProxySession, name: str) -> types.CallToolResult | None:
        """After the session's last result is recorded: the refusal of this call when it
        could not be (once; the session will be rolled back when it ends)."""
        await self._settle(ps)
        if (why := ps.unrecorded) is None:
            return None
        ps.unrecorded = None
        return _error(
            f"{name} was not run: {why}. Its outcome is unknown to the journal: this session "
            "will be rolled back when it ends"
        )

    async def _record(self, effect_id: uuid.UUID, text: str) -> bool:
        """The call did not take effect (aengine.fail, durably). Late (the undo walk had
        taken the call: its lease lapsed), the engine kept the report in the effect's
        history and flagged the session; counted as _commit counts a late result. Answers
        whether the effect now says so."""
        try:
            # the text is the upstream's: a U+0000 in it must not lose the outcome
            error = walk.storable_error(text)
            async with self.pool.connection() as conn:
                await aengine.fail(conn, effect_id, error)
            return True
        except LateResult as late:
            self.metrics.unrecorded_result("late", False)
            log.warning("effect %s: %s", effect_id, late)
        except Exception:
            self.metrics.unrecorded_result("error", False)
            log.exception("effect %s: recording its failure failed", effect_id)
        return False

    async def _compensable(
        self,
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> types.CallToolResult:
        result, outcome = await self._compensable_call(ps, name, route, upstream, args)
        self.metrics.call("compensable", outcome)
        return result

    async def _compensable_call(
        self,
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> tuple[types.CallToolResult, str]:
        """The call's answer, and its outcome as the metrics count it."""
        try:
            key = _key_of(name, args)
        except SignatureError as exc:  # says why: too deep, a number JSON cannot hold, ...
            return _error(f"{name} was not run: its arguments cannot be journaled: {exc}"), (
                "refused"
            )
        if (given_up := ps.given_up.get(key)) is not None:
            # the same call as one whose client gave up on it while it ran: that call
            # again, once it has settled (its recorded result is then replayed)
            await asyncio.wait([given_up[1]])
        overlap = given_up is None and any(not rec.done() for rec in ps.recordings)
        if not overlap and (refused := await self._unrecorded(ps, name)) is not None:
            return refused, "refused"
        given_up = ps.given_up.pop(key, None)
        if key in ps.unknown:
            # The same call as one whose outcome is unknown: it is that call again (as
            # after a restart, where numbering starts over), never a new step to run.
            step = ps.unknown[key]
        elif given_up is not None:
            step = given_up[0]
            ps.occurrences[key] = max(ps.occurrences.get(key, 0), step + 1)
        else:
            step = ps.occurrences.get(key, 0)
            ps.occurrences[key] = step + 1
        work = asyncio.ensure_future(
            self._compensable_step(ps, key, step, overlap, name, route, upstream, args)
        )
        try:
            return await self._to_its_end(ps, "compensable", work)
        except asyncio.CancelledError:
            ps.given_up[key] = (step, work)
            raise

    async def _to_its_end(
        self, ps: ProxySession, tier: str, work: Awaitable[tuple[types.CallToolResult, str]]
    ) -> tuple[types.CallToolResult, str]:
        """_finish for a call that acts upstream: when its client gives up on it, the call
        goes on to its end unanswered and is counted in the metrics then, with its
        outcome (the count otherwise comes with the answer, which it never gets)."""
        task = asyncio.ensure_future(work)
        try:
            return await self._finish(ps, task)
        except asyncio.CancelledError:
            task.add_done_callback(functools.partial(self._count_given_up, tier))
            raise

    def _count_given_up(
        self, tier: str, work: asyncio.Future[tuple[types.CallToolResult, str]]
    ) -> None:
        if not work.cancelled() and work.exception() is None:
            self.metrics.call(tier, work.result()[1])

    async def _compensable_step(
        self,
        ps: ProxySession,
        key: str,
        step: int,
        overlap: bool,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> tuple[types.CallToolResult, str]:
        """The numbered call, journaled and run (see _compensable_call)."""
        if overlap:
            icpt = await self._intercept_settling(ps, step, route, args)
            if (refused := await self._unrecorded(ps, name)) is not None:
                # the previous result could not be recorded: this call is not run, and
                # the journal is told it never took effect
                _give_back(ps, key, step)
                if isinstance(icpt, engine.Interception) and icpt.action == "execute":
                    assert icpt.effect_id is not None
                    await self._record(icpt.effect_id, _error_text(refused))
                return refused, "refused"
        else:
            icpt = await self._intercept(ps, step, route, args)
        if isinstance(icpt, types.CallToolResult):
            _give_back(ps, key, step)
            return icpt, "refused"
        if icpt.action == "replay":
            return types.CallToolResult.model_validate(icpt.result_snapshot), "replayed"
        if icpt.action == "execute":
            assert icpt.effect_id is not None
            durable = self.policy.durable_results
            result, outcome = await self._execute(
                ps, icpt.effect_id, name, route, upstream, args, wait=durable, key=key, step=step
            )
            if outcome == "ran":  # the client's answer does not wait for the journal's
                recording = asyncio.create_task(
                    self._record_later(ps, key, step, icpt.effect_id, name, route, result)
                )
                ps.recordings.add(recording)
                recording.add_done_callback(ps.recordings.discard)
                return result, "executed"
            if outcome == "unknown":
                ps.unknown[key] = step
            if outcome != "done":
                _give_back(ps, key, step)
            return result, {"done": "executed", "unknown": "unknown"}.get(outcome, "failed")
        if icpt.action == "in_progress" and key in ps.unknown:
            return self._still_unknown(ps, name, key), "unknown"
        if icpt.action == "in_progress":
            return _error(
                f"{name}: this very call is running now, or its outcome is unknown (the proxy "
                "stopped while it ran): it will not be run twice; the session will be rolled "
                "back when it ends"
            ), "refused"
        return _error(f"{name}: unexpected journal answer {icpt.action!r}"), "refused"

    async def _irreversible(
        self,
        ctx: ServerRequestContext[Any, Any],
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> types.CallToolResult:
        result, outcome = await self._irreversible_call(ctx, ps, name, route, upstream, args)
        self.metrics.call("irreversible", outcome)
        return result

    async def _irreversible_call(
        self,
        ctx: ServerRequestContext[Any, Any],
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> tuple[types.CallToolResult, str]:
        """The call's answer, and its outcome as the metrics count it (each hold begun is
        counted as it begins)."""
        key = _call_key(name, args) or name
        if (refused := await self._unrecorded(ps, name)) is not None:
            return refused, "refused"
        for _ in range(3):  # await_approval -> (decision) -> execute, at most
            icpt = await self._finish(ps, self._ask(ps, name, route, args))
            if isinstance(icpt, types.CallToolResult):
                return icpt, "refused"
            if icpt.action == "replay":
                replayed = types.CallToolResult.model_validate(icpt.result_snapshot)
                assert icpt.effect_id is not None
                edit = await self._edit(ps, icpt.effect_id)
                return (replayed if edit is None else _told_edit(replayed, edit)), "replayed"
            if icpt.action == "execute":
                assert icpt.effect_id is not None
                edit = None
                if icpt.approval_id is not None:  # a person edited the args: run theirs
                    edit = await self._edit(ps, icpt.effect_id)
                    if edit is None:
                        why = (
                            f"{name} was approved with edited arguments (approval "
                            f"{icpt.approval_id}) that could not be read: not run"
                        )
                        await self._record(icpt.effect_id, why)
                        return _error(f"{why}; make the very same call again"), "failed"
                return await self._to_its_end(
                    ps,
                    "irreversible",
                    self._approved_run(ps, key, icpt.effect_id, name, route, upstream, args, edit),
                )
            if icpt.action == "rejected":
                return await self._rejected(ps, name, route, icpt.approval_id), "rejected"
            if icpt.action == "in_progress" and key in ps.unknown:
                return self._still_unknown(ps, name, key), "unknown"
            if icpt.action == "in_progress":
                return _error(
                    f"{name}: this very call is running now, or its outcome is unknown: it "
                    "will not be run twice"
                ), "refused"
            assert icpt.approval_id is not None
            cap = self.policy.max_holds_per_client
            if ps.holds >= cap:
                return _error(
                    f"NOT RUN YET, NOT HELD: {name} waits for a human to approve it (approval "
                    f"{icpt.approval_id}), and this client already has {cap} irreversible "
                    "calls held open, the most it may (proxy.max_holds_per_client). Nothing "
                    "was done. Make the very same call again later to learn the decision."
                ), "refused"
            ps.holds += 1
            self.metrics.call("irreversible", "held")
            try:
                decision = await self._hold(ctx, icpt.approval_id)
            finally:
                ps.holds -= 1
            if decision is None:
                return _error(
                    f"NOT RUN YET: {name} is irreversible and waits for a human to approve "
                    f"it (approval {icpt.approval_id}). Nothing was done. Make the very same "
                    "call again (same tool, same arguments) after the decision: if approved "
                    "it runs then, once; if rejected you are told so. Until the decision, "
                    "this session's other calls that act are refused. (Approvers: "
                    f"undolog approvals approve {icpt.approval_id} --by NAME)"
                ), "timed_out"
            if decision != "approved":
                return await self._rejected(ps, name, route, icpt.approval_id), "rejected"
        return _error(f"{name}: the journal's answers did not settle; ask again"), "refused"

    async def _approved_run(
        self,
        ps: ProxySession,
        key: str,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
        edit: engine.ApprovalEdit | None,
    ) -> tuple[types.CallToolResult, str]:
        """An approved IRREVERSIBLE call run upstream (with the approver's arguments when
        edited) and recorded: its answer, and its outcome as the metrics count it."""
        run_args = args if edit is None else edit.approved_args
        result, outcome = await self._execute(
            ps, effect_id, name, route, upstream, run_args, key=key, step=0
        )
        if outcome == "unknown":
            ps.unknown[key] = 0
        told = result if edit is None or outcome != "done" else _told_edit(result, edit)
        return told, {"done": "approved", "unknown": "unknown"}.get(outcome, "failed")

    async def _edit(self, ps: ProxySession, effect_id: uuid.UUID) -> engine.ApprovalEdit | None:
        """The edit an approver made to the call's arguments (None: none, or unreadable)."""
        try:
            async with self.pool.connection() as conn:
                return await aengine.approval_edit(conn, ps.session_id, effect_id)
        except (UndoLogError, psycopg.Error) as exc:
            log.warning("effect %s: reading its approval's edit failed: %s", effect_id, exc)
            return None

    async def _rejected(
        self, ps: ProxySession, name: str, route: Route, approval_id: uuid.UUID | None
    ) -> types.CallToolResult:
        if route.policy.on_reject == "tell_model" and approval_id is not None:
            told = await self._tell_model(name, approval_id)
            if told is not None:
                return told
        by, reason, state = None, None, "rejected"
        with contextlib.suppress(Exception):
            async with self.pool.connection() as conn:
                row = await (
                    await conn.execute(QUERIES["approval_outcome"], {"approval_id": approval_id})
                ).fetchone()
                if row is not None:
                    by, reason, state = row
        self.walk_soon(ps)
        who = f" by {by}" if by else ""
        why = f" (reason: {reason})" if reason else ""
        standing, partial, _ = await self._standing(ps)
        if standing in SESSION_OVER and not partial:
            self._retire(ps, f"rolled back ({name} {state})")
            then = (
                "it takes no new calls. Your next call made without this session's handle "
                "starts a new session (the calls undone are not in it: make again those "
                "still wanted)."
            )
        else:  # its state unread: the next call refused says where it stands
            then = "its new calls are refused; start a new session."
        return _error(
            f"REJECTED: {name} was {state}{who}{why} (approval {approval_id}); it did not "
            f"run and never will. The session is rolled back: its undoable calls are undone "
            f"and {then}"
        )

    async def _standing(self, ps: ProxySession) -> tuple[str, bool, str | None]:
        """The session's state in the journal, whether a compensating or halted one is a
        partial walk (undolog__undo_last, rollback_to: it goes on once the undo is over),
        and its error (why it was stopped); ("unknown", False, None) when unreadable."""
        try:
            async with self.pool.connection() as conn:
                row = await (
                    await conn.execute(QUERIES["session_halt"], {"session_id": ps.session_id})
                ).fetchone()
        except Exception:
            return "unknown", False, None
        if row is None:
            return "unknown", False, None
        return str(row[0]), bool(row[3]), None if row[1] is None else str(row[1])

    def _retire(self, ps: ProxySession, why: str) -> None:
        """A session that takes no call again (SESSION_OVER, not a partial walk: a
        rejection or an operator rolled it back, or it ended): no longer its connection's
        (or conversation's) current session, so that the next call without a handle
        starts a new one, as after an idle gap (a desktop client keeps one connection for
        the app's life and sends no handle). A call naming its handle still gets it (and
        is refused by the journal). It ends once no call of it is in flight, its undo
        walk awaited as at any end: its processes and its place under the per-client cap
        are freed."""
        if not ps.retired:
            ps.retired = True
            log.info(
                "session %s: %s: its connection's next call starts a new one", ps.session_id, why
            )
        if ps.ended or self.closing:
            return
        self._in_background(self._end_retired(ps))

    async def _end_retired(self, ps: ProxySession) -> None:
        # (the call that retired it is in flight until it answers; a call that resumed it
        # by its handle since ends too: the journal refuses its calls)
        while ps.inflight and not self.closing:
            await asyncio.sleep(RETIRED_END_POLL)
        if not self.closing and not ps.ended:
            await self.end_session(ps)

    async def _tell_model(self, name: str, approval_id: uuid.UUID) -> types.CallToolResult | None:
        """The rejection as the call's answer, the session going on (the tool is registered
        on_reject 'continue'); None when the engine says the session does not go on."""
        try:
            async with self.pool.connection() as conn:
                decision = await aengine.approval_decision(conn, approval_id)
        except (UndoLogError, psycopg.Error) as exc:
            log.warning("approval %s: reading its decision failed: %s", approval_id, exc)
            return None
        if decision is None or not decision.session_continues:
            return None
        if decision.decision == "expired":
            what = "nobody approved it in time (its approval request expired)"
        else:
            what = f"{decision.decided_by or 'a human'} rejected it"
        why = f"; reason: {decision.reason}" if decision.reason else "; no reason was given"
        result = _error(
            f"REJECTED: {name} did not run and never will: {what}{why} (approval "
            f"{approval_id}). The session goes on: its earlier calls stand and other calls "
            "may be made; choose another course (this same call gets this answer again)."
        )
        # the same facts for a client that reads them rather than the text
        return result.model_copy(
            update={
                "meta": {
                    "undolog/rejection": {
                        "approval_id": str(approval_id),
                        "decision": decision.decision,
                        "decided_by": decision.decided_by,
                        "reason": decision.reason,
                    }
                }
            }
        )

    async def _hold(
        self, ctx: ServerRequestContext[Any, Any], approval_id: uuid.UUID
    ) -> str | None:
        """Wait up to the policy's hold time for a decision (the binding's wait, woken by
        the proxy's one LISTEN, with progress notifications so that the client's request
        timeout starts again); answers the decision or None."""
        hold = self.policy.hold_seconds

        async def progress(waited: float) -> None:
            with contextlib.suppress(Exception):  # a client gone meanwhile: the wait goes on
                await ctx.session.report_progress(
                    round(waited, 1), hold, f"waiting for a human to approve {approval_id}"
                )
            if self._listening is None or self._listening.done():
                await self._listen()  # it broke: listen again (the hold polls meanwhile)

        await self._listen()
        wake = aapprovals.Wakeup()
        self._held.add(wake)
        self.metrics.holds += 1
        try:
            return await aapprovals.wait_for_decision(
                self.pool,  # a connection for each read, never one for the whole hold
                approval_id,
                hold,
                PROGRESS_EVERY,
                listener=wake,
                on_progress=progress,
                progress_every=PROGRESS_EVERY,
            )
        finally:
            self.metrics.holds -= 1
            self._held.discard(wake)


def _undecided(state: str, partial: bool) -> bool:
    """Whether a session in this state cannot be ended yet, and will go on: a call of it
    awaits a person's decision, or a partial undo of it is walked or halted for a person
    (it is active again once that walk is over)."""
    return state == "awaiting_approval" or (partial and state in ("compensating", "halted"))


def _lease(policy: Policy) -> Any:
    from datetime import timedelta

    return timedelta(seconds=policy.lease_seconds)


def _handle_hash(handle: str) -> str:
    return hashlib.sha256(handle.encode()).hexdigest()


def _key_of(name: str, args: dict[str, Any]) -> str:
    """The call's key in its session (its tool and canonical args); SignatureError when
    the args cannot be signed, saying why."""
    return name + "\x00" + canonical_json(args).decode()


def _call_key(name: str, args: dict[str, Any]) -> str | None:
    try:
        return _key_of(name, args)
    except SignatureError:
        return None


def _give_back(ps: ProxySession, key: str, step: int) -> None:
    """A call that never took effect does not use up its occurrence number."""
    if ps.occurrences.get(key) == step + 1:
        ps.occurrences[key] = step


class UpstreamCompensation:
    """A compensation the undo walk runs: one upstream tool, its arguments filled from the
    journal by the stored mapping. Synchronous (the walk runs in a thread); the call itself
    runs on the event loop that owns the upstream connection."""

    def __init__(
        self,
        owner: Any,
        upstream: str,
        tool: str,
        timeout: float = 60.0,
        instances: dict[str, UpstreamConnection] | None = None,
    ) -> None:
        self.owner = owner  # has .upstreams and .loop
        self.upstream = upstream
        self.tool = tool
        self.timeout = timeout
        self.instances = instances  # a session's own processes, read when the call runs

    def __call__(self, call: walk.CompensationCall) -> None:
        args = resolve(
            call.args,
            call_args=call.call_args,
            result=call.result,
            undo_id=str(call.undo_id),
        )
        loop = self.owner.loop
        if loop is None:
            raise RuntimeError("the proxy's event loop is not running")
        conn: UpstreamConnection = (self.instances or {}).get(
            self.upstream
        ) or self.owner.upstreams[self.upstream]
        future = asyncio.run_coroutine_threadsafe(
            conn.call(self.tool, args, meta={UNDO_META_KEY: str(call.undo_id)}), loop
        )
        try:
            result = future.result(self.timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise TimeoutError(f"{self.upstream}/{self.tool} did not answer") from exc
        if result.is_error:
            raise RuntimeError(_error_text(result))
