"""Where a journaled call's time goes, for "what it would take" (docs/performance.md): the server
time of each statement (the engine as shipped, and ablated copies of it), the client CPU
per call, and the cost of one WAL flush on this machine, then the arithmetic that ties
them to the 1-agent targets.

Run by ``make bench-profile``. Starts its own throwaway PostgreSQL (pg_stat_statements
preloaded) unless ``--dsn`` names a server (superuser: the ablations drop and replace
tables). One connection, autocommit, as the binding's default. Every figure is a median
over ``--rounds`` interleaved rounds (the variants' order rotates every round).

Server µs are pg_stat_statements deltas of the statements a phase ran: executor run time
of the top-level statement (intercept, commit; the floor's INSERT and UPDATE), so neither
the round trip nor the commit's WAL flush is in them. The nested column repeats the
shipped engine's phase with ``pg_stat_statements.track = all``: each statement inside
intercept and commit, run time only (executor start and end, a few µs per statement, are
not in it; the top-level figure has them).

Ablations are not proposals: each removes something a guarantee needs, to measure what
that thing costs, which is the most a design that writes less could save by moving it:
  shipped        the engine as migrate installs it
  no_guard       the effect log's guard triggers dropped: no history rows, no links, no
                 transition checks: what the guard still costs a new call (its commit)
  unpartitioned  the effect log and its history as plain tables (same columns, keys and
                 the hot path's triggers): what "no tuple routing" could save at most
A call's exactly-once key (session, signature) has no INSERT of its own: it is a column
and a unique index of its undo entry (migration 0014), in the undo stack's INSERT in the
nested column.

Client CPU is time.process_time() per call in this process (Python, psycopg, the
socket), for the floor, the SQL API as the decorator uses it (call_signature, intercept,
commit with asynchronous results), the decorator itself, and call_signature alone.
On the throwaway server (no ``--dsn``), the same blocks also read each connection's
server process's CPU time from /proc: what a call costs the server through the protocol,
its two transactions and the caches it finds cold (the client ran between its
statements), which neither pg_stat_statements nor bench_engine_ab.py's server-side loop
counts.

``--entry`` picks the SQL API's intercept: ``intercept_tool`` (the default, the
decorator's: the tool named by its registration's id, checked once when registered) or
``intercept`` (the tool named, its tier and compensation checked on every call).

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import bench_agents as ba
import bench_engine_ab as ab
from undolog import ToolTier, UndoLog, engine, undolog_tool
from undolog._sql import sql_root
from undolog.migrations import migrate
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]

VARIANTS = ("shipped", "no_guard", "unpartitioned")
SQL_ROOT = sql_root()
DB_PREFIX = "undolog_bench_profile_"

# Run as the superuser on a fresh install; the views that read the two tables go with
# them (the ablated database serves only intercept and commit).
ABLATIONS: dict[str, str] = {
    "shipped": "",
    "no_guard": """
        DROP TRIGGER undolog_effect_log_guard ON undolog.undolog_effect_log;
        DROP TRIGGER undolog_effect_log_guard_insert ON undolog.undolog_effect_log;
    """,
    "unpartitioned": """
        CREATE TABLE undolog.plain_effect_log
            (LIKE undolog.undolog_effect_log INCLUDING DEFAULTS);
        ALTER TABLE undolog.plain_effect_log
            ADD PRIMARY KEY (session_id, effect_id, executed_at);
        CREATE TABLE undolog.plain_effect_history
            (LIKE undolog.undolog_effect_history INCLUDING DEFAULTS);
        ALTER TABLE undolog.plain_effect_history
            ADD PRIMARY KEY (session_id, history_id, executed_at);
        DROP TABLE undolog.undolog_effect_log, undolog.undolog_effect_history CASCADE;
        ALTER TABLE undolog.plain_effect_log RENAME TO undolog_effect_log;
        ALTER TABLE undolog.plain_effect_history RENAME TO undolog_effect_history;
    """
    # the hot path's triggers as shipped, on the plain tables
    + "".join(
        (SQL_ROOT / "triggers" / f"{name}.sql").read_text("utf-8")
        for name in (
            "undolog_effect_log_guard",
            "undolog_effect_log_guard_insert",
            "undolog_effect_history_chain",
        )
    ),
}

STATS = """
SELECT s.query, s.toplevel, sum(s.calls)::bigint, sum(s.total_exec_time)
FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
WHERE d.datname = current_database()
GROUP BY s.query, s.toplevel
"""

Snapshot = dict[tuple[str, bool], tuple[int, float]]


def snapshot(conn: Conn) -> Snapshot:
    return {(q, top): (int(c), float(t)) for q, top, c, t in conn.execute(STATS).fetchall()}


def delta(before: Snapshot, after: Snapshot) -> dict[tuple[str, bool], tuple[int, float]]:
    out = {}
    for key, (calls, total) in after.items():
        c0, t0 = before.get(key, (0, 0.0))
        if calls > c0:
            out[key] = (calls - c0, total - t0)
    return out


def per_call_us(d: dict[tuple[str, bool], tuple[int, float]], pattern: str, calls: int) -> float:
    """Top-level server µs per call of the statements whose text contains ``pattern``."""
    total = sum(t for (q, top), (_, t) in d.items() if top and pattern in q)
    return total * 1000 / calls


# A result, as the binding commits it: asynchronously, the effect's session first.
COMMIT_EFFECT = "SELECT undolog.commit_effect(%s, %s, %s, true)"


class Phase:
    """One connection's session in one database, making new calls or replays."""

    def __init__(self, dsn: str, entry: str = "intercept_tool") -> None:
        self.conn: Conn = psycopg.connect(dsn, autocommit=True)
        self.session = engine.begin_session(self.conn, agent="profile", lease=timedelta(hours=4))
        # once, untimed: the engine admits calls of registered tools only
        self.tool_id = engine.register_tool(
            self.conn, ba.TOOL, "compensable", ba.COMPENSATION.to_json()
        )
        self.entry = entry
        self.step = 0
        self.replay_pool = 200
        self.commit_wall = 0.0
        for step in range(self.replay_pool):  # committed before any timing starts
            got = self.intercept(1_000_000 + step)
            assert got.effect_id is not None
            engine.commit(self.conn, got.effect_id, ba.result_for(step), asynchronous=True)
        engine.set_async_results(self.conn, True)  # replay bookkeeping as the binding does

    def intercept(self, step: int) -> engine.Interception:
        args = ba.make_args(step)
        signature = call_signature(self.session, step, ba.TOOL, args)
        if self.entry == "intercept_tool":  # as the decorator: the tool by its registration
            return engine.intercept_tool(
                self.conn, self.session, self.tool_id, step, args, signature
            )
        return engine.intercept(
            self.conn,
            self.session,
            step,
            ba.TOOL,
            "compensable",
            args,
            ba.COMPENSATION.to_json(),
            signature,
        )

    def new_call(self) -> float:
        """One new call, intercept then commit (asynchronous result); answers the
        commit's wall seconds."""
        got = self.intercept(self.step)
        if got.action != "execute" or got.effect_id is None:
            raise RuntimeError(f"step {self.step}: intercept answered {got.action}")
        c0 = time.perf_counter()
        # As the binding sends it (unwaited there): the effect's session first, and its
        # row found by the id's time, no lookup (engine.commit by id alone looks it up).
        self.conn.execute(
            COMMIT_EFFECT, (self.session, got.effect_id, Jsonb(ba.result_for(self.step)))
        )
        self.step += 1
        return time.perf_counter() - c0

    def new_calls(self, calls: int) -> float:
        """Wall µs per new call; the commits' share is left in self.commit_wall."""
        t0 = time.perf_counter()
        in_commit = sum(self.new_call() for _ in range(calls))
        self.commit_wall = in_commit * 1e6 / calls
        return (time.perf_counter() - t0) * 1e6 / calls

    def replays(self, calls: int) -> float:
        t0 = time.perf_counter()
        for k in range(calls):
            if self.intercept(1_000_000 + k % self.replay_pool).action != "replay":
                raise RuntimeError("a replay was not a replay")
        return (time.perf_counter() - t0) * 1e6 / calls


def server_profile(
    base: str, rounds: int, calls: int, entry: str
) -> tuple[dict[str, dict[str, float]], dict[str, list[tuple[str, float, float]]]]:
    """Per variant: server µs of intercept (new), commit, intercept (replay), and the
    wall µs of a new call and of a replay; and the shipped engine's nested statements."""
    phases = {v: Phase(make_conninfo(base, dbname=DB_PREFIX + v), entry) for v in VARIANTS}
    called = f"undolog.{entry}("
    samples: dict[str, dict[str, list[float]]] = {
        v: {
            k: []
            for k in ("intercept", "commit", "replay", "wall_new", "wall_commit", "wall_replay")
        }
        for v in VARIANTS
    }
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
        for v in order:
            ph, s = phases[v], samples[v]
            before = snapshot(ph.conn)
            s["wall_new"].append(ph.new_calls(calls))
            s["wall_commit"].append(ph.commit_wall)
            d = delta(before, snapshot(ph.conn))
            s["intercept"].append(per_call_us(d, called, calls))
            s["commit"].append(per_call_us(d, "undolog.commit_effect(", calls))
            before = snapshot(ph.conn)
            s["wall_replay"].append(ph.replays(calls))
            s["replay"].append(per_call_us(delta(before, snapshot(ph.conn)), called, calls))
        ba.log(f"  server profile: round {r + 1}/{rounds} done")
    # The nested statements of the shipped engine: one more phase each, tracked at every
    # level.
    ph = phases["shipped"]
    ph.conn.execute("SET pg_stat_statements.track = 'all'")
    nested: dict[str, list[tuple[str, float, float]]] = {}
    for kind, run in (("new call", ph.new_calls), ("replay", ph.replays)):
        before = snapshot(ph.conn)
        run(calls)
        nested[kind] = sorted(
            (
                (" ".join(q.split())[:74], c / calls, t * 1000 / calls)
                for (q, top), (c, t) in delta(before, snapshot(ph.conn)).items()
                if not top
            ),
            key=lambda row: -row[2],
        )
    ph.conn.execute("RESET pg_stat_statements.track")
    for p in phases.values():
        p.conn.close()
    medians = {v: {k: statistics.median(x) for k, x in samples[v].items()} for v in VARIANTS}
    return medians, nested


def floor_call(conn: Conn, sig: str, session: uuid.UUID, step: int) -> None:
    """One call of the floor: INSERT ... RETURNING, then UPDATE (two round trips)."""
    row = conn.execute(
        ba.FLOOR_INSERT, (sig, session, step, ba.TOOL, Jsonb(ba.make_args(step)))
    ).fetchone()
    assert row is not None
    conn.execute(ba.FLOOR_UPDATE, (Jsonb(ba.result_for(step)), row[0]))


def floor_profile(dsn: str, rounds: int, calls: int) -> dict[str, float]:
    """The floor's server µs per call (INSERT + UPDATE) and its wall µs."""
    conn: Conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(ba.FLOOR_DDL)
    server, wall = [], []
    session, step = uuid.uuid4(), 0
    for _ in range(rounds):
        sigs = [uuid.uuid4().hex + uuid.uuid4().hex for _ in range(calls)]
        before = snapshot(conn)
        t0 = time.perf_counter()
        for k in range(calls):
            floor_call(conn, sigs[k], session, step)
            step += 1
        wall.append((time.perf_counter() - t0) * 1e6 / calls)
        d = delta(before, snapshot(conn))
        server.append(per_call_us(d, "bench_floor", calls))
    conn.close()
    return {"server": statistics.median(server), "wall": statistics.median(wall)}


def flush_cost(dsn: str, calls: int) -> float:
    """One WAL flush, µs: a one-row INSERT committed durably minus the same committed
    with synchronous_commit off (interleaved blocks of 50, medians)."""
    conn: Conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS public.bench_flush (n bigint)")
    times: dict[str, list[float]] = {"on": [], "off": []}
    for block in range(max(2, calls // 50)):
        for setting in ("on", "off") if block % 2 else ("off", "on"):
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (setting,))
            t0 = time.perf_counter()
            for k in range(50):
                conn.execute("INSERT INTO public.bench_flush VALUES (%s)", (k,))
            times[setting].append((time.perf_counter() - t0) * 1e6 / 50)
    conn.close()
    return float(statistics.median(times["on"]) - statistics.median(times["off"]))


def client_cpu(
    dsn: str, rounds: int, calls: int, entry: str, local: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """process_time() µs per call of this process for the floor, the SQL API, the
    decorator and call_signature alone; and, on a server this process started (``local``),
    the CPU time of each one's server process per call, read from /proc: the statements'
    protocol, transactions and the caches they find cold included, which neither
    pg_stat_statements nor bench_engine_ab's server-side loop counts (medians over the
    rounds; the clock ticks in 10 ms steps, so one round of 1000 calls resolves 10 µs)."""
    conn: Conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(ba.FLOOR_DDL)
    ul = UndoLog(dsn, lease=timedelta(hours=4))

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=ba.COMPENSATION, name=ba.TOOL)
    def create_user(**args: Any) -> dict[str, Any]:
        return ba.result_for(int(args["request_id"]))

    floor_session = uuid.uuid4()
    counter = iter(range(10**9))

    def floor() -> None:
        floor_call(conn, uuid.uuid4().hex + uuid.uuid4().hex, floor_session, next(counter))

    phase = Phase(dsn, entry)  # the SQL API as the decorator uses it, on a connection of its own

    def sql_api() -> None:
        phase.new_call()

    def decorator() -> None:
        create_user(**ba.make_args(next(counter)))

    sig_session = uuid.uuid4()

    def signature() -> None:
        k = next(counter)
        call_signature(sig_session, k, ba.TOOL, ba.make_args(k))

    kinds: dict[str, Callable[[], None]] = {
        "floor": floor,
        "sql": sql_api,
        "decorator": decorator,
        "signature": signature,
    }
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    server: dict[str, list[float]] = {k: [] for k in ("floor", "sql", "decorator")}
    with ul.session(agent="profile-decorator") as active:
        deco_conn = active.connection
        assert isinstance(deco_conn, psycopg.Connection)  # UndoLog, not AsyncUndoLog
        backend = {
            "floor": conn.info.backend_pid,
            "sql": phase.conn.info.backend_pid,
            "decorator": deco_conn.info.backend_pid,
        }
        for r in range(rounds):
            names = list(kinds)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                fn = kinds[name]
                pid = backend.get(name) if local else None
                s0 = ab.cpu_seconds(pid) if pid else 0.0
                c0 = time.process_time()
                for _ in range(calls):
                    fn()
                if name == "decorator":
                    engine.settle(deco_conn)  # its last commit is part of the round
                samples[name].append((time.process_time() - c0) * 1e6 / calls)
                if pid:
                    server[name].append((ab.cpu_seconds(pid) - s0) * 1e6 / calls)
    conn.close()
    phase.conn.close()
    return (
        {k: statistics.median(v) for k, v in samples.items()},
        {k: statistics.median(v) for k, v in server.items() if v},
    )


def report(
    medians: dict[str, dict[str, float]],
    nested: dict[str, list[tuple[str, float, float]]],
    floor: dict[str, float],
    cpu: dict[str, float],
    backend: dict[str, float],
    flush: float,
) -> None:
    print("\nserver µs per call (pg_stat_statements, executor run time, medians)")
    print(f"  {'variant':16} {'intercept':>10} {'commit':>8} {'new call':>9} {'replay':>8}")
    for v in VARIANTS:
        m = medians[v]
        new = m["intercept"] + m["commit"]
        print(
            f"  {v:16} {m['intercept']:>10.1f} {m['commit']:>8.1f} {new:>9.1f} {m['replay']:>8.1f}"
        )
    print(f"  {'floor':16} {'':>10} {'':>8} {floor['server']:>9.1f}")
    shipped = medians["shipped"]
    for v in VARIANTS[1:]:
        m = medians[v]
        saved = shipped["intercept"] + shipped["commit"] - m["intercept"] - m["commit"]
        print(
            f"  {v} saves {saved:.1f} µs a new call, "
            f"{shipped['replay'] - m['replay']:.1f} µs a replay"
        )
    for kind, rows in nested.items():
        print(f"\nstatements inside the shipped engine, per {kind} (run time only)")
        print(f"  {'times':>6} {'µs':>7}  statement")
        for text, times, us in rows[:12]:
            print(f"  {times:>6.2f} {us:>7.1f}  {text}")
    print("\nclient CPU µs per call (process_time, medians)")
    for name in ("floor", "sql", "decorator", "signature"):
        print(f"  {name:12} {cpu[name]:>7.1f}")
    if backend:
        print("\nserver process CPU µs per call (/proc: protocol, transactions, cold caches in)")
        for name in ("floor", "sql", "decorator"):
            print(f"  {name:12} {backend[name]:>7.1f}")
    print(
        f"\none WAL flush: {flush:.0f} µs (durable one-row INSERT minus asynchronous)"
        f"\nwall µs per call: floor {floor['wall']:.0f}, SQL new call "
        f"{shipped['wall_new']:.0f} (asynchronous result; its commit {shipped['wall_commit']:.0f}"
        f" of it), replay {shipped['wall_replay']:.0f}"
    )
    # The floor pays two flushes, a new call one (its result is asynchronous): a new call
    # keeps up with the floor when what it costs beyond the floor fits in one flush.
    extra_server = shipped["intercept"] + shipped["commit"] - floor["server"]
    extra_client = cpu["decorator"] - cpu["floor"]
    print(
        "\nthe 1-agent decorator target (>= 1.0x the floor) needs, per call,"
        "\n  (engine server - floor server) + (decorator client CPU - floor client CPU)"
        " <= one WAL flush:"
        f"\n  {extra_server:.0f} + {extra_client:.0f} = {extra_server + extra_client:.0f} µs"
        f" against {flush:.0f} µs"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dsn", default="", help="a server (superuser) instead of a new one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="calls per phase and round")
    parser.add_argument(
        "--entry",
        choices=("intercept_tool", "intercept"),
        default="intercept_tool",
        help="the SQL API's intercept: by the tool's registration id (the decorator's) or by name",
    )
    opts = parser.parse_args(argv)
    with ba.server(opts.dsn) as base:
        with psycopg.connect(base, autocommit=True) as admin:
            for v in VARIANTS:
                db = sql.Identifier(DB_PREFIX + v)
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(db))
                admin.execute(sql.SQL("CREATE DATABASE {}").format(db))
                with psycopg.connect(make_conninfo(base, dbname=DB_PREFIX + v)) as setup:
                    migrate(setup)
                    setup.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    if ABLATIONS[v]:
                        setup.execute(ABLATIONS[v])
                    setup.commit()
        try:
            shipped = make_conninfo(base, dbname=DB_PREFIX + "shipped")
            ba.log(f"server profile: {opts.rounds} rounds of {opts.calls} calls per phase")
            ba.log(f"intercept entry point: {opts.entry}")
            medians, nested = server_profile(base, opts.rounds, opts.calls, opts.entry)
            ba.log("floor, client CPU, WAL flush ...")
            floor = floor_profile(shipped, opts.rounds, opts.calls)
            cpu, backend = client_cpu(
                shipped, opts.rounds, opts.calls, opts.entry, local=not opts.dsn
            )
            flush = flush_cost(shipped, opts.calls)
            report(medians, nested, floor, cpu, backend, flush)
        finally:
            with psycopg.connect(base, autocommit=True) as admin:
                for v in VARIANTS:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(DB_PREFIX + v)
                        )
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
