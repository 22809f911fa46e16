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
from typing import Any, cast

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.mcp_proxy.proxy import McpProxy
from undolog.mcp_proxy.upstream import UpstreamDown, connect_all

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


class _StdinLines:
    """stdin's lines for the SDK's stdio transport, read on the event loop. The SDK's
    own reader blocks a thread in readline(), which no cancellation interrupts: a
    stopping proxy would wait for the client's next line before it could end its
    sessions."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self.reader.readline()
        except ValueError:  # a line over the limit: dropped whole, answered as unreadable
            while True:
                with contextlib.suppress(ValueError):
                    await self.reader.readline()
                    return "\n"
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


async def _stdin_lines() -> _StdinLines | None:
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
    return _StdinLines(reader)


async def _serve_stdio(config: str, dsn: str) -> None:
    # SIGTERM stops the proxy as SIGINT does (asyncio.run cancels the main task), so that
    # its sessions end as when the client leaves, not left active to be undone once their
    # lease runs out. (Over HTTP, uvicorn handles both signals itself.)
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    async with running_proxy(config, dsn) as proxy:
        server = build_server(proxy)
        stdin = cast(Any, await _stdin_lines())  # the SDK only iterates over it
        async with stdio_server(stdin=stdin) as (read, write):
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
