"""Benchmark (not a test): is the dashboard fast on a big journal?

Server time (request in, page rendered out, through the ASGI app in process: the
person's own connection, the views, Jinja2) of the sessions list and of one session's
page, with 1 M sessions and 10 M effects in the journal; p50 and p99. Targets: p99 under
100 ms for the list, under 200 ms for a session of 1,000 calls.

    .venv/bin/python tools/pgcluster.py run -- .venv/bin/python bench/bench_dashboard.py \
        [--sessions 1000000] [--calls 10] [--requests 200] [--keep-database]

Uses the server named by UNDOLOG_DSN (or PG* variables) as a superuser: it creates the
database undolog_bench_dashboard and an operator login (bench_operator, a member of
undolog_password_logins: a throwaway cluster of tools/pgcluster.py asks it for its
password, as the dashboard wants) and reads as it.
The journal is bulk-loaded with set-based INSERT ... SELECT generate_series as the owner,
guard triggers disabled during the load only: sessions (over four months, mostly
completed, some of every other state), ``--calls`` effects each with one history row,
plus one session of 1,000 calls with full histories, undo entries and approvals. Other
sessions' undo entries (each holds its call's signature) are not loaded: no page reads
them.
Prints the numbers; never fails on a missed target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql
from starlette.testclient import TestClient

from journal_fill import GUARDED, SESSION_ID, batches, fill, log, month_partitions
from undolog.dashboard import create_app
from undolog.dashboard.queries import encode_cursor
from undolog.demos.dashboard import PASSWORD_LOGINS

Conn = psycopg.Connection[Any]
DBNAME = os.environ.get("UNDOLOG_BENCH_DBNAME", "undolog_bench_dashboard")
LOGIN = "bench_operator"
BIG_SESSION = uuid.UUID("ffffffff-0000-4000-8000-000000001000")
BATCH = 100_000


def load(conn: Conn, sessions: int, calls: int) -> None:
    month_partitions(conn)
    for first, last in batches(0, sessions - 1, BATCH):
        # Ids increase with i (the btree indexes fill in order); the state mix is what a
        # busy journal looks like: mostly completed, a few of every other state.
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_sessions (session_id, agent, owner_role, state,
                lease_duration, lease_expires_at, created_at, updated_at, error)
            SELECT {SESSION_ID},
                   'agent-' || (i %% 50), 'bench_agent',
                   CASE WHEN i %% 1000 = 1 THEN 'halted' WHEN i %% 1000 = 2 THEN 'active'
                        WHEN i %% 1000 = 3 THEN 'awaiting_approval'
                        WHEN i %% 100 = 4 THEN 'compensated' ELSE 'completed' END,
                   '5 minutes', t, t, t,
                   CASE WHEN i %% 1000 = 1 THEN 'compensation failed for good' END
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT now() - interval '100 days' * (1 - i::float8 / %(n)s) AS t) AS c
            """,
            {"a": first, "b": last, "n": sessions},
        )
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,
                call_signature, step_index, tool_name, tier, args, state, result_snapshot,
                attempts, updated_at)
            SELECT md5('e' || i || ':' || k)::uuid, s.session_id, s.created_at,
                   md5('s' || i || ':' || k) || md5('t' || i || ':' || k), k,
                   (ARRAY['search', 'create_user', 'send_email', 'payout'])[k %% 4 + 1],
                   CASE WHEN k %% 4 = 3 THEN 'irreversible' ELSE 'compensable' END,
                   jsonb_build_object('email', 'user' || i || '@example.com', 'step', k),
                   CASE WHEN k %% 4 = 3 THEN 'approved' ELSE 'committed' END,
                   jsonb_build_object('ok', TRUE), 1, s.created_at
            FROM generate_series(%(a)s::int, %(b)s::int) AS i
            CROSS JOIN LATERAL (
                SELECT {SESSION_ID} AS session_id,
                       now() - interval '100 days' * (1 - i::float8 / %(n)s) AS created_at
            ) AS s
            CROSS JOIN generate_series(0, %(c)s::int - 1) AS k
            """,
            {"a": first, "b": last, "n": sessions, "c": calls},
        )
        conn.execute(
            """
            INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at,
                event, from_state, to_state, at, actor)
            SELECT e.session_id, e.effect_id, e.executed_at, 'transition', 'executing',
                   e.state, e.executed_at, 'bench_agent'
            FROM undolog.undolog_effect_log AS e
            WHERE e.session_id BETWEEN %(low)s AND %(high)s
            """,
            {
                "low": uuid.UUID(f"{first:08x}" + "0" * 24),
                "high": uuid.UUID(f"{last:08x}" + "f" * 24),
            },
        )


def load_big_session(conn: Conn, calls: int = 1000) -> None:
    """The session whose page is measured: 1,000 calls, each with its whole history, its
    undo entry, and an approval for every irreversible one."""
    conn.execute(
        "INSERT INTO undolog.undolog_sessions (session_id, agent, owner_role, state, "
        "lease_duration, lease_expires_at, created_at, updated_at) "
        "VALUES (%s, 'big', 'bench_agent', 'completed', '5 minutes', now(), now(), now())",
        (BIG_SESSION,),
    )
    conn.execute(
        """
        INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,
            call_signature, step_index, tool_name, tier, args, state, result_snapshot,
            attempts, updated_at)
        SELECT md5('big' || k)::uuid, %(s)s, now(), md5('b' || k) || md5('c' || k), k,
               (ARRAY['search', 'create_user', 'send_email', 'payout'])[k %% 4 + 1],
               CASE WHEN k %% 4 = 3 THEN 'irreversible' ELSE 'compensable' END,
               jsonb_build_object('email', 'user' || k || '@example.com', 'body',
                                  repeat('lorem ipsum ', 10)),
               CASE WHEN k %% 4 = 3 THEN 'approved' ELSE 'committed' END,
               jsonb_build_object('id', k), 1, now()
        FROM generate_series(0, %(n)s::int - 1) AS k
        """,
        {"s": BIG_SESSION, "n": calls},
    )
    conn.execute(
        """
        INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at, event,
            from_state, to_state, at, actor)
        SELECT e.session_id, e.effect_id, e.executed_at, 'transition', v.f, v.t, now(), 'big'
        FROM undolog.undolog_effect_log AS e,
             LATERAL (VALUES (NULL, 'pending'), ('pending', 'executing'),
                             ('executing', e.state)) AS v (f, t)
        WHERE e.session_id = %s
        ORDER BY e.step_index
        """,
        (BIG_SESSION,),
    )
    conn.execute(
        """
        INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at,
            call_signature, compensation, state)
        SELECT e.session_id, e.effect_id, e.executed_at, e.call_signature,
               CASE e.tier WHEN 'compensable' THEN '{"name": "undo_it"}'::jsonb END, 'pending'
        FROM undolog.undolog_effect_log AS e WHERE e.session_id = %s ORDER BY e.step_index
        """,
        (BIG_SESSION,),
    )
    conn.execute(
        """
        INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at,
            state, requested_at, decided_at, decided_by, decided_role, reason)
        SELECT e.session_id, e.effect_id, e.executed_at, 'approved', now(), now(), 'boss',
               'boss', 'fine'
        FROM undolog.undolog_effect_log AS e
        WHERE e.session_id = %s AND e.tier = 'irreversible'
        """,
        (BIG_SESSION,),
    )


def build(admin: Conn, base: str, sessions: int, calls: int) -> str:
    started = time.perf_counter()

    def load_all(conn: Conn) -> None:
        load(conn, sessions, calls)
        load_big_session(conn)
        log("  vacuum analyze ...")

    dsn = fill(admin, base, DBNAME, load_all, guarded=(*GUARDED, "undolog_session_history"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM undolog.undolog_sessions), "
            "(SELECT count(*) FROM undolog.undolog_effect_log)"
        ).fetchone()
        assert counts is not None
        log(
            f"loaded {counts[0]:,} sessions, {counts[1]:,} effects in "
            f"{time.perf_counter() - started:.0f} s"
        )
    if admin.execute("SELECT FROM pg_roles WHERE rolname = %s", (LOGIN,)).fetchone() is None:
        admin.execute(f"CREATE ROLE {LOGIN} LOGIN PASSWORD 'bench'")
    # A member of PASSWORD_LOGINS, whom tools/pgcluster.py's clusters ask for its password:
    # the dashboard lets in no login the server let in without it.
    if (
        admin.execute("SELECT FROM pg_roles WHERE rolname = %s", (PASSWORD_LOGINS,)).fetchone()
        is None
    ):
        admin.execute(f"CREATE ROLE {PASSWORD_LOGINS} NOLOGIN")
    admin.execute(f"GRANT undolog_operator, {PASSWORD_LOGINS} TO {LOGIN}")
    return dsn


def as_operator(dsn: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=LOGIN, password="bench")


def measure(client: TestClient, path: str, requests: int) -> tuple[float, float, int]:
    for _ in range(5):  # warm the person's connection and the plan caches
        assert client.get(path).status_code == 200, path
    times = []
    size = 0
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, path
        size = len(response.content)
    times.sort()
    p99 = times[min(len(times) - 1, round(len(times) * 0.99) - 1)]
    return statistics.median(times), p99, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=10, help="effects per session")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="measure an existing load")
    args = parser.parse_args()
    base = os.environ.get("UNDOLOG_DSN", "")
    with psycopg.connect(base, autocommit=True) as admin:
        if args.reuse:
            dsn = psycopg.conninfo.make_conninfo(base, dbname=DBNAME)
        else:
            log(f"loading {args.sessions:,} sessions x {args.calls} effects ...")
            dsn = build(admin, base, args.sessions, args.calls)
        app_dsn = psycopg.conninfo.make_conninfo(dsn, user=None)
        try:
            with TestClient(create_app(app_dsn), follow_redirects=False) as client:
                page = client.get("/login")
                token = page.text.split('name="csrf" value="')[1].split('"')[0]
                login = client.post(
                    "/login", data={"csrf": token, "login": LOGIN, "password": "bench"}
                )
                assert login.status_code == 303, login.text
                first = client.get("/sessions").text
                cursor = first.split("after=")[1].split('"')[0]
                with psycopg.connect(dsn) as conn:
                    mid = conn.execute(
                        "SELECT created_at, session_id FROM undolog.undolog_sessions "
                        "ORDER BY created_at DESC, session_id DESC OFFSET %s LIMIT 1",
                        (args.sessions // 2,),
                    ).fetchone()
                assert mid is not None
                deep = encode_cursor(mid[0], mid[1])
                cases = [
                    ("sessions list, first page", "/sessions"),
                    ("sessions list, second page", f"/sessions?after={cursor}"),
                    ("sessions list, page in the middle", f"/sessions?after={deep}"),
                    ("sessions list, state=halted", "/sessions?state=halted"),
                    ("sessions list, agent=agent-7", "/sessions?agent=agent-7"),
                    ("sessions list, id prefix search", "/sessions?q=0007a1"),
                    ("session page, 1,000 calls", f"/sessions/{BIG_SESSION}"),
                ]
                print(f"\n{'page':<40} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>9}")
                for label, path in cases:
                    p50, p99, size = measure(client, path, args.requests)
                    print(f"{label:<40} {p50:8.1f} {p99:8.1f} {size:9,}", flush=True)
            # The counts per state are fetched by the page after it shows (and kept 5 s
            # per person): counting a million sessions is the one read that grows.
            with psycopg.connect(as_operator(app_dsn)) as conn:
                times = []
                for _ in range(20):
                    started = time.perf_counter()
                    conn.execute(
                        "SELECT state, count(*) FROM undolog.sessions_list GROUP BY state"
                    ).fetchall()
                    times.append((time.perf_counter() - started) * 1000)
                times.sort()
                print(
                    f"{'sessions per state (/sessions/counts)':<40} "
                    f"{statistics.median(times):8.1f} {times[-1]:8.1f}   (max of 20)"
                )
        finally:
            if not args.keep_database and not args.reuse:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DBNAME)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
