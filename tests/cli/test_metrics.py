"""`undolog metrics`: the engine's metrics as a Prometheus text exposition, served over
HTTP or printed once; the values it reports, the plans its views run, and the example
alert rules (which may name only metrics that exist)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.conninfo import make_conninfo

from undolog import engine, metrics, saga
from undolog.cli import main
from undolog.cli.metrics import Scraper, listen_address, make_server
from undolog.queries import QUERIES

ROOT = Path(__file__).resolve().parents[2]
Conn = psycopg.Connection[Any]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
SUFFIXES = ("_sum", "_count", "_bucket")


def parse(text: str) -> Samples:
    """The samples of a 0.0.4 exposition, checking its grammar on the way: every sample
    belongs to a family whose HELP and TYPE came first, each family declared once."""
    assert text.endswith("\n")
    families: dict[str, str] = {}
    helped: set[str] = set()
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in helped, f"HELP twice for {name}"
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "summary", "histogram", "untyped")
            assert name in helped and name not in families
            families[name] = kind
        elif line.startswith("#"):
            continue
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, labels_text, value = match.groups()
            family = name
            if name not in families:
                family = next(name[: -len(s)] for s in SUFFIXES if name.endswith(s))
            assert family in families, f"{name} has no TYPE"
            labels = frozenset(LABEL.findall(labels_text or ""))
            key = (name, labels)
            assert key not in samples, f"{line!r} twice"
            samples[key] = float(value)
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def operator_dsn(conn: Conn, dsn: str) -> Iterator[str]:
    name = f"metrics_op_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_operator")
    yield make_conninfo(dsn, user=name)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_once_prints_every_metric_with_its_values(
    conn: Conn, agent_dsn: str, operator_dsn: str
) -> None:
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        live = engine.begin_session(agent, agent="a")
        got = engine.intercept(
            agent, live, 0, "create_user", "compensable", {"n": 1}, {"name": "delete_user"}
        )
        assert got.effect_id is not None
        engine.commit(agent, got.effect_id, {"ok": True})
        waiting = engine.begin_session(agent, agent="b")
        engine.intercept(agent, waiting, 0, "payout", "irreversible", {"cents": 5})
        failed = engine.begin_session(agent, agent="c")
        got = engine.intercept(
            agent, failed, 0, "create_user", "compensable", {"n": 2}, {"name": "delete_user"}
        )
        assert got.effect_id is not None
        engine.commit(agent, got.effect_id, {"ok": True})
        engine.fail_session(agent, failed, "boom")

    code, out, err = run_cli("metrics", "--once", "--dsn", operator_dsn)
    assert code == 0, err
    samples = parse(out)
    never_late = metrics.METRIC_NAMES - {"undolog_late_result_last_timestamp_seconds"}
    assert {name for name, _ in samples} >= never_late
    assert value(samples, "undolog_up") == 1
    assert value(samples, "undolog_sessions", state="active") == 1
    assert value(samples, "undolog_sessions", state="awaiting_approval") == 1
    assert value(samples, "undolog_sessions", state="failed") == 1
    assert value(samples, "undolog_halted_sessions") == 0
    assert value(samples, "undolog_approvals_pending") == 1
    assert value(samples, "undolog_approval_oldest_pending_age_seconds") >= 0
    assert value(samples, "undolog_calls_recent", tier="compensable", state="committed") == 2
    assert value(samples, "undolog_calls_recent", tier="irreversible", state="pending") == 1
    assert value(samples, "undolog_worker_due_sessions") == 1
    assert value(samples, "undolog_worker_lag_seconds") >= 0
    assert value(samples, "undolog_late_results_recent") == 0
    assert value(samples, "undolog_approval_wait_seconds_count", decision="approved") == 0

    # The walk claims the failed session's compensation: in flight, nothing due.
    claim = saga.claim_compensation(conn, failed)
    assert claim is not None
    samples = parse(run_cli("metrics", "--once", "--dsn", operator_dsn)[1])
    assert value(samples, "undolog_compensations_in_flight") == 1
    assert value(samples, "undolog_compensation_attempts_recent") == 1
    assert value(samples, "undolog_worker_due_sessions") == 0
    assert value(samples, "undolog_sessions", state="compensating") == 1


def test_an_agent_login_may_not_scrape(agent_dsn: str) -> None:
    """The views count every login's sessions: an agent is refused (exit 1, the
    permission error), and the server answers undolog_up 0 for it."""
    code, out, err = run_cli("metrics", "--once", "--dsn", agent_dsn, "--json")
    assert code == 1 and out == ""
    assert json.loads(err)["sqlstate"] == "42501"
    args = type("Args", (), {"dsn": agent_dsn})()
    scraper = Scraper(args)
    try:
        samples = parse(scraper.text())
    finally:
        scraper.close()
    assert value(samples, "undolog_up") == 0
    assert ("undolog_sessions", frozenset({("state", "active")})) not in samples


@pytest.fixture
def served(operator_dsn: str) -> Iterator[str]:
    args = type("Args", (), {"dsn": operator_dsn})()
    scraper = Scraper(args)
    server = make_server(scraper, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        scraper.close()
        thread.join()


def test_the_server_answers_get_metrics(served: str) -> None:
    with urllib.request.urlopen(f"{served}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        samples = parse(response.read().decode("utf-8"))
    assert value(samples, "undolog_up") == 1
    assert value(samples, "undolog_sessions", state="halted") == 0
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{served}/nothing", timeout=10)
    assert missing.value.code == 404


def test_the_server_reconnects_after_its_connection_is_killed(
    served: str, conn: Conn, operator_dsn: str
) -> None:
    urllib.request.urlopen(f"{served}/metrics", timeout=10).read()
    user = operator_dsn.split("user=")[1].split()[0]
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (user,)
    )
    # the scrape that finds its connection dead answers undolog_up 0 or already 1; the
    # one after it is read on a new connection
    urllib.request.urlopen(f"{served}/metrics", timeout=10).read()
    with urllib.request.urlopen(f"{served}/metrics", timeout=10) as response:
        assert value(parse(response.read().decode()), "undolog_up") == 1


def test_listen_address_is_host_and_port() -> None:
    assert listen_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert listen_address("[::1]:9464") == ("::1", 9464)
    code, _, err = run_cli("metrics", "--listen", "9464")
    assert code == 2 and "HOST:PORT" in err


def test_label_values_are_escaped() -> None:
    results: dict[str, Any] = {name: [] for name, _ in metrics.VIEWS}
    results["calls"] = [('odd"tier\\', "line\nbreak", 3, 300.0)]
    text = metrics.render(results, 0.001)
    assert 'undolog_calls_recent{tier="odd\\"tier\\\\",state="line\\nbreak"} 3' in text
    assert value(parse(text), "undolog_calls_recent", tier='odd\\"tier\\\\', state="line\\nbreak")


# --- bounded cost: the plans read indexes ----------------------------------------------------

FILL = """
INSERT INTO undolog.undolog_sessions (session_id, agent, owner_role, state, lease_duration,
    lease_expires_at, created_at, updated_at)
SELECT md5('s' || i)::uuid, 'bulk', 'bulk_agent',
       CASE WHEN i % 500 = 1 THEN 'active' WHEN i % 500 = 2 THEN 'failed' ELSE 'completed' END,
       '5 minutes', t, t, t
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c;
INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, call_signature,
    step_index, tool_name, tier, args, state, updated_at)
SELECT md5('e' || i)::uuid, md5('s' || i)::uuid, t, md5('a' || i) || md5('b' || i), 0,
       'create_user', 'compensable', '{}', 'committed', t
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c;
INSERT INTO undolog.undolog_undo_stack (undo_id, session_id, effect_id, executed_at,
    call_signature, compensation, state, created_at, updated_at)
SELECT md5('u' || i)::uuid, md5('s' || i)::uuid, md5('e' || i)::uuid, t,
       md5('a' || i) || md5('b' || i), '{"name": "delete_user"}', 'pending', t, t
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c;
INSERT INTO undolog.undolog_undo_history (session_id, undo_id, event, from_state, to_state,
    attempt, at)
SELECT md5('s' || i)::uuid, md5('u' || i)::uuid, 'transition', 'pending', 'compensating', 1, t
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c
WHERE i % 20 = 0;
INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at, state,
    requested_at, decided_at, decided_by, decided_role)
SELECT md5('s' || i)::uuid, md5('e' || i)::uuid, t, 'approved', t, t, 'boss', 'boss'
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c;
INSERT INTO undolog.undolog_effect_history (session_id, effect_id, executed_at, event,
    from_state, to_state, at)
SELECT md5('s' || i)::uuid, md5('e' || i)::uuid, t, 'transition', 'executing', 'committed', t
FROM generate_series(1, %(n)s) AS i, LATERAL (SELECT now() - interval '1 minute' * i AS t) AS c;
"""
BIG_TABLES = (
    "undolog_sessions",
    "undolog_effect_log",
    "undolog_undo_stack",
    "undolog_undo_history",
    "undolog_approval_requests",
    "undolog_effect_history",
)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


@pytest.fixture
def big_journal(conn: Conn) -> Conn:
    """20,000 sessions over the last two weeks, nearly all completed, each with a call, its
    registry row, undo entry, decided approval and history row, one in twenty with an
    undo-history row (a walk): loaded
    as the owner with the guard triggers off, then analyzed, as a journal of a few weeks
    looks to the planner."""
    for month in (-1, 0):
        conn.execute(
            "SELECT undolog.create_month_partitions(undolog.utc_month(now(), %s))", (month,)
        )
    for table in BIG_TABLES:
        conn.execute(f"ALTER TABLE undolog.{table} DISABLE TRIGGER USER")
    try:
        with conn.cursor() as cur:
            cur.execute(FILL.replace("%(n)s", "20000"))
    finally:
        for table in BIG_TABLES:
            conn.execute(f"ALTER TABLE undolog.{table} ENABLE TRIGGER USER")
    conn.execute("ANALYZE")
    return conn


def test_every_metrics_view_reads_the_big_tables_through_an_index(
    big_journal: Conn, operator_dsn: str
) -> None:
    """No plan scans a whole journal table: each big table is reached through an index
    (a sequential scan is allowed only on a table or partition the planner knows to be
    nearly empty)."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        for name, query in metrics.VIEWS:
            (plan,) = op.execute(f"EXPLAIN (FORMAT JSON) {query}").fetchone() or ()
            for node in _nodes(plan[0]["Plan"]):
                relation = node.get("Relation Name", "")
                if node["Node Type"] == "Seq Scan" and relation.startswith("undolog_"):
                    rows = big_journal.execute(
                        "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                        (f"undolog.{relation}",),
                    ).fetchone()
                    assert rows is not None and rows[0] < 1000, f"{name} scans all of {relation}"
        samples = parse(metrics.scrape(op))
    assert value(samples, "undolog_sessions", state="active") == 40
    assert value(samples, "undolog_sessions", state="failed") == 40
    assert value(samples, "undolog_worker_due_sessions") == 40 + 40  # leases ran out
    # one call a minute, the newest a minute old: the last five minutes hold four
    assert value(samples, "undolog_calls_recent", tier="compensable", state="committed") in (3, 4)
    assert value(samples, "undolog_approval_wait_seconds_count", decision="approved") in (58, 59)
    assert 19_000 <= value(samples, "undolog_sessions_estimated", state="completed") <= 20_000


# The other reads an operator's faces repeat (`undolog health`, the dashboard's counts per
# state), with their parameters: each must reach the sessions through an index too.
OPERATOR_READS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("worker_lag", {}),
    ("halted_sessions_unresolved", {}),
    ("dashboard_state_counts", {"states": list(engine.SESSION_STATES), "cap": 101}),
)


@pytest.mark.parametrize(("name", "params"), OPERATOR_READS, ids=[n for n, _ in OPERATOR_READS])
def test_health_and_the_session_counts_read_the_sessions_through_an_index(
    big_journal: Conn, operator_dsn: str, name: str, params: dict[str, Any]
) -> None:
    """As the metrics views: no plan scans the 20,000 sessions whole. Failed first for
    worker_lag (due_sessions' OR of three states, one pass over every session, where
    metrics_worker reads each state's partial index) and dashboard_state_counts (a count
    of every session, grouped)."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        query = QUERIES[name]
        (plan,) = op.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params).fetchone() or ()
        for node in _nodes(plan[0]["Plan"]):
            if node.get("Relation Name") == "undolog_sessions":
                assert node["Node Type"] != "Seq Scan", f"{name} scans all of the sessions"
                read = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node[
                    "Actual Loops"
                ]
                assert read <= 1000, f"{name} reads {read} sessions"


def test_the_example_alert_queries_on_sessions_read_no_call(
    big_journal: Conn, operator_dsn: str
) -> None:
    """examples/monitoring.sql's queries on sessions (halted, worker lag) read the sessions
    only: through sessions_overview they counted every live session's calls first (62 to
    80 ms on 1 M sessions, against 1 to 18 through sessions_list). Failed first: their
    plans read the effect log."""
    text = (ROOT / "examples" / "monitoring.sql").read_text("utf-8")
    sections = [
        text.split(f"--8<-- [start:{name}]")[1].split("--8<-- [end:")[0]
        for name in ("halted", "worker_lag")
    ]
    statements = [s for part in sections for s in part.split(";") if "SELECT" in s]
    assert len(statements) == 3
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        for statement in statements:
            (plan,) = op.execute(f"EXPLAIN (FORMAT JSON) {statement}").fetchone() or ()
            read = {n.get("Relation Name", "") for n in _nodes(plan[0]["Plan"])}
            assert not [r for r in read if r.startswith("undolog_effect_log")], statement


# --- the example alert rules ------------------------------------------------------------------


def _expressions(rules: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield rule["alert"], rule["expr"]


def test_the_example_alerts_name_only_metrics_that_exist() -> None:
    rules = yaml.safe_load((ROOT / "examples" / "prometheus_alerts.yml").read_text("utf-8"))
    alerts = list(_expressions(rules))
    assert len(alerts) >= 5
    from undolog.mcp_proxy.metrics import METRIC_NAMES as PROXY_METRIC_NAMES

    known = metrics.METRIC_NAMES | PROXY_METRIC_NAMES  # the MCP proxy's own, too
    for alert, expr in alerts:
        named = set(re.findall(r"\bundolog_[a-z_]+", expr))
        assert named, f"{alert} names no UndoLog metric"
        families = {
            next(
                (n[: -len(s)] for s in SUFFIXES if n.endswith(s) and n[: -len(s)] in known),
                n,
            )
            for n in named
        }
        assert families <= known, f"{alert}: {families - known}"
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("page", "ticket")
            assert rule["annotations"]["summary"]


def test_the_example_scrape_config_loads_the_alerts_and_scrapes_both_faces() -> None:
    config = yaml.safe_load((ROOT / "examples" / "prometheus.yml").read_text("utf-8"))
    (rules,) = config["rule_files"]
    assert (ROOT / "examples" / rules).is_file()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["undolog"]["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
    dashboard = jobs["undolog-dashboard"]
    assert dashboard["metrics_path"] == "/metrics"
    assert dashboard["authorization"]["type"] == "Bearer"
