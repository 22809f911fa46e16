"""Late answers (a journaled call answered after call_timeout_seconds) as the agent and
the operator see them, with real processes: the SDK's MCP client (its ClientSession,
through mcp.Client) drives `undolog mcp-proxy` over stdio in front of real upstream
servers whose tools act at once and answer after a delay.

- undolog__undo_last's walk waits for the late answers of its session, as the session's
  end walk does: it undoes the call with its real result instead of halting for a human.
- The proxy's metrics count the late answers awaited, recorded and given up.
- The client whose MCP session is still open is told of a late result
  (notifications/message, its logging callback), naming the call and that making it
  again returns it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import mcp_types as types
import psycopg
import pytest
from test_mcp_proxy import (
    ROOT,
    SESSION,
    HttpProxy,
    free_port,
    http_proxies,
    ledger,
    names,
    ops,
    release_slow_make,
    run,
    sessions,
    text,
    wait_for,
)
from test_mcp_proxy_late import SLOW, WALK_MARGIN, late_events, late_policy
from test_mcp_proxy_metrics import ascrape, client
from test_mcp_proxy_sessions import effects

from undolog.mcp_proxy.metrics import LATE_GIVEN_UP, LATE_RECORDED

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name


async def released_once_compensating(conn: psycopg.Connection[Any], ledger: Path, key: str) -> None:
    """Let slow_make of that key answer once its session is compensating: the undo has
    begun, and its walk waits for the answer (a walk takes no call before the session's
    late answers are over). Released WALK_MARGIN after that: a walk that did not wait
    would take the call within milliseconds of it, so the test would see it."""
    await asyncio.to_thread(wait_for, lambda: [s for _, s in sessions(conn)] == ["compensating"])
    await asyncio.sleep(WALK_MARGIN)
    release_slow_make(ledger, key)


def test_undo_last_waits_for_the_late_answer_of_the_call_it_undoes(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The agent undoes a call whose answer is still awaited (slow_make, undone by the id
    its result gives: `result.id`). The undo's walk took the call at once, before its
    result came: the compensation could not be built and the walk halted for a human.
    Now the walk waits for the late answer first (as the session's end walk does): the
    result is committed, the call undone with the real id, and the session goes on.
    (Before, a retry of the walk could still be handed the result once it came, but
    only as a late result: the session was flagged for an operator.)"""
    config = late_policy(tmp_path, proxy='late_answer_seconds = 20\nundo_last_tool = "safe"')

    async def body() -> None:
        async with client(config, dsn, ledger, mode="legacy") as mcp:
            # answers once released (15 s: the bound, within late_answer_seconds)
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 15})
            assert first.is_error and "outcome is unknown for now" in text(first), text(first)
            releasing = asyncio.create_task(released_once_compensating(conn, ledger, "s"))
            began = time.monotonic()
            undone = await mcp.call_tool("undolog__undo_last", {"count": 1, "reason": "oops"})
            took = time.monotonic() - began
            await releasing
            assert not undone.is_error, text(undone)
            assert "undid the last 1 call(s); the session goes on" in text(undone), text(undone)
            assert took < 20, f"the undo took {took:.1f} s"
            assert effects(conn) == [(SLOW, 0, "compensated")]
            later = await mcp.call_tool("put", {"key": "a", "value": "1"})
            assert not later.is_error, text(later)

    run(body)
    assert names(ledger) == ["slow_make", "unmake", "put"]
    assert ops(ledger)[1]["id"] == "s"  # built from the late result
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert late_events(conn) == []  # committed before the walk took the call
    flagged = conn.execute("SELECT needs_attention FROM undolog.sessions_overview").fetchall()
    assert flagged == [(False,)]


UPSTREAM_HEAD = """
import asyncio, json, os
from typing import Any
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer("late")

def record(op: str, key: str) -> None:
    with open(os.environ["UPSTREAM_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"op": op, "key": key}) + "\\n")
"""
"""The start of this file's upstream servers: imports, the server, the ledger."""

LATE_UPSTREAM = (
    UPSTREAM_HEAD
    + '''

@server.tool()
async def slow_make(key: str, seconds: float) -> dict[str, Any]:
    """Act at once, answer after a delay."""
    record("slow_make", key)
    await asyncio.sleep(seconds)
    return {"id": key}

@server.tool()
async def slow_fail(key: str, seconds: float) -> dict[str, Any]:
    """Answer an error after a delay."""
    record("slow_fail", key)
    await asyncio.sleep(seconds)
    raise ValueError("refused, late")

@server.tool()
async def unmake(key: str, idempotency_key: str) -> dict[str, Any]:
    record("unmake", key)
    return {"unmade": key}

server.run()
'''
)


def late_counts(seen: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in seen.items() if k.startswith("undolog_proxy_late_answers_")}


async def counted(port: int, sample: str, timeout: float = 20) -> None:
    """Until the proxy's GET /metrics counts that sample at least once."""
    deadline = time.monotonic() + timeout
    while (await ascrape(port)).get(sample, 0) < 1:
        assert time.monotonic() < deadline, f"{sample} not counted within {timeout:g} s"
        await asyncio.sleep(0.1)


def test_late_answers_are_counted(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """Awaited (three calls), recorded (one committed, one an error result: failed),
    given up (one past max_late_answers = 1: the bound; one with no answer within
    late_answer_seconds: expired), read from the proxy's GET /metrics."""
    script = tmp_path / "late_upstream.py"
    script.write_text(LATE_UPSTREAM)
    comp = 'compensation.unmake = { key = "args.key", idempotency_key = "undo_id" }\n'
    config = tmp_path / "late.toml"
    config.write_text(
        "[proxy]\ncall_timeout_seconds = 1.5\nlate_answer_seconds = 3\nmax_late_answers = 1\n"
        f'[upstreams.kv]\ncommand = ["python", "{script}"]\nhide = ["unmake"]\n'
        f'[upstreams.kv.tools.slow_make]\ntier = "compensable"\n{comp}'
        f'[upstreams.kv.tools.slow_fail]\ntier = "compensable"\n{comp}'
    )
    port = free_port()

    async def body() -> None:
        async with client(
            config, dsn, ledger, "--metrics-listen", f"127.0.0.1:{port}", mode="legacy"
        ) as mcp:
            start = late_counts(await ascrape(port))
            assert start == {
                "undolog_proxy_late_answers_total": 0,
                "undolog_proxy_late_answers_awaited_total": 0,
                'undolog_proxy_late_answers_recorded_total{outcome="committed"}': 0,
                'undolog_proxy_late_answers_recorded_total{outcome="failed"}': 0,
                'undolog_proxy_late_answers_given_up_total{reason="expired"}': 0,
                'undolog_proxy_late_answers_given_up_total{reason="bound"}': 0,
            }, start
            # a: awaited and committed; b, made while a is awaited: past the bound
            a = await mcp.call_tool("slow_make", {"key": "a", "seconds": 2.5})
            assert "waits up to 3 s" in text(a), text(a)
            b = await mcp.call_tool("slow_make", {"key": "b", "seconds": 10})
            assert b.is_error and "waits up to" not in text(b), text(b)
            # c: awaited, its error result recorded (failed)
            c = await mcp.call_tool("slow_fail", {"key": "c", "seconds": 2.5})
            assert "waits up to 3 s" in text(c), text(c)
            await counted(port, 'undolog_proxy_late_answers_recorded_total{outcome="failed"}')
            # d: awaited, no answer in time (expired)
            d = await mcp.call_tool("slow_make", {"key": "d", "seconds": 20})
            assert "waits up to 3 s" in text(d), text(d)
            await counted(port, 'undolog_proxy_late_answers_given_up_total{reason="expired"}')
            seen = late_counts(await ascrape(port))
            assert seen == {
                "undolog_proxy_late_answers_total": 0,
                "undolog_proxy_late_answers_awaited_total": 3,
                'undolog_proxy_late_answers_recorded_total{outcome="committed"}': 1,
                'undolog_proxy_late_answers_recorded_total{outcome="failed"}': 1,
                'undolog_proxy_late_answers_given_up_total{reason="expired"}': 1,
                'undolog_proxy_late_answers_given_up_total{reason="bound"}': 1,
            }, seen

    run(body)
    wait_for(lambda: [state for _, state in sessions(conn)] == ["compensated"])
    states = sorted(state for _, _, state in effects(conn))
    assert states == ["compensated", "compensated", "compensated", "pending"], states


def test_the_client_is_told_of_a_late_result(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The call is answered "outcome unknown"; its result comes later and is committed.
    The client, its MCP session still open, gets a notifications/message (its logging
    callback) naming the tool, the call's journal entry and the session's handle, and
    saying that making the same call again returns the result: which it does."""
    told: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        told.append(params)

    config = late_policy(tmp_path)
    params = client(config, dsn, ledger, mode="legacy")
    params.logging_callback = on_log

    async def body() -> None:
        async with params as mcp:
            # a server that sends notifications/message declares the logging capability
            assert mcp.server_capabilities.logging is not None
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 4})
            assert first.is_error and "outcome is unknown for now" in text(first), text(first)
            handle = (first.meta or {})[SESSION]
            assert told == []
            release_slow_make(ledger, "s")  # answered now, not after its 4 s
            for _ in range(200):
                if told:
                    break
                await asyncio.sleep(0.1)
            assert len(told) == 1, told
            note = told[0]
            ((effect_id,),) = conn.execute(
                "SELECT effect_id FROM undolog.undolog_effect_log"
            ).fetchall()
            assert note.level == "notice" and note.logger == "undolog.mcp_proxy"
            data = note.data
            assert isinstance(data, dict), data
            assert data["tool"] == "slow_make" and data["outcome"] == "committed", data
            assert data["effect_id"] == str(effect_id) and data["session"] == handle, data
            assert data["arguments"] == {"key": "s", "seconds": 4}, data
            said = data["message"]
            assert "slow_make" in said and str(effect_id) in said, said
            assert "making the same call again" in said and "returns" in said, said
            again = await mcp.call_tool("slow_make", {"key": "s", "seconds": 4})
            assert not again.is_error and again.structured_content == {"id": "s"}

    run(body)
    assert names(ledger) == ["slow_make"]
    assert [state for _, state in sessions(conn)] == ["completed"]


def test_a_late_result_whose_client_has_gone_is_recorded_all_the_same(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Over streamable HTTP the client ends its MCP session while the answer is awaited:
    nobody is told, the answer is recorded, the session completes, and the proxy serves
    the next client."""
    proxy = HttpProxy(late_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)

    async def gone() -> None:
        async with proxy.client() as mcp:
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 4})
            assert first.is_error and "outcome is unknown for now" in text(first), text(first)
        release_slow_make(ledger, "s")  # answered now, its client gone

    async def next_client() -> None:
        async with proxy.client() as mcp:
            put = await mcp.call_tool("put", {"key": "a", "value": "1"})
            assert not put.is_error, text(put)

    run(gone)
    wait_for(lambda: [state for _, state in sessions(conn)] == ["completed"], timeout=30)
    assert effects(conn) == [(SLOW, 0, "committed")]
    run(next_client)
    assert proxy.process.poll() is None
    assert names(ledger) == ["slow_make", "put"]


# logging/setLevel is of the handshake era (deprecated by 2026-07-28, SEP-2577): still
# what such a client sends, so the proxy honours it
@pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")
def test_a_client_that_set_a_higher_log_level_is_not_told(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """logging/setLevel above notice: the late result is recorded (and replayed) as
    before, but no notifications/message is sent."""
    told: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        told.append(params)

    params = client(late_policy(tmp_path), dsn, ledger, mode="legacy")
    params.logging_callback = on_log

    async def body() -> None:
        async with params as mcp:
            await mcp.set_logging_level("warning")
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 3})
            assert "outcome is unknown for now" in text(first), text(first)
            release_slow_make(ledger, "s")  # answered now, not after its 3 s
            await asyncio.to_thread(wait_for, lambda: effects(conn) == [(SLOW, 0, "committed")])
            await asyncio.sleep(1)
            again = await mcp.call_tool("slow_make", {"key": "s", "seconds": 3})
            assert not again.is_error and again.structured_content == {"id": "s"}
            assert told == []

    run(body)
    assert names(ledger) == ["slow_make"]


def test_the_late_answer_labels_are_documented() -> None:
    page = (ROOT / "docs" / "mcp-proxy.md").read_text(encoding="utf-8")
    table = page[page.index("## Metrics") : page.index("## Performance")]
    for name, labels in (
        ("undolog_proxy_late_answers_recorded_total", LATE_RECORDED),
        ("undolog_proxy_late_answers_given_up_total", LATE_GIVEN_UP),
    ):
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert all(f"`{label}`" in row for label in labels), row


def test_an_undo_whose_client_gave_up_during_the_late_wait_still_walks(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """undolog__undo_last waits for a late answer before its walk; its client gives up
    on it meanwhile (a 3 s read timeout: the SDK cancels the request, the proxy's handler
    is cancelled). The walk goes on all the same, as the session's walk task: once the
    answer comes the call is undone with its result and the session goes on. (The walk
    used to run inside the handler: cancelled, it never ran, and the session stayed
    compensating, refusing new calls and a retried undo.)"""
    config = late_policy(tmp_path, proxy='late_answer_seconds = 30\nundo_last_tool = "safe"')

    async def body() -> None:
        async with client(config, dsn, ledger, mode="legacy") as mcp:
            # answers once released (25 s: the bound, within late_answer_seconds)
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 25})
            assert "outcome is unknown for now" in text(first), text(first)
            with pytest.raises(Exception):  # noqa: B017 (the SDK's timeout error)
                await mcp.call_tool(
                    "undolog__undo_last", {"count": 1, "reason": "oops"}, read_timeout_seconds=3
                )
            release_slow_make(ledger, "s")  # the answer comes after the client gave up
            # then the walk (a worker thread)
            await asyncio.to_thread(
                wait_for, lambda: effects(conn) == [(SLOW, 0, "compensated")], 40
            )
            await asyncio.to_thread(
                wait_for, lambda: [s for _, s in sessions(conn)] == ["active"], 20
            )
            later = await mcp.call_tool("put", {"key": "a", "value": "1"})
            assert not later.is_error, text(later)

    run(body)
    assert names(ledger) == ["slow_make", "unmake", "put"]
    assert ops(ledger)[1]["id"] == "s"  # built from the late result


def test_an_undo_waiting_for_a_late_answer_reports_progress(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A client that asked for progress (a progressToken) hears from the undo while it
    waits for the late answer, as a held call does (so that its timeout starts again)."""
    config = late_policy(tmp_path, proxy='late_answer_seconds = 30\nundo_last_tool = "safe"')
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))
        if message and "late answer" in message:
            release_slow_make(ledger, "s")  # the undo was heard waiting: it may answer now

    async def body() -> None:
        async with client(config, dsn, ledger, mode="legacy") as mcp:
            # answers once released (25 s: the bound, within late_answer_seconds)
            first = await mcp.call_tool("slow_make", {"key": "s", "seconds": 25})
            assert "outcome is unknown for now" in text(first), text(first)
            undone = await mcp.call_tool(
                "undolog__undo_last",
                {"count": 1, "reason": "oops"},
                progress_callback=on_progress,
            )
            assert "undid the last 1 call(s)" in text(undone), text(undone)

    run(body)
    assert heard, "no progress while the undo waited"
    assert any(message and "late answer" in message for _, _, message in heard), heard
    assert effects(conn) == [(SLOW, 0, "compensated")]


def test_a_late_result_during_a_partial_undo_is_not_said_undone(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """slow_make (answered late), put, then undolog__undo_last(count=1): the session is
    compensating when slow_make's answer comes, but the undo takes put only. The notice
    must not say that slow_make is undone (it stays committed): it says the session is
    being rolled back and what happens if the rollback reaches the call."""
    told: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        told.append(params)

    config = late_policy(tmp_path, proxy='late_answer_seconds = 20\nundo_last_tool = "safe"')
    params = client(config, dsn, ledger, mode="legacy")
    params.logging_callback = on_log

    async def body() -> None:
        async with params as mcp:
            # answers once released (15 s: the bound, within late_answer_seconds)
            first = await mcp.call_tool("slow_make", {"key": "a", "seconds": 15})
            assert "outcome is unknown for now" in text(first), text(first)
            put = await mcp.call_tool("put", {"key": "b", "value": "1"})
            assert not put.is_error, text(put)
            releasing = asyncio.create_task(released_once_compensating(conn, ledger, "a"))
            undone = await mcp.call_tool("undolog__undo_last", {"count": 1, "reason": "b"})
            await releasing
            assert "undid the last 1 call(s)" in text(undone), text(undone)
            for _ in range(100):
                if told:
                    break
                await asyncio.sleep(0.1)
            assert len(told) == 1, told
            said = told[0].data["message"]
            assert "is undone as that answer says" not in said, said
            assert "not made again" not in said, said
            if "rolled back" in said:
                assert "if the rollback reaches this call" in said, said
            assert sorted(effects(conn)) == [("kv/put", 0, "compensated"), (SLOW, 0, "committed")]

    run(body)
    assert names(ledger) == ["slow_make", "put", "forget"]


SLOW_REFUSING_UPSTREAM = (
    UPSTREAM_HEAD
    + '''

@server.tool()
async def slow_refuse(key: str, seconds: float) -> dict[str, Any]:
    """Refuse (a JSON-RPC error: nothing done) after a delay."""
    record("slow_refuse", key)
    await asyncio.sleep(seconds)
    raise MCPError(code=-32602, message="refused: bad key (nothing done)")

@server.tool()
async def slow_make(key: str, seconds: float, pad: str = "") -> dict[str, Any]:
    record("slow_make", key)
    await asyncio.sleep(seconds)
    return {"id": key}

@server.tool()
async def unmake(key: str, idempotency_key: str) -> dict[str, Any]:
    record("unmake", key)
    return {"unmade": key}

server.run()
'''
)


def test_a_late_json_rpc_error_is_recorded_as_not_run(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream refuses the call with a JSON-RPC error after the call's timeout: as on
    the normal path, the call did nothing and is recorded "not run" (counted recorded
    failed, not given up), the client is told, the same call made again runs again, and
    the session completes with no compensation. (It was taken for no answer: the effect
    stayed executing and the session was rolled back, compensating a call that did
    nothing.) A call whose arguments are over 4096 characters is told without them."""
    script = tmp_path / "up.py"
    script.write_text(SLOW_REFUSING_UPSTREAM)
    comp = 'compensation.unmake = { key = "args.key", idempotency_key = "undo_id" }\n'
    config = tmp_path / "late.toml"
    config.write_text(
        "[proxy]\ncall_timeout_seconds = 1.5\nlate_answer_seconds = 15\n"
        f'[upstreams.kv]\ncommand = ["python", "{script}"]\nhide = ["unmake"]\n'
        f'[upstreams.kv.tools.slow_refuse]\ntier = "compensable"\n{comp}'
        f'[upstreams.kv.tools.slow_make]\ntier = "compensable"\n{comp}'
    )
    port = free_port()
    told: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        told.append(params)

    params = client(config, dsn, ledger, "--metrics-listen", f"127.0.0.1:{port}", mode="legacy")
    params.logging_callback = on_log

    async def body() -> None:
        async with params as mcp:
            first = await mcp.call_tool("slow_refuse", {"key": "x", "seconds": 4})
            assert "outcome is unknown for now" in text(first), text(first)
            big = await mcp.call_tool("slow_make", {"key": "y", "seconds": 3, "pad": "p" * 5000})
            assert "outcome is unknown for now" in text(big), text(big)
            for _ in range(300):
                if len(told) == 2:
                    break
                await asyncio.sleep(0.1)
            by_tool = {note.data["tool"]: note.data for note in told}
            assert sorted(by_tool) == ["slow_make", "slow_refuse"], told
            assert by_tool["slow_refuse"]["outcome"] == "failed", by_tool
            assert "runs it again" in by_tool["slow_refuse"]["message"], by_tool
            assert "arguments" in by_tool["slow_refuse"], by_tool
            assert "arguments" not in by_tool["slow_make"], by_tool
            seen = late_counts(await ascrape(port))
            assert seen['undolog_proxy_late_answers_recorded_total{outcome="failed"}'] == 1, seen
            assert seen['undolog_proxy_late_answers_given_up_total{reason="expired"}'] == 0, seen
            ((error,),) = conn.execute(
                "SELECT error FROM undolog.undolog_effect_log WHERE tool_name = 'kv/slow_refuse'"
            ).fetchall()
            assert "not run" in str(error) and "refused: bad key" in str(error), error
            again = await mcp.call_tool("slow_refuse", {"key": "x", "seconds": 0})
            assert again.is_error and "was not run" in text(again), text(again)

    run(body)
    assert names(ledger) == ["slow_refuse", "slow_make", "slow_refuse"]
    assert [state for _, state in sessions(conn)] == ["completed"]
