"""Server CPU and WAL per new COMPENSABLE call of the engine at two or more git revisions,
side by side with the floor, in one throwaway PostgreSQL: what an engine change saved.

Each revision's engine is installed (its own ``undolog migrate``, run from that
revision's tree: ``git archive REV``, unpacked in a temporary folder) into a database of
its own; the working tree is the revision ``.``. Each round then runs ``--calls`` new
calls in every database, intercept then commit, each its own transaction as an agent's
are, in one server-side loop: no round trips, no client, only the engine's own work,
counted as the CPU time of the server process (Linux, a local server), so that a loaded
machine's waits for a CPU are not counted, and the WAL it wrote (``pg_current_wal_lsn``).
The floor is the same loop over one plain table (INSERT … ON CONFLICT DO NOTHING, then
UPDATE). A second table does the same for replays: intercept_tool of calls committed
before the timing (the floor: the insert finds the key taken, then the row is read).
The order of the databases alternates every round; the figures are medians. The server
runs with fsync off, so that WAL flushes do not drown the difference.

    python bench/bench_engine_ab.py 11848db .            # before issue 23's v2 and now
    python bench/bench_engine_ab.py --rounds 9 --calls 4000 HEAD~1 .

The CPU clock ticks in 10 ms steps: keep ``rounds x calls`` large (the default, 7 x 3000,
resolves about 3 µs a call). A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from pgcluster import throwaway_cluster  # noqa: E402

Conn = psycopg.Connection[Any]

# One new call: intercept_tool (the decorator's entry point), commit_effect with an
# asynchronous result (the binding's default), each its own transaction.
ENGINE_LOOP = """
DO $bench$
DECLARE
    v_session uuid := gen_random_uuid();
    v_tool uuid;
    v_effect uuid;
BEGIN
    PERFORM undolog.begin_session(v_session, 'bench', '{}', '1 hour');
    SELECT t.tool_id INTO v_tool FROM undolog.undolog_tools AS t
    WHERE t.tool_name = 'bench_tool' AND t.retired_at IS NULL;
    COMMIT;
    FOR i IN 1..%(calls)s LOOP
        SELECT c.effect_id INTO v_effect
        FROM undolog.intercept_tool(
            v_session, v_tool, i, jsonb_build_object('i', i),
            encode(sha256(convert_to(v_session::text || i, 'UTF8')), 'hex')) AS c;
        COMMIT;
        PERFORM undolog.commit_effect(v_session, v_effect, '{"ok": true}', true);
        COMMIT;
    END LOOP;
END
$bench$
"""

# A replay: intercept_tool of a call committed before the timing, each its own
# transaction; the session and its calls are made once per database (REPLAY_SETUP: the
# new calls' loop, in the replayed session).
REPLAY_SESSION = "00000000-0000-4000-8000-00000000ab01"
REPLAY_SETUP = ENGINE_LOOP.replace("gen_random_uuid()", "'%(session)s'")
REPLAY_LOOP = """
DO $bench$
DECLARE
    v_session uuid := '%(session)s';
    v_tool uuid;
    v_action text;
BEGIN
    SELECT t.tool_id INTO v_tool FROM undolog.undolog_tools AS t
    WHERE t.tool_name = 'bench_tool' AND t.retired_at IS NULL;
    FOR i IN 1..%(calls)s LOOP
        SELECT c.action INTO v_action
        FROM undolog.intercept_tool(
            v_session, v_tool, i, jsonb_build_object('i', i),
            encode(sha256(convert_to(v_session::text || i, 'UTF8')), 'hex')) AS c;
        IF v_action <> 'replay' THEN
            RAISE EXCEPTION 'call %% answered %%, not replay', i, v_action;
        END IF;
        COMMIT;
    END LOOP;
END
$bench$
"""

FLOOR_TABLE = """
CREATE TABLE IF NOT EXISTS floor_calls (
    session_id uuid, call_signature text, args jsonb, state text, result jsonb,
    PRIMARY KEY (session_id, call_signature)
)
"""

FLOOR_LOOP = """
DO $bench$
DECLARE
    v_session uuid := gen_random_uuid();
    v_signature text;
BEGIN
    FOR i IN 1..%(calls)s LOOP
        v_signature := encode(sha256(convert_to(v_session::text || i, 'UTF8')), 'hex');
        INSERT INTO floor_calls (session_id, call_signature, args, state)
        VALUES (v_session, v_signature, jsonb_build_object('i', i), 'executing')
        ON CONFLICT DO NOTHING;
        COMMIT;
        UPDATE floor_calls SET state = 'committed', result = '{"ok": true}'
        WHERE session_id = v_session AND call_signature = v_signature;
        COMMIT;
    END LOOP;
END
$bench$
"""

# The floor's replay: the insert finds the key taken, then the row is read.
FLOOR_REPLAY_SETUP = """
INSERT INTO floor_calls (session_id, call_signature, args, state, result)
SELECT '%(session)s', encode(sha256(convert_to('%(session)s' || i, 'UTF8')), 'hex'),
       jsonb_build_object('i', i), 'committed', '{"ok": true}'
FROM generate_series(1, %(calls)s) AS i
"""
FLOOR_REPLAY_LOOP = """
DO $bench$
DECLARE
    v_session uuid := '%(session)s';
    v_signature text;
    v_result jsonb;
BEGIN
    FOR i IN 1..%(calls)s LOOP
        v_signature := encode(sha256(convert_to(v_session::text || i, 'UTF8')), 'hex');
        INSERT INTO floor_calls (session_id, call_signature, args, state)
        VALUES (v_session, v_signature, jsonb_build_object('i', i), 'executing')
        ON CONFLICT DO NOTHING;
        SELECT f.result INTO v_result FROM floor_calls AS f
        WHERE f.session_id = v_session AND f.call_signature = v_signature;
        COMMIT;
    END LOOP;
END
$bench$
"""

INSTALL = (
    "import sys, psycopg\n"
    "from undolog.migrations import migrate\n"
    "with psycopg.connect(sys.argv[1], autocommit=True) as conn:\n"
    "    migrate(conn)\n"
    "    conn.execute(\"SELECT undolog.register_tool('bench_tool', 'compensable',"
    ' \'{\\"name\\": \\"undo\\"}\')")\n'
)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the server process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_of(rev: str, into: Path) -> Path:
    """The repository at ``rev`` (``.``: the working tree) as a folder."""
    if rev == ".":
        return REPO
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    folder = into / rev.replace("/", "_")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def install(dsn: str, tree: Path) -> None:
    """That tree's engine, by its own migrate."""
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    subprocess.run([sys.executable, "-c", INSTALL, dsn], env=env, check=True)


def measure(conn: Conn, loop: str, calls: int) -> tuple[float, float]:
    """Server CPU µs and WAL bytes per call of one loop."""
    pid = conn.info.backend_pid
    start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    before = cpu_seconds(pid)
    conn.execute(loop % {"calls": calls, "session": REPLAY_SESSION})
    cpu = (cpu_seconds(pid) - before) * 1e6 / calls
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start[0] if start else None,)
    ).fetchone()
    return cpu, float(row[0]) / calls if row else 0.0


def ratio(value: float, floor: float) -> str:
    """value / floor, or n/a when the floor measured nothing (too few calls a round)."""
    return f"{value / floor:.2f}x" if floor > 0 else "n/a"


# What each kind of call runs, for the floor and for an engine: its setup (once per
# database, untimed) and its timed loop.
KINDS = {
    "new COMPENSABLE call": {"floor": ("", FLOOR_LOOP), "engine": ("", ENGINE_LOOP)},
    "replay of a committed call": {
        "floor": (FLOOR_REPLAY_SETUP, FLOOR_REPLAY_LOOP),
        "engine": (REPLAY_SETUP, REPLAY_LOOP),
    },
}


def run(dsn: str, revs: Sequence[str], rounds: int, calls: int) -> None:
    names = ["floor", *revs]
    conns: dict[str, Conn] = {}
    figures: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, psycopg.connect(dsn, autocommit=True) as admin:
        for i, name in enumerate(names):
            db = f"undolog_bench_ab_{i}"
            admin.execute(f"DROP DATABASE IF EXISTS {db}")
            admin.execute(f"CREATE DATABASE {db}")
            db_dsn = make_conninfo(dsn, dbname=db)
            if name == "floor":
                conns[name] = psycopg.connect(db_dsn, autocommit=True)
                conns[name].execute(FLOOR_TABLE)
            else:
                install(db_dsn, tree_of(name, Path(tmp)))
                conns[name] = psycopg.connect(db_dsn, autocommit=True)
        for kind, sides in KINDS.items():
            loops = {n: sides["floor" if n == "floor" else "engine"] for n in names}
            for name in names:  # set up; warm up: plans cached, the first rows written
                setup, loop = loops[name]
                if setup:
                    conns[name].execute(setup % {"calls": calls, "session": REPLAY_SESSION})
                conns[name].execute(loop % {"calls": 100, "session": REPLAY_SESSION})
            cpu: dict[str, list[float]] = {name: [] for name in names}
            wal: dict[str, list[float]] = {name: [] for name in names}
            for r in range(rounds):
                for name in names if r % 2 == 0 else names[::-1]:
                    c, w = measure(conns[name], loops[name][1], calls)
                    cpu[name].append(c)
                    wal[name].append(w)
                print(f"  {kind}: round {r + 1}/{rounds} done", file=sys.stderr)
            figures[kind] = {
                n: (statistics.median(cpu[n]), statistics.median(wal[n])) for n in names
            }
        for conn in conns.values():
            conn.close()
    for kind, medians in figures.items():
        floor_cpu, floor_wal = medians["floor"]
        print(f"{kind}, server-side loop, {rounds} rounds x {calls} calls (medians)")
        print(f"  {'engine':14} {'CPU µs':>8} {'vs floor':>9} {'WAL B':>7} {'vs floor':>9}")
        for name in names:
            c, w = medians[name]
            label = "floor" if name == "floor" else ("working tree" if name == "." else name)
            print(
                f"  {label:14} {c:8.1f} {ratio(c, floor_cpu):>9} {w:7.0f} {ratio(w, floor_wal):>9}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="+", help="git revisions; '.' is the working tree")
    parser.add_argument("--dsn", default="", help="a server (superuser) instead of a new one")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args(argv)
    if args.dsn:
        run(args.dsn, args.revs, args.rounds, args.calls)
        return 0
    with throwaway_cluster() as cluster:
        print(f"throwaway PostgreSQL on {cluster.host}:{cluster.port}", file=sys.stderr)
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
        run(cluster.dsn, args.revs, args.rounds, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
