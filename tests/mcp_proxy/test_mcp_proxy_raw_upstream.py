"""The MCP proxy in front of an upstream written by hand (tests/mcp_raw_upstream.py), with
real processes: the SDK's MCP client drives `undolog mcp-proxy` over stdio. The upstream
answers what an SDK would not let it: a result that is no valid CallToolResult (after
acting), and a tool whose input schema changes mid session, away from what its
compensation reads. Also: the upstream name the proxy keeps for itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import psycopg
import pytest
from test_mcp_proxy import (
    IRREVERSIBLE,
    SAFE,
    compensable,
    decided,
    effects,
    ledger,
    names,
    ops,
    run,
    sessions,
    stdio_client,
    text,
    upstream_policy,
    wait_for,
)

from undolog import saga
from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.mcp_proxy.proxy import McpProxy

__all__ = ["ledger"]  # a fixture, used by name

UNDONE = compensable("undo", key="args.key")  # by the upstream's own tool
RAW_TOOLS = {
    "bad": UNDONE,
    "newer": compensable("undo", key="result.made.key"),
    "bad_error": UNDONE,
    "make": UNDONE,
    "flip": SAFE,
    "ok": SAFE,
}


def raw_policy(
    tmp_path: Path,
    script: str = "mcp_raw_upstream.py",
    tools: dict[str, str] = RAW_TOOLS,
    **proxy: float,
) -> Path:
    """A policy fronting the hand-written upstream ``raw`` (its tool undo not offered)."""
    return upstream_policy(tmp_path / "raw.toml", "raw", script, "undo", tools, **proxy)


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


async def _gone(pid: int) -> None:
    """Until the process has exited (a loaded machine may take a while to end it)."""
    for _ in range(400):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"upstream {pid} did not exit")


def test_a_changed_schema_after_a_reconnect_is_checked_again(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """The upstream exits (a crash, an upgrade) and, started again at the next call, lists
    `make` with its argument renamed (key -> id), with no tools/list_changed: a restart
    is a new listing, checked as one. `make` is no longer offered, and a call of it is
    not run (it would be journaled with an undo, args.key, that can never be filled)."""
    tools = {"make": UNDONE, "die": SAFE, "ok": SAFE}
    path = raw_policy(tmp_path, "mcp_raw_restart_upstream.py", tools)
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with stdio_client(path, dsn, ledger) as client:
            assert not (await client.call_tool("make", {"key": "a"})).is_error
            Path(f"{ledger}.renamed").write_text("1")
            await client.call_tool("die", {})
            await _gone(int(Path(f"{ledger}.pid").read_text()))
            await asyncio.sleep(1.0)  # the proxy reads its end: the next call starts it again
            seen["made"] = await client.call_tool("make", {"id": "x"})
            seen["offered"] = [t.name for t in (await client.list_tools()).tools]
            seen["ok"] = await client.call_tool("ok", {})

    run(body)
    made = seen["made"]
    assert made.is_error and "make" in text(made), text(made)
    assert "make" not in seen["offered"], seen["offered"]
    assert not seen["ok"].is_error, text(seen["ok"])
    assert [e.get("key", e.get("id")) for e in ops(ledger) if e["op"] == "make"] == ["a"]


def test_overlapping_relistings_never_offer_what_the_newest_withdrew(tmp_path: Path) -> None:
    """Two listings handled at once (two list_changed in a row): the older one (make takes
    key: its compensation fits) registers it in the journal, an await; the newer one (make
    takes id: it does not fit) is handled meanwhile. The newer listing is the one that
    stands: make is not offered."""
    policy = load_policy(raw_policy(tmp_path))

    def listing(arg: str) -> dict[str, types.Tool]:
        def schema(*names: str) -> dict[str, Any]:
            return {
                "type": "object",
                "properties": {n: {"type": "string"} for n in names},
                "required": list(names),
            }

        tools = {
            name: types.Tool(name=name, input_schema=schema("key"))
            for name in ("bad", "newer", "bad_error", "flip", "ok")
        }
        tools["make"] = types.Tool(name="make", input_schema=schema(arg))
        tools["undo"] = types.Tool(name="undo", input_schema=schema("key", "idempotency_key"))
        return tools

    async def body() -> dict[str, Any]:
        upstream = SimpleNamespace(tools=listing("key"))
        proxy = McpProxy(policy, "postgresql://unused", {"raw": upstream})  # type: ignore[dict-item]

        @contextlib.asynccontextmanager
        async def connection() -> AsyncIterator[None]:
            yield None

        async def register(conn: Any, route: Any) -> None:
            await asyncio.sleep(0.2)  # the journal's round trip

        proxy.pool = SimpleNamespace(connection=connection)  # type: ignore[assignment]
        proxy._register = register  # type: ignore[method-assign]
        await proxy.refresh_routes("raw", listing("id"))  # withdrawn
        assert "make" not in proxy.routes
        older = asyncio.create_task(proxy.refresh_routes("raw", listing("key")))
        await asyncio.sleep(0.05)
        await proxy.refresh_routes("raw", listing("id"))  # the newer listing
        await older
        return proxy.routes

    routes = asyncio.run(body())
    assert "make" not in routes, routes["make"].listed.input_schema


def test_a_late_unreadable_answer_is_journaled_as_done(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream acted and answered, past call_timeout_seconds, what is no valid
    result: as in time, the call is journaled as done (with the note), not left of
    unknown outcome (which would roll the whole session back at its end); the same call
    made again answers the record, without running again."""
    tools = {"slow_bad": UNDONE, "ok": SAFE}
    path = raw_policy(
        tmp_path, "mcp_raw_slow_upstream.py", tools, call_timeout_seconds=1, late_answer_seconds=10
    )
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with stdio_client(path, dsn, ledger) as client:
            seen["first"] = await client.call_tool("slow_bad", {"key": "k"})
            await asyncio.to_thread(wait_for, lambda: effects(conn) == [("k", "committed")])
            seen["again"] = await client.call_tool("slow_bad", {"key": "k"})

    run(body)
    assert "outcome is unknown" in text(seen["first"]), text(seen["first"])
    assert "ran, but its result could not be read" in text(seen["again"]), text(seen["again"])
    assert names(ledger) == ["slow_bad"]
    assert effects(conn) == [("k", "committed")]
    assert [s for _, s in sessions(conn)] == ["completed"]


def test_an_irreversible_unreadable_result_is_not_said_undoable(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """An approved IRREVERSIBLE call ran and answered what is no valid result: the note
    says it ran and cannot be undone, never that a rollback undoes it."""
    path = raw_policy(tmp_path, tools={"bad": IRREVERSIBLE, "ok": SAFE}, hold_seconds=10)
    seen: dict[str, str] = {}

    async def body() -> None:
        async with stdio_client(path, dsn, ledger) as client:
            answer = await decided(conn, client.call_tool("bad", {"key": "k"}), "approve", "bob")
            seen["answer"] = text(answer)

    run(body)
    assert names(ledger) == ["bad"], seen
    said = seen["answer"]
    assert "ran, but its result could not be read" in said, said
    assert "undone with its session" not in said, said
    assert "irreversible" in said.lower() and "not undone" in said, said
