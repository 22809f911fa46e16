"""What journaling a tool call costs, side by side with the raw psycopg floor.

Run by ``make bench``: a throwaway PostgreSQL, with UNDOLOG_DSN naming its admin database.
The benchmark creates a fresh database, installs the engine with ``migrate``, and measures
on one autocommit connection per variant (psycopg 3 prepares the repeated statements):

  a. intercept+commit of a NEW compensable call: call_signature, undolog.intercept, the
     body (nothing), undolog.commit. Two round trips.
  b. replay: call_signature + undolog.intercept of an already committed call. One round trip.
  c. the floor: a plain effect-like table; INSERT ... ON CONFLICT DO NOTHING RETURNING, then
     UPDATE of state/result. Two round trips. Its signatures are generated up front.
  s. call_signature alone (part of a and b), no database.

Variants run interleaved: in each of --rounds rounds every variant makes --calls calls,
the variants taking turns --slice calls at a time (the order rotates every round), so that
the noise of a shared machine hits them all alike; calls/s is the median over the rounds,
latencies are the median and p95 over every call. Round trips are counted on the
wire (libpq trace: one Sync per round trip) rather than taken on faith.

A second part runs the same statements server-side, in DO loops: once in one transaction
(server CPU only) and once with a COMMIT after each statement (CPU + transaction + WAL
flush, still without round trips), which splits a call's client latency into server CPU,
commit/fsync, and round trip + client.

--engine-patch LABEL=FILE[,FILE...] also measures a and b on an engine changed by those SQL
files, in a database of its own, in the same interleaved rounds.

This is a benchmark, not a test: it reports whether intercept+commit reaches 0.8x the
floor's calls/s and exits 0 either way.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.errors import Diagnostic
from psycopg.types.json import Jsonb

from undolog import engine
from undolog.migrations import migrate
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]

TOOL = "create_user"
TARGET_RATIO = 0.8  # intercept+commit calls/s over the floor's, stated by the issue


class BenchError(RuntimeError):
    """The engine did not answer what the benchmark expects (a broken run, not a slow one)."""


# --- the workload ------------------------------------------------------------------------


def make_args(i: int) -> dict[str, Any]:
    """A tool call's arguments: 204 bytes of compact JSON for a 7-digit i."""
    return {
        "email": f"user{i:07d}@example.com",
        "name": "Ada Lovelace",
        "plan": "team",
        "seats": 5,
        "tags": ["beta", "eu-west-1"],
        "metadata": {"source": "crm-import", "priority": 2, "campaign": "winter-launch"},
        "request_id": i,
    }


def compensation_for(args: dict[str, Any]) -> dict[str, Any]:
    return {"name": "delete_user", "args": {"email": args["email"]}}


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def result_for(i: int) -> dict[str, Any]:
    return {"user_id": i, "status": "created"}


FLOOR_DDL = """
CREATE SCHEMA bench_floor;
CREATE TABLE bench_floor.effect (
    effect_id uuid PRIMARY KEY,
    call_signature text NOT NULL UNIQUE,
    session_id uuid NOT NULL,
    step_index integer NOT NULL,
    tool_name text NOT NULL,
    args jsonb NOT NULL,
    state text NOT NULL,
    result jsonb
);
"""

FLOOR_INSERT = (
    "INSERT INTO bench_floor.effect"
    " (effect_id, call_signature, session_id, step_index, tool_name, args, state)"
    " VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, 'executing')"
    " ON CONFLICT DO NOTHING RETURNING effect_id"
)
FLOOR_UPDATE = "UPDATE bench_floor.effect SET state = 'committed', result = %s WHERE effect_id = %s"


# --- the client-side variants --------------------------------------------------------------


class Variant:
    """One kind of call; ``call()`` makes the next one (a new step each time)."""

    round_trips = 0  # what the code does; verified on the wire by count_round_trips

    def __init__(self, key: str, label: str, conn: Conn | None, session_id: uuid.UUID) -> None:
        self.key = key
        self.label = label
        self.conn = conn
        self.session_id = session_id
        self.step = 0

    def next_step(self) -> int:
        step = self.step
        self.step += 1
        return step

    def call(self) -> None:
        raise NotImplementedError

    def db(self) -> Conn:
        if self.conn is None:
            raise BenchError(f"{self.key} has no connection")
        return self.conn


class SignatureOnly(Variant):
    round_trips = 0

    def call(self) -> None:
        step = self.next_step()
        call_signature(self.session_id, step, TOOL, make_args(step))


def intercept_call(variant: Variant, step: int) -> engine.Interception:
    """What the decorator does before a compensable body runs: sign, then intercept."""
    args = make_args(step)
    signature = call_signature(variant.session_id, step, TOOL, args)
    return engine.intercept(
        variant.db(),
        variant.session_id,
        step,
        TOOL,
        "compensable",
        args,
        compensation=compensation_for(args),
        call_signature=signature,
    )


class NewCall(Variant):
    round_trips = 2

    def call(self) -> None:
        step = self.next_step()
        got = intercept_call(self, step)
        if got.action != "execute" or got.effect_id is None:
            raise BenchError(f"{self.key}: new call {step}: intercept answered {got.action!r}")
        engine.commit(self.db(), got.effect_id, result_for(step))


class Replay(Variant):
    """Replays calls committed beforehand by ``prepare``, each one once."""

    round_trips = 1

    def __init__(self, key: str, label: str, conn: Conn | None, session_id: uuid.UUID) -> None:
        super().__init__(key, label, conn, session_id)
        self.committed = 0

    def prepare(self, count: int) -> None:
        writer = NewCall(self.key, self.label, self.conn, self.session_id)
        writer.step = self.committed
        for _ in range(count):
            writer.call()
        self.committed = writer.step

    def call(self) -> None:
        step = self.next_step()
        if step >= self.committed:
            raise BenchError(f"{self.key}: replay pool exhausted")
        got = intercept_call(self, step)
        if got.action != "replay":
            raise BenchError(f"{self.key}: replay of {step}: intercept answered {got.action!r}")


class Floor(Variant):
    round_trips = 2

    def __init__(self, conn: Conn | None, session_id: uuid.UUID, count: int) -> None:
        super().__init__("c", "floor: INSERT+UPDATE", conn, session_id)
        # 64 hex digits like a real signature, made before any timing starts.
        self.signatures = [uuid.uuid4().hex + uuid.uuid4().hex for _ in range(count)]

    def call(self) -> None:
        conn, step = self.db(), self.next_step()
        row = conn.execute(
            FLOOR_INSERT,
            (self.signatures[step], self.session_id, step, TOOL, Jsonb(make_args(step))),
        ).fetchone()
        if row is None:
            raise BenchError(f"floor call {step}: the INSERT returned no row")
        conn.execute(FLOOR_UPDATE, (Jsonb(result_for(step)), row[0]))


# --- measuring -------------------------------------------------------------------------------


@dataclass
class Samples:
    latencies_ns: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # calls/s, one per round
    wal_per_call: list[float] = field(default_factory=list)  # bytes, one per round


def wal_lsn(monitor: Conn) -> str:
    row = monitor.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_bytes_since(monitor: Conn, lsn: str) -> int:
    row = monitor.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)::bigint", (lsn,)
    ).fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class Block:
    """What a variant did in one round, summed over its slices."""

    calls: int = 0
    elapsed_ns: int = 0
    wal_bytes: int = 0


def run_slice(variant: Variant, calls: int, monitor: Conn, block: Block, samples: Samples) -> None:
    """``calls`` calls of one variant, each timed; Python's GC stays off meanwhile."""
    latencies = [0] * calls
    clock = time.perf_counter_ns
    lsn = wal_lsn(monitor)
    gc.disable()
    try:
        start = clock()
        for k in range(calls):
            t0 = clock()
            variant.call()
            latencies[k] = clock() - t0
        elapsed = clock() - start
    finally:
        gc.enable()
    block.wal_bytes += wal_bytes_since(monitor, lsn)
    block.calls += calls
    block.elapsed_ns += elapsed
    samples.latencies_ns.extend(latencies)


def run_round(
    variants: list[Variant],
    calls: int,
    slice_calls: int,
    number: int,
    monitor: Conn,
    samples: dict[str, Samples],
) -> None:
    """``calls`` calls of every variant, taking turns ``slice_calls`` at a time (the order
    rotates with the round), so that a burst of noise on the machine hits them all."""
    shift = number % len(variants)
    order = variants[shift:] + variants[:shift]
    blocks = {v.key: Block() for v in variants}
    gc.collect()
    while blocks[order[0].key].calls < calls:
        for variant in order:
            block = blocks[variant.key]
            run_slice(
                variant, min(slice_calls, calls - block.calls), monitor, block, samples[variant.key]
            )
    for key, block in blocks.items():
        samples[key].rates.append(block.calls / (block.elapsed_ns / 1e9))
        samples[key].wal_per_call.append(block.wal_bytes / block.calls)


@dataclass(frozen=True)
class WireCount:
    round_trips: int  # Sync messages sent: the client waits for ReadyForQuery after each
    parses: int  # Parse messages: 0 when every statement ran as an already prepared one


def count_round_trips(conn: Conn, action: Callable[[], None]) -> WireCount:
    """Run ``action`` with libpq tracing on and count the protocol messages it sent."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            action()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace if line.startswith("F\t")]
    return WireCount(
        round_trips=sum(1 for msg in sent if len(msg) > 2 and msg[2].strip() == "Sync"),
        parses=sum(1 for msg in sent if len(msg) > 2 and msg[2].strip() == "Parse"),
    )


def percentile(sorted_values: Sequence[int], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    index = max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values)) - 1))
    return float(sorted_values[index])


# --- the server-side loops -------------------------------------------------------------------

# Each loop reads its parameters from custom settings (bench.*), runs v_n statements and
# reports its own elapsed time in a NOTICE, so the figure holds neither the round trip of
# the DO statement nor the final commit. With bench.commit_each on, a COMMIT follows each
# statement (allowed in a DO block run outside a transaction block).
DO_TEMPLATE = """
DO $bench$
DECLARE
    v_session uuid := current_setting('bench.session')::uuid;
    v_n integer := current_setting('bench.calls')::integer;
    v_prefix text := current_setting('bench.prefix');
    v_args jsonb := current_setting('bench.args')::jsonb;
    v_compensation jsonb := current_setting('bench.compensation')::jsonb;
    v_each boolean := current_setting('bench.commit_each')::boolean;
    v_ids uuid[];
    v_id uuid;
    v_t0 timestamptz;
BEGIN
    v_ids := ARRAY(@IDS@);
    -- untimed: the engine admits calls of registered tools only (idempotent)
    PERFORM undolog.register_tool('create_user', 'compensable', v_compensation);
    v_t0 := clock_timestamp();
    FOR i IN 1..v_n LOOP
        @BODY@
        IF v_each THEN
            COMMIT;
        END IF;
    END LOOP;
    RAISE NOTICE 'bench_elapsed_us=%',
        extract(epoch FROM clock_timestamp() - v_t0) * 1000000;
END
$bench$
"""

NO_IDS = "SELECT NULL::uuid WHERE false"
SERVER_SIGNATURE = "encode(sha256(convert_to(v_prefix || i, 'UTF8')), 'hex')"
SERVER_ARGS = "jsonb_set(v_args, '{request_id}', to_jsonb(i))"
SERVER_RESULT = "jsonb_build_object('user_id', i, 'status', 'created')"

# key -> (label, ids query, loop body)
SERVER_LOOPS: dict[str, tuple[str, str, str]] = {
    "intercept": (
        "intercept, new call",
        NO_IDS,
        "SELECT x.effect_id INTO v_id FROM undolog.intercept(v_session, i, 'create_user',"
        f" 'compensable', {SERVER_ARGS}, {SERVER_SIGNATURE}, v_compensation) AS x;",
    ),
    "commit": (
        "commit",
        "SELECT r.effect_id FROM undolog.undolog_signature_registry AS r"
        " JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)"
        " WHERE r.session_id = v_session ORDER BY e.step_index",
        f"PERFORM undolog.commit(v_ids[i], {SERVER_RESULT});",
    ),
    "replay": (
        "replay (intercept)",
        NO_IDS,
        "SELECT x.effect_id INTO v_id FROM undolog.intercept(v_session, i, 'create_user',"
        f" 'compensable', {SERVER_ARGS}, {SERVER_SIGNATURE}, v_compensation) AS x;",
    ),
    "floor_insert": (
        "floor INSERT ... ON CONFLICT",
        NO_IDS,
        "INSERT INTO bench_floor.effect"
        " (effect_id, call_signature, session_id, step_index, tool_name, args, state)"
        f" VALUES (gen_random_uuid(), {SERVER_SIGNATURE}, v_session, i, 'create_user',"
        f" {SERVER_ARGS}, 'executing') ON CONFLICT DO NOTHING RETURNING effect_id INTO v_id;",
    ),
    "floor_update": (
        "floor UPDATE",
        "SELECT f.effect_id FROM bench_floor.effect AS f"
        " WHERE f.session_id = v_session ORDER BY f.step_index",
        f"UPDATE bench_floor.effect SET state = 'committed', result = {SERVER_RESULT}"
        " WHERE effect_id = v_ids[i];",
    ),
}
ENGINE_LOOPS = ("intercept", "commit", "replay")
FLOOR_LOOPS = ("floor_insert", "floor_update")
LEVELS = ("one_xact", "commit_each")


class ServerLoops:
    """Runs SERVER_LOOPS on one autocommit connection, collecting µs per statement."""

    def __init__(self, conn: Conn, monitor: Conn, calls: int) -> None:
        self.conn = conn
        self.monitor = monitor
        self.calls = calls
        self.notices: list[str] = []
        conn.add_notice_handler(self._on_notice)
        self.us: dict[tuple[str, str], list[float]] = {}
        self.wal: dict[tuple[str, str], list[float]] = {}
        args = make_args(0)
        self._set("bench.calls", str(calls))
        self._set("bench.args", compact_json(args))
        self._set("bench.compensation", compact_json(compensation_for(args)))

    def _on_notice(self, diag: Diagnostic) -> None:
        self.notices.append(diag.message_primary or "")

    def _set(self, name: str, value: str) -> None:
        self.conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    def run(self, key: str, level: str) -> None:
        _label, ids, body = SERVER_LOOPS[key]
        self._set("bench.commit_each", "on" if level == "commit_each" else "off")
        self.notices.clear()
        lsn = wal_lsn(self.monitor)
        self.conn.execute(DO_TEMPLATE.replace("@IDS@", ids).replace("@BODY@", body).encode())
        wal = wal_bytes_since(self.monitor, lsn)
        found = [m for m in self.notices if m.startswith("bench_elapsed_us=")]
        if not found:
            raise BenchError(f"server loop {key}: no timing notice")
        elapsed_us = float(found[-1].split("=", 1)[1])
        self.us.setdefault((key, level), []).append(elapsed_us / self.calls)
        self.wal.setdefault((key, level), []).append(wal / self.calls)

    def round(self, number: int) -> None:
        """One round: both levels, engine and floor, the order alternating by round."""
        groups = [ENGINE_LOOPS, FLOOR_LOOPS]
        levels = list(LEVELS)
        if number % 2:
            groups.reverse()
            levels.reverse()
        for level in levels:
            for group in groups:
                session_id = engine.begin_session(
                    self.conn, agent="bench-server", lease=timedelta(hours=2)
                )
                self._set("bench.session", str(session_id))
                self._set("bench.prefix", f"{session_id}/")
                for key in group:
                    self.run(key, level)

    def median(self, key: str, level: str) -> float:
        return statistics.median(self.us[(key, level)])

    def median_wal(self, key: str, level: str) -> float:
        return statistics.median(self.wal[(key, level)])


# --- the run --------------------------------------------------------------------------------


def connect(dsn: str) -> Conn:
    return psycopg.connect(dsn, autocommit=True)


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


@dataclass(frozen=True)
class EngineDb:
    """One database with the engine installed; ``patches`` applied after migrate()."""

    label: str  # "" for the engine as the repository installs it
    dsn: str
    patches: tuple[Path, ...] = ()

    def install(self) -> None:
        with connect(self.dsn) as conn:
            migrate(conn)
            for patch in self.patches:
                conn.execute(patch.read_text(encoding="utf-8").encode())


def parse_patch(text: str) -> tuple[str, tuple[Path, ...]]:
    label, sep, files = text.partition("=")
    paths = tuple(Path(f) for f in files.split(",") if f)
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.+-]+", label) or not paths:
        raise argparse.ArgumentTypeError(f"expected LABEL=FILE[,FILE...], not {text!r}")
    for path in paths:
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"no such file: {path}")
    return label, paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("UNDOLOG_DSN", ""),
        help="admin database to create the bench databases from "
        "(default: UNDOLOG_DSN, else the PG* variables)",
    )
    parser.add_argument("--calls", type=int, default=1000, help="calls per variant per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=300, help="untimed calls per variant")
    parser.add_argument(
        "--slice", type=int, default=100, help="calls a variant makes before the next takes over"
    )
    parser.add_argument(
        "--server-calls", type=int, default=1000, help="statements per server-side DO loop"
    )
    parser.add_argument("--server-rounds", type=int, default=3, help="server-side rounds")
    parser.add_argument(
        "--engine-patch",
        type=parse_patch,
        action="append",
        default=[],
        metavar="LABEL=FILE[,FILE...]",
        help="also measure a and b on an engine changed by these SQL files (applied in order "
        "after migrate, in a database of its own); repeatable",
    )
    parser.add_argument(
        "--keep-database",
        action="store_true",
        help="leave the bench databases behind for inspection",
    )
    opts = parser.parse_args(argv)
    if opts.calls < 1 or opts.rounds < 1 or opts.slice < 1 or opts.warmup < 0:
        parser.error("--calls, --rounds and --slice must be >= 1, --warmup >= 0")

    base = f"undolog_bench_{os.getpid()}"
    names = [base] + [f"{base}_{i}" for i in range(1, len(opts.engine_patch) + 1)]
    engines = [
        EngineDb(label, make_conninfo(opts.dsn, dbname=name), paths)
        for name, (label, paths) in zip(names, [("", ()), *opts.engine_patch], strict=True)
    ]
    with connect(opts.dsn) as admin:
        try:
            for name in names:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return run(engines, opts)
        finally:
            if opts.keep_database:
                print(f"\nbench databases kept: {', '.join(names)}")
            else:
                for name in names:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )


def run(engines: list[EngineDb], opts: argparse.Namespace) -> int:
    calls: int = opts.calls
    rounds: int = opts.rounds
    warmup: int = opts.warmup
    for engine_db in engines:
        engine_db.install()
    dsn = engines[0].dsn
    with connect(dsn) as setup:
        setup.execute(FLOOR_DDL)
        version = setup.execute("SHOW server_version").fetchone()
        fsync = setup.execute(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        ).fetchone()
    assert version is not None and fsync is not None

    per_variant = warmup + calls * rounds + 1  # +1: the call whose round trips are counted
    monitor = connect(dsn)
    conns = [monitor]
    try:
        lease = timedelta(hours=2)
        variants: list[Variant] = []
        replays: list[Replay] = []
        for engine_db in engines:
            suffix = f" [{engine_db.label}]" if engine_db.label else ""
            key = f":{engine_db.label}" if engine_db.label else ""
            new_conn, replay_conn = connect(engine_db.dsn), connect(engine_db.dsn)
            conns += [new_conn, replay_conn]
            new_session = engine.begin_session(new_conn, agent="bench-new", lease=lease)
            replay_session = engine.begin_session(replay_conn, agent="bench-replay", lease=lease)
            replay = Replay("b" + key, "replay (intercept)" + suffix, replay_conn, replay_session)
            variants += [
                NewCall("a" + key, "intercept+commit, new call" + suffix, new_conn, new_session),
                replay,
            ]
            replays.append(replay)
        floor_conn = connect(dsn)
        conns.append(floor_conn)
        variants += [
            Floor(floor_conn, uuid.uuid4(), per_variant),
            SignatureOnly("s", "call_signature only (in a, b)", None, uuid.uuid4()),
        ]

        print(
            f"PostgreSQL {version[0]}; fsync={fsync[0]}, synchronous_commit={fsync[1]}; "
            f"args {len(compact_json(make_args(1234567)))} bytes of JSON"
        )
        for engine_db in engines[1:]:
            print(f"engine [{engine_db.label}]: " + ", ".join(str(p) for p in engine_db.patches))
        print(f"setup: committing {per_variant:,} calls per replay pool ...", flush=True)
        for replay in replays:
            replay.prepare(per_variant)

        for variant in variants:  # warm-up: caches, plans, psycopg's prepared statements
            for _ in range(warmup):
                variant.call()

        wire: dict[str, WireCount] = {}
        for variant in variants:
            if variant.conn is not None:
                wire[variant.key] = count_round_trips(variant.conn, variant.call)
            else:
                variant.call()
                wire[variant.key] = WireCount(0, 0)

        samples = {v.key: Samples() for v in variants}
        print(
            f"measuring: {rounds} rounds x {calls:,} calls of each variant, interleaved "
            f"{opts.slice} calls at a time",
            flush=True,
        )
        for r in range(rounds):
            run_round(variants, calls, opts.slice, r, monitor, samples)

        report_client(variants, samples, wire)

        server_calls: int = opts.server_calls
        server_rounds: int = opts.server_rounds
        if server_calls > 0 and server_rounds > 0:
            print(
                f"\nserver side (engine as installed): DO loops of {server_calls:,} statements, "
                f"{server_rounds} rounds, interleaved ...",
                flush=True,
            )
            loops = ServerLoops(variants[0].db(), monitor, server_calls)
            for r in range(server_rounds):
                loops.round(r)
            report_server(loops, samples)
    finally:
        for conn in conns:
            conn.close()
    return 0


def report_client(
    variants: list[Variant], samples: dict[str, Samples], wire: dict[str, WireCount]
) -> None:
    floor_rate = statistics.median(samples["c"].rates)
    kw = max(len(v.key) for v in variants)
    lw = max(len(v.label) for v in variants)
    print()
    header = (
        f"{'':{kw}} {'variant':{lw}} {'RT/call':>7} {'calls/s':>9} {'p50 µs':>8} "
        f"{'p95 µs':>8} {'vs floor':>8} {'WAL B/call':>10}"
    )
    print(header)
    print("-" * len(header))
    for variant in variants:
        s = samples[variant.key]
        lat = sorted(s.latencies_ns)
        rate = statistics.median(s.rates)
        rt = wire[variant.key]
        if rt.round_trips != variant.round_trips:
            raise BenchError(
                f"{variant.label}: {rt.round_trips} round trips on the wire, "
                f"the code says {variant.round_trips}"
            )
        vs_floor = f"{rate / floor_rate:.2f}x" if variant.conn is not None else ""
        wal = fmt_int(statistics.median(s.wal_per_call)) if variant.conn is not None else ""
        print(
            f"{variant.key:{kw}} {variant.label:{lw}} {rt.round_trips:>7} {fmt_int(rate):>9} "
            f"{percentile(lat, 0.5) / 1000:>8.1f} {percentile(lat, 0.95) / 1000:>8.1f} "
            f"{vs_floor:>8} {wal:>10}"
        )
    print(
        "RT/call: round trips counted on the wire (libpq trace, Sync messages) for one call; "
        "statements ran prepared: "
        + ", ".join(f"{k}={'yes' if w.parses == 0 else 'no'}" for k, w in wire.items() if k != "s")
    )
    for variant in variants:
        if not isinstance(variant, NewCall):
            continue
        rates = samples[variant.key].rates
        ratio = statistics.median(rates) / floor_rate
        verdict = "MET" if ratio >= TARGET_RATIO else "NOT met"
        per_round = ", ".join(
            f"{a / c:.2f}" for a, c in zip(rates, samples["c"].rates, strict=True)
        )
        print(
            f"target {variant.key}: intercept+commit >= {TARGET_RATIO}x the floor's calls/s: "
            f"{verdict} ({ratio:.2f}x: {fmt_int(statistics.median(rates))} vs "
            f"{fmt_int(floor_rate)} calls/s; per round {per_round})"
        )


def report_server(loops: ServerLoops, samples: dict[str, Samples]) -> None:
    one, each = LEVELS
    print(
        f"\n{'server side, µs per statement (median)':42} {'1 xact':>8} {'COMMIT each':>12} "
        f"{'WAL B (1 xact)':>15} {'WAL B (each)':>13}"
    )
    for key, (label, _ids, _body) in SERVER_LOOPS.items():
        print(
            f"  {label:40} {loops.median(key, one):>8.1f} {loops.median(key, each):>12.1f} "
            f"{fmt_int(loops.median_wal(key, one)):>15} "
            f"{fmt_int(loops.median_wal(key, each)):>13}"
        )

    def total(keys: tuple[str, ...], level: str) -> float:
        return sum(loops.median(k, level) for k in keys)

    engine_keys = ("intercept", "commit")
    rows = [
        ("a intercept+commit", engine_keys, "a"),
        ("b replay", ("replay",), "b"),
        ("c floor INSERT+UPDATE", FLOOR_LOOPS, "c"),
    ]
    print(
        f"\n{'where a call goes, µs (medians)':32} {'server CPU':>10} {'+commit/WAL':>12} "
        f"{'+RT & client':>13} {'= client p50':>13}"
    )
    for label, keys, variant in rows:
        cpu = total(keys, one)
        committed = total(keys, each)
        client = percentile(sorted(samples[variant].latencies_ns), 0.5) / 1000
        print(
            f"  {label:30} {cpu:>10.1f} {committed - cpu:>12.1f} {client - committed:>13.1f} "
            f"{client:>13.1f}"
        )
    print(
        "server CPU: the statements in one transaction; +commit/WAL: the same with a COMMIT "
        "after each\n(transaction start/end, WAL flush); the rest is round trips, protocol "
        "and Python."
    )
    cpu_ratio = total(engine_keys, one) / total(FLOOR_LOOPS, one)
    print(f"server CPU, intercept+commit vs floor: {cpu_ratio:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
