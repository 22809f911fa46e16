"""A session that ends (here at its idle boundary) while its undolog__undo_last walk is
running, with real processes: the SDK's MCP client drives `undolog mcp-proxy` over stdio
in front of a real upstream whose slow tool answers late.

undolog__undo_last sets the session compensating and walks its last calls only; the
engine then puts the session back to active. Its end waits for that walk and then ends
the session as an active one (completed): never left active with no owner, for
recover() to fail at its lease's expiry and a worker to undo every call the agent kept."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_mcp_proxy import ledger, names, run, sessions, text, wait_for
from test_mcp_proxy_late import SLOW, late_policy
from test_mcp_proxy_metrics import client
from test_mcp_proxy_sessions import effects

__all__ = ["ledger"]


def test_session_ending_during_a_partial_undo_is_completed_after_it(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    config = late_policy(
        tmp_path,
        proxy=(
            "late_answer_seconds = 30\n"
            'undo_last_tool = "safe"\n'
            'session_boundary = "idle"\n'
            "session_idle_seconds = 2"
        ),
    )

    async def body() -> None:
        async with client(config, dsn, ledger, mode="legacy") as mcp:
            kept = await mcp.call_tool("put", {"key": "keep", "value": "1"})
            assert not kept.is_error, text(kept)
            # answers after 12 s: past the call timeout (2 s), its outcome unknown for now
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 12})
            assert "outcome is unknown for now" in text(first), text(first)
            # the partial undo's walk waits for the late answer (~10 s more): the client
            # gives up on it after 3 s and the idle boundary (2 s) ends the session
            # while that walk is still to run
            with pytest.raises(Exception):  # noqa: B017 (the SDK's timeout error)
                await mcp.call_tool(
                    "undolog__undo_last",
                    {"count": 1, "reason": "oops"},
                    read_timeout_seconds=3,
                )
            # the partial walk undoes the slow call; then the session's end completes it
            await asyncio.to_thread(
                wait_for, lambda: [s for _, s in sessions(conn)] == ["completed"], 40
            )

    run(body)
    assert [state for _, state in sessions(conn)] == ["completed"]
    done = sorted((tool, state) for tool, _, state in effects(conn))
    assert done == [("kv/put", "committed"), (SLOW, "compensated")], done
    ops = names(ledger)
    assert "unmake" in ops and "forget" not in ops, ops


def test_a_chained_walk_cancelled_does_not_walk() -> None:
    """undolog__undo_last's walk chained after the walk running (McpProxy._walk_after):
    cancelled while it waits, it is cancelled, and no walk of its own runs."""
    import types as pytypes

    from undolog.mcp_proxy.proxy import McpProxy, ProxySession

    walked: list[ProxySession] = []

    async def walk_after_late(ps: ProxySession) -> None:
        walked.append(ps)

    stub = pytypes.SimpleNamespace(_walk_after_late=walk_after_late)

    async def body() -> None:
        running = asyncio.create_task(asyncio.sleep(30))  # the earlier walk, still running
        ps = ProxySession(uuid.uuid4())
        chained = asyncio.create_task(McpProxy._walk_after(stub, ps, running))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        chained.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(chained, 5)
        assert not running.cancelled() and not running.done()  # the earlier walk goes on
        running.cancel()
        await asyncio.sleep(0.2)
        assert walked == []

    asyncio.run(body())
