"""Benchmark (not a test): what the operator's faces read, at 10 k and at 1 M sessions.

The engine's hot path was measured on a big journal (docs/performance.md); this measures
what people and monitors read: each named query of queries.sql that the dashboard's pages
and live refreshes (sessions list and its filters, a session's page, the approvals inbox,
past decisions, tools, maintenance), ``undolog metrics``, ``undolog health`` and the
CLI's listings run, as the login that runs them (an approver and operator login: the
engine's grants and row-level security apply). For each scale: a database of its own,
loaded with set-based ``INSERT ... SELECT generate_series`` as the engine's owner (guard
triggers disabled during the load only, then VACUUM ANALYZE, what autovacuum would do):

* ``--sessions`` sessions over about four months (so over several month partitions),
  mostly completed, one in a thousand of each live state (active with its lease run out,
  failed, compensating, halted), three in a thousand awaiting approval (a few thousand
  pending requests at 1 M), one in a hundred compensated;
* ``--calls`` calls a session (2: 2 M calls at 1 M sessions), each with its history row
  and undo entry (which holds its signature); the last call of a session awaiting
  approval is an irreversible call with its pending request;
* one session in ten: a decided approval of its first call.

The alert queries of examples/monitoring.sql (docs/operations/monitoring.md) are timed
too, as the same login.

Then the median of ``--repeat`` runs of each query (milliseconds, after one warm run) and
its rows; for a query slower than ``--explain-ms``, EXPLAIN (ANALYZE, BUFFERS)'s culprit:
the plan's scan node that read the most rows (rows returned plus removed by a filter,
times loops). ``--plans`` prints those plans whole. Ends with one table, a column per
scale.

    .venv/bin/python tools/pgcluster.py run -- .venv/bin/python bench/bench_operator_reads.py
    .venv/bin/python tools/pgcluster.py run -- .venv/bin/python \
        bench/bench_operator_reads.py --sessions 10000 --plans

Uses the server named by UNDOLOG_DSN (or PG* variables) as a superuser: it creates the
databases undolog_bench_reads_<n> and the login bench_reads_staff. ``--keep-database``
keeps them, ``--reuse`` measures kept ones again. Prints the numbers; never fails on a
slow one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from journal_fill import AT, SESSION_ID, batches, fill, log, month_partitions
from undolog.dashboard.queries import COUNT_CAP
from undolog.engine import SESSION_STATES
from undolog.metrics import SCRIPT
from undolog.queries import QUERIES
from undolog.session_filter import SessionFilter, filter_params, sessions_query

Conn = psycopg.Connection[Any]
DBNAME = "undolog_bench_reads_{}"
LOGIN = "bench_reads_staff"
BATCH = 250_000
# The state of session i: one in a thousand of each live state, three in a thousand
# awaiting approval, one in a hundred compensated, the rest completed.
STATE = """CASE i %% 1000 WHEN 1 THEN 'halted' WHEN 2 THEN 'active'
                WHEN 3 THEN 'awaiting_approval' WHEN 7 THEN 'awaiting_approval'
                WHEN 8 THEN 'awaiting_approval' WHEN 5 THEN 'failed'
                WHEN 6 THEN 'compensating'
                ELSE CASE WHEN i %% 100 = 4 THEN 'compensated' ELSE 'completed' END END"""
AWAITING = "i %% 1000 IN (3, 7, 8)"
# The alert queries docs/operations/monitoring.md gives operators to run.
MONITORING = Path(__file__).resolve().parents[1] / "examples" / "monitoring.sql"


def load(conn: Conn, sessions: int, calls: int) -> None:
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    month_partitions(conn)
    for first, last in batches(1, sessions, BATCH):
        params = {"a": first, "b": last, "n": sessions, "now": now, "c": calls}
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_sessions (session_id, agent, owner_role, state,
                lease_duration, lease_expires_at, created_at, updated_at, error)
            SELECT {SESSION_ID}, 'agent-' || (i %% 50), 'bench_agent', st,
                   '5 minutes', t, t, t,
                   CASE WHEN st IN ('halted', 'failed') THEN 'it went wrong' END
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t, {STATE} AS st) AS c
            """,
            params,
        )
        # Call k of session i; the last call of a session awaiting approval waits for
        # its request (irreversible, pending).
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,
                call_signature, step_index, tool_name, tier, args, state, result_snapshot,
                attempts, updated_at)
            SELECT md5('e' || i || ':' || k)::uuid, {SESSION_ID}, t,
                   md5('s' || i || ':' || k) || md5('t' || i || ':' || k), k,
                   CASE WHEN w THEN 'payout' ELSE
                       (ARRAY['search', 'create_user', 'send_email'])[(i + k) %% 3 + 1] END,
                   CASE WHEN w THEN 'irreversible' ELSE 'compensable' END,
                   jsonb_build_object('email', 'user' || i || '@example.com', 'step', k),
                   CASE WHEN w THEN 'pending' ELSE 'committed' END,
                   CASE WHEN NOT w THEN '{{"ok": true}}'::jsonb END, 1, t
            FROM generate_series(%(a)s::int, %(b)s::int) AS i
            CROSS JOIN generate_series(0, %(c)s::int - 1) AS k
            CROSS JOIN LATERAL (SELECT {AT} AS t,
                                       {AWAITING} AND k = %(c)s::int - 1 AS w) AS c
            """,
            params,
        )
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at,
                event, from_state, to_state, at, actor)
            SELECT {SESSION_ID}, md5('e' || i || ':' || k)::uuid, t, 'transition',
                   'executing', 'committed', t, 'bench_agent'
            FROM generate_series(%(a)s::int, %(b)s::int) AS i
            CROSS JOIN generate_series(0, %(c)s::int - 1) AS k
            CROSS JOIN LATERAL (SELECT {AT} AS t) AS c
            """,
            params,
        )
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_undo_stack (undo_id, session_id, effect_id,
                executed_at, call_signature, compensation, state, created_at, updated_at,
                next_attempt_at)
            SELECT md5('u' || i || ':' || k)::uuid, {SESSION_ID},
                   md5('e' || i || ':' || k)::uuid, t,
                   md5('s' || i || ':' || k) || md5('t' || i || ':' || k),
                   '{{"name": "undo_it"}}'::jsonb, 'pending', t, t, t
            FROM generate_series(%(a)s::int, %(b)s::int) AS i
            CROSS JOIN generate_series(0, %(c)s::int - 1) AS k
            CROSS JOIN LATERAL (SELECT {AT} AS t) AS c
            WHERE NOT ({AWAITING} AND k = %(c)s::int - 1)
            """,
            params,
        )
        # The pending requests (the awaiting sessions' last calls) and one decided
        # request in ten sessions (of their first call, waited 0..10 minutes).
        conn.execute(
            f"""
            INSERT INTO undolog.undolog_approval_requests (session_id, effect_id,
                executed_at, state, requested_at, decided_at, decided_by, decided_role)
            SELECT {SESSION_ID}, md5('e' || i || ':' || (%(c)s::int - 1))::uuid, t,
                   'pending', t, NULL, NULL, NULL
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            WHERE {AWAITING}
            UNION ALL
            SELECT {SESSION_ID}, md5('e' || i || ':0')::uuid, t, 'approved', t,
                   t + interval '1 second' * (i %% 600), 'boss', 'boss'
            FROM generate_series(%(a)s::int, %(b)s::int) AS i,
                 LATERAL (SELECT {AT} AS t) AS c
            WHERE i %% 10 = 9
            """,
            params,
        )


def build(admin: Conn, base: str, dbname: str, sessions: int, calls: int) -> str:
    started = time.perf_counter()
    dsn = fill(admin, base, dbname, lambda conn: load(conn, sessions, calls))
    for role in ("undolog_operator", "undolog_approver"):
        admin.execute(
            sql.SQL(
                "DO $$ BEGIN CREATE ROLE {} LOGIN; "
                "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
            ).format(sql.Identifier(LOGIN))
        )
        admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(LOGIN)))
    log(f"loaded {sessions:,} sessions in {time.perf_counter() - started:.0f} s")
    return dsn


Case = tuple[str, str, Any, dict[str, Any]]  # face, query name, statement, parameters


def cases(conn: Conn) -> list[Case]:
    """Every read measured, with parameters taken from the loaded journal."""
    mid = conn.execute(
        "SELECT created_at, session_id FROM undolog.sessions_list "
        "ORDER BY created_at DESC, session_id DESC OFFSET "
        "(SELECT reltuples::bigint / 2 FROM pg_class "
        " WHERE oid = 'undolog.undolog_sessions'::regclass) LIMIT 1"
    ).fetchone()
    assert mid is not None
    sid = {"session_id": mid[1]}
    pending = conn.execute(
        "SELECT approval_id, session_id, step_index FROM undolog.pending_approvals "
        "ORDER BY requested_at, approval_id LIMIT 200"
    ).fetchall()
    requests = {
        "approval_ids": [p[0] for p in pending],
        "session_ids": [p[1] for p in pending],
        "step_indexes": [p[2] or 0 for p in pending],
    }

    def page(**filters: Any) -> tuple[Any, dict[str, Any]]:
        params = filter_params(SessionFilter(**filters))
        keyset = {"after_at": None, "after_id": None}
        if "after" in filters:
            keyset = {"after_at": filters["after"][0], "after_id": filters["after"][1]}
        params.update(keyset, limit=51, cell=300, change=120, changes=20)
        return sessions_query(params), params

    def sessions(label: str, **filters: Any) -> Case:
        statement, params = page(**filters)
        return ("dashboard", f"dashboard_sessions_page {label}", statement, params)

    cli_page, cli_params = page()
    cli_params["limit"] = 50
    listing = sql.SQL(QUERIES["sessions_overview_filtered"]).format(page=cli_page)
    keyset = {"after_at": None, "after_id": None, "limit": 51, "cell": 300}
    edits = {"change": 120, "changes": 20}
    q = QUERIES
    return [
        (
            "dashboard",
            "dashboard_state_counts",
            q["dashboard_state_counts"],
            # as the page asks (the parameters an older, unbounded count ignores)
            {"states": list(SESSION_STATES), "cap": COUNT_CAP + 1},
        ),
        sessions("(first page)"),
        sessions("(a page in the middle)", after=(mid[0], mid[1])),
        sessions("state=halted", state="halted"),
        sessions("state=completed", state="completed"),
        sessions("agent=agent-7", agent="agent-7"),
        sessions("q=<id prefix>", search=str(mid[1])[:6]),
        sessions("q=payout (a tool)", search="payout"),
        ("dashboard", "dashboard_session", q["dashboard_session"], sid),
        (
            "dashboard",
            "dashboard_session_calls",
            q["dashboard_session_calls"],
            {**sid, "cell": 300, "limit": 5001},
        ),
        (
            "dashboard",
            "dashboard_session_undo",
            q["dashboard_session_undo"],
            {**sid, "limit": 5000, "halt_undo_id": None},
        ),
        (
            "dashboard",
            "dashboard_session_approvals",
            q["dashboard_session_approvals"],
            {**sid, "cell": 300, **edits},
        ),
        ("dashboard", "dashboard_session_states", q["dashboard_session_states"], sid),
        ("dashboard", "dashboard_session_chain", q["dashboard_session_chain"], sid),
        ("dashboard", "dashboard_session_fingerprint", q["dashboard_session_fingerprint"], sid),
        (
            "dashboard",
            "pending_approvals (the inbox)",
            q["pending_approvals"],
            {"head": 2000, "limit": 200},
        ),
        (
            "dashboard",
            "dashboard_inbox_deliveries",
            q["dashboard_inbox_deliveries"],
            {"approval_ids": requests["approval_ids"]},
        ),
        (
            "dashboard",
            "dashboard_inbox_prior_calls",
            q["dashboard_inbox_prior_calls"],
            {**requests, "cell": 300, "prior": 10},
        ),
        (
            "dashboard",
            "dashboard_inbox_prior_counts",
            q["dashboard_inbox_prior_counts"],
            requests,
        ),
        ("dashboard", "dashboard_inbox_fingerprint", q["dashboard_inbox_fingerprint"], {}),
        (
            "dashboard",
            "dashboard_decisions_page",
            q["dashboard_decisions_page"],
            {"since": None, "by": None, **keyset, **edits},
        ),
        (
            "dashboard",
            "dashboard_decisions_page by=boss",
            q["dashboard_decisions_page"],
            {"since": None, "by": "boss", **keyset, **edits},
        ),
        (
            "dashboard",
            "dashboard_tools",
            q["dashboard_tools"],
            {"owner": None, "all": True, "limit": 501},
        ),
        ("dashboard", "dashboard_partitions", q["dashboard_partitions"], {"limit": 201}),
        ("dashboard", "dashboard_anchors", q["dashboard_anchors"], {"limit": 21}),
        ("dashboard", "dashboard_lease_expired", q["dashboard_lease_expired"], {}),
        *[
            ("metrics", name, q[name], {})
            for name in (
                "metrics_sessions",
                "metrics_sessions_estimated",
                "metrics_approvals",
                "metrics_approval_decisions",
                "metrics_calls",
                "metrics_compensations",
                "metrics_worker",
                "metrics_late_results",
            )
        ],
        ("metrics", "(the whole scrape script)", SCRIPT, {}),
        ("health", "worker_lag", q["worker_lag"], {}),
        ("health", "halted_sessions_unresolved", q["halted_sessions_unresolved"], {}),
        ("health", "pending_partitions", q["pending_partitions"], {}),
        ("health", "public_advisory_functions", q["public_advisory_functions"], {}),
        ("health", "schemas_open_to_agents", q["schemas_open_to_agents"], {}),
        ("cli", "sessions_overview_filtered (sessions list)", listing, cli_params),
        ("cli", "session_overview (sessions show)", q["session_overview"], sid),
        ("cli", "session_timeline (sessions show)", q["session_timeline"], sid),
        # its default --limit (an older, unbounded list ignores the parameter)
        (
            "cli",
            "pending_approvals (approvals list)",
            q["pending_approvals"],
            {"head": None, "limit": 50},
        ),
        (
            "cli",
            "decided_approvals (approvals decided)",
            q["decided_approvals"],
            {"since": None, "mine": False, "limit": 50},
        ),
        (
            "cli",
            "registered_tools (tools list)",
            q["registered_tools"],
            {"owner": None, "all": True},
        ),
        (
            "cli",
            "notification_deliveries",
            q["notification_deliveries"],
            {"approval_id": None, "state": None, "limit": 50},
        ),
        *monitoring_queries(),
    ]


def monitoring_queries() -> list[Case]:
    """examples/monitoring.sql's queries, each named by its section and number."""
    found: list[Case] = []
    section = ""
    text: list[str] = []
    for line in MONITORING.read_text("utf-8").splitlines():
        if "--8<-- [start:" in line:
            section = line.split("[start:")[1].split("]")[0]
        elif line.strip() and not line.lstrip().startswith("--"):
            text.append(line)
            if line.rstrip().endswith(";"):
                number = sum(1 for c in found if f"[{section}]" in c[1]) + 1
                statement = "\n".join(text).rstrip().rstrip(";")
                found.append(("docs", f"monitoring.sql [{section}] {number}", statement, {}))
                text = []
    return found


def run(conn: Conn, statement: Any, params: dict[str, Any]) -> int:
    """Runs the statement (a script: each of its statements) and answers its rows."""
    if not params and isinstance(statement, str) and ";\n" in statement:
        cur = conn.execute(statement, prepare=False)
        n = 0
        while True:
            n += len(cur.fetchall())
            if not cur.nextset():
                return n
    return len(conn.execute(statement, params or None, prepare=False).fetchall())


def culprit(conn: Conn, statement: Any, params: dict[str, Any], whole: bool) -> str:
    """The plan's scan that read the most rows, as 'Node on relation (index): rows'."""
    if isinstance(statement, str) and ";\n" in statement:
        return "(a script: see its statements)"
    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT {}) ").format(
        sql.SQL("TEXT" if whole else "JSON")
    ) + (sql.SQL(statement) if isinstance(statement, str) else statement)
    found = conn.execute(explain, params or None, prepare=False).fetchall()
    if whole:
        print("\n".join(r[0] for r in found), flush=True)
        return ""
    plan = found[0][0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    best: tuple[float, str] = (-1.0, "")

    def walk(node: dict[str, Any]) -> None:
        nonlocal best
        kind = node["Node Type"]
        if "Scan" in kind and ("Relation Name" in node or "Index Name" in node):
            loops = node.get("Actual Loops", 1)
            read = (
                node.get("Actual Rows", 0)
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            ) * loops
            where = node.get("Relation Name", "")
            if "Index Name" in node:
                where += f" ({node['Index Name']})"
            if read > best[0]:
                best = (read, f"{kind} on {where}: {read:,.0f} rows")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return best[1]


def measure(
    dsn: str, repeat: int, explain_ms: float, plans: bool, only: Callable[[str], bool]
) -> dict[str, tuple[int, float, str]]:
    results: dict[str, tuple[int, float, str]] = {}
    staff = psycopg.conninfo.make_conninfo(dsn, user=LOGIN)
    with psycopg.connect(staff, autocommit=True) as conn:
        for face, name, statement, params in cases(conn):
            key = f"{face:<9} {name}"
            if not only(key):
                continue
            try:
                rows = run(conn, statement, params)  # warm: catalog caches, the pages read
            except psycopg.Error as exc:
                results[key] = (0, float("nan"), f"refused: {exc.sqlstate} {exc}".strip())
                log(f"  {key:<60} {results[key][2]}")
                continue
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                run(conn, statement, params)
                times.append((time.perf_counter() - started) * 1000)
            ms = statistics.median(times)
            why = ""
            if ms >= explain_ms:
                if plans:
                    print(f"\n--- {key}: {ms:.1f} ms", flush=True)
                why = culprit(conn, statement, params, plans)
            results[key] = (rows, ms, why)
            log(f"  {key:<60} {rows:>7} rows {ms:9.1f} ms  {why}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument(
        "--sessions", default="10000,1000000", help="scales, comma-separated (10000,1000000)"
    )
    parser.add_argument("--calls", type=int, default=2, help="calls per session (2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each read (5)")
    parser.add_argument(
        "--explain-ms", type=float, default=20.0, help="explain a read this slow or slower"
    )
    parser.add_argument("--plans", action="store_true", help="print the slow reads' plans")
    parser.add_argument("--only", default="", help="measure the reads whose name has this")
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="measure kept databases again")
    args = parser.parse_args()
    scales = [int(s) for s in args.sessions.split(",")]
    base = os.environ.get("UNDOLOG_DSN", "")
    table: dict[int, dict[str, tuple[int, float, str]]] = {}
    with psycopg.connect(base, autocommit=True) as admin:
        for n in scales:
            dbname = DBNAME.format(n)
            try:
                if args.reuse:
                    dsn = psycopg.conninfo.make_conninfo(base, dbname=dbname)
                else:
                    log(f"loading {n:,} sessions x {args.calls} calls ...")
                    dsn = build(admin, base, dbname, n, args.calls)
                log(f"measuring at {n:,} sessions ...")
                table[n] = measure(
                    dsn, args.repeat, args.explain_ms, args.plans, lambda k: args.only in k
                )
            finally:
                if not args.keep_database and not args.reuse:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname))
                    )
    names = list(table[scales[0]])
    head = f"{'face':<9} {'query':<52}" + "".join(
        f" {'rows':>7} {f'ms @{n:,}':>12}" for n in scales
    )
    print("\n" + head + "  culprit (largest scan, at the largest scale)")
    for key in names:
        line = f"{key:<62}"
        for n in scales:
            rows, ms, _ = table[n].get(key, (0, float("nan"), ""))
            line += f" {rows:>7} {ms:12.1f}"
        print(line + "  " + table[scales[-1]].get(key, (0, 0.0, ""))[2], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
