"""One definition of an unfinished session (undolog.session_unfinished): every state but
completed and compensated, and a halted session until an operator resolves it. The
partial indexes over the unfinished sessions keep their predicates' literal text (an
index predicate cannot call a function that may change under it), and the planner uses
a partial index only for a query whose WHERE implies its predicate: so each index's
predicate must be, once planned, the very expression the function inlines to, and the
engine's queries must still read the indexes. Nothing else in sql/ may spell the
predicate out again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]
SQL = Path(__file__).resolve().parents[2] / "sql"
INDEXES = ("undolog_sessions_unfinished_idx", "undolog_sessions_owner_live_idx")
SHARED = "undolog.session_unfinished(s.state, s.resolved_at)"


def filter_of(conn: Conn, where: str) -> str:
    """The planned form of ``where`` over the sessions (a sequential scan's filter)."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_indexonlyscan = off")
        plan = conn.execute(
            f"EXPLAIN (VERBOSE, COSTS OFF) SELECT 1 FROM undolog.undolog_sessions AS s"
            f" WHERE {where}"
        ).fetchall()
    (line,) = [str(r[0]).strip() for r in plan if str(r[0]).strip().startswith("Filter:")]
    return line


def plan_of(conn: Conn, query: str) -> str:
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN (COSTS OFF) {query}").fetchall())


@pytest.mark.parametrize("index", INDEXES)
def test_each_index_predicate_is_the_shared_definition(conn: Conn, index: str) -> None:
    row = conn.execute(
        "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i"
        " WHERE i.indexrelid = %s::regclass",
        (f"undolog.{index}",),
    ).fetchone()
    assert row is not None and row[0] is not None, f"{index} is not partial"
    predicate = re.sub(r"\b(state|resolved_at)\b", r"s.\1", row[0])
    assert filter_of(conn, predicate) == filter_of(conn, SHARED)


def test_the_shared_definition_reads_the_partial_indexes(conn: Conn) -> None:
    """The queries written with it still use the indexes: the live count of begin_session
    (owner_live_idx, its predicate implied: no filter left), unfinished_sessions and
    metrics_sessions. Over live sessions of many logins, analyzed."""
    conn.execute(
        "INSERT INTO undolog.undolog_sessions (session_id, owner_role, lease_duration,"
        " lease_expires_at) SELECT gen_random_uuid(), 'login_' || g % 100, '1 hour', now()"
        " FROM generate_series(1, 5000) AS g"
    )
    conn.execute("ANALYZE undolog.undolog_sessions")
    count = plan_of(
        conn,
        "SELECT count(*) FROM undolog.undolog_sessions AS s WHERE s.owner_role = session_user"
        f" AND {SHARED}",
    )
    assert "Index Only Scan using undolog_sessions_owner_live_idx" in count, count
    assert "Filter" not in count, count
    for query in (
        "SELECT * FROM undolog.unfinished_sessions('2000-01-01', '2000-02-01')",
        "SELECT * FROM undolog.metrics_sessions",
    ):
        plan = plan_of(conn, query)
        assert re.search(r"undolog_sessions_(unfinished|owner_live)_idx", plan), plan


def test_no_other_source_spells_the_predicate_out() -> None:
    """Only the function and the indexes' migrations (whose text must stay literal)."""
    spelled = re.compile(r"NOT\s+IN\s*\(\s*'completed',\s*'compensated'\s*\)", re.IGNORECASE)
    found = sorted(
        str(p.relative_to(SQL))
        for p in SQL.rglob("*.sql")
        if not p.is_relative_to(SQL / "migrations") and spelled.search(p.read_text())
    )
    assert found == ["functions/session_unfinished.sql"]
