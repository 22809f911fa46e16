"""Benchmark (not a test): does the journal stay fast as it grows, and is retention cheap?

1. intercept latency (median, p95) with 10 k rows vs 2 M rows in the journal (target:
   within 1.2x), measured in interleaved rounds so that a noisy machine hurts both alike;
2. the time to drop a month of 50 k vs 500 k rows (target: under 1 s, independent of the
   size), split into the pruning of the undo/approval rows (row deletes, no lock that
   blocks intercept) and the DDL (the only moment intercepts wait), and the worst
   intercept latency seen by an agent running during the drop.

    .venv/bin/python tools/pgcluster.py run -- .venv/bin/python bench/bench_partitions.py

Uses the server named by UNDOLOG_DSN (or PG* variables) as a superuser: it creates and
drops two databases. The journal is bulk-loaded with INSERT ... SELECT as the owner, with
the guard triggers disabled during the load only, spread over past months (completed
sessions, a tenth of the calls irreversible with their approval requests), then vacuumed.
Prints the numbers side by side; never fails on a missed target.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.errors import Diagnostic

from journal_fill import fill, log
from undolog import engine, partitions

Conn = psycopg.Connection[Any]

SMALL_DB, BIG_DB = "undolog_bench_10k", "undolog_bench_2m"
# (month offset from the current UTC month, effects in it)
SMALL_LOAD = [(-4, 2500), (-3, 2500), (-2, 2500), (-1, 2500)]
BIG_LOAD = [(-5, 50_000), (-4, 500_000), (-3, 500_000), (-2, 500_000), (-1, 500_000)]
ROUNDS, PER_ROUND, WARMUP = 10, 200, 200
COMPENSATION = {"name": "delete_user", "args": {"soft": True}}


def dsn_for(base: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(base, dbname=dbname)


def load_month(conn: Conn, offset: int, effects: int) -> None:
    """Journal ``effects`` calls spread over month ``offset``, as intercept and commit
    would have: effect, its two history rows (created executing, committed), undo entry
    (with the call's signature, its exactly-once key), approval (1 in 10); effect ids that
    carry their executed_at, as intercept makes them (undolog.effect_id_at)."""
    conn.execute("SELECT undolog.create_month_partitions(undolog.utc_month(now(), %s))", (offset,))
    conn.execute("DROP TABLE IF EXISTS stage")
    conn.execute(
        """
        CREATE TEMP TABLE stage AS
        SELECT undolog.effect_id_at(t.executed_at) AS effect_id,
               md5(%(tag)s || (g / 100))::uuid AS session_id,
               t.executed_at,
               encode(sha256(convert_to(%(tag)s || g, 'UTF8')), 'hex') AS call_signature,
               CASE WHEN g %% 10 = 0 THEN 'irreversible' ELSE 'compensable' END AS tier,
               g
        FROM generate_series(0, %(n)s - 1) AS g,
             LATERAL (SELECT undolog.month_start(undolog.utc_month(now(), %(k)s)) AS lo,
                             undolog.month_start(undolog.utc_month(now(), %(k)s + 1)) AS hi) AS b,
             LATERAL (SELECT b.lo + (b.hi - b.lo) * (g::float8 / %(n)s) AS executed_at) AS t
        """,
        {"tag": f"bench:{offset}:", "n": effects, "k": offset},
    )
    conn.execute(
        "INSERT INTO undolog.undolog_sessions (session_id, agent, state, lease_duration, "
        "lease_expires_at, created_at, updated_at) "
        "SELECT session_id, 'bench', 'completed', '5 minutes', min(executed_at), "
        "min(executed_at), max(executed_at) FROM stage GROUP BY session_id"
    )
    conn.execute(
        "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, "
        "call_signature, step_index, tool_name, tier, args, state, result_snapshot, attempts, "
        "updated_at) "
        "SELECT effect_id, session_id, executed_at, call_signature, g % 100, 'create_user', "
        "tier, jsonb_build_object('email', 'user' || g || '@example.com', 'name', 'User ' || g), "
        "CASE tier WHEN 'compensable' THEN 'committed' ELSE 'approved' END, "
        "CASE tier WHEN 'compensable' THEN jsonb_build_object('user_id', g) END, 1, executed_at "
        "FROM stage"
    )
    conn.execute(
        "INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at, "
        "event, from_state, to_state, at) "
        "SELECT session_id, effect_id, executed_at, 'transition', f, t, executed_at "
        "FROM stage, LATERAL (VALUES (NULL, 'executing'), ('executing', 'committed')) AS v (f, t)"
    )
    conn.execute(
        "INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at, "
        "call_signature, compensation, state, created_at) "
        "SELECT session_id, effect_id, executed_at, call_signature, CASE tier "
        "WHEN 'compensable' THEN %s::jsonb END, 'pending', executed_at FROM stage ORDER BY g",
        ('{"name": "delete_user", "args": {}}',),
    )
    conn.execute(
        "INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at, "
        "state, requested_at, decided_at, decided_by, decided_role) "
        "SELECT session_id, effect_id, executed_at, 'approved', executed_at, executed_at, "
        "'bench', 'undolog_approver' FROM stage WHERE tier = 'irreversible'"
    )


def build(admin: Conn, base: str, dbname: str, months: list[tuple[int, int]]) -> None:
    started = time.perf_counter()

    def load(conn: Conn) -> None:
        for offset, effects in months:
            with conn.transaction():
                load_month(conn, offset, effects)
            log(f"  {dbname}: month {offset:+d} loaded ({effects} calls)")

    fill(admin, base, dbname, load, maintenance_work_mem="256MB")
    total = sum(n for _, n in months)
    log(f"  {dbname}: {total} calls loaded and vacuumed in {time.perf_counter() - started:.0f} s")


def register(conn: Conn) -> None:
    """intercept admits a registered tool only: the one tool these calls make."""
    engine.register_tool(conn, "create_user", "compensable", COMPENSATION)


def timed_calls(conn: Conn, session: uuid.UUID, first_step: int, count: int) -> list[float]:
    """Intercept (timed) then commit ``count`` new compensable calls."""
    latencies = []
    for step in range(first_step, first_step + count):
        args = {"email": f"user{step}@example.com", "name": f"User {step}"}
        t0 = time.perf_counter()
        got = engine.intercept(
            conn, session, step, "create_user", "compensable", args, COMPENSATION
        )
        latencies.append(time.perf_counter() - t0)
        assert got.action == "execute" and got.effect_id is not None, got
        engine.commit(conn, got.effect_id, {"user_id": step})
    return latencies


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1]


@contextlib.contextmanager
def undolog_debug(conn: Conn, into: list[str]) -> Iterator[None]:
    """Collect the engine's own timing messages (RAISE DEBUG 'undolog: ...')."""

    def handler(diag: Diagnostic) -> None:
        if (diag.message_primary or "").startswith("undolog:"):
            into.append(diag.message_primary or "")

    conn.add_notice_handler(handler)
    conn.execute("SET client_min_messages = debug1")
    try:
        yield
    finally:
        conn.execute("RESET client_min_messages")
        conn.remove_notice_handler(handler)


def drop_month(
    conn: Conn, base: str, dbname: str, offset: int, detach_only: bool = False
) -> dict[str, float]:
    """Drop (or detach) month ``offset`` and anything older while an agent intercepts and
    commits on the current month; answer the timings."""
    stop = threading.Event()
    calls: list[tuple[float, float]] = []  # (wall-clock start, latency)
    failures: list[BaseException] = []

    def agent() -> None:
        try:
            with psycopg.connect(dsn_for(base, dbname), autocommit=True) as c:
                session = engine.begin_session(c, agent="bench-during-drop")
                register(c)
                step = 0
                while not stop.is_set():
                    wall, t0 = time.time(), time.perf_counter()
                    timed_calls(c, session, step, 1)
                    calls.append((wall, time.perf_counter() - t0))
                    step += 1
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=agent)
    thread.start()
    time.sleep(1.0)
    cutoff_row = conn.execute(
        "SELECT undolog.month_start(undolog.utc_month(now(), %s))", (offset + 1,)
    ).fetchone()
    assert cutoff_row is not None
    messages: list[str] = []
    with undolog_debug(conn, messages):
        t0 = time.time()
        dropped = partitions.drop(conn, cutoff_row[0], detach_only=detach_only)
        t1 = time.time()
    time.sleep(0.5)
    stop.set()
    thread.join()
    if failures:
        raise failures[0]
    assert len(dropped) == 2, dropped
    text = " ".join(messages)
    pruned = re.search(r"pruned (\d+) \S+ rows in ([\d.]+) ms", text)
    ddl = re.search(
        r"(?:dropped|detached) partitions in ([\d.]+) ms \(DDL from epoch ([\d.]+)\)", text
    )
    ddl_from = float(ddl.group(2)) if ddl else t1
    # Calls overlapping the pruning, and those overlapping the DDL up to the commit: only
    # the latter can have waited for the catalog lock.
    pruning = [lat for start, lat in calls if start + lat >= t0 and start < ddl_from]
    ddl_window = [lat for start, lat in calls if start + lat >= ddl_from and start <= t1]
    before = [lat for start, lat in calls if start + lat < t0]
    return {
        "total_ms": (t1 - t0) * 1000,
        "pruned_rows": float(pruned.group(1)) if pruned else float("nan"),
        "prune_ms": float(pruned.group(2)) if pruned else float("nan"),
        "ddl_ms": float(ddl.group(1)) if ddl else float("nan"),
        "calls_pruning": float(len(pruning)),
        "max_pruning_ms": max(pruning, default=float("nan")) * 1000,
        "calls_ddl": float(len(ddl_window)),
        "max_ddl_ms": max(ddl_window, default=float("nan")) * 1000,
        "median_before_ms": statistics.median(before) * 1000 if before else float("nan"),
    }


def settle(conn: Conn) -> None:
    """Vacuum what a drop leaves behind (dead undo/approval rows, as autovacuum soon
    would) and checkpoint, so that each measurement starts from the same state."""
    conn.execute("VACUUM undolog.undolog_undo_stack, undolog.undolog_approval_requests")
    conn.execute("CHECKPOINT")


def main() -> int:
    base = os.environ.get("UNDOLOG_DSN", "")
    with psycopg.connect(base, autocommit=True) as admin:
        log("loading the journals (the 2 M one takes a few minutes on 2 cores) ...")
        build(admin, base, SMALL_DB, SMALL_LOAD)
        build(admin, base, BIG_DB, BIG_LOAD)
        try:
            results = run(base)
        finally:
            for db in (SMALL_DB, BIG_DB):
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(db)))
    report(results)
    return 0


def run(base: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with (
        psycopg.connect(dsn_for(base, SMALL_DB), autocommit=True) as small,
        psycopg.connect(dsn_for(base, BIG_DB), autocommit=True) as big,
    ):
        for conn in (small, big):
            row = conn.execute("SELECT count(*) FROM undolog.undolog_effect_log").fetchone()
            results.setdefault("rows", []).append(row[0] if row else 0)
            register(conn)
        sessions = {
            "small": engine.begin_session(small, agent="bench", lease=timedelta(days=1)),
            "big": engine.begin_session(big, agent="bench", lease=timedelta(days=1)),
        }
        timed_calls(small, sessions["small"], 0, WARMUP)
        timed_calls(big, sessions["big"], 0, WARMUP)
        lat: dict[str, list[float]] = {"small": [], "big": []}
        log(f"intercept: {ROUNDS} interleaved rounds of {PER_ROUND} calls per journal ...")
        for r in range(ROUNDS):
            first = WARMUP + r * PER_ROUND
            order = [("small", small), ("big", big)]
            if r % 2:
                order.reverse()
            for key, conn in order:
                lat[key] += timed_calls(conn, sessions[key], first, PER_ROUND)
        results["latency"] = lat

        log("drop: the 50 k month, then the 500 k month, with an agent running ...")
        results["drop_50k"] = drop_month(big, base, BIG_DB, -5)
        settle(big)
        results["drop_500k"] = drop_month(big, base, BIG_DB, -4)
        settle(big)
        results["detach_500k"] = drop_month(big, base, BIG_DB, -3, detach_only=True)
        settle(big)
        t0 = time.perf_counter()
        partitions.maintain(big, months_ahead=3, retention_months=120)
        results["maintain_noop_ms"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        created = partitions.ensure(big, months_ahead=4)
        results["ensure_one_month_ms"] = (time.perf_counter() - t0) * 1000
        results["ensure_created"] = created
    return results


def report(results: dict[str, Any]) -> None:
    small_rows, big_rows = results["rows"]
    s, b = results["latency"]["small"], results["latency"]["big"]
    ms = 1000.0
    print()
    print(
        f"intercept latency (ms)   journal of {small_rows:>9d}   journal of {big_rows:>9d}"
        "   ratio   target"
    )
    for name, f in (("median", statistics.median), ("p95", p95)):
        a, z = f(s) * ms, f(b) * ms
        print(f"  {name:<22} {a:>20.3f}   {z:>20.3f}   {z / a:5.2f}   <= 1.20")
    print(f"  calls measured         {len(s):>20d}   {len(b):>20d}")
    print()
    d50, d500, x500 = results["drop_50k"], results["drop_500k"], results["detach_500k"]
    print("drop one month (ms)         drop 50 k rows  drop 500 k rows  detach 500 k rows   target")
    rows = (
        ("drop_partitions total", "total_ms", "< 1000"),
        ("  prune (row deletes)", "prune_ms", "no intercept waits"),
        ("  DDL (catalog lock)", "ddl_ms", "independent of size"),
        ("rows pruned", "pruned_rows", ""),
        ("agent calls during prune", "calls_pruning", ""),
        ("agent worst call, prune", "max_pruning_ms", "no lock wait"),
        ("agent calls during DDL", "calls_ddl", ""),
        ("agent worst call, DDL", "max_ddl_ms", "waits for the lock"),
        ("agent median call before", "median_before_ms", ""),
    )
    for label, key, target in rows:
        print(
            f"  {label:<26} {d50[key]:>12.1f}   {d500[key]:>14.1f}   {x500[key]:>16.1f}   {target}"
        )
    print()
    print(f"maintain_partitions, nothing to do, 2 M journal: {results['maintain_noop_ms']:.1f} ms")
    print(
        f"ensure_partitions creating one month ({', '.join(results['ensure_created'])}): "
        f"{results['ensure_one_month_ms']:.1f} ms"
    )


if __name__ == "__main__":
    sys.exit(main())
