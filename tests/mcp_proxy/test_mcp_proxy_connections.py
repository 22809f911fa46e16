"""The journal connections a proxy session keeps between its calls, in process on a real
PostgreSQL: a session keeps the connection its statements took, gives it back to the pool
when it has been quiet for a heartbeat and when it ends, and no more than the proxy's cap
are kept by all sessions together (the rest of the pool serves the others)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg
from test_mcp_proxy_sessions import session_policy

from undolog.mcp_proxy import proxy as proxy_module
from undolog.mcp_proxy.policy import load_policy
from undolog.mcp_proxy.proxy import McpProxy


def available(mcp: McpProxy) -> int:
    """The pool's connections not taken (neither by a statement nor kept by a session)."""
    return int(mcp.pool.get_stats()["pool_available"])


def all_back(mcp: McpProxy) -> bool:
    """Every connection of the pool is in it (none kept, none in use)."""
    return available(mcp) == int(mcp.pool.get_stats()["pool_size"])


def state(conn: psycopg.Connection[Any], mcp_session: Any) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.sessions_list WHERE session_id = %s",
        (mcp_session.session_id,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_a_session_keeps_its_connection_until_quiet_for_a_beat_then_gives_it_back(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # no upstream process is started: only the journal's side of a session is used
    policy = load_policy(session_policy(tmp_path, proxy="lease_seconds = 1.5"))

    async def body() -> None:
        mcp = McpProxy(policy, dsn, {})
        await mcp.open()
        try:
            ps = mcp._new_session()
            await mcp.begin(ps)
            assert ps.kept == []  # begin's connection went back: the session was not begun
            assert await mcp._state(ps) == "active"  # a statement of the live session
            size = int(mcp.pool.get_stats()["pool_size"])
            assert len(ps.kept) == 1  # the connection that statement took
            assert available(mcp) == size - 1
            ps.last_call = time.monotonic()
            # Each beat takes a connection for its statement (and gives it back after it,
            # the session being quiet): wait for a moment between two beats.
            deadline = time.monotonic() + 10
            while (ps.kept or not all_back(mcp)) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert ps.kept == [], "kept after a quiet heartbeat"
            assert all_back(mcp)
            assert state(conn, ps) == "active"  # still beating: only the connection went

            other = mcp._new_session()
            await mcp.begin(other)
            assert await mcp._state(other) == "active"
            assert len(other.kept) == 1
            await mcp.end_session(other)
            assert other.kept == []  # given back when the session ended
            assert state(conn, other) == "completed"
        finally:
            await mcp.close()

    asyncio.run(body())


def test_no_more_than_the_cap_of_connections_are_kept_by_all_sessions(
    tmp_path: Path, dsn: str
) -> None:
    policy = load_policy(session_policy(tmp_path, proxy="lease_seconds = 600"))

    async def body() -> None:
        mcp = McpProxy(policy, dsn, {})
        await mcp.open()
        try:
            many = [mcp._new_session() for _ in range(proxy_module.KEPT_CONNECTIONS + 2)]
            for ps in many:
                await mcp.begin(ps)
                assert await mcp._state(ps) == "active"
            assert sum(len(ps.kept) for ps in many) == proxy_module.KEPT_CONNECTIONS
            # the sessions beyond the cap work all the same, a checkout a statement
            for ps in many[proxy_module.KEPT_CONNECTIONS :]:
                assert ps.kept == []
                assert await mcp._state(ps) == "active"
                assert ps.kept == []
            for ps in many:
                await mcp.end_session(ps)
            assert sum(len(ps.kept) for ps in many) == 0
            assert all_back(mcp)
        finally:
            await mcp.close()

    asyncio.run(body())
