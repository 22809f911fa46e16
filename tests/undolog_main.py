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

if gate := os.environ.get("UNDOLOG_TEST_ROLLBACK_LAST_GATE"):
    # the proxy's rollback_last, once committed, waits for this file to exist: a test
    # cuts undolog__undo_last off in that window, between the undo's commit and its walk
    # (tests/mcp_proxy/test_mcp_undo_last.py), which is otherwise a few microseconds wide
    import asyncio
    from pathlib import Path
    from typing import Any

    import undolog.asaga

    opened = Path(gate)
    committed = undolog.asaga.rollback_last

    async def gated(*args: Any, **kwargs: Any) -> Any:
        done = await committed(*args, **kwargs)
        while not opened.exists():
            await asyncio.sleep(0.05)
        return done

    undolog.asaga.rollback_last = gated

if gate := os.environ.get("UNDOLOG_TEST_UNDO_SPAN_GATE"):
    # the proxy's rollback_to_plan (read by an approved undolog__undo_last, after its own
    # entry was recorded and before its rollback_last) makes GATE.reached and then waits
    # for GATE to exist: a test cuts the undo off in that window, approved and not yet
    # begun (tests/mcp_proxy/test_mcp_undo_last.py), which is otherwise a few journal
    # round trips wide. The file made tells the test it is in the window (no sleeping)
    import asyncio
    from pathlib import Path
    from typing import Any

    import undolog.asaga

    held_open = Path(gate)
    planned = undolog.asaga.rollback_to_plan

    async def gated_plan(*args: Any, **kwargs: Any) -> Any:
        Path(f"{held_open}.reached").touch()
        while not held_open.exists():
            await asyncio.sleep(0.05)
        return await planned(*args, **kwargs)

    undolog.asaga.rollback_to_plan = gated_plan

runpy.run_module("undolog.cli", run_name="__main__", alter_sys=True)
