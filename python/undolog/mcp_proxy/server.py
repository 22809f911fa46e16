"""``undolog mcp-proxy --config FILE [--http HOST:PORT]``: serve the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import ListenHandler
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from undolog import _serving, logs
from undolog._version import __version__
from undolog.mcp_proxy.metrics import parse_listen, serve_metrics
from undolog.mcp_proxy.passthrough import Passthrough
from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.mcp_proxy.proxy import (
    LOG_LEVEL_SLOT,
    SESSION_META_KEY,
    McpProxy,
    client_connection,
    upstream_error_kind,
)
from undolog.mcp_proxy.relay import Write, relaying_stdio
from undolog.mcp_proxy.shapes import call_params_problem, envelope_problem, valid_id
from undolog.mcp_proxy.stdio import LINE_LIMIT
from undolog.mcp_proxy.upstream import OutcomeUnknown, UpstreamDown, connect_all

log = logging.getLogger("undolog.mcp_proxy")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Options:
    """The command line's word over the policy's [proxy] table (None: the policy's)."""

    metrics_listen: str | None = None
    durable_results: bool | None = None


@contextlib.asynccontextmanager
async def running_proxy(
    config: str, dsn: str, options: Options = Options()
) -> AsyncIterator[McpProxy]:
    """Load the policy, connect the upstreams, check the policy against their tools, open
    the journal, serve the proxy's metrics if asked; close it all on the way out.
    PolicyError/UpstreamDown refuse to start (ValueError: a bad --metrics-listen)."""
    policy = load_policy(config)
    if options.durable_results is not None:
        policy = dataclasses.replace(policy, durable_results=options.durable_results)
    listen = options.metrics_listen or policy.metrics_listen
    address = parse_listen(listen) if listen else None
    upstreams = await connect_all(policy.upstreams, policy.call_timeout_seconds)
    try:
        policy.check_against({name: up.listing() for name, up in upstreams.items()})
        proxy = McpProxy(policy, dsn, upstreams)
        await proxy.open()
        metrics_server: asyncio.Server | None = None
        try:
            if address is not None:
                try:
                    metrics_server = await serve_metrics(proxy.metrics, *address)
                except OSError as exc:
                    raise ValueError(f"cannot serve metrics on {listen}: {exc}") from exc
                bound = metrics_server.sockets[0].getsockname()
                # stderr: over stdio, stdout is the client's
                print(
                    f"undolog mcp-proxy: metrics on http://{address[0]}:{bound[1]}/metrics",
                    file=sys.stderr,
                    flush=True,
                )
            yield proxy
        finally:
            if metrics_server is not None:
                metrics_server.close()
            await proxy.close()
    finally:
        for up in upstreams.values():
            await up.close()


class _ProxyServer(Server[Any]):
    """The SDK's server, announcing that the lists it relays can change (over stdio and
    over HTTP, whose session manager asks for the options itself)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(
                prompts_changed=True, resources_changed=True, tools_changed=True
            ),
            experimental_capabilities,
            extensions,
        )


def build_server(proxy: McpProxy, relay: MessageRelay | None = None) -> Server[Any]:
    passthrough = Passthrough(proxy)

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        passthrough.remember(ctx)
        if relay is not None:
            relay.served(ctx)
        return types.ListToolsResult(tools=proxy.list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        passthrough.remember(ctx)
        if relay is not None:
            relay.served(ctx)
        return await proxy.call_tool(ctx, params.name, dict(params.arguments or {}))

    resources = bool(passthrough.serving("resources"))
    prompts = bool(passthrough.serving("prompts"))
    subscribable = passthrough.subscribable()
    server = _ProxyServer(
        "undolog-mcp-proxy",
        version=__version__,
        instructions=(
            "Tools behind UndoLog: each description states its tier. An IRREVERSIBLE call may "
            "answer that it awaits a human's approval: make the same call again later. "
            "Resources and prompts are passed through as they are."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=passthrough.list_resources if resources else None,
        on_list_resource_templates=passthrough.list_resource_templates if resources else None,
        on_read_resource=passthrough.read_resource if resources else None,
        on_subscribe_resource=passthrough.subscribe if subscribable else None,
        on_unsubscribe_resource=passthrough.unsubscribe if subscribable else None,
        on_list_prompts=passthrough.list_prompts if prompts else None,
        on_get_prompt=passthrough.get_prompt if prompts else None,
        on_subscriptions_listen=ListenHandler(passthrough.bus),
    )
    server.add_notification_handler(
        "notifications/roots/list_changed",
        types.NotificationParams,
        passthrough.client_roots_changed,
    )
    server.add_notification_handler(
        "notifications/initialized", types.NotificationParams, passthrough.client_initialized
    )
    # The proxy tells a handshake-era client of a late result with notifications/message
    # (McpProxy._tell_late); a server that sends them declares the logging capability,
    # which the SDK derives from a logging/setLevel handler: the level a client sets
    # is kept on its connection, and a late-result notice (level notice) below it is
    # not sent.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_log_level)
    # The SDK wraps every request in an OpenTelemetry span by default; the proxy sits on
    # the path of every tool call, so it keeps only what it needs.
    server.middleware = []
    if relay is not None:
        relay.server_info = server.server_info.model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
    return server


async def set_log_level(
    ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
) -> types.EmptyResult:
    connection = client_connection(ctx)
    if connection is not None:
        connection.state[LOG_LEVEL_SLOT] = params.level
    return types.EmptyResult()


# a SAFE call's _meta may hold only these to be relayed unparsed (anything else, such as
# a progress token, takes the SDK's path, which knows what to do with it)
_RELAYABLE_META = {
    types.PROTOCOL_VERSION_META_KEY,
    types.CLIENT_INFO_META_KEY,
    types.CLIENT_CAPABILITIES_META_KEY,
    SESSION_META_KEY,
}


class MessageRelay:
    """Tool calls over stdio, answered at the JSON-RPC message level: the request line is
    read once, and the answer written as one line, without the SDK's server parsing it
    into its models, validating and dumping it again (most of what the proxy cost).

    A SAFE call is one message to the upstream and its result written back as it came
    (with the proxy's identity on a 2026-era answer): nothing is journaled for it. A
    COMPENSABLE call runs the proxy's journaled path as from the SDK's server, with the
    request context of this same stdio connection (taken from a request the SDK served
    on it: the listing of tools every client starts with), so that its session is the
    one the SDK's path would give it. Every other request, and a call with anything
    unusual about it (a progress token, an unknown protocol version, no context yet),
    goes to the SDK's server."""

    def __init__(self, proxy: McpProxy) -> None:
        self.proxy = proxy
        self.server_info: dict[str, Any] = {}  # the proxy's, stamped on 2026-era answers
        # a handshake-era client's calls are relayed only after its handshake: its
        # initialize request, then its notifications/initialized
        self.handshake = False
        self.initialized = False
        self.told_early = False  # logged a notifications/initialized sent before initialize
        self.contexts: dict[bool, ServerRequestContext[Any, Any]] = {}  # by era: modern?
        self.running: dict[str | int, asyncio.Task[None]] = {}  # by request id

    def served(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """A request the SDK served on this connection: its context, for the relay."""
        self.contexts[ctx.protocol_version in MODERN_PROTOCOL_VERSIONS] = ctx

    def __call__(self, message: dict[str, Any], write: Write) -> bool:
        method = message.get("method")
        if method == "initialize" and "id" in message:
            # the handshake begins (the SDK's server answers it); only params the SDK
            # accepts open it, as only those open the SDK's own gate
            with contextlib.suppress(ValueError):
                types.InitializeRequestParams.model_validate(
                    message.get("params") or {}, by_name=False
                )
                self.handshake = True
            return False
        if method == "notifications/initialized":
            if not self.handshake:
                # before (or without) initialize: the MCP lifecycle begins with it. The
                # SDK's server would take this as the end of a handshake that never
                # began and serve every request after it; dropped here, its gate stays
                # closed: a request is answered with its JSON-RPC error until initialize
                if not self.told_early:  # once: a client may send it again and again
                    self.told_early = True
                    log.warning(
                        "notifications/initialized before the initialize request: ignored "
                        "(requests other than ping are refused until initialize)"
                    )
                return True
            params = message.get("params")
            if params is None or isinstance(params, dict):  # else the SDK drops it too
                self.initialized = True
            return False
        if message.get("method") == "notifications/cancelled":
            # the client gave up on a call: as the SDK's server does for the requests it
            # serves, its handler is cancelled and never answered (a journaled call still
            # runs to its end, and the same call made again is that call: see the proxy)
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            running = self.running.get(cancelled) if isinstance(cancelled, str | int) else None
            if running is not None:
                running.cancel()
            return False
        params = message.get("params")
        request_id = message.get("id")
        if (
            method == "tools/call"
            and message.get("jsonrpc") == "2.0"
            and isinstance(request_id, (str, int))
            and not isinstance(request_id, bool)
            and (problem := call_params_problem(params)) is not None
            and (self.initialized or _modern(params))
        ):
            # what the SDK's server answers "Invalid request parameters", said with what
            # to send instead (before the handshake, the SDK's refusal of any request)
            write(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": types.INVALID_PARAMS, "message": problem},
                }
            )
            return True
        if (
            message.get("method") != "tools/call"
            or message.get("jsonrpc") != "2.0"
            or not isinstance(request_id, (str, int))
            or isinstance(request_id, bool)
            or not isinstance(params, dict)
        ):
            return False
        name, args, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        route = self.proxy.routes.get(name) if isinstance(name, str) else None
        if route is None or route.policy.tier == "irreversible":
            return False  # a held call sends progress: the SDK's path
        if args is None:
            args = {}
        if meta is None:
            meta = {}
        if not isinstance(args, dict) or not isinstance(meta, dict) or set(meta) - _RELAYABLE_META:
            return False
        version = meta.get(types.PROTOCOL_VERSION_META_KEY)
        modern = version is not None
        if modern and version not in MODERN_PROTOCOL_VERSIONS:
            return False  # the SDK answers with the versions it speaks
        if not modern and not self.initialized:
            return False
        if self.proxy.policy.upstreams[route.upstream].instances != "shared":
            # the call goes to the session's own process, which only the proxy's path
            # (with its session) picks: a read must see the session's own writes
            return False
        upstream = self.proxy.upstreams[route.upstream]
        if upstream.relayable() is None:
            return False  # reconnecting, or a 2026-era upstream: the SDK's path
        answer: Awaitable[dict[str, Any]]
        if route.policy.tier == "safe":
            answer = self._safe(str(name), route.upstream, route.tool, upstream, args)
        else:
            template = self.contexts.get(modern)
            if template is None:
                return False
            ctx = dataclasses.replace(
                template,
                method="tools/call",
                params=params,
                request_id=request_id,
                meta=cast(types.RequestParamsMeta, meta),
                protocol_version=str(version) if modern else template.protocol_version,
            )
            answer = self._journaled(ctx, str(name), args)
        task = asyncio.create_task(self._answer(request_id, answer, modern, write))
        self.running[request_id] = task
        task.add_done_callback(functools.partial(self._done, request_id))
        return True

    def _done(self, request_id: str | int, task: asyncio.Task[None]) -> None:
        if self.running.get(request_id) is task:  # not a later request of the same id
            del self.running[request_id]

    async def _safe(
        self, name: str, up_name: str, tool: str, upstream: Any, args: dict[str, Any]
    ) -> dict[str, Any]:
        metrics = self.proxy.metrics
        try:
            result: dict[str, Any] = await upstream.call_raw(tool, args)
        except (UpstreamDown, OutcomeUnknown, MCPError) as exc:
            metrics.call("safe", "failed")
            metrics.upstream_error(up_name, upstream_error_kind(exc))
            return {"content": [{"type": "text", "text": f"{name}: {exc}"}], "isError": True}
        metrics.call("safe", "relayed")
        if result.get("isError") is True:
            metrics.upstream_error(up_name, "error_result")
        return result

    async def _journaled(
        self, ctx: ServerRequestContext[Any, Any], name: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        result = await self.proxy.call_tool(ctx, name, args)
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        # the era's own shape of the result, as the SDK's server sends it
        return methods.serialize_server_result("tools/call", ctx.protocol_version, dumped)

    async def _answer(
        self,
        request_id: str | int,
        answer: Awaitable[dict[str, Any]],
        modern: bool,
        write: Write,
    ) -> None:
        try:
            result = await answer
        except Exception as exc:  # as the SDK's server answers a handler that raised
            log.exception("tools/call %s failed", request_id)
            write(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": types.INTERNAL_ERROR, "message": str(exc)},
                }
            )
            return
        if modern:
            result = {"resultType": "complete", **result}
            meta = result.get("_meta")
            meta = dict(meta) if isinstance(meta, dict) else {}
            meta[types.SERVER_INFO_META_KEY] = self.server_info
            result["_meta"] = meta
        write({"jsonrpc": "2.0", "id": request_id, "result": result})


def _modern(params: Any) -> bool:
    """Whether a request's params say it is of the 2026 era (its protocol version in its
    _meta), which needs no handshake."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get(types.PROTOCOL_VERSION_META_KEY) is not None


async def _stdin_reader() -> asyncio.StreamReader | None:
    """A cancellable reader of stdin, or None when stdin is no pipe or socket (the SDK's
    reader then)."""
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # never a terminal's flags
        return None
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    try:
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer
        )
    except (ValueError, OSError):
        return None
    return reader


async def _serve_stdio(config: str, dsn: str, options: Options) -> None:
    # SIGTERM stops the proxy as SIGINT does (asyncio.run cancels the main task), so that
    # its sessions end as when the client leaves, not left active to be undone once their
    # lease runs out. (Over HTTP, uvicorn handles both signals itself.)
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    async with running_proxy(config, dsn, options) as proxy:
        reader = await _stdin_reader()
        if reader is not None:
            relay = MessageRelay(proxy)
            server = build_server(proxy, relay)
            async with relaying_stdio(reader, relay) as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        server = build_server(proxy)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def _client_gone(record: logging.LogRecord) -> bool:
    """The MCP SDK's "Error handling POST request" left out when the error is the
    client's connection closing before its body was whole (the client went away, or the
    server closed it: the cap on connections waiting for their request, REQUEST_TIMEOUT):
    it logged each with its traceback, as fast as a flood of such connections came, and
    there is nobody left to answer."""
    from starlette.requests import ClientDisconnect

    return not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect))


def _decoded(body: bytes) -> Any:
    """The JSON a body holds when it is an object or an array (None otherwise, or when
    it cannot be read here: the SDK answers it)."""
    if not body.lstrip().startswith((b"{", b"[")):
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _request_id(message: Any) -> str | None:
    """The id of the JSON-RPC request a decoded body is, as the MCP SDK's streamable HTTP
    transport keys it (``str(id)``), or None: no request, or not one to read here."""
    if not isinstance(message, dict) or "method" not in message:
        return None
    rid = message.get("id")
    return str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _shape_problem(message: Any) -> tuple[int, int, Any, str] | None:
    """Why the SDK would refuse a decoded body for its shape, said with what to send
    instead (shapes.py): the HTTP status and JSON-RPC code the SDK gives it, the id to
    answer, the words; None when it is none of those."""
    envelope = envelope_problem(message)
    if envelope is not None:  # the SDK's transport refuses it with HTTP 400 (its id null)
        given = message.get("id") if isinstance(message, dict) else None
        return 400, envelope[0], given if valid_id(given) else None, envelope[1]
    if isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message:
        problem = call_params_problem(message.get("params"))
        if problem is not None:  # the SDK's server answers it on the request's stream
            return 200, types.INVALID_PARAMS, message["id"], problem
    return None


class PostGuard:
    """In front of the MCP SDK's streamable HTTP app, for every POST (the SDK reads its
    body whole, however long, and so would anything in front of it):

    - a body longer than ``max_body`` bytes (the policy's ``proxy.max_request_mib``) is
      refused (HTTP 413, JSON-RPC -32600, naming the key), at its Content-Length or once
      that much has come, and nothing run: a client cannot make the proxy hold a body of
      any size;
    - a JSON-RPC request with the id of a request still in flight on the same MCP session
      (``Mcp-Session-Id``) is refused (HTTP 400, JSON-RPC -32600, saying to give each
      request an id of its own). The SDK's transport keys a request's answer stream by
      ``str(id)``: a second request of the same id (or ``2`` and ``"2"``) replaced the
      first one's stream, so the first request's answer went to the second request's
      POST, and the first POST was never answered nor closed, even once the session was
      deleted (bench/fuzz_mcp_proxy.py). JSON-RPC asks a client for ids unique among its
      requests in flight; the proxy holds it to that instead of mixing its answers up.

    A message of the wrong shape (shapes.py) is answered here with what to send instead,
    unless it names an MCP session (``Mcp-Session-Id``) that ``knows_session`` says the
    SDK does not know (expired, deleted, made up): the SDK answers that before it reads
    the body (404 "Session not found": initialize again), and a client told first to fix
    its params learned only after that it had to start over."""

    def __init__(
        self,
        app: ASGIApp,
        max_body: int,
        knows_session: Callable[[str], bool] = lambda _session: True,
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.knows_session = knows_session
        self.in_flight: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body:
            await self._too_long(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._too_long(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        session = headers.get(b"mcp-session-id")
        decoded = _decoded(body)
        era = headers.get(b"mcp-protocol-version")
        if (era is None or era.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS) and (
            session is None or self.knows_session(session.decode("latin-1"))
        ):
            # (a 2026-era request takes the SDK's path of its own, as it answers it)
            shape = _shape_problem(decoded)
            if shape is not None:
                status, code, given_id, problem = shape
                await _refuse(send, status, given_id, problem, code)
                return
        rid = _request_id(decoded) if session is not None else None
        key = (session.decode("latin-1"), rid) if session is not None and rid is not None else None
        if key is None:
            await self.app(scope, replay, send)
            return
        if key in self.in_flight:
            given_id = json.loads(body)["id"]
            await _refuse(
                send,
                400,
                given_id,
                f"request id {json.dumps(given_id)} is already in flight on this MCP session: "
                "nothing was done; give each request an id of its own among those not yet "
                "answered, and send this one again with another id",
            )
            return
        self.in_flight.add(key)
        try:
            await self.app(scope, replay, send)
        finally:
            self.in_flight.discard(key)

    async def _too_long(self, send: Send) -> None:
        mib = self.max_body // (1024 * 1024)
        await _refuse(
            send,
            413,
            None,
            f"the request's body is longer than {mib} MiB (proxy.max_request_mib): nothing "
            "was done; send less, or raise proxy.max_request_mib in the proxy's policy",
        )


async def _refuse(
    send: Send, status: int, rid: Any, message: str, code: int = types.INVALID_REQUEST
) -> None:
    """An HTTP answer of ``status`` carrying a JSON-RPC error (-32600 unless ``code``)
    for request ``rid``."""
    answer = json.dumps(
        {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(answer)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": answer})


async def _serve_http(config: str, dsn: str, host: str, port: int, options: Options) -> None:
    logging.getLogger("mcp.server.streamable_http").addFilter(_client_gone)
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    server: Any = None
    raised: list[int] = []

    def stop(sig: int, frame: Any) -> None:
        # uvicorn, stopped by a signal, raises it again once it has stopped serving (for
        # the handler it had replaced, this one): asyncio.run's own for SIGINT cancelled
        # the proxy's close() at its first wait, so that the sessions still live were
        # not ended (left active, for their lease's expiry to fail them and a worker to
        # undo every call their clients kept), and SIGTERM's default ended the process
        # before close() began. That raise is taken as done: the proxy is closing; any
        # other signal (a second ^C, or one before it serves) stops it at once.
        raised.append(sig)
        if server is None or not server.should_exit or len(raised) > 1:
            loop.call_soon_threadsafe(main.cancel)

    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, stop) for sig in handled}
    try:
        async with running_proxy(config, dsn, options) as proxy:
            proxy.http = True
            mcp_server = build_server(proxy)
            starlette = mcp_server.streamable_http_app(host=host)
            sessions = mcp_server.session_manager
            app = PostGuard(
                starlette,
                proxy.policy.max_request_mib * 1024 * 1024,
                # the SDK (2.3) has no public lookup of an MCP session id; the sessions it
                # serves are its manager's _server_instances, which it answers 404 without
                # (tests/mcp_proxy/test_mcp_proxy_shapes.py fails if that changes)
                knows_session=lambda session: session in sessions._server_instances,
            )
            server = _serving.uvicorn_server(  # a request not whole within REQUEST_TIMEOUT: closed
                app, host=host, port=port, log_level="warning", log_config=logs.uvicorn_log_config()
            )
            print(
                f"undolog mcp-proxy: serving http://{host}:{port}/mcp", file=sys.stderr, flush=True
            )
            await server.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def parse_http(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765, not {value!r}")
    return host, int(port)


def serve(config: str, dsn: str, http: str | None = None, options: Options = Options()) -> int:
    """The command's body: exit code 2 for a refused policy, 1 for an unreachable upstream
    or journal."""
    logs.basic_config(logging.INFO, "undolog mcp-proxy: %(message)s")
    try:
        if http is None:
            asyncio.run(_serve_stdio(config, dsn, options))
        else:
            host, port = parse_http(http)
            asyncio.run(_serve_http(config, dsn, host, port, options))
    except PolicyError as exc:
        print(f"undolog mcp-proxy: policy refused: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        print(f"undolog mcp-proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UpstreamDown as exc:
        print(f"undolog mcp-proxy: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (KeyboardInterrupt, asyncio.CancelledError):  # SIGINT, SIGTERM
        pass
    return EXIT_OK
