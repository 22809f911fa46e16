"""An upstream MCP server that misbehaves on purpose, for the proxy's hostile tests:
huge results, U+0000 in results and errors, a crash in the middle of a call, a result
without the field the compensation reads. Executions land in UPSTREAM_LEDGER."""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over, mcp's above all)
import zygote

zygote.hand_over()  # in a child of the tests' zygote (tests/zygote.py), if they started one

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("hostile-upstream")


def _record(op: str, **fields: Any) -> None:
    with Path(os.environ["UPSTREAM_LEDGER"]).open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"op": op, **fields}, sort_keys=True) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


@server.tool()
def make(key: str, size: int = 0) -> dict[str, Any]:
    """Make a thing; its result carries `size` bytes of padding."""
    _record("make", key=key)
    return {"id": key, "padding": "a" * size}


@server.tool()
def make_with_nul(key: str) -> dict[str, Any]:
    """Make a thing; its result carries a U+0000 (which PostgreSQL's jsonb refuses)."""
    _record("make", key=key)
    return {"id": key, "label": "a\x00b"}


@server.tool()
def unmake(id: str, idempotency_key: str) -> dict[str, Any]:
    """Undo make."""
    _record("unmake", id=id, idempotency_key=idempotency_key)
    return {"unmade": id}


@server.tool()
def nul_error(key: str) -> dict[str, Any]:
    """Refuse, with U+0000 in the error text."""
    raise ToolError(f"refused {key}\x00 with a NUL")


@server.tool()
def crash(key: str) -> dict[str, Any]:
    """Act, then die before answering."""
    _record("crash", key=key)
    os._exit(1)


@server.tool()
def wrong_shape(key: str) -> dict[str, Any]:
    """Answer without the field the compensation reads."""
    _record("wrong_shape", key=key)
    return {"other": key}


if __name__ == "__main__":
    server.run()
