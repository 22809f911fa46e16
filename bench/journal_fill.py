"""The bulk fill of a throwaway journal, shared by the benchmarks that measure on a big
one (bench_dashboard.py, bench_metrics.py, bench_operator_reads.py, bench_partitions.py).

:func:`fill` makes a database of its own (dropped first if it is there), migrates it, and
runs the script's own ``load``: set-based ``INSERT ... SELECT generate_series`` as the
engine's owner, rows written in their final form, with the guard triggers (state
machine, history, append-only) disabled during the load only; then VACUUM ANALYZE (what
autovacuum would do). What rows, and how many, stays each script's own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from undolog.migrations import migrate

Conn = psycopg.Connection[Any]

# The tables whose user triggers are disabled while loading.
GUARDED = (
    "undolog_sessions",
    "undolog_effect_log",
    "undolog_effect_history",
    "undolog_undo_stack",
    "undolog_approval_requests",
)
# Session i's id: ids increase with i (the btree indexes fill in order).
SESSION_ID = "(lpad(to_hex(i), 8, '0') || substr(md5(i::text), 9, 24))::uuid"
# Session i of %(n)s's time, spread over 100 days, the newest %(now)s: one instant for
# every table's rows, so that a call's undo entry and effect row carry the same executed_at.
AT = "%(now)s::timestamptz - interval '100 days' * (1 - i::float8 / %(n)s)"
# The months a load spreads over (offsets from the current UTC month): four months back
# and the next.
MONTHS = (-4, -3, -2, -1, 0, 1)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def month_partitions(conn: Conn, months: Sequence[int] = MONTHS) -> None:
    """The partitions of ``months`` (offsets from the current UTC month)."""
    for month in months:
        conn.execute(
            "SELECT undolog.create_month_partitions(undolog.utc_month(now(), %s))", (month,)
        )


def batches(first: int, last: int, size: int) -> Iterator[tuple[int, int]]:
    """``first``..``last`` in batches of ``size`` (each bounds included), each logged with
    the time its loop body took."""
    for low in range(first, last + 1, size):
        high = min(low + size - 1, last)
        started = time.perf_counter()
        yield low, high
        log(f"  sessions {low:>9}..{high:<9} {time.perf_counter() - started:6.1f} s")


@contextmanager
def guards_off(conn: Conn, tables: Sequence[str] = GUARDED) -> Iterator[None]:
    """The tables' user triggers disabled for the block only (the owner's bulk load)."""
    for table in tables:
        conn.execute(f"ALTER TABLE undolog.{table} DISABLE TRIGGER USER")
    try:
        yield
    finally:
        for table in tables:
            conn.execute(f"ALTER TABLE undolog.{table} ENABLE TRIGGER USER")


def fill(
    admin: Conn,
    base: str,
    dbname: str,
    load: Callable[[Conn], None],
    *,
    guarded: Sequence[str] = GUARDED,
    maintenance_work_mem: str = "512MB",
) -> str:
    """Database ``dbname`` made afresh on the server of ``base`` (``admin``: a superuser's
    connection to it), migrated, filled by ``load`` (on an autocommit connection, as the
    owner, the ``guarded`` tables' triggers disabled) and vacuumed; answers its DSN."""
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    dsn = psycopg.conninfo.make_conninfo(base, dbname=dbname)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute("SET synchronous_commit = off")
        conn.execute(
            sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem))
        )
        with guards_off(conn, guarded):
            load(conn)
        conn.execute("VACUUM (ANALYZE)")
    return dsn
