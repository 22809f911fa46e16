"""The MCP proxy's journal connections resolve names in pg_catalog alone (_conninfo): the
proxy runs as its agent login, and a function another agent made in public (where a
database made before PostgreSQL 15 lets any login create) must not run as this one."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_mcp_proxy_sessions import session_policy

from undolog import walk
from undolog.mcp_proxy.policy import load_policy
from undolog.mcp_proxy.proxy import McpProxy


def test_the_journal_pools_connections_are_pinned(tmp_path: Path, dsn: str) -> None:
    async def body() -> tuple[str, ...]:
        proxy = McpProxy(load_policy(session_policy(tmp_path)), dsn, {})
        await proxy.pool.open(wait=True)
        try:
            async with proxy.pool.connection() as conn:
                row = await (await conn.execute("SHOW search_path")).fetchone()
        finally:
            await proxy.pool.close()
        assert row is not None
        return tuple(row)

    assert asyncio.run(body()) == ("pg_catalog, pg_temp",)


def test_the_walks_connection_is_pinned(
    tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection the proxy's own undo walk runs on (walk.run_walk, here recording
    the path it was given instead of walking)."""
    seen: list[tuple[str, ...]] = []

    def run_walk(conn: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> str:
        row = conn.execute("SHOW search_path").fetchone()
        assert row is not None
        seen.append(tuple(row))
        return "compensated"

    monkeypatch.setattr(walk, "run_walk", run_walk)
    proxy = McpProxy(load_policy(session_policy(tmp_path)), dsn, {})
    asyncio.run(proxy._walk(uuid.uuid4(), {}))
    assert seen == [("pg_catalog, pg_temp",)]
