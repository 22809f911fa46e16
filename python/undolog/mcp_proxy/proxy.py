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
import hashlib
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import psycopg
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from psycopg_pool import AsyncConnectionPool

from undolog import aengine, engine, walk
from undolog.approvals import CHANNEL, DECISIONS
from undolog.errors import (
    InvalidArgument,
    InvalidStateTransition,
    PayloadTooLarge,
    PermissionDenied,
    SessionNotActive,
    SignatureError,
    UndoLogError,
)
from undolog.mcp_proxy.policy import (
    MappingError,
    Policy,
    ToolPolicy,
    _walk_path,
    resolve,
    result_value,
)
from undolog.mcp_proxy.upstream import OutcomeUnknown, UpstreamConnection, UpstreamDown
from undolog.signature import canonical_json

log = logging.getLogger("undolog.mcp_proxy")

SESSION_META_KEY = "undolog/session"  # the proxy's handle, never a session id
RAW_SESSION_META_KEY = "undolog/session_id"  # refused: a client may not name a session id
UNDO_META_KEY = "undolog/undo_id"
PROGRESS_EVERY = 2.0  # seconds between progress notifications while a call is held
COMPENSATION_PREFIX = "mcp:"
APPLICATION_NAME = "undolog-mcp-proxy"
POOL_SIZE = 8  # the proxy's journal connections, besides its one LISTEN connection


def compensation_name(upstream: str, tool: str) -> str:
    """The compensation's name in the journal: which upstream tool undoes the call."""
    return f"{COMPENSATION_PREFIX}{upstream}/{tool}"


def journal_name(upstream: str, tool: str) -> str:
    """The tool name journaled (and signed): stable when upstreams are added."""
    return f"{upstream}/{tool}"


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _snapshot(result: types.CallToolResult) -> dict[str, Any]:
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("_meta", None)
    return data


def _reduced_snapshot(result: types.CallToolResult, route: Route, why: Exception) -> dict[str, Any]:
    """The journal's record of a result it cannot hold whole: a note, and as structured
    content only the values the compensation's ``result.`` paths read (a replay answers
    this)."""
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
    note = (
        f"The result was not journaled whole ({str(why).splitlines()[0][:200]}); "
        "a replay answers this note and what the undo needs."
    )
    return {
        "content": [{"type": "text", "text": note}],
        "structuredContent": kept,
        "isError": False,
    }


def _error_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return ("upstream error: " + " ".join(texts))[:2000]


@dataclass
class Route:
    upstream: str
    tool: str
    policy: ToolPolicy
    listed: types.Tool


@dataclass
class ProxySession:
    session_id: uuid.UUID
    handle: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # the live client connection the handle was given to (None: stdio process, stateless
    # HTTP, or no connection holds it now)
    owner: Any = None
    occurrences: dict[str, int] = field(default_factory=dict)
    began: bool = False
    bindings: int = 0
    holds: int = 0  # irreversible calls of this session held open now
    beat: asyncio.Task[None] | None = None
    walking: asyncio.Task[None] | None = None
    begin_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class McpProxy:
    """The proxy's state: upstream connections, the tool table, sessions, the journal."""

    def __init__(self, policy: Policy, dsn: str, upstreams: dict[str, UpstreamConnection]) -> None:
        self.policy = policy
        self.dsn = dsn
        self.upstreams = upstreams
        self.routes: dict[str, Route] = {}
        for up_name, up in upstreams.items():
            hidden = set(policy.upstreams[up_name].hide)
            for tool_name, tool in up.tools.items():
                if tool_name in hidden:
                    continue
                exposed = policy.exposed_name(up_name, tool_name)
                if exposed in self.routes:
                    raise ValueError(f"two upstream tools would both be called {exposed!r}")
                self.routes[exposed] = Route(
                    up_name, tool_name, policy.tier_of(up_name, tool_name), tool
                )
        self.sessions: dict[uuid.UUID, ProxySession] = {}
        self.by_handle: dict[str, ProxySession] = {}
        self.process_session: uuid.UUID | None = None
        self.http = False  # served over streamable HTTP (set by the server)
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True, "application_name": APPLICATION_NAME},
            open=False,
        )
        # One LISTEN connection wakes every held call: a connection per hold let one client
        # open as many PostgreSQL connections as it made irreversible calls at once.
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listening: asyncio.Task[None] | None = None
        self._listen_lock = asyncio.Lock()
        self._held: set[asyncio.Event] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
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
                if route.policy.tier == "safe":
                    continue
                await aengine.register_tool(
                    conn,
                    journal_name(route.upstream, route.tool),
                    route.policy.tier,
                    self._descriptor(route) if route.policy.tier == "compensable" else None,
                )

    async def close(self) -> None:
        for ps in list(self.sessions.values()):
            await self.end_session(ps)
        for ps in self.sessions.values():
            if ps.walking is not None:
                with contextlib.suppress(Exception):
                    await ps.walking
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
                for event in list(self._held):
                    event.set()
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
        return out

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
        connection = None
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # The SDK keeps one Connection per handshake-era client session; it offers
            # no public accessor from a lowlevel handler's context.
            connection = getattr(ctx.session, "_connection", None)
        if handle is not None:
            ps = await self._by_handle(handle)
            if ps.owner is not None and ps.owner is not connection:
                # the handle is in use by a live connection: a second one presenting it
                # learned it from somewhere else
                raise ValueError(
                    "this session handle belongs to another client connection; it is refused"
                )
        elif connection is not None:
            ps = connection.state.get("undolog.session")
            if ps is None:
                ps = connection.state["undolog.session"] = self._new_session()
        elif self.http:
            ps = self._new_session()  # stateless HTTP: the client sends the handle back
        else:
            if self.process_session is None:
                self.process_session = uuid.uuid4()
                self._new_session(self.process_session)
            ps = self.sessions[self.process_session]
        if connection is not None and ps.owner is None:
            ps.owner = connection
            ps.bindings += 1
            connection.exit_stack.push_async_callback(self._unbind, ps)
        return ps

    def _new_session(self, sid: uuid.UUID | None = None) -> ProxySession:
        ps = ProxySession(sid or uuid.uuid4())
        self.sessions[ps.session_id] = ps
        self.by_handle[ps.handle] = ps
        return ps

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
        async with self.pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT session_id FROM undolog.undolog_sessions"
                    " WHERE metadata->>'handle_sha256' = %s",
                    (_handle_hash(handle),),
                )
            ).fetchone()
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
        ps.owner = None
        ps.bindings -= 1
        if ps.bindings <= 0:
            await self.end_session(ps)

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
            ps.beat = asyncio.create_task(self._heartbeat(ps))

    async def _heartbeat(self, ps: ProxySession) -> None:
        while True:
            await asyncio.sleep(max(self.policy.lease_seconds / 3, 0.5))
            try:
                async with self.pool.connection() as conn:
                    await aengine.heartbeat(conn, ps.session_id)
            except SessionNotActive:
                self.walk_soon(ps)
                return
            except Exception as exc:  # a passing fault: the next beat tries again
                log.warning("session %s: heartbeat failed: %s", ps.session_id, exc)

    async def end_session(self, ps: ProxySession) -> None:
        """The client is gone: complete its session, or fail it and undo its work when the
        outcome of one of its calls is unknown."""
        if ps.beat is not None:
            ps.beat.cancel()
            ps.beat = None
        if not ps.began:
            return
        ps.began = False  # a later call of the same session id begins it again
        try:
            async with self.pool.connection() as conn:
                state = await aengine.session_state(conn, ps.session_id)
                if state == "active":
                    try:
                        await aengine.complete_session(conn, ps.session_id)
                        return
                    except InvalidStateTransition as exc:
                        await aengine.fail_session(conn, ps.session_id, str(exc))
                elif state not in ("failed", "compensating"):
                    return
            self.walk_soon(ps)
        except Exception:
            log.exception("session %s: ending it failed", ps.session_id)

    def walk_soon(self, ps: ProxySession) -> None:
        """Run the failed session's undo walk here, in the background (once at a time)."""
        if ps.walking is None or ps.walking.done():
            ps.walking = asyncio.create_task(self._walk(ps.session_id))

    async def _walk(self, session_id: uuid.UUID) -> None:
        def in_thread() -> str | None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                try:
                    return walk.run_walk(conn, session_id, self.compensations, wait=10.0)
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
        route = self.routes.get(name)
        if route is None:
            return _error(f"unknown tool {name!r}")
        upstream = self.upstreams[route.upstream]
        if route.policy.tier == "safe":
            try:
                return await upstream.call(route.tool, args)
            except (UpstreamDown, OutcomeUnknown, MCPError) as exc:
                return _error(f"{name}: {exc}")
        try:
            await upstream.ensure_connected()  # nothing is journaled for a call not sent
        except UpstreamDown as exc:
            return _error(f"{name} was not run: {exc}")
        try:
            ps = await self.session_for(ctx)
            await self.begin(ps)
        except (ValueError, UndoLogError, psycopg.Error) as exc:
            return _error(f"{name} was not run: {exc}")
        if route.policy.tier == "compensable":
            result = await self._compensable(ps, name, route, upstream, args)
        else:
            result = await self._irreversible(ctx, ps, name, route, upstream, args)
        # the handle is how this client (and only it) resumes the session
        return result.model_copy(
            update={"meta": {**(result.meta or {}), SESSION_META_KEY: ps.handle}}
        )

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

    async def _intercept(
        self, ps: ProxySession, step: int, route: Route, args: dict[str, Any], comp: Any
    ) -> engine.Interception | types.CallToolResult:
        """intercept(), or the tool error to answer when the journal refuses the call."""
        tier = route.policy.tier
        try:
            async with self.pool.connection() as conn:
                return await aengine.intercept(
                    conn,
                    ps.session_id,
                    step,
                    journal_name(route.upstream, route.tool),
                    tier,
                    args,
                    comp,
                )
        except SessionNotActive as exc:
            state = await self._state(ps)
            if state in ("failed", "compensating"):
                self.walk_soon(ps)
                return _error(
                    f"not run: session {ps.session_id} is {state}: it was stopped and its "
                    "work is being undone; start a new session"
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

    async def _state(self, ps: ProxySession) -> str:
        try:
            async with self.pool.connection() as conn:
                return await aengine.session_state(conn, ps.session_id)
        except Exception:
            return "unknown"

    async def _execute(
        self,
        effect_id: uuid.UUID,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> tuple[types.CallToolResult, bool]:
        """Forward a journaled call and record its outcome: (result, failed)."""
        try:
            result = await upstream.call(route.tool, args)
        except OutcomeUnknown as exc:
            # It may have acted: the effect stays executing, so the walk compensates it.
            return _error(
                f"{name}: {exc}. Its outcome is unknown: it will not be run again, and "
                "this session will be rolled back when it ends."
            ), False
        except (UpstreamDown, MCPError) as exc:
            await self._record(engine.FAIL, effect_id, f"not run: {exc}"[:2000])
            return _error(f"{name} was not run: {exc}"), True
        if result.is_error:
            await self._record(engine.FAIL, effect_id, _error_text(result))
            return result, True
        try:
            try:
                async with self.pool.connection() as conn:
                    await aengine.commit(conn, effect_id, _snapshot(result))
            except (PayloadTooLarge, InvalidArgument) as exc:
                # It ran and its result is known, but the journal cannot hold it whole
                # (over the payload limit, or a U+0000 jsonb refuses): keep what the
                # compensation reads, so that the call stays undoable, not unknown.
                async with self.pool.connection() as conn:
                    await aengine.commit(conn, effect_id, _reduced_snapshot(result, route, exc))
        except Exception as exc:
            return _error(
                f"{name} ran, but the journal could not record its result ({exc}): "
                "its outcome counts as unknown and the session will be rolled back."
            ), False
        return result, False

    async def _record(self, query: str, effect_id: uuid.UUID, text: str) -> None:
        try:
            async with self.pool.connection() as conn:
                # the text is the upstream's: a U+0000 in it must not lose the outcome
                await conn.execute(query, (effect_id, walk.storable_error(text)))
        except Exception:
            log.exception("effect %s: recording its failure failed", effect_id)

    async def _compensable(
        self,
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> types.CallToolResult:
        key = _call_key(name, args)
        if key is None:
            return _error(f"{name}: the arguments cannot be journaled exactly as JSON")
        step = ps.occurrences.get(key, 0)
        ps.occurrences[key] = step + 1
        icpt = await self._intercept(ps, step, route, args, self._descriptor(route))
        if isinstance(icpt, types.CallToolResult):
            _give_back(ps, key, step)
            return icpt
        if icpt.action == "replay":
            return types.CallToolResult.model_validate(icpt.result_snapshot)
        if icpt.action == "execute":
            assert icpt.effect_id is not None
            result, failed = await self._execute(icpt.effect_id, name, route, upstream, args)
            if failed:
                _give_back(ps, key, step)
            return result
        if icpt.action == "in_progress":
            return _error(
                f"{name}: this very call is running now, or its outcome is unknown (the proxy "
                "stopped while it ran): it will not be run twice; the session will be rolled "
                "back when it ends"
            )
        return _error(f"{name}: unexpected journal answer {icpt.action!r}")

    async def _irreversible(
        self,
        ctx: ServerRequestContext[Any, Any],
        ps: ProxySession,
        name: str,
        route: Route,
        upstream: UpstreamConnection,
        args: dict[str, Any],
    ) -> types.CallToolResult:
        for _ in range(3):  # await_approval -> (decision) -> execute, at most
            icpt = await self._intercept(ps, 0, route, args, None)
            if isinstance(icpt, types.CallToolResult):
                return icpt
            if icpt.action == "replay":
                return types.CallToolResult.model_validate(icpt.result_snapshot)
            if icpt.action == "execute":
                assert icpt.effect_id is not None
                result, _ = await self._execute(icpt.effect_id, name, route, upstream, args)
                return result
            if icpt.action == "rejected":
                return await self._rejected(ps, name, icpt.approval_id)
            if icpt.action == "in_progress":
                return _error(
                    f"{name}: this very call is running now, or its outcome is unknown: it "
                    "will not be run twice"
                )
            assert icpt.approval_id is not None
            cap = self.policy.max_holds_per_client
            if ps.holds >= cap:
                return _error(
                    f"NOT RUN YET, NOT HELD: {name} waits for a human to approve it (approval "
                    f"{icpt.approval_id}), and this client already has {cap} irreversible "
                    "calls held open, the most it may (proxy.max_holds_per_client). Nothing "
                    "was done. Make the very same call again later to learn the decision."
                )
            ps.holds += 1
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
                )
            if decision != "approved":
                return await self._rejected(ps, name, icpt.approval_id)
        return _error(f"{name}: the journal's answers did not settle; ask again")

    async def _rejected(
        self, ps: ProxySession, name: str, approval_id: uuid.UUID | None
    ) -> types.CallToolResult:
        by, reason, state = None, None, "rejected"
        with contextlib.suppress(Exception):
            async with self.pool.connection() as conn:
                row = await (
                    await conn.execute(
                        "SELECT decided_by, reason, state FROM undolog.undolog_approval_requests"
                        " WHERE approval_id = %s",
                        (approval_id,),
                    )
                ).fetchone()
                if row is not None:
                    by, reason, state = row
        self.walk_soon(ps)
        who = f" by {by}" if by else ""
        why = f" (reason: {reason})" if reason else ""
        return _error(
            f"REJECTED: {name} was {state}{who}{why} (approval {approval_id}); it did not "
            "run and never will. The session is rolled back: its undoable calls are undone "
            "and its new calls refused; start a new session."
        )

    async def _hold(
        self, ctx: ServerRequestContext[Any, Any], approval_id: uuid.UUID
    ) -> str | None:
        """Wait up to the policy's hold time for a decision (progress notifications while it
        waits); answers the decision or None. A notification is only a wake-up: the
        decision is what the table says."""
        hold = self.policy.hold_seconds
        started = time.monotonic()
        deadline = started + hold
        await self._listen()
        wake = asyncio.Event()
        self._held.add(wake)
        try:
            while True:
                wake.clear()
                async with self.pool.connection() as conn:
                    row = await (
                        await conn.execute(
                            "SELECT state FROM undolog.undolog_approval_requests"
                            " WHERE approval_id = %s",
                            (approval_id,),
                        )
                    ).fetchone()
                if row is not None and row[0] in DECISIONS:
                    return str(row[0])
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                with contextlib.suppress(Exception):
                    await ctx.session.report_progress(
                        round(time.monotonic() - started, 1),
                        hold,
                        f"waiting for a human to approve {approval_id}",
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), min(PROGRESS_EVERY, remaining))
                if self._listening is None or self._listening.done():
                    await self._listen()
        finally:
            self._held.discard(wake)


def _lease(policy: Policy) -> Any:
    from datetime import timedelta

    return timedelta(seconds=policy.lease_seconds)


def _handle_hash(handle: str) -> str:
    return hashlib.sha256(handle.encode()).hexdigest()


def _call_key(name: str, args: dict[str, Any]) -> str | None:
    try:
        return name + "\x00" + canonical_json(args).decode()
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

    def __init__(self, owner: Any, upstream: str, tool: str, timeout: float = 60.0) -> None:
        self.owner = owner  # has .upstreams and .loop
        self.upstream = upstream
        self.tool = tool
        self.timeout = timeout

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
        conn: UpstreamConnection = self.owner.upstreams[self.upstream]
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
