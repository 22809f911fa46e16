"""The MCP proxy's session lifecycle with real processes: the SDK's MCP client drives
`undolog mcp-proxy`, which fronts tests/mcp_session_upstream.py (a store kept in the
upstream process's memory). Retries after a timeout, one upstream process per session,
session boundaries (idle gap, conversation) and rejections told to the model."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import psycopg
import pytest
from test_mcp_proxy import (
    ROOT,
    SESSION,
    HttpProxy,
    _env,
    _proxy_args,
    decided,
    http_proxies,
    ledger,
    names,
    ops,
    pending_approval,
    run,
    sessions,
    stdio_client,
    text,
    wait_for,
)

from undolog import approvals, saga

__all__ = ["http_proxies", "ledger"]  # fixtures, shared with the proxy's main tests

CONVERSATION = "undolog/conversation"
PAYOUT = {"account": "acc-1", "amount_cents": 5}  # the irreversible call a person rejects


def session_policy(
    tmp_path: Path, proxy: str = "", upstream: str = "", pay: str = "", timeout: float = 10
) -> Path:
    """A policy fronting the session upstream; extra lines for [proxy], [upstreams.kv]
    and the irreversible tool pay."""
    path = tmp_path / "sessions.toml"
    path.write_text(
        f"[proxy]\nhold_seconds = 2\ncall_timeout_seconds = {timeout}\n{proxy}\n"
        '[upstreams.kv]\ncommand = ["python", "tests/mcp_session_upstream.py"]\n'
        f'hide = ["forget", "unmake"]\n{upstream}\n'
        '[upstreams.kv.tools.put]\ntier = "compensable"\n'
        'compensation.forget = { key = "args.key", idempotency_key = "undo_id" }\n'
        '[upstreams.kv.tools.slow_make]\ntier = "compensable"\n'
        'compensation.unmake = { id = "args.key", idempotency_key = "undo_id" }\n'
        '[upstreams.kv.tools.read_all]\ntier = "safe"\n'
        f'[upstreams.kv.tools.pay]\ntier = "irreversible"\n{pay}\n'
    )
    return path


def meta(**values: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {f"undolog/{k}": v for k, v in values.items()})


def effects(conn: psycopg.Connection[Any]) -> list[tuple[str, int, str]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT tool_name, step_index, state FROM undolog.undolog_effect_log"
            " ORDER BY executed_at"
        ).fetchall()
    ]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child the proxy has not reaped yet is a zombie: gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


# -- a retry after a timeout -------------------------------------------------------------


def test_a_retry_after_a_timeout_is_not_run_again(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream acts, then answers after the proxy stopped waiting: the outcome is
    unknown. The same call made again in the same session is that call (step 0 again),
    answered as unknown, and never reaches the upstream; the session is undone at its
    end, that call's compensation once. (late_answer_seconds = 0: the proxy does not wait
    for the answer after its timeout; test_mcp_proxy_late covers the wait.)"""
    config = session_policy(tmp_path, proxy="late_answer_seconds = 0", timeout=1.5)
    slow = {"key": "s", "seconds": 4}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            first = await client.call_tool("slow_make", slow)
            assert first.is_error and "outcome is unknown" in text(first), text(first)
            handle = (first.meta or {})[SESSION]
            for _ in range(2):
                again = await client.call_tool("slow_make", slow)
                assert again.is_error and "outcome is unknown" in text(again), text(again)
                assert "will not be run again" in text(again)
                assert (again.meta or {})[SESSION] == handle  # the same session
            put = await client.call_tool("put", {"key": "k", "value": "v"})
            assert not put.is_error, text(put)
            await asyncio.sleep(3)  # the first call's sleep is over upstream
            assert names(ledger) == ["slow_make", "put"]
            assert effects(conn) == [
                ("kv/slow_make", 0, "executing"),
                ("kv/put", 0, "committed"),
            ]

    run(body)
    wait_for(lambda: sessions(conn)[0][1] == "compensated")
    assert names(ledger) == ["slow_make", "put", "forget", "unmake"]


def test_a_retry_after_a_timeout_of_an_approved_irreversible_call(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """An approved payout whose answer is lost: asking again is told the outcome is
    unknown and pays nothing a second time."""
    config = session_policy(tmp_path, timeout=1.5)
    config.write_text(
        config.read_text().replace(
            '[upstreams.kv.tools.slow_make]\ntier = "compensable"\n'
            'compensation.unmake = { id = "args.key", idempotency_key = "undo_id" }\n',
            '[upstreams.kv.tools.slow_make]\ntier = "irreversible"\n',
        )
    )
    slow = {"key": "p", "seconds": 4}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger, mode="legacy") as client:
            first = await decided(conn, client.call_tool("slow_make", slow), "approve", "alice")
            assert first.is_error and "outcome is unknown" in text(first), text(first)
            again = await client.call_tool("slow_make", slow)
            assert again.is_error and "outcome is unknown" in text(again), text(again)
            assert names(ledger) == ["slow_make"]

    run(body)
    assert names(ledger) == ["slow_make"]


# -- one upstream process per session ----------------------------------------------------


def concurrent_puts(proxy: HttpProxy) -> dict[str, dict[str, Any]]:
    """Two HTTP clients (MCP sessions) writing at the same time; what each then reads."""

    async def client_writes(who: str) -> dict[str, Any]:
        async with proxy.client() as client:
            for i in range(3):
                made = await client.call_tool("put", {"key": f"{who}{i}", "value": who})
                assert not made.is_error, text(made)
            seen = await client.call_tool("read_all", {})
            assert not seen.is_error, text(seen)
            assert seen.structured_content is not None
            return dict(seen.structured_content)

    async def both() -> list[dict[str, Any]]:
        return list(await asyncio.gather(client_writes("a"), client_writes("b")))

    a, b = asyncio.run(both())
    return {"a": a, "b": b}


def test_per_session_upstreams_keep_concurrent_clients_apart(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    config = session_policy(tmp_path, upstream='instances = "per_session"')
    proxy = HttpProxy(config, dsn, ledger)
    http_proxies.append(proxy)
    seen = concurrent_puts(proxy)
    # each client sees its own writes, all of them, and only those
    assert seen["a"]["store"] == {"a0": "a", "a1": "a", "a2": "a"}
    assert seen["b"]["store"] == {"b0": "b", "b1": "b", "b2": "b"}
    pids = {who: s["pid"] for who, s in seen.items()}
    assert pids["a"] != pids["b"]
    assert {e["pid"] for e in ops(ledger) if e["op"] == "put"} == set(pids.values())
    assert len(names(ledger)) == 6
    # the sessions ended with their clients: completed, their processes closed
    wait_for(lambda: [s for _, s in sessions(conn)] == ["completed", "completed"])
    wait_for(lambda: not any(alive(pid) for pid in pids.values()))


def test_a_shared_upstream_can_lose_a_concurrent_write(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Why per_session exists: the same two clients on the default (shared) upstream
    write into one process, whose read-modify-write loses what the other wrote between
    (both calls journaled committed, as the docs warn)."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)
    seen = concurrent_puts(proxy)
    assert seen["a"]["pid"] == seen["b"]["pid"]

    async def final_read() -> dict[str, Any]:
        async with proxy.client() as client:
            result = await client.call_tool("read_all", {})
            assert result.structured_content is not None
            return cast(dict[str, Any], result.structured_content["store"])

    kept = set(asyncio.run(final_read()))
    written = {f"{w}{i}" for w in "ab" for i in range(3)}
    assert names(ledger).count("put") == 6  # every put ran and recorded its key...
    assert kept < written, "no write was lost: the race this test shows did not happen"
    states = {r[0] for r in conn.execute("SELECT state FROM undolog.undolog_effect_log")}
    assert states == {"committed"}


def test_a_per_session_upstream_undoes_on_the_sessions_own_process(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A rollback from outside, while the client is connected: the compensations run on
    the session's own upstream process (where its writes are), not on the shared one."""
    config = session_policy(tmp_path, upstream='instances = "per_session"')

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            for key in ("x", "y"):
                assert not (await client.call_tool("put", {"key": key, "value": "1"})).is_error
            # a SAFE read goes to the session's own process too: it sees its writes
            before = await client.call_tool("read_all", {})
            assert before.structured_content is not None
            assert before.structured_content["store"] == {"x": "1", "y": "1"}
            ((sid, _),) = sessions(conn)
            saga.rollback_session(conn, sid, "alice", "not these")
            refused = await client.call_tool("put", {"key": "z", "value": "1"})
            assert refused.is_error and "undone" in text(refused)  # and the walk starts
            await asyncio.to_thread(wait_for, lambda: dict(sessions(conn))[sid] == "compensated")
            # the connection's next call is in a new session (the rolled-back one takes
            # no call again), on that session's own process
            seen = await client.call_tool("read_all", {})
            assert seen.structured_content is not None
            assert seen.structured_content["store"] == {}
            assert seen.structured_content["pid"] != before.structured_content["pid"]
            read_pids.add(before.structured_content["pid"])

    read_pids: set[int] = set()
    run(body)
    puts = {e["pid"] for e in ops(ledger) if e["op"] == "put"}
    forgets = [(e["key"], e["pid"]) for e in ops(ledger) if e["op"] == "forget"]
    assert len(puts) == 1 and [k for k, _ in forgets] == ["y", "x"]
    assert {p for _, p in forgets} == puts
    assert read_pids == puts  # the read on the session's process, not the shared one


# -- caps ------------------------------------------------------------------------------


def test_a_clients_live_sessions_are_capped_and_ended_ones_forgotten(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
) -> None:
    """proxy.max_sessions_per_client: a conversation more than the cap is refused with a
    tool error that says what to do, and nothing runs; once the client's sessions ended
    (here at the idle gap) they no longer count, and the proxy forgets them."""
    config = session_policy(
        tmp_path,
        proxy='session_boundary = "conversation"\nsession_idle_seconds = 1.5\n'
        "max_sessions_per_client = 2",
    )

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            for name in ("a", "b"):
                done = await client.call_tool(
                    "put", {"key": name, "value": "1"}, meta=meta(conversation=name)
                )
                assert not done.is_error, text(done)
            refused = await client.call_tool(
                "put", {"key": "c", "value": "1"}, meta=meta(conversation="c")
            )
            assert refused.is_error, text(refused)
            assert "max_sessions_per_client" in text(refused)
            assert "send" in text(refused) and "handle" in text(refused)  # what to do
            assert [e["key"] for e in ops(ledger)] == ["a", "b"]
            await asyncio.to_thread(
                wait_for, lambda: [s for _, s in sessions(conn)] == ["completed", "completed"]
            )
            later = await client.call_tool(
                "put", {"key": "c", "value": "1"}, meta=meta(conversation="c")
            )
            assert not later.is_error, text(later)

    run(body)


def test_ended_sessions_are_forgotten(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Client connections come and go: the proxy keeps no ended session (each is logged
    as forgotten once its end is settled), and a handle still resumes one."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)

    async def one(key: str, handle: str | None = None) -> str:
        async with proxy.client() as client:
            done = await client.call_tool(
                "put", {"key": key, "value": "1"}, meta=meta(session=handle) if handle else None
            )
            assert not done.is_error, text(done)
            return str((done.meta or {})[SESSION])

    handles = [asyncio.run(one(key)) for key in ("a", "b", "c")]
    wait_for(lambda: [s for _, s in sessions(conn)] == ["completed"] * 3)
    assert asyncio.run(one("a", handles[0])) == handles[0]  # resumed from the journal: replayed
    assert [e["key"] for e in ops(ledger)] == ["a", "b", "c"]  # the replay ran nothing
    wait_for(lambda: [s for _, s in sessions(conn)] == ["completed"] * 3)
    proxy.process.send_signal(signal.SIGINT)
    proxy.process.wait(15)
    assert proxy.process.stderr is not None
    logged = proxy.process.stderr.read()
    forgotten = [
        line.split("session ")[1].split(":")[0]
        for line in logged.splitlines()
        if "ended and forgotten" in line
    ]
    first = str(sessions(conn)[0][0])
    assert sorted(forgotten) == sorted([str(sid) for sid, _ in sessions(conn)] + [first])


def test_per_session_upstream_processes_are_capped(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """proxy.max_upstream_processes: a session whose process would be one too many is
    refused (SAFE call too), and gets one once another session's process closed."""
    config = session_policy(
        tmp_path,
        proxy='session_boundary = "conversation"\nsession_idle_seconds = 1.5\n'
        "max_upstream_processes = 1",
        upstream='instances = "per_session"',
    )

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            first = await client.call_tool(
                "put", {"key": "a", "value": "1"}, meta=meta(conversation="a")
            )
            assert not first.is_error, text(first)
            refused = await client.call_tool("read_all", {}, meta=meta(conversation="b"))
            assert refused.is_error and "max_upstream_processes" in text(refused), text(refused)
            (pid,) = {e["pid"] for e in ops(ledger)}
            await asyncio.to_thread(wait_for, lambda: not alive(pid))
            later = await client.call_tool("read_all", {}, meta=meta(conversation="b"))
            assert not later.is_error, text(later)
            assert later.structured_content is not None
            assert later.structured_content["pid"] != pid
            assert later.structured_content["store"] == {}

    run(body)


# -- session boundaries --------------------------------------------------------------------


def test_an_idle_gap_starts_a_new_session(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """session_boundary = "idle": after the gap without a call the session completes (and
    its own upstream process closes); the next call (same connection, no handle) begins a
    new one, with a new process."""
    config = session_policy(
        tmp_path,
        proxy='session_boundary = "idle"\nsession_idle_seconds = 1.5',
        upstream='instances = "per_session"',
    )

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            first = await client.call_tool("put", {"key": "a", "value": "1"})
            quick = await client.call_tool("put", {"key": "b", "value": "1"})
            assert (first.meta or {})[SESSION] == (quick.meta or {})[SESSION]
            await asyncio.to_thread(wait_for, lambda: sessions(conn)[0][1] == "completed")
            later = await client.call_tool("put", {"key": "c", "value": "1"})
            assert not later.is_error, text(later)
            assert (later.meta or {})[SESSION] != (first.meta or {})[SESSION]
            assert [s for _, s in sessions(conn)] == ["completed", "active"]
            first_pid, later_pid = (e["pid"] for e in ops(ledger) if e["key"] in ("a", "c"))
            assert first_pid != later_pid
            await asyncio.to_thread(wait_for, lambda: not alive(first_pid))
            assert alive(later_pid)

    run(body)
    assert [s for _, s in sessions(conn)] == ["completed", "completed"]
    per_session = conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log GROUP BY session_id ORDER BY 1"
    ).fetchall()
    assert per_session == [(1,), (2,)]


def test_an_idle_gap_keeps_a_session_that_waits_for_a_decision(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A session whose payout waits for a human is not ended by the idle gap: asked again
    after the decision, the same call in the same session runs, once."""
    config = session_policy(tmp_path, proxy='session_boundary = "idle"\nsession_idle_seconds = 1')
    payout = {"account": "acc-1", "amount_cents": 10}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            waiting = await client.call_tool("pay", payout)
            assert waiting.is_error and "NOT RUN YET" in text(waiting), text(waiting)
            await asyncio.sleep(3)  # three gaps
            assert [s for _, s in sessions(conn)] == ["awaiting_approval"]
            approval_id = pending_approval(conn)
            assert approval_id is not None
            approvals.approve(conn, approval_id, "alice")
            paid = await client.call_tool("pay", payout)
            assert not paid.is_error, text(paid)
            assert (paid.meta or {})[SESSION] == (waiting.meta or {})[SESSION]

    run(body)
    assert names(ledger) == ["pay"]
    assert [s for _, s in sessions(conn)] == ["completed"]


def test_conversations_are_sessions_of_their_own(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """session_boundary = "conversation": each _meta["undolog/conversation"] of a
    connection is its own session, so rolling one conversation back leaves the other
    working."""
    config = session_policy(tmp_path, proxy='session_boundary = "conversation"')

    async def body() -> None:
        async with stdio_client(config, dsn, ledger, mode="legacy") as client:
            one = await client.call_tool(
                "put", {"key": "a", "value": "1"}, meta=meta(conversation="c1")
            )
            two = await client.call_tool(
                "put", {"key": "b", "value": "2"}, meta=meta(conversation="c2")
            )
            one_again = await client.call_tool(
                "put", {"key": "c", "value": "1"}, meta=meta(conversation="c1")
            )
            handles = [(r.meta or {})[SESSION] for r in (one, two, one_again)]
            assert handles[0] == handles[2] != handles[1]
            by_handle = {
                r[1]: r[0]
                for r in conn.execute(
                    "SELECT session_id, metadata->>'handle_sha256' FROM undolog.undolog_sessions"
                )
            }
            assert len(by_handle) == 2
            c2 = next(
                sid
                for sid, n in conn.execute(
                    "SELECT session_id, count(*) FROM undolog.undolog_effect_log"
                    " GROUP BY session_id"
                )
                if n == 1
            )
            saga.rollback_session(conn, c2, "alice", "wrong conversation")
            refused = await client.call_tool(
                "put", {"key": "d", "value": "2"}, meta=meta(conversation="c2")
            )
            assert refused.is_error, text(refused)
            still = await client.call_tool(
                "put", {"key": "e", "value": "1"}, meta=meta(conversation="c1")
            )
            assert not still.is_error, text(still)
            bad = await client.call_tool(
                "put", {"key": "f", "value": "1"}, meta=meta(conversation="")
            )
            assert bad.is_error and "undolog/conversation" in text(bad)

    run(body)
    wait_for(lambda: sorted(s for _, s in sessions(conn)) == ["compensated", "completed"])
    # b forgotten by c2's undo walk, which the proxy runs beside c1's next call: the two
    # land in either order (under load, e first)
    keys = [e["key"] for e in ops(ledger)]
    assert keys[:3] == ["a", "b", "c"] and sorted(keys[3:]) == ["b", "e"], keys


def test_a_conversation_name_is_scoped_to_its_connection(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Two HTTP clients of one proxy naming the same conversation get a session each:
    the name is no key to another client's session."""
    proxy = HttpProxy(
        session_policy(tmp_path, proxy='session_boundary = "conversation"'), dsn, ledger
    )
    http_proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as a, proxy.client() as b:
            one = await a.call_tool("put", {"key": "a", "value": "1"}, meta=meta(conversation="c"))
            two = await b.call_tool("put", {"key": "b", "value": "1"}, meta=meta(conversation="c"))
            assert not (one.is_error or two.is_error)
            assert (one.meta or {})[SESSION] != (two.meta or {})[SESSION]
            assert len(sessions(conn)) == 2

    run(body)
    wait_for(lambda: [s for _, s in sessions(conn)] == ["completed", "completed"])


# -- a rejection told to the model --------------------------------------------------------

SESSIONS_EXAMPLE = ROOT / "examples" / "mcp-proxy" / "sessions.toml"


def test_a_rejection_told_to_the_model_keeps_the_session(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The docs' desktop policy (examples/mcp-proxy/sessions.toml): pay is on_reject =
    "tell_model". The held payout is rejected: the call's answer is a tool error with who
    rejected it and why, the session stays active, its earlier write stands and its later
    calls run; at its end it completes, nothing undone."""
    payout = {"account": "acc-9", "amount_cents": 1200}
    chat = meta(conversation="chat-1")

    async def body() -> None:
        async with stdio_client(SESSIONS_EXAMPLE, dsn, ledger, mode="legacy") as client:
            made = await client.call_tool("put", {"key": "a", "value": "1"}, meta=chat)
            assert not made.is_error, text(made)
            paid = client.call_tool("pay", payout, meta=chat)
            rejected = await decided(conn, paid, "reject", "bob", "that account is closed")
            assert rejected.is_error
            assert "REJECTED" in text(rejected) and "bob rejected it" in text(rejected)
            assert "that account is closed" in text(rejected) and "goes on" in text(rejected)
            told = (rejected.meta or {})["undolog/rejection"]
            assert told["decided_by"] == "bob" and told["reason"] == "that account is closed"
            assert (rejected.meta or {})[SESSION] == (made.meta or {})[SESSION]
            assert [s for _, s in sessions(conn)] == ["active"]
            again = await client.call_tool("pay", payout, meta=chat)
            assert again.is_error and "bob rejected it" in text(again), text(again)
            later = await client.call_tool("put", {"key": "b", "value": "2"}, meta=chat)
            assert not later.is_error, text(later)
            seen = await client.call_tool("read_all", {}, meta=chat)
            assert seen.structured_content is not None
            assert seen.structured_content["store"] == {"a": "1", "b": "2"}

    run(body)
    assert [s for _, s in sessions(conn)] == ["completed"]
    assert names(ledger) == ["put", "put"]  # no payout, nothing undone
    count = conn.execute("SELECT count(*) FROM undolog.undolog_approval_requests").fetchone()
    assert count == (1,)


def test_a_rejection_without_tell_model_still_undoes_the_session(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The default on_reject (fail_session), in the same setting: the rejection ends the
    session and undoes its write."""
    config = session_policy(tmp_path)

    async def body() -> None:
        async with stdio_client(config, dsn, ledger, mode="legacy") as client:
            assert not (await client.call_tool("put", {"key": "a", "value": "1"})).is_error
            rejected = await decided(conn, client.call_tool("pay", PAYOUT), "reject", "bob", "no")
            assert rejected.is_error and "rolled back" in text(rejected), text(rejected)
            await asyncio.to_thread(wait_for, lambda: sessions(conn)[0][1] == "compensated")

    run(body)
    assert names(ledger) == ["put", "forget"]


def test_a_desktop_client_goes_on_in_a_new_session_after_a_rollback(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """session_boundary = "connection" (the default), one connection for the app's life
    and no handle sent back (Claude Desktop). A person rejects a payout: the session is
    rolled back, and the connection's next call starts a new session (it was refused
    with "session … is compensated" until the app restarted). So after a rollback from
    outside: the next call is refused saying so, the one after runs in a new session. A
    call naming the rolled-back session's handle is still refused, never moved."""
    config = session_policy(tmp_path)
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger, mode="legacy") as client:
            first = await client.call_tool("put", {"key": "a", "value": "1"})
            assert not first.is_error, text(first)
            old = (first.meta or {})[SESSION]
            rejected = await decided(conn, client.call_tool("pay", PAYOUT), "reject", "bob", "no")
            assert rejected.is_error and "rolled back" in text(rejected), text(rejected)
            assert "next call made without this session's handle starts a new session" in (
                text(rejected)
            )
            await asyncio.to_thread(wait_for, lambda: sessions(conn)[0][1] == "compensated")
            later = await client.call_tool("put", {"key": "b", "value": "2"})
            assert not later.is_error, text(later)
            assert (later.meta or {})[SESSION] != old
            # the old handle, sent back: refused, not moved to the new session
            named = await client.call_tool(
                "put", {"key": "c", "value": "3"}, meta=meta(session=old)
            )
            assert named.is_error and "is compensated" in text(named), text(named)
            # rolled back by an operator: the next call is told, the one after goes on
            (_, _), (sid, state) = sessions(conn)
            assert state == "active"
            saga.rollback_session(conn, sid, "alice", "undone from outside")
            refused = await client.call_tool("put", {"key": "d", "value": "4"})
            seen["refused"] = text(refused)
            assert refused.is_error, text(refused)
            await asyncio.to_thread(wait_for, lambda: sessions(conn)[1][1] == "compensated")
            again = await client.call_tool("put", {"key": "d", "value": "4"})
            assert not again.is_error, text(again)
            seen["store"] = (await client.call_tool("read_all", {})).structured_content or {}

    run(body)
    assert "no new calls (stopped: rolled back by alice: undone from outside)" in seen["refused"]
    assert (
        "next call made without this session's handle starts a new session" in (seen["refused"])
    ), seen
    assert seen["store"]["store"] == {"d": "4"}, seen
    assert [s for _, s in sessions(conn)] == ["compensated", "compensated", "completed"]
    assert names(ledger) == ["put", "forget", "put", "forget", "put"]


def test_one_session_at_a_time_goes_on_in_a_new_one_after_a_rejection(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """max_sessions_per_client = 1: a rejection retires the connection's session, and
    its next call starts a new one at once; the retired session, still ending (its undo
    walk), does not hold the client's one place."""
    config = session_policy(tmp_path, proxy="max_sessions_per_client = 1")
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger, mode="legacy") as client:
            first = await client.call_tool("put", {"key": "a", "value": "1"})
            assert not first.is_error, text(first)
            rejected = await decided(conn, client.call_tool("pay", PAYOUT), "reject", "bob", "no")
            assert rejected.is_error and "starts a new session" in text(rejected), text(rejected)
            later = seen["later"] = await client.call_tool("put", {"key": "b", "value": "2"})
            seen["old"], seen["new"] = (first.meta or {})[SESSION], (later.meta or {}).get(SESSION)

    run(body)
    assert not seen["later"].is_error, text(seen["later"])
    assert seen["old"] != seen["new"]


# -- refused at start --------------------------------------------------------------------

BAD = {
    "unknown instances": ("", 'instances = "many"', "", "upstreams.kv.instances: one of"),
    "idle without seconds": ('session_boundary = "idle"', "", "", "needs proxy.session_idle"),
    "seconds without idle": ("session_idle_seconds = 5", "", "", "only with session_boundary"),
    "bad boundary": ('session_boundary = "day"', "", "", "proxy.session_boundary: one of"),
    "bad on_reject": ("", "", 'on_reject = "ignore"', "on_reject: one of fail_session"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_session_keys_are_refused_at_start(
    case: str, tmp_path: Path, dsn: str, ledger: Path
) -> None:
    proxy, upstream, pay, message = BAD[case]
    done = subprocess.run(
        [sys.executable, *_proxy_args(session_policy(tmp_path, proxy, upstream, pay), dsn)],
        env=_env(ledger),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr


def test_on_reject_only_for_an_irreversible_tool(tmp_path: Path, dsn: str, ledger: Path) -> None:
    config = session_policy(tmp_path)
    config.write_text(
        config.read_text().replace(
            '[upstreams.kv.tools.read_all]\ntier = "safe"\n',
            '[upstreams.kv.tools.read_all]\ntier = "safe"\non_reject = "tell_model"\n',
        )
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *_proxy_args(config, dsn)],
        env=_env(ledger),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "only an irreversible tool" in done.stderr, done.stderr
    assert time.monotonic() - started < 30


def test_a_session_rolled_back_from_outside_is_walked_at_the_proxy_s_heartbeat(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The proxy's heartbeat (the binding's beat) finds a session rolled back from
    outside no longer active, and walks it then: the client still connected, making no
    further call. The session's last call, its result recorded with no call after it, is
    what the walk undoes."""
    policy = session_policy(tmp_path, proxy="lease_seconds = 1.5")  # a beat every 0.5 s

    async def body() -> None:
        async with stdio_client(policy, dsn, ledger) as client:
            put = await client.call_tool("put", {"key": "k", "value": "v"})
            assert not put.is_error, text(put)
            committed = "SELECT state FROM undolog.undolog_effect_log WHERE tool_name = 'kv/put'"
            await asyncio.to_thread(
                wait_for, lambda: conn.execute(committed).fetchone() == ("committed",)
            )
            (sid, _), *_ = sessions(conn)
            saga.rollback_session(conn, sid, "alice", "undone from outside")
            await asyncio.to_thread(wait_for, lambda: sessions(conn)[0][1] == "compensated")
            assert names(ledger) == ["put", "forget"]

    run(body)


def test_parallel_calls_of_one_session_are_all_recorded_before_it_ends(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A client runs two COMPENSABLE calls of one session at once. The first to answer has
    its commit held up (the test locks its effect row); the second's commit goes through;
    then the session's idle gap ends it. The session's end waits for every call's result,
    not only the last one's: it completes, and nothing is undone."""
    policy = session_policy(tmp_path, proxy='session_boundary = "idle"\nsession_idle_seconds = 1')
    locked, release = threading.Event(), threading.Event()

    def hold_first_commit() -> None:
        with psycopg.connect(dsn) as holder:  # a transaction: the lock lasts until commit
            find = (
                "SELECT effect_id FROM undolog.undolog_effect_log"
                " WHERE tool_name = 'kv/slow_make' AND args ->> 'key' = 'first' FOR UPDATE"
            )
            deadline = time.monotonic() + 20
            while holder.execute(find).fetchone() is None and time.monotonic() < deadline:
                holder.rollback()
                time.sleep(0.02)
            locked.set()
            release.wait(30)

    async def body() -> None:
        holder = threading.Thread(target=hold_first_commit)
        holder.start()
        try:
            async with stdio_client(policy, dsn, ledger) as client:
                first = asyncio.ensure_future(
                    client.call_tool("slow_make", {"key": "first", "seconds": 0.8})
                )
                await asyncio.to_thread(locked.wait, 20)
                second = await client.call_tool("slow_make", {"key": "second", "seconds": 1.6})
                assert not (await first).is_error and not second.is_error
                await asyncio.sleep(2.5)  # the idle gap has passed: the session is ending
                assert [state for _, state in sessions(conn)] == ["active"]  # it waits
                release.set()
                await asyncio.to_thread(
                    wait_for, lambda: sessions(conn)[0][1] not in ("active", "compensating")
                )
        finally:
            release.set()
            holder.join()

    run(body)
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert names(ledger) == ["slow_make", "slow_make"]  # nothing undone
