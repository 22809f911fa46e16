"""`python -m undolog.cli` for the MCP proxy's tests: the undolog command (the proxy, the
worker), forked from the tests' zygote when one listens (tests/zygote.py), as the
upstream servers are; else a plain process. ``python tests/undolog_main.py mcp-proxy ...``
is ``undolog mcp-proxy ...``."""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over)
import zygote

zygote.hand_over()

import runpy

runpy.run_module("undolog.cli", run_name="__main__", alter_sys=True)
