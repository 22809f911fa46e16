"""The MCP proxy's optional tool undolog__undo_last (proxy.undo_last_tool): an agent
undoes its session's last calls through undolog.rollback_last and the walk, with a real
MCP client, the proxy process and tests/mcp_session_upstream.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_mcp_proxy import ledger, ops, run, sessions, stdio_client, text
from test_mcp_proxy_sessions import session_policy

from undolog.mcp_proxy.policy import PolicyError, load_policy

__all__ = ["ledger"]  # the fixture


def test_the_agent_undoes_its_last_calls_and_goes_on(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    config = session_policy(tmp_path, proxy='undo_last_tool = "safe"')

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            assert "undolog__undo_last" in listed
            for key in ("a", "b", "c"):
                assert not (await client.call_tool("put", {"key": key, "value": "1"})).is_error
            undone = await client.call_tool("undolog__undo_last", {"count": 2, "reason": "oops"})
            assert not undone.is_error, text(undone)
            assert "undid the last 2 call(s); the session goes on" in text(undone)
            again = await client.call_tool("put", {"key": "c", "value": "2"})  # a new call
            assert not again.is_error, text(again)
            seen = await client.call_tool("read_all", {})
            assert seen.structured_content is not None
            assert seen.structured_content["store"] == {"a": "1", "c": "2"}
            too_many = await client.call_tool("undolog__undo_last", {"count": 9, "reason": "x"})
            assert too_many.is_error and "fewer than 9 calls" in text(too_many)

    run(body)
    forgets = [e["key"] for e in ops(ledger) if e["op"] == "forget"]
    assert forgets == ["c", "b"]  # last first
    ((sid, _),) = sessions(conn)
    row = conn.execute(
        "SELECT detail -> 'rollback_to' ->> 'reason', detail -> 'rollback_to' ->> 'count'"
        " FROM undolog.undolog_session_history WHERE session_id = %s AND to_state ="
        " 'compensating' AND from_state = 'active'",
        (sid,),
    ).fetchone()
    assert row == ("oops", "2")


def test_the_tool_is_off_by_default_and_its_tier_checked(tmp_path: Path, dsn: str) -> None:
    assert load_policy(session_policy(tmp_path)).undo_last_tool == "off"
    with pytest.raises(PolicyError, match="asking a person before an undo is not built"):
        load_policy(session_policy(tmp_path, proxy='undo_last_tool = "irreversible"'))
