"""`python -m undolog.cli` for the MCP proxy's tests: the undolog command (the proxy, the
worker), forked from the tests' zygote when one listens (tests/zygote.py), as the
upstream servers are; else a plain process. ``python tests/undolog_main.py mcp-proxy ...``
is ``undolog mcp-proxy ...``."""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over)
import zygote

zygote.hand_over()

import os
import runpy

if bound := os.environ.get("UNDOLOG_TEST_SDK_CLEANUP_SECONDS"):
    # the MCP SDK's bound on a connection's exit callbacks (5 s), shorter: a test of what
    # outlasts it need not wait that long (tests/mcp_proxy/test_mcp_proxy_left_sessions.py)
    import mcp.server.runner

    mcp.server.runner._EXIT_STACK_CLOSE_TIMEOUT = float(bound)

runpy.run_module("undolog.cli", run_name="__main__", alter_sys=True)
