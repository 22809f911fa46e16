"""``undolog mcp-proxy --config FILE [--http HOST:PORT]``: serve the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.mcp_proxy.proxy import McpProxy
from undolog.mcp_proxy.upstream import UpstreamDown, connect_all

log = logging.getLogger("undolog.mcp_proxy")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


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


def build_server(proxy: McpProxy) -> Server[Any]:
    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=proxy.list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await proxy.call_tool(ctx, params.name, dict(params.arguments or {}))

    server: Server[Any] = Server(
        "undolog-mcp-proxy",
        version="0.1.0",
        instructions=(
            "Tools behind UndoLog: each description states its tier. An IRREVERSIBLE call may "
            "answer that it awaits a human's approval: make the same call again later."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    # The SDK wraps every request in an OpenTelemetry span by default; the proxy sits on
    # the path of every tool call, so it keeps only what it needs.
    server.middleware = []
    return server


async def _serve_stdio(config: str, dsn: str) -> None:
    async with running_proxy(config, dsn) as proxy:
        server = build_server(proxy)
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
    except KeyboardInterrupt:
        pass
    return EXIT_OK
