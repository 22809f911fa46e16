"""What issue 23's decision 2 (a live call in one row) would cost a new call and a replay:
a sketch of its hot path, measured beside the engine as shipped and the floor, in one
throwaway PostgreSQL, with bench_engine_ab.py's harness (server-side loops, server CPU and
WAL per call, alternating rounds, medians).

The sketch is not a design of decision 2, only its write pattern at its cheapest, so that
"what it would take" is a measured figure rather than a guess. Per new COMPENSABLE call
it writes one row into one plain table (``sketch_live_calls``: the effect, its undo entry
and its exactly-once key; three index entries: the key, the effect id, the walk's
unfinished entries) with no row trigger, and its commit is one HOT UPDATE of that row,
which records the commit and links it into the session's hash chain itself (the row read
and locked first by the effect id, then the chain head moved, then the row updated). It
keeps what the shipped intercept checks per call (the call's form, the registration by
id, the signature's try-lock, the session's shared lock, row and owner) and what it
records (the commit's time, login and link; a replay's count, and its ``replayed``
history row, linked). It leaves out what the hot path does not touch: the walk, the
approvals, the views, retention (live rows moving to the month partitions when their
session ends), and the guard's identity checks on later updates, which decision 3 would
hand to privileges and pgTAP.

    python bench/bench_one_row.py                 # 9 rounds x 4000 calls
    python bench/bench_one_row.py --rounds 15 --calls 6000

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence

import psycopg
from psycopg.conninfo import make_conninfo

import bench_engine_ab as ab
from pgcluster import throwaway_cluster

# The sketch, beside the shipped engine in the same database (it reuses the sessions, the
# tool registry, the chain heads and the engine's inlined checks).
SKETCH = r"""
CREATE TABLE undolog.sketch_live_calls (
    session_id uuid NOT NULL,
    call_signature text NOT NULL,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    stack_position bigint GENERATED ALWAYS AS IDENTITY,
    step_index integer NOT NULL,
    tool_name text NOT NULL,
    tier text NOT NULL,
    args jsonb NOT NULL,
    tool_id uuid,
    intercepted_by text NOT NULL DEFAULT session_user,
    state text NOT NULL,
    attempts integer NOT NULL,
    compensation jsonb,
    max_attempts integer,
    undo_state text NOT NULL DEFAULT 'pending',
    result_snapshot jsonb,
    error text,
    committed_at timestamptz,
    committed_by text,
    commit_seq bigint,
    commit_prev bytea,
    commit_hash bytea,
    replay_count integer NOT NULL DEFAULT 0,
    last_replayed_at timestamptz,
    PRIMARY KEY (session_id, call_signature)
);
CREATE UNIQUE INDEX sketch_live_calls_effect_key
ON undolog.sketch_live_calls (effect_id, session_id);
CREATE INDEX sketch_live_calls_unfinished_idx
ON undolog.sketch_live_calls (session_id, stack_position DESC)
WHERE undo_state IN ('pending', 'compensating');

CREATE FUNCTION undolog.sketch_intercept_tool(
    p_session_id uuid, p_tool_id uuid, p_step_index integer, p_args jsonb,
    p_call_signature text
)
RETURNS TABLE (effect_id uuid, action text, state text, result_snapshot jsonb)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_tool_name text;
    v_tier text;
    v_compensation jsonb;
    v_state text;
    v_owner text;
    v_effect_id uuid;
BEGIN
    IF NOT undolog.call_args_ok(p_session_id, p_step_index, p_args, p_call_signature) THEN
        PERFORM undolog.check_call_args(p_session_id, p_step_index, p_args, p_call_signature);
    END IF;
    SELECT t.tool_name, t.tier, t.compensation INTO v_tool_name, v_tier, v_compensation
    FROM undolog.undolog_tools AS t
    WHERE t.tool_id = p_tool_id AND t.owner_role = session_user AND t.retired_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'UL017', MESSAGE = 'tool not registered';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(
        undolog.session_lock_key(p_session_id, session_user));
    SELECT s.state, s.owner_role INTO v_state, v_owner
    FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session_id;
    IF v_owner IS DISTINCT FROM session_user THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'another role''s session';
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(
            undolog.signature_lock_key(p_session_id, p_call_signature)) THEN
        effect_id := NULL; action := 'in_progress';
        RETURN NEXT;
        RETURN;
    END IF;
    -- A replay: one statement, as the shipped engine's.
    UPDATE undolog.sketch_live_calls AS c
    SET replay_count = c.replay_count + 1, last_replayed_at = now()
    WHERE c.session_id = p_session_id AND c.call_signature = p_call_signature
      AND c.state = 'committed'
      AND (c.step_index, c.tool_name, c.args) = (p_step_index, v_tool_name, p_args)
    RETURNING c.effect_id, c.result_snapshot INTO v_effect_id, result_snapshot;
    IF FOUND THEN
        -- Its record: a history row, which links itself (its table's trigger).
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state, detail)
        VALUES (p_session_id, v_effect_id, now(), 'replayed', 'committed', 'committed',
                pg_catalog.jsonb_build_object('replay_count', 1));
        effect_id := v_effect_id; action := 'replay'; state := 'committed';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_state <> 'active' THEN
        RAISE EXCEPTION USING ERRCODE = 'UL010', MESSAGE = 'session not active';
    END IF;
    INSERT INTO undolog.sketch_live_calls
        (session_id, call_signature, effect_id, executed_at, step_index, tool_name, tier,
         args, tool_id, state, attempts, compensation, max_attempts)
    VALUES
        (p_session_id, p_call_signature, undolog.effect_id_at(now()), now(), p_step_index,
         v_tool_name, v_tier, p_args, p_tool_id, 'executing', 1,
         v_compensation - 'max_attempts', (v_compensation ->> 'max_attempts')::integer)
    ON CONFLICT (session_id, call_signature) DO NOTHING
    RETURNING sketch_live_calls.effect_id INTO v_effect_id;
    effect_id := v_effect_id; action := 'execute'; state := 'executing';
    RETURN NEXT;
END
$$;

CREATE FUNCTION undolog.sketch_commit_effect(
    p_session_id uuid, p_effect_id uuid, p_result jsonb, p_async boolean DEFAULT FALSE
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_call undolog.sketch_live_calls;
    v_at timestamptz := pg_catalog.clock_timestamp();
    v_seq bigint;
    v_prev bytea;
    v_hash bytea;
BEGIN
    IF p_async AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    IF NOT undolog.payload_fits(p_result) THEN
        PERFORM undolog.check_payload('result', p_result);
    END IF;
    SELECT c.* INTO v_call FROM undolog.sketch_live_calls AS c
    WHERE c.effect_id = p_effect_id AND c.session_id = p_session_id
      AND c.state = 'executing' AND c.intercepted_by = session_user
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'UL003', MESSAGE = 'unknown effect';
    END IF;
    UPDATE undolog.undolog_chain_heads AS h
    SET seq = h.seq + 1, prev = h.head,
        head = undolog.chain_hash(h.head, undolog.chain_record_effect(
            'committed', v_call.session_id, v_call.effect_id, v_call.executed_at,
            v_call.call_signature, v_call.step_index, v_call.tool_name, v_call.tier,
            v_call.args, v_call.intercepted_by, v_call.tool_id, v_at, session_user,
            coalesce(p_result, 'null'::jsonb)))
    WHERE h.session_id = p_session_id
    RETURNING h.seq, h.prev, h.head INTO v_seq, v_prev, v_hash;
    UPDATE undolog.sketch_live_calls AS c
    SET state = 'committed', result_snapshot = coalesce(p_result, 'null'::jsonb),
        committed_at = v_at, committed_by = session_user,
        commit_seq = v_seq, commit_prev = v_prev, commit_hash = v_hash
    WHERE c.session_id = p_session_id AND c.call_signature = v_call.call_signature;
    RETURN 'committed';
END
$$;
"""


def sketch_loop(loop: str) -> str:
    """The shipped engine's loop, calling the sketch's two functions instead."""
    out = loop.replace("undolog.intercept_tool(", "undolog.sketch_intercept_tool(").replace(
        "undolog.commit_effect(", "undolog.sketch_commit_effect("
    )
    assert out != loop
    return out


NEW, REPLAY = "new COMPENSABLE call", "replay of a committed call"
# A variant: how its database is made (from an empty database's dsn to the connection its
# loops run on) and, for each kind of call, its setup (untimed, once) and its timed loop.
Loops = dict[str, tuple[str, str]]
Variant = tuple[Callable[[str], ab.Conn], Loops]


def floor_database(dsn: str) -> ab.Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(ab.FLOOR_TABLE)
    return conn


def engine_database(dsn: str) -> ab.Conn:
    ab.install(dsn, ab.REPO)
    return psycopg.connect(dsn, autocommit=True)


def sketch_database(dsn: str) -> ab.Conn:
    conn = engine_database(dsn)
    conn.execute(SKETCH)
    return conn


VARIANTS: dict[str, Variant] = {
    "floor": (
        floor_database,
        {NEW: ("", ab.FLOOR_LOOP), REPLAY: (ab.FLOOR_REPLAY_SETUP, ab.FLOOR_REPLAY_LOOP)},
    ),
    "engine": (
        engine_database,
        {NEW: ("", ab.ENGINE_LOOP), REPLAY: (ab.REPLAY_SETUP, ab.REPLAY_LOOP)},
    ),
    "one-row sketch": (
        sketch_database,
        {
            NEW: ("", sketch_loop(ab.ENGINE_LOOP)),
            REPLAY: (sketch_loop(ab.REPLAY_SETUP), sketch_loop(ab.REPLAY_LOOP)),
        },
    ),
}


def compare(dsn: str, variants: dict[str, Variant], rounds: int, calls: int) -> None:
    """Each variant in a database of its own on the server at ``dsn`` (a superuser's), each
    kind of call measured in alternating rounds; prints the medians against the floor's
    (the variant named "floor")."""
    names = list(variants)
    params = {"session": ab.REPLAY_SESSION}
    conns: dict[str, ab.Conn] = {}
    with psycopg.connect(dsn, autocommit=True) as admin:
        for i, name in enumerate(names):
            admin.execute(f"CREATE DATABASE undolog_bench_one_row_{i}")
            make_database, _ = variants[name]
            conns[name] = make_database(make_conninfo(dsn, dbname=f"undolog_bench_one_row_{i}"))
    for kind in (NEW, REPLAY):
        loops = {name: variants[name][1][kind] for name in names}
        for name in names:  # set up; warm up: plans cached, the first rows written
            setup, loop = loops[name]
            if setup:
                conns[name].execute(setup % {"calls": calls, **params})
            conns[name].execute(loop % {"calls": 100, **params})
        cpu: dict[str, list[float]] = {n: [] for n in names}
        wal: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                c, w = ab.measure(conns[name], loops[name][1], calls)
                cpu[name].append(c)
                wal[name].append(w)
            print(f"  {kind}: round {r + 1}/{rounds} done", file=sys.stderr)
        floor_cpu = statistics.median(cpu["floor"])
        floor_wal = statistics.median(wal["floor"])
        print(f"{kind}, server-side loop, {rounds} rounds x {calls} calls")
        print(f"  {'':18} {'CPU µs':>8} {'vs floor':>9} {'WAL B':>7} {'vs floor':>9}")
        for name in names:
            c, w = statistics.median(cpu[name]), statistics.median(wal[name])
            print(
                f"  {name:18} {c:8.1f} {ab.ratio(c, floor_cpu):>9} {w:7.0f}"
                f" {ab.ratio(w, floor_wal):>9}"
            )
    for conn in conns.values():
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=4000)
    opts = parser.parse_args(argv)
    with throwaway_cluster("fsync=off") as cluster:
        compare(cluster.dsn, VARIANTS, opts.rounds, opts.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
