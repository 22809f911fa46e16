"""The MCP proxy in front of an upstream written by hand (tests/mcp_raw_upstream.py), with
real processes: the SDK's MCP client drives `undolog mcp-proxy` over stdio. The upstream
answers what an SDK would not let it: a result that is no valid CallToolResult (after
acting), and a tool whose input schema changes mid session, away from what its
compensation reads. Also: the upstream name the proxy keeps for itself."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import mcp_types as types
import psycopg
import pytest
from test_mcp_proxy import (
    effects,
    ledger,
    names,
    ops,
    run,
    sessions,
    stdio_client,
    text,
    wait_for,
)

from undolog import saga
from undolog.mcp_proxy.policy import PolicyError, load_policy

__all__ = ["ledger"]  # a fixture, used by name

RAW_POLICY = """\
[proxy]
hold_seconds = 2
call_timeout_seconds = 5

[upstreams.raw]
command = ["python", "tests/mcp_raw_upstream.py"]
hide = ["undo"]

[upstreams.raw.tools.bad]
tier = "compensable"
compensation.undo = { key = "args.key", idempotency_key = "undo_id" }
[upstreams.raw.tools.newer]
tier = "compensable"
compensation.undo = { key = "result.made.key", idempotency_key = "undo_id" }
[upstreams.raw.tools.bad_error]
tier = "compensable"
compensation.undo = { key = "args.key", idempotency_key = "undo_id" }
[upstreams.raw.tools.make]
tier = "compensable"
compensation.undo = { key = "args.key", idempotency_key = "undo_id" }
[upstreams.raw.tools.flip]
tier = "safe"
[upstreams.raw.tools.ok]
tier = "safe"
"""


def raw_policy(tmp_path: Path) -> Path:
    path = tmp_path / "raw.toml"
    path.write_text(RAW_POLICY)
    return path


def test_a_malformed_result_is_never_run_twice_and_stays_undoable(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream acted, then answered a result that is no CallToolResult (a text item
    without its text; a content type of a newer specification): the call ran, so it is
    journaled as done, with a note and what its compensation reads from what came. The
    client is answered that (a tool result, never a JSON-RPC error), the same call made
    again replays it without reaching the upstream, and a rollback undoes both calls."""
    answers: list[types.CallToolResult] = []

    async def body() -> None:
        async with stdio_client(raw_policy(tmp_path), dsn, ledger) as client:
            await client.list_tools()
            for _ in range(2):
                answers.append(await client.call_tool("bad", {"key": "k"}))
            answers.append(await client.call_tool("newer", {"key": "n"}))
            wait_for(lambda: effects(conn) == [("k", "committed"), ("n", "committed")])
            (sid, _), *_ = sessions(conn)
            saga.rollback_session(conn, sid, "alice", "undo it all")

    run(body)
    assert [e for e in names(ledger) if e != "undo"] == ["bad", "newer"]
    for answer in answers:
        said = text(answer)
        assert "ran, but its result could not be read" in said, said
        assert "not a valid MCP tool result" in said, said
    assert text(answers[0]) == text(answers[1])  # the replay answers the note
    wait_for(lambda: sessions(conn)[0][1] == "compensated")
    # LIFO, and `newer`'s compensation read result.made.key from what came
    assert [e["key"] for e in ops(ledger) if e["op"] == "undo"] == ["n", "k"]


def test_a_malformed_error_result_is_journaled_as_failed(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A malformed result that says it is an error (isError) is the upstream's refusal,
    as a well-formed one is: the client gets a tool error, the call is journaled as not
    having acted, and made again it runs again; nothing is left to undo."""
    answers: list[types.CallToolResult] = []

    async def body() -> None:
        async with stdio_client(raw_policy(tmp_path), dsn, ledger) as client:
            for _ in range(2):
                answers.append(await client.call_tool("bad_error", {"key": "e"}))
            assert effects(conn) == [("e", "pending")]

    run(body)
    assert all(a.is_error and "not a valid MCP tool result" in text(a) for a in answers), [
        text(a) for a in answers
    ]
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert names(ledger) == []


def test_a_compensable_tools_changed_schema_is_checked_again(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """Mid session the upstream lists `make` again with its argument renamed (key -> id):
    its compensation reads args.key, which the new schema no longer has, so `make` is no
    longer offered (a call of it would be journaled with an undo that fails on the day it
    is needed) and a call of it is refused, not run. Listed again as it was, it is
    offered again."""
    seen: dict[str, Any] = {}

    async def offered(client: Any) -> dict[str, types.Tool]:
        return {t.name: t for t in (await client.list_tools()).tools}

    async def relisted(client: Any, want: bool) -> dict[str, types.Tool]:
        await client.call_tool("flip", {})
        for _ in range(100):  # the notification, the proxy's re-listing
            tools = await offered(client)
            if ("make" in tools) == want:
                return tools
            await asyncio.sleep(0.1)
        raise AssertionError(f"make still {'not ' if want else ''}offered")

    async def body() -> None:
        async with stdio_client(raw_policy(tmp_path), dsn, ledger) as client:
            assert "make" in await offered(client)
            assert not (await client.call_tool("make", {"key": "a"})).is_error
            await relisted(client, want=False)
            seen["refused"] = await client.call_tool("make", {"id": "x"})
            tools = await relisted(client, want=True)
            assert "key" in tools["make"].input_schema["properties"]
            assert not (await client.call_tool("make", {"key": "b"})).is_error

    run(body)
    refused = seen["refused"]
    assert refused.is_error and "unknown tool 'make'" in text(refused), text(refused)
    assert [e.get("key", e.get("id")) for e in ops(ledger) if e["op"] == "make"] == ["a", "b"]


def test_the_upstream_name_undolog_is_the_proxys_own(tmp_path: Path) -> None:
    """The proxy journals its own undolog__undo_last as `undolog/undo_last`: an upstream
    named `undolog` would share its journal names (an approval of the one would let the
    other run), so the policy is refused, saying what to do."""
    path = tmp_path / "undolog.toml"
    path.write_text('[upstreams.undolog]\ncommand = ["python", "tests/mcp_raw_upstream.py"]\n')
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    message = str(refused.value)
    assert "upstreams.undolog" in message, message
    assert "reserved" in message and "rename the upstream" in message, message
    path.write_text('[upstreams.undolog2]\ncommand = ["python", "tests/mcp_raw_upstream.py"]\n')
    assert list(load_policy(path).upstreams) == ["undolog2"]
