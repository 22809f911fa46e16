"""`undolog mcp-proxy --http` and clients that never finish a request: each is closed
within undolog._serving.REQUEST_TIMEOUT (uvicorn alone kept them open for ever), while an
MCP session whose call streams its answer for longer than that bound, and a slow client
that does finish, are served."""

from __future__ import annotations

import threading
from pathlib import Path

from test_mcp_proxy import HttpProxy, http_proxies, ledger, names, run, text

from slow_clients import assert_closed_within_the_bound, closing_times, slow_but_whole
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
