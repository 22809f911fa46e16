"""Edit, then approve, through the MCP proxy: the upstream gets the approved arguments,
once, and the client's result says first that a person changed them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from test_mcp_proxy import derived_policy, ops, pending_approval, run, stdio_client, text

from undolog import approvals


def test_an_edited_irreversible_call_runs_upstream_with_the_approved_args(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    config = derived_policy(tmp_path, hold_seconds=0.5)
    payout = {"account": "acc-7", "amount_cents": 90_000}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            waiting = await client.call_tool("payments__process_payout", payout)
            approval_id = pending_approval(conn)
            assert approval_id is not None and f"approval {approval_id}" in text(waiting)
            edited = {"account": "acc-7", "amount_cents": 9_000}
            approvals.approve(conn, approval_id, "alice", "policy cap", args=edited)
            paid = await client.call_tool("payments__process_payout", payout)
            assert not paid.is_error
            assert paid.structured_content is not None
            assert paid.structured_content["amount_cents"] == 9_000
            assert text(paid).startswith("Note: alice changed the arguments")
            assert "amount_cents: 90000 -> 9000" in text(paid)
            assert paid.meta is not None
            assert paid.meta["undolog/edit"]["requested_args"] == payout
            replay = await client.call_tool("payments__process_payout", payout)
            assert replay.structured_content == paid.structured_content
            assert text(replay).startswith("Note: alice changed the arguments")

    run(body)
    sent = [entry for entry in ops(ledger) if entry["op"] == "process_payout"]
    assert len(sent) == 1, sent
    assert "9000" in str(sent[0]) and "90000" not in str(sent[0])
