"""Sessions their clients left that the proxy must still end (bench/fuzz_mcp_proxy.py once
left one active after its end and a worker pass): each is completed (or undone) by the
proxy, never left active for its lease's expiry to fail it and a worker to undo every call
its client kept. Real proxy and upstream processes over streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import psycopg
import pytest
from mcp import Client
from test_mcp_proxy import (
    HttpProxy,
    holding_the_session_row,
    ledger,
    names,
    release_slow_make,
    wait_for,
)
from test_mcp_proxy_hostile import RawHttp, _ended, _state, pending_ids
from test_mcp_proxy_sessions import http_proxies, session_policy

from undolog import approvals, saga
from undolog.mcp_proxy.proxy import CONCLUDE_RETRY_PAUSES

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name


def _begun(client: RawHttp, request_id: int, key: str) -> tuple[str, str]:
    """A put of the client's: its session's id and handle."""
    _, put = client.call(request_id, "put", {"key": key, "value": "1"})
    handle = put[0]["result"]["_meta"]["undolog/session"]
    return handle.split(".")[0], handle


def _a_session(
    tmp_path: Path,
    dsn: str,
    ledger: Path,
    http_proxies: list[HttpProxy],
    proxy_lines: str = "",
    **popen: Any,
) -> tuple[HttpProxy, RawHttp, str, str]:
    """A proxy in front of the session upstream, and a raw client of it that began a
    session with a put: the proxy, the client, the session's id and its handle.
    ``popen``: more of the proxy process's Popen arguments (HttpProxy's)."""
    proxy = HttpProxy(session_policy(tmp_path, proxy=proxy_lines), dsn, ledger, **popen)
    http_proxies.append(proxy)
    client = RawHttp(proxy.url)
    return proxy, client, *_begun(client, 1, "a")


def test_an_end_that_outlasts_the_sdks_bound_on_exit_callbacks_still_ends_the_session(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client leaves (DELETE) while a COMPENSABLE call of its session runs: the
    session's end waits for that call. The proxy ran the end in the connection's exit
    callback, which the MCP SDK cancels after 5 s (here 0.2): the end was cut short, its
    heartbeat already stopped, and the session stayed active with nobody to end it, until
    its lease ran out and a worker undid both calls (or, cut short a moment later, it
    was forgotten). Now the end is the proxy's own task: the lease is kept while it
    waits, and the session completes once the call is recorded."""
    monkeypatch.setenv("UNDOLOG_TEST_SDK_CLEANUP_SECONDS", "0.2")  # tests/undolog_main.py
    lease = 3.0  # a beat every second: room for a loaded machine
    _proxy, client, sid, _ = _a_session(
        tmp_path, dsn, ledger, http_proxies, f"lease_seconds = {lease}"
    )
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(client.call, 2, "slow_make", {"key": "s", "seconds": 30})
        wait_for(lambda: names(ledger) == ["put", "slow_make"])  # running upstream
        client.leave()
        time.sleep(lease + 0.3)  # past the lease, had the heartbeat stopped
        expired = conn.execute("SELECT * FROM undolog.fail_expired_sessions()").fetchall()
        assert expired == []
        release_slow_make(ledger, "s")
        assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    finally:
        pool.shutdown(wait=False)
    assert names(ledger) == ["put", "slow_make"]  # nothing undone


def test_a_session_resumed_while_its_left_connections_end_waits_is_not_ended_under_it(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """The client leaves while a COMPENSABLE call of its session runs (the end waits for
    that call), and comes back on a new connection with the session's handle before the
    call is over. The left connection's end went on once the call was recorded: it
    completed the session under the new connection, whose next call was refused (or,
    with a call of it in flight, failed it and undid every call). Now that end stands
    down: the new connection holds the session, and its own leaving ends it."""
    proxy, client, sid, handle = _a_session(tmp_path, dsn, ledger, http_proxies)
    pool = ThreadPoolExecutor(1)
    try:
        slow = pool.submit(client.call, 2, "slow_make", {"key": "s", "seconds": 30})
        wait_for(lambda: names(ledger) == ["put", "slow_make"])  # running upstream
        client.leave()
        back = RawHttp(proxy.url)
        meta = {"undolog/session": handle}
        _, put = back.call(1, "put", {"key": "b", "value": "1"}, meta)
        assert not put[-1]["result"].get("isError"), put
        release_slow_make(ledger, "s")
        with contextlib.suppress(Exception):
            slow.result(10)
        time.sleep(0.5)  # the left connection's end, over the call, concluded (before)
        _, put = back.call(2, "put", {"key": "c", "value": "1"}, meta)
        assert not put[-1]["result"].get("isError"), put
        assert _state(conn, sid) == "active"
        back.leave()
        assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    finally:
        pool.shutdown(wait=False)
    assert names(ledger) == ["put", "slow_make", "put", "put"]  # nothing undone


@pytest.mark.parametrize("how", ["leaves", "proxy_stops"])
def test_a_session_left_in_a_partial_undo_is_completed_once_the_undo_is_over(
    how: str,
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """An operator undoes the last of a live session's two calls (rollback_last: a
    partial undo, after which the session goes on), then its client leaves, or the proxy
    stops. The proxy's end saw the session compensating, started the walk and forgot the
    session: the walk put it back to active, and nobody ended it (a worker would have
    undone the call the undo left standing at the lease's expiry). Now the end waits for
    the partial undo's walk, then completes the session, its first call kept; a proxy
    stopping walks it first."""
    proxy, client, sid, _ = _a_session(tmp_path, dsn, ledger, http_proxies)
    _begun(client, 2, "b")
    assert saga.rollback_last(conn, uuid.UUID(sid), 1, "the second was wrong", "op") == (
        "compensating"
    )
    if how == "leaves":
        client.leave()
    else:
        proxy.stop()  # SIGINT
    assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    assert names(ledger) == ["put", "put", "forget"]


def test_a_call_without_a_connection_does_not_take_over_a_left_sessions_end(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """A client leaves while its payout awaits approval: the proxy keeps the session, to
    end it once decided. A call sending the session's handle meanwhile took that end over
    ("its next end ends it"), but a 2026-era request (stateless HTTP) has no connection
    whose end ends the session: approved, it stayed active with nobody to end it. Now
    only a connection (or the idle boundary) takes the end over; the session completes
    once approved."""
    proxy, client, sid, handle = _a_session(tmp_path, dsn, ledger, http_proxies)
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(client.call, 2, "pay", {"account": "acc", "amount_cents": 5})
        approval_id = wait_for(lambda: next(iter(pending_ids(conn)), None))
        client.leave()
        time.sleep(0.5)  # the proxy's end of the left session has found it undecided

        async def resume() -> str:
            async with Client(proxy.url, read_timeout_seconds=30) as stateless:  # 2026 era
                while True:
                    refused = await stateless.call_tool(
                        "put",
                        {"key": "z", "value": "1"},
                        meta=cast(types.RequestParamsMeta, {"undolog/session": handle}),
                    )
                    said = " ".join(c.text for c in refused.content if c.type == "text")
                    assert refused.is_error, refused  # the payout awaits its decision
                    if "another client connection" not in said:  # (until it let go)
                        return said
                    await asyncio.sleep(0.1)

        asyncio.run(resume())
        approvals.approve(conn, approval_id, "alice", "checked")
        assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    finally:
        pool.shutdown(wait=False)
    assert names(ledger) == ["put"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_proxy_over_http_stopped_by_a_signal_ends_its_live_sessions(
    stop: signal.Signals,
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """uvicorn, stopped by a signal, raises it again once it has stopped serving: SIGTERM's
    default handler then ended the process before the proxy closed, its live sessions left
    active (for their lease's expiry to fail them and a worker to undo their calls), and
    SIGINT's (asyncio.run's) cancelled the proxy's close at its first wait. Now the proxy
    closes as a client's leaving would end its sessions: completed."""
    proxy, _client, sid, _ = _a_session(tmp_path, dsn, ledger, http_proxies)
    proxy.process.send_signal(stop)
    assert proxy.process.wait(15) == 0
    assert _ended(conn, sid) == "completed"
    assert names(ledger) == ["put"]


def test_a_partial_undo_that_lands_while_the_session_is_being_completed_is_waited_for(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """The client leaves; the proxy reads its session active and completes it, but a
    partial undo commits in between (here an operator's rollback_last, holding the
    session's row until then; in bench/fuzz_mcp_proxy.py seed 420, the client's own
    undolog__undo_last, cut short by its leaving after its rollback_last was sent). The
    completion was refused, the proxy started the walk and forgot the session: the walk
    put it back to active, with nobody to end it. Now the proxy reads the state again
    and waits for the partial undo as when it finds one."""
    _proxy, client, sid, _ = _a_session(tmp_path, dsn, ledger, http_proxies)
    _begun(client, 2, "b")
    with holding_the_session_row(dsn, sid) as operator:
        client.leave()
        wait_for(  # the proxy's complete_session waits for the row
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE %s",
                    ("%complete_session%",),
                ).fetchone()
                == (1,)
            )
        )
        operator.execute(
            "SELECT undolog.rollback_last(%s, 1, 'the second was wrong', 'op')", (sid,)
        )
    assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    assert names(ledger) == ["put", "put", "forget"]


def _completion_waiting(conn: psycopg.Connection[Any]) -> int | None:
    """The backend of the proxy's complete_session waiting for the session's row."""
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        ("%complete_session%",),
    ).fetchone()
    return None if row is None else int(row[0])


def _break_the_completion(conn: psycopg.Connection[Any]) -> None:
    """A real database error in the session end's last step: its connection ended
    (pg_terminate_backend) while its complete_session waits for the row."""
    pid = wait_for(lambda: _completion_waiting(conn))
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: _completion_waiting(conn) != pid)


def test_a_session_whose_completion_fails_once_is_completed_on_a_retry(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """The client leaves and the proxy's complete_session fails (its connection ended).
    The end was only logged and the session forgotten: active, with nobody to end it,
    until its lease's expiry failed it and a worker undid every call its client kept.
    Now the last step is tried again after a pause: completed."""
    _proxy, client, sid, _ = _a_session(tmp_path, dsn, ledger, http_proxies)
    with holding_the_session_row(dsn, sid):
        client.leave()
        _break_the_completion(conn)
    assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    assert names(ledger) == ["put"]


def test_a_session_whose_completion_keeps_failing_is_kept_and_ended_when_the_proxy_stops(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Every attempt at the session's completion fails: the proxy says what an operator
    can do, keeps the session (its heartbeat beating, its lease renewed) and completes
    it when it stops. It was forgotten at the first failure, its heartbeat stopped."""
    lease = 3.0
    log_path = tmp_path / "proxy.log"
    with log_path.open("w") as log_file:
        proxy, client, sid, _ = _a_session(
            tmp_path, dsn, ledger, http_proxies, f"lease_seconds = {lease}", stderr=log_file
        )
    with holding_the_session_row(dsn, sid):
        client.leave()
        for _ in range(len(CONCLUDE_RETRY_PAUSES) + 1):
            _break_the_completion(conn)
        said = wait_for(lambda: "could not be recorded" in log_path.read_text() and log_path)
    logged = said.read_text()
    assert f"`undolog sessions rollback {sid} --by NAME" in logged, logged
    assert "tries again when it stops" in logged, logged
    assert f"after {len(CONCLUDE_RETRY_PAUSES) + 1} attempt(s)" in logged, logged
    # its heartbeat still beats (its beats waited for the row too): the lease renewed
    wait_for(
        lambda: (
            conn.execute(
                "SELECT lease_expires_at > now() + interval '1 second'"
                " FROM undolog.undolog_sessions WHERE session_id = %s",
                (sid,),
            ).fetchone()
            == (True,)
        )
    )
    assert conn.execute("SELECT * FROM undolog.fail_expired_sessions()").fetchall() == []
    assert _state(conn, sid) == "active"
    proxy.stop()  # SIGINT: close() ends it
    assert _ended(conn, sid) == "completed"
    assert names(ledger) == ["put"]


def _lock_waiters(conn: psycopg.Connection[Any]) -> int:
    """How many of this database's backends wait for a lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_session_resumed_while_its_end_is_tried_again_is_not_ended_under_its_new_connection(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """The client leaves; the end's complete_session fails (its connection ended) while the
    client is back on a new connection with the session's handle, its put waiting for the
    session's row. The end tried again after its pause regardless: it completed the
    session under the new connection (or, its put still executing, failed it and undid
    every call). Now the retry stands down: the new connection holds the session, and
    its own leaving ends it."""
    log_path = tmp_path / "proxy.log"
    with log_path.open("w") as log_file:
        proxy, client, sid, handle = _a_session(
            tmp_path, dsn, ledger, http_proxies, stderr=log_file
        )
    back = RawHttp(proxy.url)
    meta = {"undolog/session": handle}
    pool = ThreadPoolExecutor(1)
    try:
        with psycopg.connect(dsn) as operator:  # one transaction, holding the session's row
            operator.execute(
                "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE",
                (sid,),
            )
            client.leave()
            wait_for(lambda: _completion_waiting(conn))  # the end's first try waits
            put = pool.submit(back.call, 1, "put", {"key": "b", "value": "1"}, meta)
            wait_for(lambda: _lock_waiters(conn) >= 2)  # the resumed put waits too
            _break_the_completion(conn)
            # the end's next try waits for the row again, or the end stood down
            wait_for(
                lambda: (
                    _completion_waiting(conn) is not None
                    or "resumed by a new connection" in log_path.read_text()
                )
            )
        _, answers = put.result(15)
        assert not answers[-1]["result"].get("isError"), answers
        _, answers = back.call(2, "put", {"key": "c", "value": "1"}, meta)
        assert not answers[-1]["result"].get("isError"), answers
        assert answers[-1]["result"]["_meta"]["undolog/session"].split(".")[0] == sid
        assert _state(conn, sid) == "active"
        back.leave()
        assert wait_for(functools.partial(_ended, conn, sid), timeout=15) == "completed"
    finally:
        pool.shutdown(wait=False)
    assert names(ledger) == ["put", "put", "put"]  # nothing undone
