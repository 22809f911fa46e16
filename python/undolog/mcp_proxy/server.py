"""``undolog mcp-proxy --config FILE [--http HOST:PORT]``: serve the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import ListenHandler
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from undolog.mcp_proxy.passthrough import Passthrough
from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.mcp_proxy.proxy import SESSION_META_KEY, McpProxy
from undolog.mcp_proxy.relay import Write, relaying_stdio
from undolog.mcp_proxy.upstream import OutcomeUnknown, UpstreamDown, connect_all

log = logging.getLogger("undolog.mcp_proxy")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# One JSON-RPC message is one line: room for calls well over the journal's 1 MiB limit,
# which the journal then refuses with a clear tool error.
STDIN_LINE_LIMIT = 64 * 1024 * 1024


@contextlib.asynccontextmanager
async def running_proxy(config: str, dsn: str) -> AsyncIterator[McpProxy]:
    """Load the policy, connect the upstreams, check the policy against their tools, open
    the journal; close it all on the way out. PolicyError/UpstreamDown refuse to start."""
    policy = load_policy(config)
    upstreams = await connect_all(policy.upstreams, policy.call_timeout_seconds)
    try:
        policy.check_against({name: up.listing() for name, up in upstreams.items()})
        proxy = McpProxy(policy, dsn, upstreams)
        await proxy.open()
        try:
            yield proxy
        finally:
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


def build_server(proxy: McpProxy) -> Server[Any]:
    passthrough = Passthrough(proxy)

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        passthrough._remember(ctx)
        return types.ListToolsResult(tools=proxy.list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        passthrough._remember(ctx)
        return await proxy.call_tool(ctx, params.name, dict(params.arguments or {}))

    def serving(capability: str) -> bool:
        return any(
            up.capabilities is not None and getattr(up.capabilities, capability) is not None
            for up in proxy.upstreams.values()
        )

    resources = serving("resources")
    subscribable = any(
        up.capabilities is not None
        and up.capabilities.resources is not None
        and bool(up.capabilities.resources.subscribe)
        for up in proxy.upstreams.values()
    )
    server = _ProxyServer(
        "undolog-mcp-proxy",
        version="0.1.0",
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
        on_list_prompts=passthrough.list_prompts if serving("prompts") else None,
        on_get_prompt=passthrough.get_prompt if serving("prompts") else None,
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
    # The SDK wraps every request in an OpenTelemetry span by default; the proxy sits on
    # the path of every tool call, so it keeps only what it needs.
    server.middleware = []
    return server


# a SAFE call's _meta may hold only these to be relayed unparsed (anything else, such as
# a progress token, takes the SDK's path, which knows what to do with it)
_RELAYABLE_META = {
    types.PROTOCOL_VERSION_META_KEY,
    types.CLIENT_INFO_META_KEY,
    types.CLIENT_CAPABILITIES_META_KEY,
    SESSION_META_KEY,
}


class SafeRelay:
    """SAFE tool calls over stdio, answered at the JSON-RPC message level: the request is
    read once, sent to the upstream as one message, and the upstream's result is written
    back as it came (with the proxy's identity on a 2026-era answer). Nothing is journaled
    for a SAFE call, so the SDK's models add nothing but time here. Every other request,
    and a SAFE call with anything unusual about it, goes to the SDK's server."""

    def __init__(self, proxy: McpProxy, server: Server[Any]) -> None:
        self.proxy = proxy
        self.server_info = server.server_info.model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        self.initialized = False  # a handshake-era client: only after its handshake
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self, message: dict[str, Any], write: Write) -> bool:
        if message.get("method") == "notifications/initialized":
            self.initialized = True
            return False
        params = message.get("params")
        request_id = message.get("id")
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
        if route is None or route.policy.tier != "safe":
            return False
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
        upstream = self.proxy.upstreams[route.upstream]
        if upstream.relayable() is None:
            return False  # reconnecting, or a 2026-era upstream: the SDK's path
        task = asyncio.create_task(
            self._relay(request_id, str(name), route.tool, upstream, args, modern, write)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def _relay(
        self,
        request_id: str | int,
        name: str,
        tool: str,
        upstream: Any,
        args: dict[str, Any],
        modern: bool,
        write: Write,
    ) -> None:
        try:
            result = await upstream.call_raw(tool, args)
        except (UpstreamDown, OutcomeUnknown, MCPError) as exc:
            result = {"content": [{"type": "text", "text": f"{name}: {exc}"}], "isError": True}
        if modern:
            result = {"resultType": "complete", **result}
            meta = result.get("_meta")
            meta = dict(meta) if isinstance(meta, dict) else {}
            meta[types.SERVER_INFO_META_KEY] = self.server_info
            result["_meta"] = meta
        write({"jsonrpc": "2.0", "id": request_id, "result": result})


async def _stdin_reader() -> asyncio.StreamReader | None:
    """A cancellable reader of stdin, or None when stdin is no pipe or socket (the SDK's
    reader then)."""
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # never a terminal's flags
        return None
    reader = asyncio.StreamReader(limit=STDIN_LINE_LIMIT)
    try:
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer
        )
    except (ValueError, OSError):
        return None
    return reader


async def _serve_stdio(config: str, dsn: str) -> None:
    # SIGTERM stops the proxy as SIGINT does (asyncio.run cancels the main task), so that
    # its sessions end as when the client leaves, not left active to be undone once their
    # lease runs out. (Over HTTP, uvicorn handles both signals itself.)
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    async with running_proxy(config, dsn) as proxy:
        server = build_server(proxy)
        reader = await _stdin_reader()
        if reader is not None:
            async with relaying_stdio(reader, SafeRelay(proxy, server)) as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def _serve_http(config: str, dsn: str, host: str, port: int) -> None:
    import uvicorn

    async with running_proxy(config, dsn) as proxy:
        proxy.http = True
        app = build_server(proxy).streamable_http_app(host=host)
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        print(f"undolog mcp-proxy: serving http://{host}:{port}/mcp", file=sys.stderr, flush=True)
        await server.serve()


def parse_http(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765, not {value!r}")
    return host, int(port)


def serve(config: str, dsn: str, http: str | None = None) -> int:
    """The command's body: exit code 2 for a refused policy, 1 for an unreachable upstream
    or journal."""
    logging.basicConfig(level=logging.INFO, format="undolog mcp-proxy: %(message)s")
    try:
        if http is None:
            asyncio.run(_serve_stdio(config, dsn))
        else:
            host, port = parse_http(http)
            asyncio.run(_serve_http(config, dsn, host, port))
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
