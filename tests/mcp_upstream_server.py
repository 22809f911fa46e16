"""A small upstream MCP server for the proxy's tests: users, e-mails and payouts.

Every execution of a tool that acts is appended to the JSON-lines ledger named by
UPSTREAM_LEDGER, so a test sees a double execution (or a missing one) for what it is.
Run over stdio (default) or streamable HTTP: ``upstream_server.py --http PORT``.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over, mcp's above all)
import zygote

zygote.hand_over()  # in a child of the tests' zygote (tests/zygote.py), if they started one

import argparse
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-upstream")


def _ledger() -> Path:
    return Path(os.environ["UPSTREAM_LEDGER"])


def _record(op: str, **fields: Any) -> None:
    with _ledger().open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"op": op, **fields}, sort_keys=True) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def _count(op: str) -> int:
    if not _ledger().exists():
        return 0
    lines = _ledger().read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if json.loads(line)["op"] == op)


@server.tool()
def lookup_user(email: str) -> dict[str, Any]:
    """Find a user by e-mail (reads only)."""
    return {"email": email, "found": False}


@server.tool()
def echo(text: str) -> dict[str, Any]:
    """Answer the text (reads nothing, records nothing: the benchmark's body)."""
    return {"text": text}


@server.tool()
def create_user(email: str, name: str) -> dict[str, Any]:
    """Create a user account."""
    if email.startswith("broken"):
        raise ValueError(f"cannot create {email}")
    user_id = _count("create_user") + 1
    _record("create_user", email=email, name=name, user_id=user_id)
    return {"user_id": user_id, "email": email}


@server.tool()
def delete_user(user_id: int, idempotency_key: str) -> dict[str, Any]:
    """Delete a user account (the compensation of create_user)."""
    _record("delete_user", user_id=user_id, idempotency_key=idempotency_key)
    return {"deleted": user_id}


@server.tool()
def send_email(to: str, subject: str, body: str = "") -> dict[str, Any]:
    """Send an e-mail."""
    message_id = f"msg-{uuid.uuid4().hex[:8]}"
    _record("send_email", to=to, subject=subject, message_id=message_id)
    return {"message_id": message_id}


@server.tool()
def retract_email(message_id: str, idempotency_key: str) -> dict[str, Any]:
    """Retract an e-mail not yet read (the compensation of send_email)."""
    _record("retract_email", message_id=message_id, idempotency_key=idempotency_key)
    return {"retracted": message_id}


@server.tool()
def process_payout(account: str, amount_cents: int) -> dict[str, Any]:
    """Pay money out to an account: cannot be undone."""
    payout_id = f"po-{_count('process_payout') + 1}"
    _record("process_payout", account=account, amount_cents=amount_cents, payout_id=payout_id)
    return {"payout_id": payout_id, "amount_cents": amount_cents}


@server.tool()
def slow_echo(text: str, seconds: float) -> dict[str, Any]:
    """Answer after a delay (to test an upstream that is too slow)."""
    time.sleep(seconds)
    _record("slow_echo", text=text)
    return {"text": text}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
