"""An upstream MCP server for the proxy's session tests: a key-value store kept in the
process's memory (so two clients sharing one process share it, and one process per
session keeps them apart), a tool slower than the proxy's call timeout, and a payout.

Its writes are read-modify-write with an await in between, as a server that rewrites a
whole file per call (the reference memory server) does: two concurrent writes into one
process lose one. Every execution lands in UPSTREAM_LEDGER with the process id.

slow_make answers after its ``seconds``, or sooner once the test releases it (a file
``release-<key>`` beside the ledger, written by test_mcp_proxy.release_slow_make): a test
that needs the answer to come after some step of its own waits for that step, not for a
delay long enough on the slowest machine.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over, mcp's above all)
import zygote

zygote.hand_over()  # in a child of the tests' zygote (tests/zygote.py), if they started one

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("session-upstream")
STORE: dict[str, str] = {}


def _record(op: str, **fields: Any) -> None:
    with Path(os.environ["UPSTREAM_LEDGER"]).open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"op": op, "pid": os.getpid(), **fields}, sort_keys=True) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


@server.tool()
async def put(key: str, value: str) -> dict[str, Any]:
    """Store a value under a key."""
    global STORE
    before = dict(STORE)
    await asyncio.sleep(0.05)  # the window in which a concurrent write is lost
    STORE = {**before, key: value}
    _record("put", key=key, value=value)
    return {"key": key}


@server.tool()
async def forget(key: str, idempotency_key: str) -> dict[str, Any]:
    """Remove a key (the compensation of put)."""
    STORE.pop(key, None)
    _record("forget", key=key, idempotency_key=idempotency_key)
    return {"forgot": key}


@server.tool()
async def read_all() -> dict[str, Any]:
    """Every key and value this process holds."""
    return {"store": STORE, "pid": os.getpid()}


RELEASE_POLL = 0.05  # seconds between looks for a slow_make's release file


@server.tool()
async def slow_make(key: str, seconds: float) -> dict[str, Any]:
    """Act at once, then answer after a delay (longer than the proxy waits), or once
    released."""
    _record("slow_make", key=key)
    released = Path(os.environ["UPSTREAM_LEDGER"]).with_name(f"release-{key}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        await asyncio.sleep(max(min(RELEASE_POLL, deadline - loop.time()), 0))
        if released.exists() or loop.time() >= deadline:
            return {"id": key}


@server.tool()
async def unmake(id: str, idempotency_key: str) -> dict[str, Any]:
    """Undo slow_make."""
    _record("unmake", id=id, idempotency_key=idempotency_key)
    return {"unmade": id}


@server.tool()
async def pay(account: str, amount_cents: int, seconds: float = 0) -> dict[str, Any]:
    """Pay money out: cannot be undone (and answer after ``seconds``)."""
    _record("pay", account=account, amount_cents=amount_cents)
    await asyncio.sleep(seconds)
    return {"paid": amount_cents, "account": account}


if __name__ == "__main__":
    server.run()
