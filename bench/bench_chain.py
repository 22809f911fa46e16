"""What the history's hash chain adds to a new COMPENSABLE call (docs/operations/audit.md).

A throwaway PostgreSQL (or ``--dsn``, a superuser's: the chain triggers are switched off
and on), the engine installed, one session. Each round runs ``--calls`` new compensable
calls as the decorator makes them (intercept_tool, then commit_effect with an
asynchronous result; bench_engine_ab.ENGINE_LOOP), each its own transaction, in one
server-side loop: no round trips, only the engine's own work, counted as the CPU time of
the server process (Linux, a local server), so that a loaded machine's waits for a CPU
are not counted. The throwaway server runs with fsync off, so that WAL flushes do not
drown the difference. Each round runs with the chain on and off (the order alternates);
the figure is the median difference per call. A new call is one link, in its own effect
row (its commit, whose record is the whole call: migration 0013), made by the effect
log's guard trigger: "off" is that guard re-created without its link (the canonical record, its hash
and the session head's update) and the history tables' chain triggers disabled. The
shipped guard is put back at the end.

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from bench_engine_ab import ENGINE_LOOP as LOOP  # the decorator's calls, server-side
from bench_engine_ab import cpu_seconds
from pgcluster import throwaway_cluster
from undolog.migrations import migrate

TRIGGERS = ("undolog_effect_history", "undolog_session_history")


# The guard's link: from the head's UPDATE to the end of its fallback (chain_link).
GUARD_LINK = re.compile(
    r"\n\s*UPDATE undolog\.undolog_chain_heads AS h.*?FROM undolog\.chain_link\([^;]*;\s*END IF;",
    re.S,
)
# The canonical records the link hashes: built for nothing once the link is gone.
GUARD_RECORD = re.compile(r"v_canonical := undolog\.chain_record_effect\([^;]*\);", re.S)


def guard_source(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(
        "SELECT pg_get_functiondef('undolog.effect_log_guard()'::regprocedure)"
    ).fetchone()
    assert row is not None
    return str(row[0])


def unlinked_guard(shipped: str) -> str:
    """The shipped guard without its link: every check and history row kept."""
    cut, found = GUARD_LINK.subn("", shipped)
    cut, records = GUARD_RECORD.subn("", cut)
    if found != 1 or records != 3:
        raise SystemExit("bench_chain: effect_log_guard's link not found; update GUARD_LINK")
    return cut


def switch(conn: psycopg.Connection[Any], on: bool, guard: dict[bool, str]) -> None:
    verb = "ENABLE" if on else "DISABLE"
    for table in TRIGGERS:
        conn.execute(f"ALTER TABLE undolog.{table} {verb} TRIGGER {table}_chain")
    conn.execute(guard[on])


def run(dsn: str, rounds: int, calls: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute(
            "SELECT undolog.register_tool('bench_tool', 'compensable', '{\"name\": \"undo\"}')"
        )
        conn.execute(LOOP % {"calls": 50})  # warm up
        pid = conn.info.backend_pid
        shipped = guard_source(conn)
        guard = {True: shipped, False: unlinked_guard(shipped)}
        per: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds):
            for on in (True, False) if r % 2 == 0 else (False, True):
                switch(conn, on, guard)
                before = cpu_seconds(pid)
                conn.execute(LOOP % {"calls": calls})
                per[on].append((cpu_seconds(pid) - before) * 1e6 / calls)
        switch(conn, True, guard)
    median_on, median_off = statistics.median(per[True]), statistics.median(per[False])
    diffs = [a - b for a, b in zip(per[True], per[False], strict=True)]
    print(f"new compensable call (intercept + commit), server-side, {rounds} rounds x {calls}")
    print(f"  chain on   {median_on:8.1f} µs CPU per call")
    print(f"  chain off  {median_off:8.1f} µs CPU per call")
    print(f"  added      {statistics.median(diffs):8.1f} µs per call (median of rounds)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="", help="a server (superuser) instead of a new one")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.dsn:
        run(args.dsn, args.rounds, args.calls)
    else:
        with throwaway_cluster() as cluster:
            print(f"throwaway PostgreSQL on {cluster.host}:{cluster.port}")
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET fsync = off")
                conn.execute("SELECT pg_reload_conf()")
            run(cluster.dsn, args.rounds, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
