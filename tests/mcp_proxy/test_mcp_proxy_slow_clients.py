"""`undolog mcp-proxy --http` and clients that never finish a request: each is closed
within undolog._serving.REQUEST_TIMEOUT (uvicorn alone kept them open for ever), while an
MCP session whose call streams its answer for longer than that bound, and a slow client
that does finish, are served. Nor does a flood of connections that send nothing, more
than the proxy has descriptors for, keep an MCP request out."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from test_mcp_proxy import HttpProxy, http_proxies, ledger, names, run, text

from slow_clients import (
    FLOOD_FD_LIMIT,
    assert_a_flood_keeps_no_request_out,
    assert_closed_within_the_bound,
    closed_by_server,
    closing_times,
    fd_limit,
    slow_but_whole,
)
from undolog._serving import REQUEST_TIMEOUT

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name


def test_a_connection_that_never_finishes_its_request_is_closed(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(
        "[proxy]\ncall_timeout_seconds = 30\n"
        '[upstreams.crm]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
        '[upstreams.crm.tools.slow_echo]\ntier = "safe"\n'
        '[upstreams.crm.tools.lookup_user]\ntier = "safe"\n'
    )
    proxy = HttpProxy(config, dsn, ledger)
    http_proxies.append(proxy)
    found: dict[str, float | None] = {}
    probing = threading.Thread(target=lambda: found.update(closing_times(proxy.port, "/mcp")))
    probing.start()

    async def body() -> None:
        # a call whose answer streams for longer than the bound, in a session as long
        async with proxy.client() as client:
            slow = await client.call_tool(
                "slow_echo", {"text": "a", "seconds": REQUEST_TIMEOUT + 2}
            )
            assert not slow.is_error, text(slow)
            after = await client.call_tool("lookup_user", {"email": "a@x"})
            assert not after.is_error, text(after)

    run(body)
    probing.join()
    assert_closed_within_the_bound(found)
    assert names(ledger) == ["slow_echo"]
    # GET /mcp without a session is refused, but answered: the request was whole
    assert slow_but_whole(proxy.port, "/mcp").startswith(b"4")


def initialize(port: int) -> bytes:
    """An MCP client's first request, over streamable HTTP."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "flood-test", "version": "1"},
            },
        }
    ).encode()
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_a_flood_of_idle_connections_does_not_keep_a_request_out(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """An MCP client's initialize during a flood of idle connections: answered at 11.5 s
    before the cap on connections waiting for their request (244,372 log lines), now
    within a second."""
    config = tmp_path / "flood.toml"
    config.write_text(
        '[upstreams.crm]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
        '[upstreams.crm.tools.lookup_user]\ntier = "safe"\n'
    )
    log = tmp_path / "proxy.log"
    with log.open("w") as err:
        proxy = HttpProxy(config, dsn, ledger, stderr=err, preexec_fn=fd_limit(FLOOD_FD_LIMIT))
    http_proxies.append(proxy)
    assert_a_flood_keeps_no_request_out(proxy.port, initialize(proxy.port), log, proxy.stop)


def test_a_body_cut_short_by_the_server_is_not_logged_as_an_error(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """A POST /mcp whose body never came whole, closed by the server (the cap on
    connections waiting for their request, or REQUEST_TIMEOUT): the MCP SDK's body read
    ends in Starlette's ClientDisconnect, which it logged as "Error handling POST request"
    with its traceback, one for each such connection: a flood of them, each closed at
    once by the next, wrote the log as fast as it came. Nobody is left to answer: not
    logged."""
    config = tmp_path / "cut.toml"
    config.write_text(
        '[upstreams.crm]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
        '[upstreams.crm.tools.lookup_user]\ntier = "safe"\n'
    )
    log = tmp_path / "proxy.log"
    with log.open("w") as err:
        # max_waiting() 16: the 40 connections below close 24 of their own
        proxy = HttpProxy(config, dsn, ledger, stderr=err, preexec_fn=fd_limit(64))
    http_proxies.append(proxy)
    cut: list[socket.socket] = []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", proxy.port))
            s.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                b"Content-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\n"
                b'Content-Length: 100\r\n\r\n{"jsonrpc"' % proxy.port
            )
            cut.append(s)
        time.sleep(1)
        assert sum(closed_by_server(cut)) >= 20  # the longest waiting, by the cap
        time.sleep(0.5)
        text = log.read_text()
        assert "ClientDisconnect" not in text and "Traceback" not in text, text[:3000]
    finally:
        for s in cut:
            s.close()
