"""What a new COMPENSABLE call and a replay would cost as plain SQL an agent's login sends
itself, its authority enforced by the database (row-level security, column privileges,
constraints) with no PL/pgSQL on the path: beside the floor, the engine and the one-row
PL/pgSQL sketch, in bench_one_row.py's server-side loops, and through the decorator's
protocol at one agent beside bench_agents.py's floor and decorator.

The design measured (``PLAIN_SQL``, installed beside the shipped engine, whose sessions,
tool registry and chain heads it reuses):

- one plain table, ``plain_live_calls``: the effect, its undo entry and its exactly-once
  key ``(session_id, call_signature)``, with the one-row sketch's three indexes (the key,
  the effect id, the walk's unfinished entries) and no trigger;
- a new call is one prepared statement (``INTERCEPT``): a probe of the key, then
  ``INSERT ... SELECT`` from the tool's registration ``... ON CONFLICT DO NOTHING``,
  answering the new effect, or the probed row (a replay answers the cached result);
- the commit is one statement (``COMMIT``): the row locked by its effect id, the
  session's chain head moved over the commit's canonical record (chain_record_effect and
  chain_hash, as commit_effect links it), the row updated with its link (HOT: no indexed
  column changes), asynchronously committed as the binding's default;
- what the agent may do, enforced by policies (row-level security binds the agent's
  login; its subqueries read the sessions table and the registry): it inserts only into
  its own active session, only a tool registered to it, not retired, with the tier, name
  and compensation of its registration (the agent never chooses the tier); it reads only
  its own calls; it writes only the columns it is granted (the effect id, times, login
  and stack position are defaults it cannot set); it commits only its own executing call
  of its own active session, with its login, the statement's time, and a link whose
  previous hash is the session's head and whose hash is the row's own record's; the
  call's form (signature, step, args an object whose numbers fit and whose text is
  within the payload limit) and the result's are checked in the policies ("plain SQL")
  or as CHECK constraints ("plain SQL, CHECKs");
- "plain SQL, owner": the same statements sent by the tables' owner, whom no policy
  binds: what they cost with no authority checked.

After the loops, what the agent's login gets for what it may not do (SQLSTATEs), and
for the things the design does not stop.

What this design cannot enforce, or gives up, is in docs/performance-log.md ("Plain SQL
on the hot path"). The walk, approvals, failure, retention and the views are left out,
as the one-row sketch leaves them out.

    python bench/bench_plain_sql.py                    # 9 rounds x 4000; protocol 5 x 1600
    python bench/bench_plain_sql.py --rounds 11 --calls 5000 --protocol-calls 2000
    python bench/bench_plain_sql.py --no-loop          # the protocol part only

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import psycopg
from psycopg.conninfo import make_conninfo

import bench_agents as agents
import bench_engine_ab as ab
import bench_one_row as one_row
from pgcluster import throwaway_cluster
from undolog import engine
from undolog.migrations import migrate

# The agent's login: RLS binds it (a superuser or the tables' owner would bypass it).
AGENT = "bench_plain_agent"

PLAIN_SQL = r"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'bench_plain_agent') THEN
        CREATE ROLE bench_plain_agent LOGIN;
    END IF;
END
$$;
GRANT undolog_agent TO bench_plain_agent;

CREATE TABLE undolog.plain_live_calls (
    session_id uuid NOT NULL,
    call_signature text NOT NULL,
    effect_id uuid NOT NULL DEFAULT undolog.effect_id_at(now()),
    executed_at timestamptz NOT NULL DEFAULT now(),
    stack_position bigint GENERATED ALWAYS AS IDENTITY,
    step_index integer NOT NULL,
    tool_id uuid NOT NULL,
    tool_name text NOT NULL,
    tier text NOT NULL,
    args jsonb NOT NULL,
    compensation jsonb,
    intercepted_by text NOT NULL DEFAULT session_user,
    state text NOT NULL DEFAULT 'executing',
    undo_state text NOT NULL DEFAULT 'pending',
    result_snapshot jsonb,
    committed_at timestamptz,
    committed_by text,
    commit_seq bigint,
    commit_prev bytea,
    commit_hash bytea,
    PRIMARY KEY (session_id, call_signature)
);
CREATE UNIQUE INDEX plain_live_calls_effect_key
ON undolog.plain_live_calls (effect_id, session_id);
CREATE INDEX plain_live_calls_unfinished_idx
ON undolog.plain_live_calls (session_id, stack_position DESC)
WHERE undo_state IN ('pending', 'compensating');

ALTER TABLE undolog.plain_live_calls ENABLE ROW LEVEL SECURITY;
-- Its own calls: the row's login, which only the INSERT's default sets, and only into
-- the login's own session (below).
CREATE POLICY plain_reads_own ON undolog.plain_live_calls
FOR SELECT TO bench_plain_agent
USING (intercepted_by = session_user);
-- A call of its own active session (the sessions table's policy shows an agent only its
-- own sessions), of a tool registered to it and not retired, as registered.
CREATE POLICY plain_intercepts_own ON undolog.plain_live_calls
FOR INSERT TO bench_plain_agent
WITH CHECK (
    (
        SELECT s.owner_role = session_user AND s.state = 'active'
        FROM undolog.undolog_sessions AS s
        WHERE s.session_id = plain_live_calls.session_id
    )
    AND (
        SELECT t.owner_role = session_user AND t.retired_at IS NULL
            AND t.tool_name = plain_live_calls.tool_name AND t.tier = plain_live_calls.tier
            AND t.compensation IS NOT DISTINCT FROM plain_live_calls.compensation
        FROM undolog.undolog_tools AS t
        WHERE t.tool_id = plain_live_calls.tool_id
    )
    AND {call_checks}
);
-- Its own executing call of its active session, committed with its login and the
-- statement's time, linked after the session's head.
CREATE POLICY plain_commits_own ON undolog.plain_live_calls
FOR UPDATE TO bench_plain_agent
USING (
    state = 'executing' AND intercepted_by = session_user
    AND (
        SELECT s.state = 'active' FROM undolog.undolog_sessions AS s
        WHERE s.session_id = plain_live_calls.session_id
    )
)
WITH CHECK (
    state = 'committed' AND committed_by = session_user AND committed_at = now()
    AND (commit_seq, commit_prev) = (
        SELECT h.seq + 1, h.head FROM undolog.undolog_chain_heads AS h
        WHERE h.session_id = plain_live_calls.session_id
    )
    AND {commit_checks}
);
-- The commit moves its session's head (the engine's own writers are its owner's).
CREATE POLICY plain_moves_own_head ON undolog.undolog_chain_heads
FOR UPDATE TO bench_plain_agent
USING ((
    SELECT s.state = 'active' FROM undolog.undolog_sessions AS s
    WHERE s.session_id = undolog_chain_heads.session_id
));

GRANT SELECT,
    INSERT (session_id, call_signature, step_index, tool_id, tool_name, tier, args,
            compensation),
    UPDATE (state, result_snapshot, committed_at, committed_by, commit_seq, commit_prev,
            commit_hash)
ON undolog.plain_live_calls TO bench_plain_agent;
GRANT UPDATE (seq, prev, head) ON undolog.undolog_chain_heads TO bench_plain_agent;
GRANT EXECUTE ON FUNCTION
    undolog.effect_id_at(timestamptz),
    undolog.signature_well_formed(text), undolog.numbers_fit(jsonb),
    undolog.max_payload_bytes(), undolog.chain_hash(bytea, text),
    undolog.chain_time(timestamptz),
    undolog.chain_record_effect(text, uuid, uuid, timestamptz, text, integer, text, text,
                                jsonb, text, uuid, timestamptz, text, jsonb)
TO bench_plain_agent;
"""

# What the agent's rows must hold, beyond who may write them: the call's form (checked
# when it is inserted) and its commit's (when it is committed: its result within the
# payload limits, its link the hash of its own record after its previous link, so that
# no agent stores a link that does not hash what the row holds). In the policies (the
# variant "plain SQL"), they are part of each statement's plan, prepared once. As CHECK
# constraints ("plain SQL, CHECKs"), which bind the owner too, PostgreSQL reads their
# expressions from the catalog's node text and prepares them again for every statement
# that writes the table, SQL functions inlined again: measured on a loaded machine,
# 700-900 µs a new call with the engine's SQL functions as written in them, 350-390 with
# those functions expanded as below (``inlined``), 200-220 with the checks in the
# policies.
CALL_CHECKS = """
    undolog.signature_well_formed(call_signature) AND step_index >= 0
    AND jsonb_typeof(args) = 'object' AND undolog.numbers_fit(args)
    AND octet_length(args::text) <= undolog.max_payload_bytes()
"""
COMMIT_CHECKS = """
    undolog.numbers_fit(result_snapshot)
    AND octet_length(result_snapshot::text) <= undolog.max_payload_bytes()
    AND commit_hash = undolog.chain_hash(commit_prev, undolog.chain_record_effect(
        'committed', session_id, effect_id, executed_at, call_signature, step_index,
        tool_name, tier, args, intercepted_by, tool_id, committed_at, committed_by,
        result_snapshot))
"""
# The same as constraints, which hold for every row: a committed row's.
STATE_CHECKS = """
    state IN ('executing', 'committed')
    AND (state = 'committed') = (committed_at IS NOT NULL)
    AND (committed_at IS NULL) = (committed_by IS NULL)
    AND (committed_at IS NULL) = (commit_hash IS NULL)
"""


def inlined(conn: ab.Conn, expression: str) -> str:
    """``expression`` over plain_live_calls with the SQL functions it calls expanded, as
    the planner inlines them (EXPLAIN VERBOSE's output)."""
    row = conn.execute(
        "EXPLAIN (VERBOSE, COSTS OFF, FORMAT JSON)"
        f" SELECT {expression} FROM undolog.plain_live_calls"
    ).fetchone()
    assert row is not None
    return str(row[0][0]["Plan"]["Output"][0])


def plain_schema(conn: ab.Conn, *, constraints: bool = False) -> None:
    """PLAIN_SQL, in a database the engine is installed in: the rows' checks in the
    policies, or as CHECK constraints (``constraints``)."""
    if not constraints:
        conn.execute(
            PLAIN_SQL.format(call_checks=f"({CALL_CHECKS})", commit_checks=f"({COMMIT_CHECKS})")
        )
        return
    conn.execute(PLAIN_SQL.format(call_checks="TRUE", commit_checks="TRUE"))
    checks = {
        "call": CALL_CHECKS,
        "commit": f"state = 'executing' OR ({COMMIT_CHECKS})",
        "state": STATE_CHECKS,
    }
    for name, expression in checks.items():
        conn.execute(
            "ALTER TABLE undolog.plain_live_calls"
            f" ADD CONSTRAINT plain_live_calls_{name}_check CHECK ({inlined(conn, expression)})"
        )


# A call, new or made again: $1 session, $2 tool id, $3 step, $4 args, $5 signature.
# Answers (effect_id, action, result): 'execute' for a new call; for a call made before,
# 'replay' and its result when it is committed and the same call, 'different call' when
# the signature's call differs, else its state. No row: the key is being inserted by a
# concurrent call (ON CONFLICT), or the tool is not this login's registration.
INTERCEPT = """
WITH probe AS (
    SELECT c.effect_id, c.state, c.result_snapshot,
           (c.step_index, c.tool_id, c.args) = ($3::integer, $2::uuid, $4::jsonb) AS same
    FROM undolog.plain_live_calls AS c
    WHERE c.session_id = $1::uuid AND c.call_signature = $5::text
), made AS (
    INSERT INTO undolog.plain_live_calls AS c
        (session_id, call_signature, step_index, tool_id, tool_name, tier, args,
         compensation)
    SELECT $1::uuid, $5::text, $3::integer, t.tool_id, t.tool_name, t.tier, $4::jsonb,
           t.compensation
    FROM undolog.undolog_tools AS t
    WHERE t.tool_id = $2::uuid AND t.retired_at IS NULL AND NOT EXISTS (SELECT FROM probe)
    ON CONFLICT (session_id, call_signature) DO NOTHING
    RETURNING c.effect_id
)
SELECT made.effect_id, 'execute' AS action, NULL::jsonb AS result FROM made
UNION ALL
SELECT probe.effect_id,
       CASE WHEN NOT probe.same THEN 'different call'
            WHEN probe.state = 'committed' THEN 'replay'
            ELSE probe.state END,
       probe.result_snapshot
FROM probe
"""

# A call's commit: $1 session, $2 effect id, $3 result. Answers the effect id, or no row
# when the call is not this login's executing call. Its own transaction, committed
# asynchronously (as commit_effect(p_async => true) does).
COMMIT = """
WITH call AS (
    SELECT c.session_id, c.call_signature, c.effect_id, c.executed_at, c.step_index,
           c.tool_name, c.tier, c.args, c.intercepted_by, c.tool_id
    FROM undolog.plain_live_calls AS c
    WHERE c.effect_id = $2::uuid AND c.session_id = $1::uuid AND c.state = 'executing'
      AND pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL
    FOR UPDATE
), link AS (
    UPDATE undolog.undolog_chain_heads AS h
    SET seq = h.seq + 1, prev = h.head,
        head = undolog.chain_hash(h.head, undolog.chain_record_effect(
            'committed', call.session_id, call.effect_id, call.executed_at,
            call.call_signature, call.step_index, call.tool_name, call.tier, call.args,
            call.intercepted_by, call.tool_id, now(), session_user, $3::jsonb))
    FROM call
    WHERE h.session_id = call.session_id
    RETURNING h.seq, h.prev, h.head
)
UPDATE undolog.plain_live_calls AS c
SET state = 'committed', result_snapshot = $3::jsonb, committed_at = now(),
    committed_by = session_user, commit_seq = link.seq, commit_prev = link.prev,
    commit_hash = link.head
FROM link
WHERE c.effect_id = $2::uuid AND c.session_id = $1::uuid
RETURNING c.effect_id
"""


def in_loop(statement: str, into: str, *params: str) -> str:
    """``statement`` inside a PL/pgSQL loop: its parameters ``$1``.. replaced by the loop's
    expressions (PL/pgSQL passes them as parameters of the statement's cached plan) and its
    answer's first columns read INTO ``into``."""
    for n in range(len(params), 0, -1):
        assert f"${n}" in statement
        statement = statement.replace(f"${n}", f"({params[n - 1]})")
    return f"{statement.strip()}\n    INTO {into};"


# The loops: bench_engine_ab.py's, with the two statements in place of intercept_tool and
# commit_effect, as the agent's login.
SIGNATURE = "encode(sha256(convert_to(v_session::text || i, 'UTF8')), 'hex')"
ARGS = "jsonb_build_object('i', i)"
RESULT = """'{"ok": true}'"""
PLAIN_LOOP = f"""
DO $bench$
DECLARE
    v_session uuid := gen_random_uuid();
    v_tool uuid;
    v_effect uuid;
    v_action text;
BEGIN
    PERFORM undolog.begin_session(v_session, 'bench', '{{}}', '1 hour');
    SELECT t.tool_id INTO v_tool FROM undolog.undolog_tools AS t
    WHERE t.tool_name = 'bench_tool' AND t.retired_at IS NULL;
    COMMIT;
    FOR i IN 1..%(calls)s LOOP
        {in_loop(INTERCEPT, "v_effect, v_action", "v_session", "v_tool", "i", ARGS, SIGNATURE)}
        IF v_action IS DISTINCT FROM 'execute' THEN
            RAISE EXCEPTION 'call %% answered %%, not execute', i, v_action;
        END IF;
        COMMIT;
        {in_loop(COMMIT, "v_effect", "v_session", "v_effect", RESULT)}
        IF v_effect IS NULL THEN
            RAISE EXCEPTION 'call %% was not committed', i;
        END IF;
        COMMIT;
    END LOOP;
END
$bench$
"""
PLAIN_REPLAY_SETUP = PLAIN_LOOP.replace("gen_random_uuid()", "'%(session)s'")
PLAIN_REPLAY_LOOP = f"""
DO $bench$
DECLARE
    v_session uuid := '%(session)s';
    v_tool uuid;
    v_effect uuid;
    v_action text;
BEGIN
    SELECT t.tool_id INTO v_tool FROM undolog.undolog_tools AS t
    WHERE t.tool_name = 'bench_tool' AND t.retired_at IS NULL;
    FOR i IN 1..%(calls)s LOOP
        {in_loop(INTERCEPT, "v_effect, v_action", "v_session", "v_tool", "i", ARGS, SIGNATURE)}
        IF v_action IS DISTINCT FROM 'replay' THEN
            RAISE EXCEPTION 'call %% answered %%, not replay', i, v_action;
        END IF;
        COMMIT;
    END LOOP;
END
$bench$
"""


def plain_database(dsn: str, *, constraints: bool = False) -> ab.Conn:
    """The engine, PLAIN_SQL beside it, and the agent login's connection, its tool
    registered (bench_engine_ab.py's bench_tool) as its own."""
    with one_row.engine_database(dsn) as owner:
        plain_schema(owner, constraints=constraints)
    conn = psycopg.connect(make_conninfo(dsn, user=AGENT), autocommit=True)
    engine.register_tool(conn, "bench_tool", "compensable", {"name": "undo"})
    return conn


def trusted_database(dsn: str) -> ab.Conn:
    """The same statements sent by the tables' owner, whom no policy binds: what the
    statements cost without the database checking the agent's authority."""
    conn = one_row.engine_database(dsn)
    plain_schema(conn)
    return conn


PLAIN_LOOPS: one_row.Loops = {
    one_row.NEW: ("", PLAIN_LOOP),
    one_row.REPLAY: (PLAIN_REPLAY_SETUP, PLAIN_REPLAY_LOOP),
}


def run_loops(rounds: int, calls: int) -> None:
    variants: dict[str, one_row.Variant] = {
        **one_row.VARIANTS,
        "plain SQL": (plain_database, PLAIN_LOOPS),
        "plain SQL, CHECKs": (partial(plain_database, constraints=True), PLAIN_LOOPS),
        "plain SQL, owner": (trusted_database, PLAIN_LOOPS),
    }
    with throwaway_cluster("fsync=off") as cluster:
        one_row.compare(cluster.dsn, variants, rounds, calls)
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE undolog_bench_refusals")
        dsn = make_conninfo(cluster.dsn, dbname="undolog_bench_refusals")
        plain_database(dsn).close()
        show_refusals(dsn)


# --- what the database refuses ------------------------------------------------------------

# A commit that links its row after the head but leaves the head where it is: $1 effect.
COMMIT_WITHOUT_HEAD = """
UPDATE undolog.plain_live_calls AS c
SET state = 'committed', result_snapshot = '{}', committed_at = now(),
    committed_by = session_user, commit_seq = h.seq + 1, commit_prev = h.head,
    commit_hash = undolog.chain_hash(h.head, undolog.chain_record_effect(
        'committed', c.session_id, c.effect_id, c.executed_at, c.call_signature,
        c.step_index, c.tool_name, c.tier, c.args, c.intercepted_by, c.tool_id, now(),
        session_user, '{}'))
FROM undolog.undolog_chain_heads AS h
WHERE c.effect_id = $1::uuid AND h.session_id = c.session_id
"""


def show_refusals(dsn: str) -> None:
    """What the agent's login gets for what it may not do, and for what it may do and
    should not: each attempt in its own transaction, its SQLSTATE or its command tag."""
    conn = psycopg.connect(make_conninfo(dsn, user=AGENT), autocommit=True)
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("CREATE ROLE bench_plain_other LOGIN IN ROLE undolog_agent")
    other = psycopg.connect(make_conninfo(dsn, user="bench_plain_other"), autocommit=True)
    tool = str(engine.register_tool(conn, "bench_tool", "compensable", {"name": "undo"}))
    mine = str(engine.begin_session(conn, agent="plain"))
    ended = str(engine.begin_session(conn, agent="plain"))
    theirs = str(engine.begin_session(other, agent="other"))
    sig = iter(f"{n:064x}" for n in range(1, 1000))
    args = json.dumps({"i": 1})

    def attempt(label: str, statement: str, *params: str) -> list[str]:
        res = conn.pgconn.exec_params(statement.encode(), [v.encode() for v in params])
        if res.status == psycopg.pq.ExecStatus.FATAL_ERROR:
            code = (res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or b"").decode()
            message = (res.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
            print(f"  {label:52} refused {code}: {message}")
            return []
        answer = [(res.get_value(r, 1) or b"").decode() for r in range(res.ntuples)]
        tag = res.command_status.decode() if res.command_status else ""
        print(f"  {label:52} accepted: {tag} {answer if res.nfields > 1 else ''}")
        return [(res.get_value(r, 0) or b"").decode() for r in range(res.ntuples)]

    def new_call(session: str) -> str:
        return attempt("a new call", INTERCEPT, session, tool, "1", args, next(sig))[0]

    print("what the agent's login gets (plain SQL, checks in the policies)")
    done = new_call(ended)
    attempt("its commit", COMMIT, ended, done, "{}")
    signature = f"{1:064x}"
    engine.complete_session(conn, uuid.UUID(ended))
    attempt("the same call again, its session ended", INTERCEPT, ended, tool, "1", args, signature)
    attempt("a new call in its ended session", INTERCEPT, ended, tool, "2", args, next(sig))
    attempt("a call in another login's session", INTERCEPT, theirs, tool, "1", args, next(sig))
    attempt("a malformed signature", INTERCEPT, mine, tool, "1", args, "not-a-signature")
    big = json.dumps({"blob": "x" * 1_100_000})
    attempt("args over the payload limit", INTERCEPT, mine, tool, "1", big, next(sig))
    attempt(
        "a tier other than its registration's",
        "INSERT INTO undolog.plain_live_calls (session_id, call_signature, step_index, tool_id,"
        " tool_name, tier, args) VALUES ($1, $2, 1, $3, 'bench_tool', 'irreversible', '{}')",
        mine,
        next(sig),
        tool,
    )
    attempt(
        "a login of its choosing",
        "INSERT INTO undolog.plain_live_calls (session_id, call_signature, step_index, tool_id,"
        " tool_name, tier, args, compensation, intercepted_by) VALUES ($1, $2, 1, $3,"
        " 'bench_tool', 'compensable', '{}', '{\"name\": \"undo\"}', 'someone')",
        mine,
        next(sig),
        tool,
    )
    executing = new_call(mine)
    attempt(
        "a commit whose link is not its record's hash",
        "UPDATE undolog.plain_live_calls SET state = 'committed', result_snapshot = '{}',"
        " committed_at = now(), committed_by = session_user, commit_seq = 2,"
        " commit_prev = '\\x00', commit_hash = '\\x00' WHERE effect_id = $1",
        executing,
    )
    attempt("a commit of a call already committed", COMMIT, ended, done, "{}")
    attempt("a commit that leaves the head where it is", COMMIT_WITHOUT_HEAD, executing)
    attempt("then another call's commit after the same head", COMMIT, mine, new_call(mine), "{}")
    attempt(
        "the session's head moved to any value",
        "UPDATE undolog.undolog_chain_heads SET head = '\\x00' WHERE session_id = $1",
        mine,
    )
    conn.close()
    other.close()


# --- through the protocol, one agent -------------------------------------------------------

PLAIN_STATEMENTS = {b"plain_intercept": INTERCEPT.encode(), b"plain_commit": COMMIT.encode()}


class PlainAgent:
    """The agent's login on a connection of its own: a session for new calls, and a
    session whose calls, committed before the timing, are replayed. ``statements``: the
    intercept and the commit it prepares (another design's, in a subclass), each
    answering as INTERCEPT and COMMIT do."""

    statements: ClassVar[dict[bytes, bytes]] = PLAIN_STATEMENTS

    def __init__(self, dsn: str, replay_pool: int) -> None:
        self.conn: ab.Conn = psycopg.connect(make_conninfo(dsn, user=AGENT), autocommit=True)
        self.tool = str(
            engine.register_tool(
                self.conn, agents.TOOL, "compensable", agents.COMPENSATION.to_json()
            )
        ).encode()
        self.prepared: set[bytes] = set()
        # The replay pool: the calls of a session of their own, made before the timing.
        self.replay_session = self.session = self.begin()
        self.step = 0
        self.replay_sigs = self.new_calls(replay_pool)
        self.replay_step = 0
        self.session = self.begin()
        self.step = 0

    def begin(self) -> bytes:
        return str(engine.begin_session(self.conn, agent="plain")).encode()

    def new_calls(self, calls: int) -> list[bytes]:
        """New calls, intercept and commit sent as the decorator sends them; answers
        their signatures (64 hex digits, made before the calls, as the floor's)."""
        first = self.step
        self.step += calls
        sigs = [(uuid.uuid4().hex + uuid.uuid4().hex).encode() for _ in range(calls)]

        def intercept(k: int) -> agents.Statement:
            args = json.dumps(agents.make_args(first + k)).encode()
            step = str(first + k).encode()
            return b"plain_intercept", [self.session, self.tool, step, args, sigs[k]]

        def commit(k: int, answer: Any) -> agents.Statement:
            assert answer is not None and answer.ntuples == 1
            assert answer.get_value(0, 1) == b"execute"
            result = json.dumps(agents.result_for(first + k)).encode()
            return b"plain_commit", [self.session, answer.get_value(0, 0), result]

        agents.one_round_trip(self.conn, self.statements, self.prepared, calls, intercept, commit)
        return sigs

    def run_new(self, calls: int) -> None:
        self.new_calls(calls)

    def run_replay(self, calls: int) -> None:
        """Calls made again: the intercept alone, one waited round trip each."""
        pgconn = self.conn.pgconn
        for step in range(self.replay_step, self.replay_step + calls):
            args = json.dumps(agents.make_args(step)).encode()
            params = [self.replay_session, self.tool, str(step).encode(), args]
            res = pgconn.exec_prepared(b"plain_intercept", [*params, self.replay_sigs[step]])
            if res.ntuples != 1 or res.get_value(0, 1) != b"replay":
                raise RuntimeError(f"replay step {step}: {res.error_message.decode()}")
        self.replay_step += calls


# The designs through the protocol: a name, its label and its agent's class.
PROTOCOL_DESIGNS: dict[str, tuple[str, type[PlainAgent]]] = {
    "plain": ("plain SQL", PlainAgent),
}


def run_protocol(
    rounds: int,
    calls: int,
    designs: dict[str, tuple[str, type[PlainAgent]]] = PROTOCOL_DESIGNS,
    schema: Callable[[ab.Conn], None] = plain_schema,
) -> None:
    """One agent, in this process: bench_agents.py's floor (two waited round trips), its
    floor through the decorator's protocol, its decorator and its decorator's replay,
    beside each design's new call (the decorator's protocol) and replay (the plain SQL
    statements', or another's: ``designs``, installed by ``schema`` beside the engine), in
    alternating rounds; calls/s, the server process's CPU µs and the WAL bytes per call,
    medians."""
    with throwaway_cluster() as cluster, psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {agents.ENGINE_DB}")
        dsn = make_conninfo(cluster.dsn, dbname=agents.ENGINE_DB)
        with psycopg.connect(dsn, autocommit=True) as owner:
            migrate(owner)
            owner.execute(agents.FLOOR_DDL)
            schema(owner)
        pool = calls * (rounds + 1)
        agent = agents.Agent(0, dsn, pool, with_dbos=False)
        design_agents = {name: cls(dsn, pool) for name, (_, cls) in designs.items()}
        monitor = psycopg.connect(dsn, autocommit=True)
        # Each variant: how a block of calls runs, and the connection whose server process
        # does its work.
        blocks: dict[str, tuple[Callable[[int], None], ab.Conn]] = {
            "floor": (lambda n: agent.run("floor", n), agent.conn),
            "floor_one_rt": (lambda n: agent.run("floor_one_rt", n), agent.floor_conn),
            "decorator": (lambda n: agent.run("decorator", n), agent._conn_of(agent.active)),
            "replay_decorator": (
                lambda n: agent.run("replay_decorator", n),
                agent._conn_of(agent.active_replay),
            ),
        }
        labels = dict(agents.LABELS)
        for name, design in design_agents.items():
            blocks[name] = (design.run_new, design.conn)
            blocks[f"{name}_replay"] = (design.run_replay, design.conn)
            labels[name] = f"{designs[name][0]}, decorator protocol"
            labels[f"{name}_replay"] = f"{designs[name][0]} replay"
        rates: dict[str, list[float]] = {name: [] for name in blocks}
        cpu: dict[str, list[float]] = {name: [] for name in blocks}
        wal: dict[str, list[float]] = {name: [] for name in blocks}
        names = list(blocks)
        for name in names:  # warm-up: plans, caches, prepared statements
            blocks[name][0](calls // 10)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                run, conn = blocks[name]
                pid = conn.info.backend_pid
                lsn = monitor.execute("SELECT pg_current_wal_lsn()").fetchone()
                before = ab.cpu_seconds(pid)
                t0 = time.perf_counter()
                run(calls)
                rates[name].append(calls / (time.perf_counter() - t0))
                time.sleep(0.05)  # the last unwaited commit's CPU
                cpu[name].append((ab.cpu_seconds(pid) - before) * 1e6 / calls)
                row = monitor.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn[0] if lsn else None,)
                ).fetchone()
                wal[name].append(float(row[0]) / calls if row else 0.0)
            print(f"  protocol: round {r + 1}/{rounds} done", file=sys.stderr)
        floor = statistics.median(rates["floor"])
        print(f"one agent through the protocol, {rounds} rounds x {calls} calls (medians)")
        print(f"  {'variant':32} {'calls/s':>8} {'vs floor':>8} {'server µs':>9} {'WAL B':>7}")
        for name in names:
            rate = statistics.median(rates[name])
            print(
                f"  {labels[name]:32} {rate:8,.0f} {rate / floor:7.2f}x"
                f" {statistics.median(cpu[name]):9.1f} {statistics.median(wal[name]):7.0f}"
            )
        monitor.close()
        for design in design_agents.values():
            design.conn.close()
        agent.close()


def parse_options(argv: Sequence[str] | None, description: str, rounds: int) -> argparse.Namespace:
    """The options of a bench of the loops and the protocol part (this one's and
    bench_c_hot_path.py's): ``rounds`` is the loops' default."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--protocol-rounds", type=int, default=5)
    parser.add_argument("--protocol-calls", type=int, default=1600)
    parser.add_argument("--no-loop", action="store_true", help="the protocol part only")
    parser.add_argument("--no-protocol", action="store_true", help="the loops only")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv, (__doc__ or "").splitlines()[0], rounds=9)
    if not opts.no_loop:
        run_loops(opts.rounds, opts.calls)
    if not opts.no_protocol:
        run_protocol(opts.protocol_rounds, opts.protocol_calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
