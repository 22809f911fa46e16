"""tests/mcp_raw_upstream.py with ``slow_bad``: it acts, waits (SLOW_BAD seconds, 2.5 by
default: past the proxy's call timeout), then answers a result that is no valid
CallToolResult (a text item without its text), with the structured content a
compensation reads. Executions land in UPSTREAM_LEDGER."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcp_raw_upstream as raw

raw.TOOLS["slow_bad"] = {
    "name": "slow_bad",
    "description": "acts, waits, then answers a malformed result",
    "inputSchema": raw._object("key"),
}
_call = raw.call


def call(mid: Any, name: str, args: dict[str, Any]) -> None:
    if name != "slow_bad":
        _call(mid, name, args)
        return
    raw.record("slow_bad", key=args.get("key"))
    time.sleep(float(os.environ.get("SLOW_BAD", "2.5")))
    raw.answer(mid, {"content": [{"type": "text"}], "structuredContent": {"made": args.get("key")}})


raw.call = call
if __name__ == "__main__":
    raw.main()
