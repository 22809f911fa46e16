"""A stdio MCP upstream written by hand (no SDK, so it can say what the SDK would not):
results that are no valid CallToolResult, and a tool whose input schema changes mid
session. Executions land in UPSTREAM_LEDGER, one JSON line each.

- ``bad``: acts, then answers a text item without its text.
- ``newer``: acts, then answers a content item of a type this MCP SDK does not know
  (as from a newer specification), with the structured content a compensation reads.
- ``bad_error``: acts not, and answers a malformed error result (``isError``).
- ``make``/``flip``: ``flip`` re-lists ``make`` with its argument ``key`` renamed
  ``id`` (and back, the next time), and sends notifications/tools/list_changed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def record(op: str, **fields: Any) -> None:
    with open(os.environ["UPSTREAM_LEDGER"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"op": op, **fields}, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _object(*required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in required},
        "required": list(required),
    }


TOOLS: dict[str, dict[str, Any]] = {
    name: {"name": name, "description": description, "inputSchema": schema}
    for name, description, schema in [
        ("bad", "acts, then answers a malformed result", _object("key")),
        ("newer", "acts, then answers a content type of a newer spec", _object("key")),
        ("bad_error", "answers a malformed error result", _object("key")),
        ("undo", "undoes bad, newer and make", _object("key", "idempotency_key")),
        ("make", "makes a thing", _object("key")),
        ("flip", "renames make's argument key to id, or back", _object()),
        ("ok", "a read", _object()),
    ]
}


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def answer(mid: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": mid, "result": result})


def said(words: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": words}]}


def call(mid: Any, name: str, args: dict[str, Any]) -> None:
    key = args.get("key")
    if name == "bad":
        record("bad", key=key)
        answer(mid, {"content": [{"type": "text"}]})
    elif name == "newer":
        record("newer", key=key)
        hologram = {"type": "hologram", "uri": f"holo://{key}"}
        answer(mid, {"content": [hologram], "structuredContent": {"made": {"key": key}}})
    elif name == "bad_error":
        answer(mid, {"content": [{"type": "text"}], "isError": True})
    elif name == "undo":
        record("undo", key=key, idempotency_key=args.get("idempotency_key"))
        answer(mid, said("undone"))
    elif name == "make":
        record("make", **args)
        answer(mid, said("made"))
    elif name == "flip":
        renamed = "id" if "key" in TOOLS["make"]["inputSchema"]["properties"] else "key"
        TOOLS["make"] = {**TOOLS["make"], "inputSchema": _object(renamed)}
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        answer(mid, said("flipped"))
    else:
        answer(mid, said("fine"))


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        mid, method = msg.get("id"), msg.get("method")
        params = msg.get("params") or {}
        if method == "initialize":
            answer(
                mid,
                {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "raw", "version": "1"},
                },
            )
        elif method == "tools/list":
            answer(mid, {"tools": list(TOOLS.values())})
        elif method == "tools/call":
            call(mid, params["name"], params.get("arguments") or {})
        elif mid is not None and method is not None:
            answer(mid, {})


if __name__ == "__main__":
    main()
