"""The MCP proxy under faults of the processes around it, with real processes: JSON-RPC
lines written by hand to `undolog mcp-proxy` over stdio (test_mcp_proxy_hostile's Line),
in front of tests/mcp_session_upstream.py (every execution lands in a ledger with its
process id, so a call run twice, or a compensation lost, is visible). The upstream is
SIGKILLed between calls and in the middle of one, hangs, stays down for the session's
undo walk; the proxy is SIGKILLed mid-call and started again; the database ends the
proxy's connections."""

from __future__ import annotations

import json
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
from test_mcp_proxy import ledger, names, ops, run_worker, sessions, wait_for
from test_mcp_proxy_hostile import Line
from test_mcp_proxy_sessions import effects, session_policy

from undolog.mcp_proxy.proxy import APPLICATION_NAME

__all__ = ["ledger"]  # a fixture, used by name

SESSION = "undolog/session"


def result(answer: dict[str, Any] | None) -> dict[str, Any]:
    assert answer is not None, "no answer: the proxy died or hung"
    out: dict[str, Any] = answer["result"]
    return out


def said(answer: dict[str, Any] | None) -> str:
    return " ".join(c.get("text", "") for c in result(answer)["content"])


def ok(answer: dict[str, Any] | None) -> dict[str, Any]:
    out = result(answer)
    assert not out.get("isError"), json.dumps(out)[:800]
    return out


def answers(line: Line, request_ids: range, timeout: float = 30) -> dict[int, Any]:
    """The answers to calls made in parallel, in whatever order they come (Line.answer
    drops the lines it reads that answer another request)."""
    assert line.process.stdout is not None
    fd = line.process.stdout.fileno()
    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while True:
        while (end := line.buffer.find(b"\n")) != -1:
            message = json.loads(bytes(line.buffer[:end]))
            del line.buffer[: end + 1]
            if message.get("id") in request_ids:
                got[message["id"]] = message
        left = deadline - time.monotonic()
        if len(got) == len(request_ids) or line.eof or left <= 0:
            return got
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 1 << 20)
            line.eof = not chunk
            line.buffer += chunk


def kill(pid: int) -> None:
    """SIGKILL an upstream process, and wait until it is gone (its parent, the proxy,
    reaps it: until then it is a zombie, gone for our purpose)."""
    os.kill(pid, signal.SIGKILL)

    def gone() -> bool:
        stat = Path(f"/proc/{pid}/stat")
        return not stat.exists() or stat.read_text().split()[2] == "Z"

    wait_for(gone)


def test_an_upstream_killed_between_calls_is_reconnected_before_the_next_call(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream process dies between two calls (SIGKILL, an OOM kill). The proxy had
    seen its connection close, but the next call was sent into it all the same (through
    the SDK's client session, its owner not having noticed): answered "connection closed",
    counted as of unknown outcome, and the session, every call of which had worked, was
    rolled back at its end; a resource read, or a SAFE call, was refused as unreachable
    with no reconnection. Now the proxy starts the upstream again first: the call runs
    once, on the new process, and the session completes."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start(list_tools=True)  # the relayed path
        line.call(1, "put", {"key": "a", "value": "1"})
        handle = ok(line.answer(1))["_meta"][SESSION]
        first = ops(ledger)[0]["pid"]
        kill(first)
        time.sleep(0.5)  # the proxy reads the end of the upstream's stdout
        line.call(2, "put", {"key": "b", "value": "2"}, **{SESSION: handle})
        ok(line.answer(2))
        line.call(3, "read_all", {})  # SAFE: the new process holds what was put since
        assert ok(line.answer(3))["structuredContent"]["store"] == {"b": "2"}
        line.call(4, "slow_make", {"key": "s", "seconds": 0})  # the SDK's path
        ok(line.answer(4))
        kill(ops(ledger)[-1]["pid"])
        time.sleep(0.5)
        line.call(5, "read_all", {}, progressToken="p")
        assert ok(line.answer(5))["structuredContent"]["store"] == {}
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["put", "put", "slow_make"]
    assert [e["pid"] for e in ops(ledger)][1:] != [first, first]
    assert sorted(effects(conn)) == [
        ("kv/put", 0, "committed"),
        ("kv/put", 0, "committed"),
        ("kv/slow_make", 0, "committed"),
    ]
    assert [state for _, state in sessions(conn)] == ["completed"]


def test_the_journal_connections_the_database_ended_are_replaced_unseen(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The database ends the proxy's idle connections (a restart, pg_terminate_backend,
    a failover). The pool handed each dead connection to the next call, which was refused
    ("not run: ... server closed the connection unexpectedly"), one call per connection
    the pool held; a COMPENSABLE result recorded on one was lost, and its session rolled
    back. Now a dead idle connection is replaced before use: no call sees it, every call
    is journaled before it runs, and the session completes."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start(list_tools=True)
        for request_id in range(1, 5):  # calls in parallel: the pool opens several
            line.call(request_id, "put", {"key": f"k{request_id}", "value": "1"})
        parallel = answers(line, range(1, 5))
        assert sorted(parallel) == [1, 2, 3, 4], "not answered"
        for answer in parallel.values():
            ok(answer)
        # recorded (the answers do not wait for it): idle connections only from here
        wait_for(lambda: effects(conn) == [("kv/put", 0, "committed")] * 4)
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchall()
        assert len(ended) >= 2 and all(row[0] for row in ended), ended
        time.sleep(0.3)
        for request_id in range(5, 13):
            line.call(request_id, "put", {"key": f"k{request_id}", "value": "1"})
            ok(line.answer(request_id))
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["put"] * 12
    assert effects(conn) == [("kv/put", 0, "committed")] * 12
    assert [state for _, state in sessions(conn)] == ["completed"]


def test_a_compensation_whose_upstream_is_down_is_kept_for_the_worker(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream dies in the middle of a COMPENSABLE call and will not start again
    while the session ends: the call's outcome is unknown, the session is failed, and
    its walk cannot reach the compensations' upstream. Nothing is lost: the proxy exits,
    the session stays compensating with its undo entries, and `undolog worker
    --mcp-config` undoes both calls once the upstream starts again, each once."""
    down = tmp_path / "down"
    config = tmp_path / "policy.toml"
    config.write_text(
        # the proxy's walk gives up on the compensations' retries after 1 s (10 by default)
        "[proxy]\ncall_timeout_seconds = 8\nwalk_wait_seconds = 1\n[upstreams.kv]\n"
        f'command = ["sh", "-c", "if [ -e {down} ]; then echo down >&2; exit 3; fi; '
        'exec python tests/mcp_session_upstream.py"]\n'
        'hide = ["forget", "unmake"]\n'
        '[upstreams.kv.tools.put]\ntier = "compensable"\n'
        'compensation.forget = { key = "args.key", idempotency_key = "undo_id" }\n'
        '[upstreams.kv.tools.slow_make]\ntier = "compensable"\n'
        'compensation.unmake = { id = "args.key", idempotency_key = "undo_id" }\n'
    )
    line = Line(config, dsn, ledger)
    try:
        line.start(list_tools=True)
        line.call(1, "put", {"key": "a", "value": "1"})
        ok(line.answer(1))
        line.call(2, "slow_make", {"key": "s", "seconds": 60})
        wait_for(lambda: names(ledger) == ["put", "slow_make"])
        down.write_text("")
        kill(ops(ledger)[-1]["pid"])
        assert "outcome is unknown" in said(line.answer(2))
        line.call(3, "put", {"key": "b", "value": "2"})
        refused = said(line.answer(3))
        assert "was not run" in refused and "exited with code 3" in refused, refused
    finally:
        assert line.leave() == 0  # after the proxy's walk gave up waiting
    assert [state for _, state in sessions(conn)] == ["compensating"]
    assert names(ledger) == ["put", "slow_make"]
    down.unlink()
    # the failed attempts' backoff, passed (as time would)
    conn.execute("UPDATE undolog.undolog_undo_stack SET next_attempt_at = now()")
    run_worker(dsn, config, ledger)
    assert [state for _, state in sessions(conn)] == ["compensated"]
    assert names(ledger) == ["put", "slow_make", "unmake", "forget"]
