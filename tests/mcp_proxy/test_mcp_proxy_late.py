"""A journaled call whose upstream answers after call_timeout_seconds, with real processes:
JSON-RPC lines written by hand to `undolog mcp-proxy` over stdio (test_mcp_proxy_hostile's
Line) in front of tests/mcp_session_upstream.py, whose slow_make acts at once and answers
after a delay. The proxy answered the client "outcome unknown" and dropped the answer that
came later: the call stayed executing, the same call made again was refused as unknown,
the session was failed at its end and undone, and a compensation that reads the call's
result (`result.id`) could not be built. Now the proxy keeps waiting for the answer in the
background (proxy.late_answer_seconds, at most proxy.max_late_answers calls at once) and
records it as the engine allows."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_mcp_proxy import ledger, names, ops, release_slow_make, run_worker, sessions, wait_for
from test_mcp_proxy_faults import SESSION, answers, kill, ok, result, said
from test_mcp_proxy_hostile import Line
from test_mcp_proxy_sessions import effects

from undolog import saga
from undolog.mcp_proxy.policy import PolicyError, load_policy

__all__ = ["ledger"]  # a fixture, used by name

SLOW = "kv/slow_make"
# How long a test keeps a slow answer back once the walk that must wait for it has begun:
# a walk that did not wait would take the call within milliseconds, and the test see it.
WALK_MARGIN = 2.0


def late_policy(
    tmp_path: Path,
    proxy: str = "late_answer_seconds = 20",
    undo_id: str = "result.id",
    command: str = '["python", "tests/mcp_session_upstream.py"]',
) -> Path:
    """The session upstream, slow_make undone by the id its result gives (or another
    mapping), a call timeout of 2 s and the given [proxy] lines."""
    path = tmp_path / "late.toml"
    path.write_text(
        f"[proxy]\ncall_timeout_seconds = 2\n{proxy}\n"
        f"[upstreams.kv]\ncommand = {command}\n"
        'hide = ["forget", "unmake"]\n'
        '[upstreams.kv.tools.put]\ntier = "compensable"\n'
        'compensation.forget = { key = "args.key", idempotency_key = "undo_id" }\n'
        '[upstreams.kv.tools.slow_make]\ntier = "compensable"\n'
        f'compensation.unmake = {{ id = "{undo_id}", idempotency_key = "undo_id" }}\n'
    )
    return path


def slow(line: Line, request_id: int, key: str, seconds: float, **meta: Any) -> None:
    line.call(request_id, "slow_make", {"key": key, "seconds": seconds}, **meta)


def text(answered: dict[str, Any]) -> str:
    """The text of a result (an answer's "result")."""
    return said({"result": answered})


def late_events(conn: psycopg.Connection[Any]) -> list[tuple[str, Any]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT event, detail FROM undolog.undolog_effect_history"
            " WHERE event IN ('late_commit', 'late_fail') ORDER BY effect_id"
        ).fetchall()
    ]


def walked_before_its_answer(
    line: Line, conn: psycopg.Connection[Any], dsn: str, config: Path, ledger: Path
) -> uuid.UUID:
    """A slow call of unknown outcome, its session rolled back and the call claimed by
    `undolog worker` (one pass) while its answer is still awaited: it stays compensating,
    its compensation not built (no result yet, so no result.id). Then the upstream
    answers (released: the rollback and the worker's pass, a process of its own, come
    first however loaded the machine; 15 s is only the bound, within the 2 s call
    timeout and the 20 s late_answer_seconds). Answers the session."""
    line.start(list_tools=True)
    slow(line, 1, "s", 15)
    assert "outcome is unknown for now" in said(line.answer(1))
    ((sid, _),) = sessions(conn)
    assert saga.rollback_session(conn, sid, "alice", "undo it") == "failed"
    run_worker(dsn, config, ledger)
    assert effects(conn) == [(SLOW, 0, "compensating")]
    release_slow_make(ledger, "s")
    return sid


def test_a_late_answer_is_committed_and_the_same_call_replays_it(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(a) The answer comes while the session is active: committed. The same call made
    while it is awaited is told so and not run; made after, it replays the result; the
    session completes, nothing is undone."""
    line = Line(late_policy(tmp_path), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 15)  # answers once released (15 s: the bound)
        first = result(line.answer(1))
        assert first.get("isError") and "waits up to 20 s" in text(first), first
        handle = first["_meta"][SESSION]
        slow(line, 2, "s", 15, **{SESSION: handle})  # while awaited: that call, not run
        assert "outcome is unknown for now" in said(line.answer(2))
        release_slow_make(ledger, "s")
        wait_for(lambda: effects(conn) == [(SLOW, 0, "committed")])
        slow(line, 3, "s", 15, **{SESSION: handle})
        assert ok(line.answer(3))["structuredContent"] == {"id": "s"}
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["slow_make"]
    assert effects(conn) == [(SLOW, 0, "committed")]
    assert [state for _, state in sessions(conn)] == ["completed"]


FAILING_UPSTREAM = '''
import asyncio, json, os
from typing import Any
from mcp.server.mcpserver import MCPServer

server = MCPServer("late-fail")
RUNS = 0

@server.tool()
async def slow_make(key: str, seconds: float) -> dict[str, Any]:
    """Act, then answer: the first run answers an error late, the next ones at once."""
    global RUNS
    RUNS += 1
    with open(os.environ["UPSTREAM_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"op": "slow_make", "key": key, "pid": os.getpid()}) + "\\n")
    if RUNS == 1:
        await asyncio.sleep(seconds)
        raise ValueError("refused, late")
    return {"id": key}

@server.tool()
async def unmake(id: str, idempotency_key: str) -> dict[str, Any]:
    with open(os.environ["UPSTREAM_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"op": "unmake", "id": id, "pid": os.getpid()}) + "\\n")
    return {"unmade": id}

@server.tool()
async def put(key: str, value: str) -> dict[str, Any]:
    return {"key": key}

@server.tool()
async def forget(key: str, idempotency_key: str) -> dict[str, Any]:
    return {"forgot": key}

server.run()
'''


def test_a_late_error_answer_is_recorded_as_not_run_and_the_call_runs_again(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(a) The late answer is an error result: the call never took effect (fail), so the
    same call made again runs again, and the session completes."""
    script = tmp_path / "late_fail_upstream.py"
    script.write_text(FAILING_UPSTREAM)
    line = Line(late_policy(tmp_path, command=f'["python", "{script}"]'), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 4)
        handle = result(line.answer(1))["_meta"][SESSION]
        wait_for(lambda: effects(conn) == [(SLOW, 0, "pending")])
        slow(line, 2, "s", 4, **{SESSION: handle})
        assert ok(line.answer(2))["structuredContent"] == {"id": "s"}
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["slow_make", "slow_make"]
    assert effects(conn) == [(SLOW, 0, "committed")]
    assert [state for _, state in sessions(conn)] == ["completed"]


def test_a_session_rolled_back_while_an_answer_is_awaited_is_undone_with_its_result(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(b) The session is rolled back from outside while the answer is awaited. The
    proxy's walk waits for it: the answer is committed on the failed session's call
    (still executing), and its compensation is built from the real result (`result.id`)
    instead of halting the walk for a human."""
    line = Line(late_policy(tmp_path), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 15)  # answers once released (15 s: the bound)
        handle = result(line.answer(1))["_meta"][SESSION]
        ((sid, _),) = sessions(conn)
        assert saga.rollback_session(conn, sid, "alice", "undo it") == "failed"
        line.call(2, "put", {"key": "a", "value": "1"}, **{SESSION: handle})
        assert "was stopped and its work is being undone" in said(line.answer(2))
        # while the walk waits for it; a walk that did not wait would have taken the call
        # within milliseconds of the rollback, so the test would see it
        time.sleep(WALK_MARGIN)
        release_slow_make(ledger, "s")
        wait_for(lambda: "unmake" in names(ledger), timeout=30)
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["slow_make", "unmake"]
    assert ops(ledger)[-1]["id"] == "s"
    assert [state for _, state in sessions(conn)] == ["compensated"]
    assert late_events(conn) == []


def test_an_answer_after_the_walk_took_the_call_is_kept_as_late(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(b) The walk (here `undolog worker`) took the call before its answer came: the
    engine takes the answer as late, keeping it (the result too) in the effect's history
    and flagging the session for an operator. The attempt claimed before it came had no
    result to read, so it did not undo the call with a made-up id; a later attempt is
    handed the late result (claim_compensation; test_mcp_proxy_late_walk follows it)."""
    line = Line(late_policy(tmp_path), dsn, ledger)
    config = tmp_path / "late.toml"
    try:
        sid = walked_before_its_answer(line, conn, dsn, config, ledger)
        wait_for(lambda: late_events(conn), timeout=30)
    finally:
        assert line.leave() == 0
    ((event, detail),) = late_events(conn)
    assert event == "late_commit" and detail["arrived"] == "committed"
    assert detail["result"]["structuredContent"] == {"id": "s"}
    # never undone with a made-up id: not at all yet, or with the answer's own id
    undone = [op for op in ops(ledger) if op["op"] == "unmake"]
    assert names(ledger)[0] == "slow_make" and all(op["id"] == "s" for op in undone)
    attention = conn.execute(
        "SELECT needs_attention FROM undolog.sessions_overview WHERE session_id = %s", (sid,)
    ).fetchone()
    assert attention is not None and attention[0]


def test_a_session_ended_at_an_idle_gap_waits_for_the_answer_and_completes(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The session's end comes while an answer is awaited (here its idle gap): it waits
    for it, the answer is committed, and the session completes instead of being failed
    and undone for a call whose outcome came."""
    proxy = 'late_answer_seconds = 20\nsession_boundary = "idle"\nsession_idle_seconds = 1'
    line = Line(late_policy(tmp_path, proxy=proxy), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 5)
        assert "outcome is unknown for now" in said(line.answer(1))
        wait_for(lambda: [state for _, state in sessions(conn)] == ["completed"], timeout=30)
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["slow_make"]
    assert effects(conn) == [(SLOW, 0, "committed")]


def test_no_answer_within_the_bound_leaves_the_call_unknown(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(c) No answer within late_answer_seconds: as without the wait, the call stays of
    unknown outcome and the session is failed and undone when it ends. Past
    max_late_answers, a call is not awaited at all (its answer says so)."""
    proxy = "late_answer_seconds = 1\nmax_late_answers = 1"
    line = Line(late_policy(tmp_path, proxy=proxy, undo_id="args.key"), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 30)
        slow(line, 2, "t", 30)
        both = answers(line, range(1, 3))
        waited = [said(answer) for answer in both.values() if "waits up to 1 s" in said(answer)]
        given_up = [said(answer) for answer in both.values() if "waits up to" not in said(answer)]
        assert len(waited) == 1 and len(given_up) == 1, both
        assert "making the same call again gets this answer" in given_up[0]
        time.sleep(2)  # past the bound
        slow(line, 3, "s", 30)
        again = said(line.answer(3))
        assert "got no answer" in again and "waits up to" not in again, again
        assert effects(conn) == [(SLOW, 0, "executing")] * 2
    finally:
        assert line.leave() == 0
    assert sorted(names(ledger)) == ["slow_make", "slow_make", "unmake", "unmake"]
    assert [state for _, state in sessions(conn)] == ["compensated"]
    assert late_events(conn) == []


def test_the_proxy_leaving_while_an_answer_is_awaited_does_not_wait_for_it(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """(d) The client leaves (stdin closes: the proxy exits) while an answer is awaited
    for a minute: the proxy exits at once, records nothing for that call, and its
    session is failed and undone as its outcome is unknown."""
    proxy = "late_answer_seconds = 60"
    line = Line(late_policy(tmp_path, proxy=proxy, undo_id="args.key"), dsn, ledger)
    try:
        line.start(list_tools=True)
        slow(line, 1, "s", 20)
        assert "waits up to 60 s" in said(line.answer(1))
    finally:
        began = time.monotonic()
        assert line.leave() == 0
        took = time.monotonic() - began
    assert took < 15, f"the proxy took {took:.1f} s to exit"
    assert names(ledger) == ["slow_make", "unmake"]
    assert effects(conn) == [(SLOW, 0, "compensated")]
    assert [state for _, state in sessions(conn)] == ["compensated"]
    assert late_events(conn) == []


def test_an_upstream_that_does_not_start_is_answered_with_the_session_handle(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The "upstream did not start" tool error carried no session handle, unlike every
    other answer to a journaled call: a client that had none yet (a per-session upstream
    that will not start at the session's first call) could not continue the session
    the proxy had made for it. Now it carries the handle of the call's session, and the
    handle continues that session."""
    down = tmp_path / "down"
    command = (
        f'["sh", "-c", "if [ -e {down} ]; then echo down >&2; exit 3; fi; '
        'exec python tests/mcp_session_upstream.py"]'
    )
    # a shared upstream, down between two calls
    line = Line(late_policy(tmp_path, command=command), dsn, ledger)
    try:
        line.start(list_tools=True)
        line.call(1, "put", {"key": "a", "value": "1"})
        handle = ok(line.answer(1))["_meta"][SESSION]
        down.write_text("")
        kill(ops(ledger)[-1]["pid"])
        time.sleep(0.5)  # the proxy reads the end of the upstream's stdout
        line.call(2, "put", {"key": "b", "value": "2"}, **{SESSION: handle})
        refused = result(line.answer(2))
        assert "did not start" in text(refused), refused
        assert refused["_meta"][SESSION] == handle
    finally:
        assert line.leave() == 0
    down.unlink()
    # a per-session upstream that does not start at the session's first call
    upstream = 'instances = "per_session"'
    config = late_policy(tmp_path, command=command)
    config.write_text(
        config.read_text().replace("[upstreams.kv]\n", f"[upstreams.kv]\n{upstream}\n")
    )
    line = Line(config, dsn, ledger)
    try:
        line.start(list_tools=True)
        down.write_text("")
        line.call(1, "put", {"key": "a", "value": "1"})
        refused = result(line.answer(1))
        assert "did not start" in text(refused), refused
        handle = refused["_meta"][SESSION]
        down.unlink()
        line.call(2, "put", {"key": "a", "value": "1"}, **{SESSION: handle})
        ok(line.answer(2))
    finally:
        assert line.leave() == 0
    assert [state for _, state in sessions(conn)] == ["completed", "completed"]


def test_the_late_answer_settings_are_checked(tmp_path: Path) -> None:
    def policy(lines: str) -> Path:
        return late_policy(tmp_path, proxy=lines)

    assert load_policy(policy("")).late_answer_seconds == 30
    assert load_policy(policy("")).max_late_answers == 64
    assert load_policy(policy("late_answer_seconds = 0")).late_answer_seconds == 0
    assert load_policy(policy("max_late_answers = 5")).max_late_answers == 5
    for bad in ("late_answer_seconds = -1", 'late_answer_seconds = "1"', "max_late_answers = 0"):
        with pytest.raises(PolicyError, match=bad.split(" ")[0]):
            load_policy(policy(bad))
