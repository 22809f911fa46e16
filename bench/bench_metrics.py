"""Benchmark (not a test): what does one metrics scrape cost on a big journal?

The time of ``undolog.metrics.scrape`` (the eight metrics views, one round trip, the
exposition rendered) as an operator login, with 1 M sessions in the journal (mostly
completed over 100 days, a few of every live state), one call each with its undo entry
(which holds the call's signature) and history row, 100 k decided approvals and 100 k
undo-history rows spread over the same 100 days, and a recent minute of traffic (calls,
decisions, compensation attempts, a late result); p50 and p99. Target: under 200 ms.
Then each view's plan, to show it reads an index and not the whole table.

    .venv/bin/python tools/pgcluster.py run -- .venv/bin/python bench/bench_metrics.py \
        [--sessions 1000000] [--scrapes 50] [--keep-database]

Uses the server named by UNDOLOG_DSN (or PG* variables) as a superuser: it creates the
database undolog_bench_metrics and an operator login (bench_metrics_operator). The load
is set-based INSERT ... SELECT generate_series as the owner, guard triggers disabled
during the load only, then ANALYZE (what autovacuum would do). Prints the numbers;
never fails on a missed target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from journal_fill import AT, SESSION_ID, batches, fill, log, month_partitions
from undolog.metrics import VIEWS, scrape

Conn = psycopg.Connection[Any]
DBNAME = os.environ.get("UNDOLOG_BENCH_DBNAME", "undolog_bench_metrics")
LOGIN = "bench_metrics_operator"
TARGET_MS = 200.0
BATCH = 250_000


def load(conn: Conn, sessions: int) -> None:
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    month_partitions(conn)
    for first, last in batches(1, sessions, BATCH):
        params = {"a": first, "b": last, "n": sessions, "now": now}
        # Mostly finished; one in a thousand of each live state (active with a lease run
        # out, so that it is due for the worker).
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_sessions (session_id, agent, owner_role, state,
                lease_duration, lease_expires_at, created_at, updated_at)
            SELECT {SESSION_ID}, 'agent-' || (i %% 50), 'bench_agent',
                   CASE WHEN i %% 1000 = 1 THEN 'halted' WHEN i %% 1000 = 2 THEN 'active'
                        WHEN i %% 1000 = 3 THEN 'awaiting_approval'
                        WHEN i %% 1000 = 5 THEN 'failed'
                        WHEN i %% 100 = 4 THEN 'compensated' ELSE 'completed' END,
                   '5 minutes', t, t, t
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            """,
            params,
        )
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,
                call_signature, step_index, tool_name, tier, args, state, attempts, updated_at)
            SELECT md5('e' || i)::uuid, {SESSION_ID}, t,
                   md5('s' || i) || md5('t' || i), 0,
                   CASE WHEN i %% 4 = 3 THEN 'payout' ELSE 'create_user' END,
                   CASE WHEN i %% 4 = 3 THEN 'irreversible' ELSE 'compensable' END,
                   '{{}}', CASE WHEN i %% 4 = 3 THEN 'approved' ELSE 'committed' END, 1, t
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            """,
            params,
        )
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at,
                event, from_state, to_state, at, actor)
            SELECT {SESSION_ID}, md5('e' || i)::uuid, t,
                   CASE WHEN i %% 20000 = 4 THEN 'late_commit' ELSE 'transition' END,
                   'executing', 'committed', t, 'bench_agent'
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            """,
            params,
        )
        # Every call's undo entry with its signature (the call's exactly-once key): a
        # compensable call's compensation, an irreversible call's barrier. Left pending as
        # a finished session leaves it; the failed sessions' ones wait for the walk.
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_undo_stack (undo_id, session_id, effect_id,
                executed_at, call_signature, compensation, state, created_at, updated_at,
                next_attempt_at)
            SELECT md5('u' || i)::uuid, {SESSION_ID}, md5('e' || i)::uuid, t,
                   md5('s' || i) || md5('t' || i),
                   CASE WHEN i %% 4 <> 3 THEN '{{"name": "delete_user"}}'::jsonb END,
                   'pending', t, t, t
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            """,
            params,
        )
        # One in ten sessions: a decided approval (waited 0..10 minutes) and an undo
        # history row; the pending approvals are the awaiting_approval sessions'.
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at,
                state, requested_at, decided_at, decided_by, decided_role)
            SELECT {SESSION_ID}, md5('e' || i)::uuid, t,
                   CASE WHEN i %% 1000 = 3 THEN 'pending' ELSE 'approved' END, t,
                   CASE WHEN i %% 1000 <> 3 THEN t + interval '1 second' * (i %% 600) END,
                   CASE WHEN i %% 1000 <> 3 THEN 'boss' END,
                   CASE WHEN i %% 1000 <> 3 THEN 'boss' END
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            WHERE i %% 10 = 3
            """,
            params,
        )
        # The undo history's rows are loaded apart from the undo stack's (not by its
        # trigger; the undo history is not among journal_fill.GUARDED).
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_undo_history (session_id, undo_id, event,
                from_state, to_state, attempt, at, actor)
            SELECT {SESSION_ID}, md5('u' || i)::uuid, 'transition', 'pending',
                   'compensating', 1, t, 'worker'
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            WHERE i %% 10 = 4
            """,
            params,
        )


def build(admin: Conn, base: str, sessions: int) -> str:
    started = time.perf_counter()
    dsn = fill(admin, base, DBNAME, lambda conn: load(conn, sessions))
    admin.execute(
        sql.SQL(
            "DO $$ BEGIN CREATE ROLE {} LOGIN IN ROLE undolog_operator; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ).format(sql.Identifier(LOGIN))
    )
    log(f"loaded {sessions:,} sessions in {time.perf_counter() - started:.0f} s")
    return dsn


def measure(dsn: str, scrapes: int) -> list[float]:
    with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user=LOGIN), autocommit=True) as c:
        scrape(c)  # warm: plans, catalog caches, the pages the views read
        times = []
        for _ in range(scrapes):
            started = time.perf_counter()
            scrape(c)
            times.append((time.perf_counter() - started) * 1000)
        return times


def plans(dsn: str) -> None:
    with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user=LOGIN), autocommit=True) as c:
        for name, query in VIEWS:
            rows = c.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {query}").fetchall()
            text = "\n".join(r[0] for r in rows)
            scans = [
                line.strip()
                for line in text.splitlines()
                if "Scan" in line or "Execution Time" in line
            ]
            print(f"\n{name}:")
            for line in scans:
                print(f"    {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="measure an existing database")
    args = parser.parse_args()
    base = os.environ.get("UNDOLOG_DSN", "")
    with psycopg.connect(base, autocommit=True) as admin:
        if args.reuse:
            dsn = psycopg.conninfo.make_conninfo(base, dbname=DBNAME)
        else:
            dsn = build(admin, base, args.sessions)
        try:
            times = measure(dsn, args.scrapes)
            p50 = statistics.median(times)
            p99 = statistics.quantiles(times, n=100)[98] if len(times) > 1 else times[0]
            print(
                f"scrape with {args.sessions:,} sessions: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
                f"over {len(times)} scrapes (target < {TARGET_MS:.0f} ms: "
                f"{'met' if p99 < TARGET_MS else 'MISSED'})"
            )
            plans(dsn)
        finally:
            if not args.keep_database and not args.reuse:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(DBNAME)
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
