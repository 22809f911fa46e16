"""What a new COMPENSABLE call and a replay would cost with the hot path in C (issue 23):
two C functions, ``c_intercept`` and ``c_commit`` (bench/c_hot_path/undolog_hot.c),
that write bench_plain_sql.py's one-row live-call table through PostgreSQL's heap and
index access methods (no SPI, no planner, no executor plan), beside the floor, the
engine, the one-row PL/pgSQL sketch and the plain SQL statements, in bench_one_row.py's
server-side loops and through the decorator's protocol at one agent (bench_plain_sql.py's
protocol part). A benchmark of a prototype, not a product: nothing in python/ or sql/
uses it.

The .so is built at run time into a temporary folder (gcc, ``pg_config``'s flags and
server headers) and loaded into the bench's throwaway cluster; without gcc or the
headers the bench says what to install and exits 0. The functions run as the agent's
login (bench_plain_sql.py's ``bench_plain_agent``), not as a superuser: no privilege and
no policy applies to what a C function reads and writes, so its own checks are all the
authority there is, and they are paid in the figures.

What ``c_intercept(session, tool_id, step, args, signature)`` checks, as journal_call
does for intercept_tool: the call's own part (a signature of 64 lowercase hex; a
session; a step >= 0; args a JSON object within the payload limits: its numbers ones a
finite double holds, in C for a value under 512 bytes, by undolog.payload_fits beyond,
refused by undolog.check_payload); the registration by its id (this login's, live;
UL017 otherwise), whose tier is the call's (COMPENSABLE only: an IRREVERSIBLE one is
refused, 0A000); the session's advisory lock taken shared (session_lock_key's key, with
the caller's login); the session, read after the lock (UL002 unknown, 42501 another
login's); the call's own advisory key tried (signature_lock_key's: 'in_progress' while
another transaction journals it); the exactly-once key probed (a replay answers the
cached row, in any state of the session; the same signature for another call, UL005);
a new call only in an active session (UL010). The row: effect_id_at(now()), now(), the
stack position's identity, the registration's name, tier and compensation, the login.

What ``c_commit(session, effect_id, result, async)`` checks: the result within the
payload limits; the effect in that session (UL003); the session the caller's (42501)
and active (UL010); the call the caller's (42501) and executing (UL001, also when a
concurrent commit won). It moves the session's chain head over the committed call's
canonical record (chain_record_effect's text, chain_hash's sha256 after the head:
checked below against the SQL functions, row by row) and updates both rows in place
(HOT), asynchronously committed when it is the transaction's first write. A commit that
finds the head moved by a concurrent one waits for it and links after it; both races
(another call of the session, the same call) are run after the loops.

What it skips: the wait for the session's lock is not bounded (the engine's is: 5 s,
then UL030); READ COMMITTED only (0A000 otherwise); replays are not counted and leave no
history row (as the plain SQL design); IRREVERSIBLE calls and approvals, the walk,
retention and the views (as the one-row sketch). The tables' OIDs and column numbers
are cached per backend, and read again after any change to one of the tables (an ALTER
TABLE, a table dropped and made again).

    python bench/bench_c_hot_path.py                      # 7 rounds x 4000; protocol 5 x 1600
    python bench/bench_c_hot_path.py --rounds 9 --calls 5000 --no-protocol

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import ClassVar

import psycopg
from psycopg.conninfo import make_conninfo

import bench_engine_ab as ab
import bench_one_row as one_row
import bench_plain_sql as plain
from pgcluster import throwaway_cluster
from undolog import engine

SOURCE = Path(__file__).resolve().parent / "c_hot_path" / "undolog_hot.c"
INSTALL_HINT = "apt-get install postgresql-server-dev-15 gcc"

# The C functions, beside PLAIN_SQL (whose table they write), granted to the agent's
# login only. Created by a superuser (LANGUAGE C is untrusted).
C_FUNCTIONS = """
CREATE FUNCTION undolog.c_intercept{suffix}(
    p_session_id uuid, p_tool_id uuid, p_step_index integer, p_args jsonb,
    p_call_signature text,
    OUT effect_id uuid, OUT action text, OUT result_snapshot jsonb
)
RETURNS record LANGUAGE c VOLATILE AS '{library}', 'undolog_c_intercept{suffix}';
CREATE FUNCTION undolog.c_commit{suffix}(
    p_session_id uuid, p_effect_id uuid, p_result jsonb, p_async boolean DEFAULT FALSE
)
RETURNS text LANGUAGE c VOLATILE AS '{library}', 'undolog_c_commit{suffix}';
REVOKE ALL ON FUNCTION undolog.c_intercept{suffix}(uuid, uuid, integer, jsonb, text),
    undolog.c_commit{suffix}(uuid, uuid, jsonb, boolean) FROM public;
GRANT EXECUTE ON FUNCTION undolog.c_intercept{suffix}(uuid, uuid, integer, jsonb, text),
    undolog.c_commit{suffix}(uuid, uuid, jsonb, boolean) TO {agent};
"""
# The two builds of the same checks: the tables through the access methods (c_intercept,
# c_commit), and through SPI's prepared statements (c_intercept_spi, c_commit_spi).
DESIGNS = {"C functions": "", "C through SPI": "_spi"}


def build(into: Path) -> Path | None:
    """The .so, compiled from SOURCE into ``into``; None (and what to install, printed)
    when gcc, pg_config or the server headers are missing."""
    pg_config = shutil.which("pg_config")
    if shutil.which("gcc") is None or pg_config is None:
        print(f"gcc or pg_config is missing: {INSTALL_HINT}")
        return None

    def config(flag: str) -> str:
        return subprocess.run([pg_config, flag], check=True, capture_output=True, text=True).stdout

    headers = config("--includedir-server").strip()
    if not (Path(headers) / "postgres.h").exists():
        print(f"PostgreSQL's server headers are missing: {INSTALL_HINT}")
        return None
    library = into / "undolog_hot.so"
    flags = [*config("--cflags").split(), *config("--cflags_sl").split()]
    subprocess.run(
        ["gcc", *flags, "-I", headers, "-shared", "-o", str(library), str(SOURCE)], check=True
    )
    # The server runs as the postgres system user when the bench runs as root.
    into.chmod(0o755)
    return library


def c_schema(owner: ab.Conn, library: Path) -> None:
    """PLAIN_SQL and the C functions, in a database the engine is installed in."""
    plain.plain_schema(owner)
    for suffix in DESIGNS.values():
        owner.execute(C_FUNCTIONS.format(library=library, agent=plain.AGENT, suffix=suffix))


def c_database(dsn: str, library: Path) -> ab.Conn:
    """The engine, PLAIN_SQL and the C functions, and the agent login's connection, its
    tool registered (bench_engine_ab.py's bench_tool) as its own."""
    with one_row.engine_database(dsn) as owner:
        c_schema(owner, library)
    conn = psycopg.connect(make_conninfo(dsn, user=plain.AGENT), autocommit=True)
    engine.register_tool(conn, "bench_tool", "compensable", {"name": "undo"})
    return conn


def c_loop(loop: str, suffix: str) -> str:
    """The shipped engine's loop, calling the C functions (of ``suffix``) instead."""
    out = loop.replace("undolog.intercept_tool(", f"undolog.c_intercept{suffix}(").replace(
        "undolog.commit_effect(", f"undolog.c_commit{suffix}("
    )
    assert out != loop
    return out


def c_loops(suffix: str) -> one_row.Loops:
    return {
        one_row.NEW: ("", c_loop(ab.ENGINE_LOOP, suffix)),
        one_row.REPLAY: (c_loop(ab.REPLAY_SETUP, suffix), c_loop(ab.REPLAY_LOOP, suffix)),
    }


def run_loops(library: Path, rounds: int, calls: int) -> None:
    variants: dict[str, one_row.Variant] = {
        **one_row.VARIANTS,
        "plain SQL": (plain.plain_database, plain.PLAIN_LOOPS),
        "plain SQL, owner": (plain.trusted_database, plain.PLAIN_LOOPS),
        **{
            design: (partial(c_database, library=library), c_loops(suffix))
            for design, suffix in DESIGNS.items()
        },
    }
    with throwaway_cluster("fsync=off") as cluster:
        one_row.compare(cluster.dsn, variants, rounds, calls)
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE ROLE bench_c_other LOGIN IN ROLE undolog_agent")
            for n, (design, suffix) in enumerate(DESIGNS.items()):
                admin.execute(f"CREATE DATABASE undolog_bench_c_checks_{n}")
                dsn = make_conninfo(cluster.dsn, dbname=f"undolog_bench_c_checks_{n}")
                show_checks(dsn, library, design, suffix)


# --- what the C functions refuse, and whether their links are the engine's --------------

INTERCEPT = "SELECT * FROM undolog.c_intercept{suffix}(%s, %s, %s, %s, %s)"
COMMIT = "SELECT undolog.c_commit{suffix}(%s, %s, %s, true)"

# Every committed row's link against the SQL functions': its hash over its own record
# after its previous link, its previous link its session's previous commit's, and its
# effect id's time its executed_at. Answers (rows, rows whose link or id is wrong). Then
# the heads of the active sessions (an ended one's head moved on over its end's record),
# each its last commit's link.
LINKS_CHECK = """
WITH c AS (
    SELECT c.*, lag(c.commit_hash) OVER (PARTITION BY c.session_id ORDER BY c.commit_seq)
           AS before
    FROM undolog.plain_live_calls AS c WHERE c.state = 'committed'
)
SELECT count(*), count(*) FILTER (WHERE
    c.commit_hash IS DISTINCT FROM undolog.chain_hash(c.commit_prev, undolog.chain_record_effect(
        'committed', c.session_id, c.effect_id, c.executed_at, c.call_signature, c.step_index,
        c.tool_name, c.tier, c.args, c.intercepted_by, c.tool_id, c.committed_at,
        c.committed_by, c.result_snapshot))
    OR (c.before IS NOT NULL AND c.before IS DISTINCT FROM c.commit_prev)
    OR undolog.effect_time(c.effect_id) IS DISTINCT FROM c.executed_at)
FROM c
"""
WAITING = (
    "SELECT count(*) FROM pg_catalog.pg_stat_activity"
    " WHERE wait_event_type = 'Lock' AND query LIKE '%c_commit%'"
)
HEADS_CHECK = """
SELECT count(*) FILTER (WHERE h.head IS DISTINCT FROM (
    SELECT c.commit_hash FROM undolog.plain_live_calls AS c
    WHERE c.session_id = h.session_id ORDER BY c.commit_seq DESC NULLS LAST LIMIT 1))
FROM undolog.undolog_chain_heads AS h
JOIN undolog.undolog_sessions AS s ON s.session_id = h.session_id AND s.state = 'active'
WHERE h.session_id IN (SELECT c.session_id FROM undolog.plain_live_calls AS c)
"""


def show_checks(dsn: str, library: Path, design: str, suffix: str) -> None:
    """What the agent's login gets from a design's C functions for what it may and may
    not do (each attempt in its own transaction: its answer, or its SQLSTATE), then every
    link they wrote checked against the engine's SQL functions. ``bench_c_other``: a
    second agent login."""
    conn = c_database(dsn, library)
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute(
            f"GRANT EXECUTE ON FUNCTION undolog.c_commit{suffix}(uuid, uuid, jsonb, boolean),"
            f" undolog.c_intercept{suffix}(uuid, uuid, integer, jsonb, text) TO bench_c_other"
        )
    intercept, commit = INTERCEPT.format(suffix=suffix), COMMIT.format(suffix=suffix)
    other = psycopg.connect(make_conninfo(dsn, user="bench_c_other"), autocommit=True)
    tool = engine.register_tool(conn, "bench_tool", "compensable", {"name": "undo"})
    irreversible = engine.register_tool(conn, "bench_wire", "irreversible", None)
    their_tool = engine.register_tool(other, "bench_tool", "compensable", {"name": "undo"})
    mine = engine.begin_session(conn, agent="c")
    theirs = engine.begin_session(other, agent="other")
    sig = iter(f"{n:064x}" for n in range(1, 1000))
    args = '{"i": 1}'

    def attempt(label: str, who: ab.Conn, statement: str, *params: object) -> tuple[str, ...]:
        try:
            row = who.execute(statement, params).fetchone()
        except psycopg.Error as error:
            print(f"  {label:56} refused {error.sqlstate}: {error.diag.message_primary}")
            return ()
        answer = tuple(str(v) for v in row) if row else ()
        print(f"  {label:56} {' '.join(answer[1:] or answer)[:40]}")
        return answer

    def rows() -> int:
        row = conn.execute("SELECT count(*) FROM undolog.plain_live_calls").fetchone()
        return int(row[0]) if row else -1

    print(f"what the agent's login gets from {design}")
    signature = next(sig)
    effect = attempt("a new call", conn, intercept, mine, tool, 1, args, signature)[0]
    attempt("its commit", conn, commit, mine, effect, '{"ok": true}')
    before = rows()
    attempt("the same call again", conn, intercept, mine, tool, 1, args, signature)
    print(f"  {'  rows written by the replay':56} {rows() - before}")
    attempt("the same signature, other args", conn, intercept, mine, tool, 1, '{"i": 2}', signature)
    attempt("its commit again", conn, commit, mine, effect, '{"ok": true}')
    attempt("a call in another login's session", conn, intercept, theirs, tool, 1, args, next(sig))
    attempt("another login's tool", conn, intercept, mine, their_tool, 1, args, next(sig))
    attempt("an unregistered tool", conn, intercept, mine, uuid.uuid4(), 1, args, next(sig))
    attempt("an IRREVERSIBLE tool", conn, intercept, mine, irreversible, 1, args, next(sig))
    attempt("a malformed signature", conn, intercept, mine, tool, 1, args, "not-a-signature")
    numbers = '{"big": 1.5e308, "small": -5e-324, "zero": 0, "list": [1, 2.5]}'
    attempt("numbers a double holds", conn, intercept, mine, tool, 9, numbers, next(sig))
    longer = '{"text": "' + "y" * 2000 + '"}'
    attempt(
        "args of 2 kB (payload_fits, as the owner)",
        conn,
        intercept,
        mine,
        tool,
        8,
        longer,
        next(sig),
    )
    attempt("args not an object", conn, intercept, mine, tool, 1, "[1]", next(sig))
    attempt("a number no double holds", conn, intercept, mine, tool, 1, '{"n": 1e400}', next(sig))
    big = '{"blob": "' + "x" * 1_100_000 + '"}'
    attempt("args over the payload limit", conn, intercept, mine, tool, 1, big, next(sig))
    executing = attempt("a new call", conn, intercept, mine, tool, 2, args, next(sig))[0]
    # The same call while another transaction of the login journals it.
    racing = next(sig)
    with psycopg.connect(make_conninfo(dsn, user=plain.AGENT)) as first:
        first.execute(intercept, (mine, tool, 7, args, racing))
        attempt(
            "a call another transaction is journaling", conn, intercept, mine, tool, 7, args, racing
        )
        first.commit()
    attempt("the same call once that one committed", conn, intercept, mine, tool, 7, args, racing)
    attempt("its commit by another login", other, commit, mine, executing, "{}")
    attempt("its commit named in another session", conn, commit, theirs, executing, "{}")
    attempt("its commit", conn, commit, mine, executing, '{"ok": 2}')

    def meanwhile(label: str, effect: str) -> None:
        """``effect``'s commit (or, with none, the other call's) by the agent's
        connection while another transaction of the login has committed another call of
        the same session and not ended: it waits (seen waiting on a lock), then answers
        once that transaction ends."""
        first_call = attempt("a new call", conn, intercept, mine, tool, 20, args, next(sig))[0]
        with (
            psycopg.connect(make_conninfo(dsn, user=plain.AGENT)) as first,
            psycopg.connect(dsn, autocommit=True) as owner,
        ):
            first.execute(commit, (mine, first_call, '{"first": true}'))
            late = threading.Thread(
                target=attempt,
                args=(label, conn, commit, mine, effect or first_call, '{"late": true}'),
            )
            late.start()
            waiting = 0
            for _ in range(100):
                row = owner.execute(WAITING).fetchone()
                waiting = int(row[0]) if row else 0
                if waiting:
                    break
                time.sleep(0.05)
            first.commit()
            late.join()
        print(f"    (it waited on a lock: {'yes' if waiting else 'no'})")

    meanwhile(
        "another call's commit meanwhile, then links after it",
        attempt("a new call", conn, intercept, mine, tool, 21, args, next(sig))[0],
    )
    meanwhile("the same call's commit meanwhile", "")
    engine.complete_session(conn, mine)
    attempt("a new call in its ended session", conn, intercept, mine, tool, 3, args, next(sig))
    attempt(
        "the first call again, its session ended", conn, intercept, mine, tool, 1, args, signature
    )
    # A run of calls in a session of their own, then every link.
    conn.execute(c_loop(ab.ENGINE_LOOP, suffix) % {"calls": 500})
    with psycopg.connect(dsn, autocommit=True) as owner:
        links = owner.execute(LINKS_CHECK).fetchone()
        heads = owner.execute(HEADS_CHECK).fetchone()
    assert links is not None and heads is not None
    print(
        f"  links checked against chain_hash(chain_record_effect(...)): {links[0]} rows,"
        f" {links[1]} wrong; active sessions' heads not at their last link: {heads[0]}"
    )
    conn.close()
    other.close()


# --- through the protocol, one agent -------------------------------------------------------


class CAgent(plain.PlainAgent):
    """bench_plain_sql.py's agent, sending the C functions instead of its statements."""

    statements: ClassVar[dict[bytes, bytes]] = {
        b"plain_intercept": (
            b"SELECT effect_id, action, result_snapshot FROM undolog.c_intercept("
            b"$1::uuid, $2::uuid, $3::integer, $4::jsonb, $5::text)"
        ),
        b"plain_commit": b"SELECT undolog.c_commit($1::uuid, $2::uuid, $3::jsonb, true)",
    }


class CSpiAgent(plain.PlainAgent):
    """The same, sending the C functions through SPI."""

    statements: ClassVar[dict[bytes, bytes]] = {
        name: statement.replace(b"c_intercept(", b"c_intercept_spi(").replace(
            b"c_commit(", b"c_commit_spi("
        )
        for name, statement in CAgent.statements.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    opts = plain.parse_options(argv, (__doc__ or "").splitlines()[0], rounds=7)
    with tempfile.TemporaryDirectory(prefix="undolog-c-hot-") as folder:
        library = build(Path(folder))
        if library is None:
            return 0
        if not opts.no_loop:
            run_loops(library, opts.rounds, opts.calls)
        if not opts.no_protocol:
            designs: dict[str, tuple[str, type[plain.PlainAgent]]] = {
                **plain.PROTOCOL_DESIGNS,
                "c": ("C functions", CAgent),
                "c_spi": ("C through SPI", CSpiAgent),
            }
            plain.run_protocol(
                opts.protocol_rounds,
                opts.protocol_calls,
                designs,
                partial(c_schema, library=library),
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
