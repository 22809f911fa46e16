"""What ``@undolog_tool`` costs an agent, side by side with baselines in the same run.

    make bench-decorator     (a throwaway PostgreSQL; or UNDOLOG_DSN=... python bench/...)

1. SAFE: a bare call vs the SAFE-decorated tool (target: under 1 µs added). For scale,
   also a plain functools.wraps pass-through wrapper, which SAFE deliberately avoids.
2. COMPENSABLE through the decorator (intercept + body + commit: 2 round trips) vs the raw
   psycopg floor (INSERT ... ON CONFLICT DO NOTHING, then UPDATE: 2 autocommit round
   trips, bench_intercept.py's floor) — target 0.8x the floor's calls/s — and vs the
   engine's SQL functions called directly (undolog.engine), which isolates what the
   decorator itself adds (binding, signature, result check).
3. Replay through the decorator: the same session started again (1 round trip a call).

Variants run interleaved in rounds; calls/s is the median over rounds. A benchmark, not a
test: it never fails on a slow result.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import timeit
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench_intercept import FLOOR_DDL, FLOOR_INSERT, FLOOR_UPDATE, make_args, result_for
from undolog import CompensationDescriptor, ToolTier, UndoLog, engine, undolog_tool
from undolog.migrations import migrate

TARGET_RATIO = 0.8
SAFE_TARGET_NS = 1000


def bare(query: str) -> str:
    return query


safe_tool = undolog_tool(tier=ToolTier.SAFE)(bare)


@functools.wraps(bare)
def wrapped(*args: Any, **kwargs: Any) -> str:
    return bare(*args, **kwargs)


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("delete_user", args={"soft": True}),
)
def create_user(
    email: str,
    name: str,
    plan: str,
    seats: int,
    tags: list[str],
    metadata: dict[str, Any],
    request_id: int,
) -> dict[str, Any]:
    return result_for(request_id)


def ns_per_call(fn: Callable[[str], str], number: int) -> float:
    timer = timeit.Timer(lambda: fn("q"))
    return min(timer.repeat(repeat=7, number=number)) / number * 1e9


def bench_safe(number: int) -> None:
    base, safe, wrap = (ns_per_call(f, number) for f in (bare, safe_tool, wrapped))
    print("1. SAFE tools (ns per call; best of 7 x", f"{number:,} calls)")
    print(f"   bare function                {base:8.1f}")
    print(
        f"   @undolog_tool(SAFE)          {safe:8.1f}   added {safe - base:+.1f} ns"
        f"  (target < {SAFE_TARGET_NS} ns: {'met' if safe - base < SAFE_TARGET_NS else 'NOT met'})"
    )
    print(
        f"   a functools.wraps wrapper    {wrap:8.1f}   added {wrap - base:+.1f} ns"
        "  (what SAFE avoids by returning the function itself)"
    )
    print(f"   same object: {safe_tool is bare}\n")


class Rounds:
    def __init__(self, dsn: str, calls: int) -> None:
        self.dsn = dsn
        self.calls = calls
        self.rates: dict[str, list[float]] = {
            "decorator": [],
            "engine": [],
            "floor": [],
            "replay": [],
        }
        self.ul = UndoLog(dsn)
        self.ul.compensation("delete_user")(lambda call: None)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.base = 0

    def timed(self, key: str, run: Callable[[], None]) -> None:
        start = time.perf_counter()
        run()
        self.rates[key].append(self.calls / (time.perf_counter() - start))

    def decorator_and_replay(self) -> None:
        session_id = uuid.uuid4()
        base = self.base

        def first() -> None:
            with self.ul.session(session_id):
                for i in range(self.calls):
                    create_user(**make_args(base + i))

        def again() -> None:
            with self.ul.session(session_id):
                for i in range(self.calls):
                    create_user(**make_args(base + i))

        self.timed("decorator", first)
        self.timed("replay", again)

    def engine_direct(self) -> None:
        session = engine.begin_session(self.conn)
        base = self.base
        compensation = {"name": "delete_user", "args": {"soft": True}}
        # once, untimed: the engine admits calls of registered tools only
        engine.register_tool(self.conn, "create_user", "compensable", compensation)

        def run() -> None:
            for i in range(self.calls):
                args = make_args(base + i)
                got = engine.intercept(
                    self.conn,
                    session,
                    i,
                    "create_user",
                    "compensable",
                    args,
                    compensation,
                )
                assert got.effect_id is not None
                engine.commit(self.conn, got.effect_id, result_for(base + i))

        self.timed("engine", run)
        engine.complete_session(self.conn, session)

    def floor(self) -> None:
        session = uuid.uuid4()
        signatures = [uuid.uuid4().hex + uuid.uuid4().hex for _ in range(self.calls)]
        base = self.base

        def run() -> None:
            for i in range(self.calls):
                row = self.conn.execute(
                    FLOOR_INSERT,
                    (signatures[i], session, i, "create_user", Jsonb(make_args(base + i))),
                ).fetchone()
                assert row is not None
                self.conn.execute(FLOOR_UPDATE, (Jsonb(result_for(base + i)), row[0]))

        self.timed("floor", run)

    def round(self, index: int) -> None:
        order = [self.floor, self.decorator_and_replay, self.engine_direct]
        shift = index % len(order)
        for step in order[shift:] + order[:shift]:
            step()
        self.base += self.calls


def bench_journaled(dsn: str, calls: int, rounds: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute(FLOOR_DDL)
    bench = Rounds(dsn, calls)
    bench.round(-1)  # warm-up: plans cached, pages in memory
    for key in bench.rates:
        bench.rates[key].clear()
    for i in range(rounds):
        bench.round(i)
    floor = statistics.median(bench.rates["floor"])
    print(f"2./3. journaled calls ({rounds} interleaved rounds x {calls:,} calls; median calls/s)")
    labels = {
        "floor": "raw psycopg floor (INSERT+UPDATE)   2 RT",
        "engine": "engine.intercept + engine.commit    2 RT",
        "decorator": "COMPENSABLE via @undolog_tool       2 RT",
        "replay": "replay via @undolog_tool            1 RT",
    }
    for key in ("floor", "engine", "decorator", "replay"):
        rate = statistics.median(bench.rates[key])
        print(
            f"   {labels[key]}  {rate:9,.0f}/s  {rate / floor:5.2f}x floor"
            f"  {1e6 / rate:7.0f} µs/call"
        )
    decorated = statistics.median(bench.rates["decorator"]) / floor
    print(
        f"   target: COMPENSABLE via the decorator >= {TARGET_RATIO}x the floor: "
        f"{'met' if decorated >= TARGET_RATIO else 'NOT met'} ({decorated:.2f}x)"
    )
    bench.conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="journaled calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--safe-calls", type=int, default=200_000)
    opts = parser.parse_args(argv)
    dsn = os.environ.get("UNDOLOG_DSN")
    if not dsn:
        print("UNDOLOG_DSN is not set (make bench starts a throwaway PostgreSQL)", file=sys.stderr)
        return 2
    bench_safe(opts.safe_calls)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS undolog_bench_decorator")
        admin.execute("CREATE DATABASE undolog_bench_decorator")
    bench_dsn = psycopg.conninfo.make_conninfo(dsn, dbname="undolog_bench_decorator")
    bench_journaled(bench_dsn, opts.calls, opts.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
