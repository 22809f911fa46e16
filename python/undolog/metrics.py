"""The engine's metrics as a Prometheus text exposition (format 0.0.4), written by hand so
that the binding needs no Prometheus client.

Every figure is read from the metrics views (``sql/views/metrics_*.sql``) and only from
them: their cost is bounded by what is live or recent (sessions still in hand, pending
approvals, the last minutes' calls), never by the years of finished sessions a journal
keeps (docs/operations/monitoring.md lists each metric and says how it is bounded).
The views are granted to approver and operator only: an agent login cannot scrape.

``scrape(conn)`` and ``ascrape(aconn)`` answer the exposition's text; ``undolog metrics``
serves it over HTTP, and the dashboard at ``/metrics``. ``sample``, ``family`` and
``exposition`` are the text format's one definition, which the MCP proxy's own metrics
(undolog.mcp_proxy.metrics) are written with too.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from undolog._conninfo import with_connect_timeout
from undolog.engine import translated
from undolog.queries import QUERIES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# A scrape's bounds (``undolog metrics`` and the dashboard's /metrics): a server that
# accepts and never answers, or a journal table held ACCESS EXCLUSIVE by a migration,
# answers undolog_up 0 within Prometheus's default scrape_timeout (10 s), instead of
# never. The DSN's own connect_timeout and options (or PGCONNECT_TIMEOUT, PGOPTIONS) win
# over these.
CONNECT_TIMEOUT = 3  # seconds to connect (libpq's connect_timeout)
LOCK_TIMEOUT = "2s"  # a lock wait ends first, and its error says it was a lock
STATEMENT_TIMEOUT = "5s"
# How long a scrape waits for the one before it (one connection serves them in turn): past
# it, a scrape stuck where no server-side timeout reaches (a server that stopped answering
# once connected) makes the next ones answer undolog_up 0 instead of queueing. The
# dashboard bounds its whole scrape, that wait included, by it.
SCRAPE_TIMEOUT = 9.0


def scrape_conninfo(dsn: str) -> str:
    """``dsn`` with a scrape's bounds: CONNECT_TIMEOUT unless the DSN or PGCONNECT_TIMEOUT
    sets one, and LOCK_TIMEOUT and STATEMENT_TIMEOUT ahead of the DSN's options (or
    PGOPTIONS, which a DSN's options replace), so that a setting given there wins."""
    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    ours = f"-c lock_timeout={LOCK_TIMEOUT} -c statement_timeout={STATEMENT_TIMEOUT}"
    return with_connect_timeout(dsn, CONNECT_TIMEOUT, options=f"{ours} {given}".strip())


# One statement per view (the catalogue's metrics_*), sent together in one round trip;
# their results come back in this order (each sorted, so that the exposition's lines keep
# their places). The statements take no parameters: the script goes as one simple query.
VIEWS: tuple[tuple[str, str], ...] = (
    ("sessions", QUERIES["metrics_sessions"]),
    ("estimated", QUERIES["metrics_sessions_estimated"]),
    ("approvals", QUERIES["metrics_approvals"]),
    ("decisions", QUERIES["metrics_approval_decisions"]),
    ("calls", QUERIES["metrics_calls"]),
    ("compensations", QUERIES["metrics_compensations"]),
    ("worker", QUERIES["metrics_worker"]),
    ("late", QUERIES["metrics_late_results"]),
)
SCRIPT = ";\n".join(sql for _, sql in VIEWS)

Rows = Sequence[Sequence[Any]]
Results = Mapping[str, Rows]

# Every metric's name, type and help, in the order of the exposition. Test and docs read
# this list (the example alert rules may name only these).
METRICS: tuple[tuple[str, str, str], ...] = (
    ("undolog_up", "gauge", "1 when the scrape read the engine's metrics views, else 0."),
    (
        "undolog_sessions",
        "gauge",
        "Sessions still in the engine's or a person's hands, by state (exact; abandoned "
        "halted sessions are not counted).",
    ),
    (
        "undolog_session_oldest_age_seconds",
        "gauge",
        "Seconds since the oldest session in this state last changed state.",
    ),
    (
        "undolog_halted_sessions",
        "gauge",
        "Halted sessions no operator has resolved: work neither done nor undone.",
    ),
    (
        "undolog_sessions_estimated",
        "gauge",
        "Sessions by state, estimated from the planner's statistics (as of the last ANALYZE).",
    ),
    ("undolog_approvals_pending", "gauge", "Approval requests waiting for a person."),
    (
        "undolog_approvals_past_deadline",
        "gauge",
        "Pending approval requests past their deadline (the next expire_approvals closes them).",
    ),
    (
        "undolog_approval_oldest_pending_age_seconds",
        "gauge",
        "Seconds the oldest pending approval request has waited (0 when none waits).",
    ),
    (
        "undolog_approval_wait_seconds",
        "summary",
        "Seconds from request to decision, over the decisions of the last hour "
        "(_count and _sum cover the same window: read them as gauges).",
    ),
    (
        "undolog_calls_recent",
        "gauge",
        "Calls journaled in the last 5 minutes, by tier and current state.",
    ),
    (
        "undolog_compensation_attempts_recent",
        "gauge",
        "Compensation attempts started in the last 5 minutes.",
    ),
    (
        "undolog_compensation_failures_recent",
        "gauge",
        "Compensation attempts that failed in the last 5 minutes (retried or not).",
    ),
    (
        "undolog_compensation_give_ups_recent",
        "gauge",
        "Compensations that exhausted their attempts in the last 5 minutes (session halted).",
    ),
    ("undolog_compensations_in_flight", "gauge", "Undo entries a walker holds now."),
    (
        "undolog_compensations_retrying",
        "gauge",
        "Undo entries waiting for a retry after a failed attempt.",
    ),
    (
        "undolog_worker_due_sessions",
        "gauge",
        "Sessions the recovery worker must act on now (undolog.due_sessions).",
    ),
    (
        "undolog_worker_lag_seconds",
        "gauge",
        "Seconds the oldest due session has waited for the worker (0 when none is due).",
    ),
    (
        "undolog_late_results_recent",
        "gauge",
        "Results that arrived after the undo walk took their call, for the calls it claimed "
        "in the last 24 hours.",
    ),
    (
        "undolog_late_result_last_timestamp_seconds",
        "gauge",
        "Unix time of the last late result (absent when none was recorded).",
    ),
    ("undolog_scrape_duration_seconds", "gauge", "Seconds this scrape spent reading."),
)
METRIC_NAMES = frozenset(name for name, _, _ in METRICS)
QUANTILES = (("0.5", 3), ("0.9", 4), ("0.99", 5))


def _number(value: Any) -> str:
    if value is None:
        return "NaN"
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number.is_integer() and abs(number) < 2**53:
        return str(int(number))
    return repr(number)


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(name: str, value: Any, labels: Mapping[str, Any] | None = None) -> str:
    """One sample line of the exposition (labels escaped, numbers as Prometheus reads
    them: NaN, +Inf, integers without a decimal point)."""
    if labels:
        inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {_number(value)}"
    return f"{name} {_number(value)}"


_sample = sample


def family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    """One metric's lines: its HELP, its TYPE, then its sample lines."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def exposition(lines: Iterable[str]) -> str:
    """The exposition's text from its lines (each family's, in order)."""
    return "\n".join(lines) + "\n"


def _samples(results: Results) -> dict[str, list[str]]:
    """Each metric's sample lines from the views' rows."""
    out: dict[str, list[str]] = {name: [] for name in METRIC_NAMES}
    for state, sessions, oldest in results["sessions"]:
        out["undolog_sessions"].append(_sample("undolog_sessions", sessions, {"state": state}))
        out["undolog_session_oldest_age_seconds"].append(
            _sample("undolog_session_oldest_age_seconds", oldest, {"state": state})
        )
        if state == "halted":
            out["undolog_halted_sessions"].append(_sample("undolog_halted_sessions", sessions))
    for state, sessions in results["estimated"]:
        out["undolog_sessions_estimated"].append(
            _sample("undolog_sessions_estimated", sessions, {"state": state})
        )
    for pending, past_deadline, oldest in results["approvals"]:
        out["undolog_approvals_pending"].append(_sample("undolog_approvals_pending", pending))
        out["undolog_approvals_past_deadline"].append(
            _sample("undolog_approvals_past_deadline", past_deadline)
        )
        out["undolog_approval_oldest_pending_age_seconds"].append(
            _sample("undolog_approval_oldest_pending_age_seconds", oldest)
        )
    name = "undolog_approval_wait_seconds"
    for row in results["decisions"]:
        decision, decided, total = row[0], row[1], row[2]
        for quantile, column in QUANTILES:
            out[name].append(
                _sample(name, row[column], {"decision": decision, "quantile": quantile})
            )
        out[name].append(_sample(f"{name}_sum", total, {"decision": decision}))
        out[name].append(_sample(f"{name}_count", decided, {"decision": decision}))
    for tier, state, calls, _window in results["calls"]:
        out["undolog_calls_recent"].append(
            _sample("undolog_calls_recent", calls, {"tier": tier, "state": state})
        )
    for attempts, failures, gave_up, in_flight, retrying, _window in results["compensations"]:
        for metric, value in (
            ("undolog_compensation_attempts_recent", attempts),
            ("undolog_compensation_failures_recent", failures),
            ("undolog_compensation_give_ups_recent", gave_up),
            ("undolog_compensations_in_flight", in_flight),
            ("undolog_compensations_retrying", retrying),
        ):
            out[metric].append(_sample(metric, value))
    for due, lag in results["worker"]:
        out["undolog_worker_due_sessions"].append(_sample("undolog_worker_due_sessions", due))
        out["undolog_worker_lag_seconds"].append(_sample("undolog_worker_lag_seconds", lag))
    for late, last_at in results["late"]:
        out["undolog_late_results_recent"].append(_sample("undolog_late_results_recent", late))
        if isinstance(last_at, datetime):
            out["undolog_late_result_last_timestamp_seconds"].append(
                _sample("undolog_late_result_last_timestamp_seconds", last_at.timestamp())
            )
    return out


def render(results: Results | None, duration: float, error: str | None = None) -> str:
    """The exposition: every metric's HELP and TYPE, then its samples. ``results`` None
    (the views could not be read: ``error`` says why) leaves only undolog_up 0."""
    samples = _samples(results) if results is not None else {}
    lines: list[str] = []
    if error is not None:
        lines.append("# scrape failed: " + " ".join(error.split()))
    for name, kind, help_text in METRICS:
        if name == "undolog_up":
            own = [_sample(name, 1 if results is not None else 0)]
        elif name == "undolog_scrape_duration_seconds":
            own = [_sample(name, round(duration, 6))]
        else:
            own = samples.get(name, [])
        lines.extend(family(name, kind, help_text, own))
    return exposition(lines)


def _collect(sets: Iterable[Rows]) -> dict[str, Rows]:
    results = dict(zip((name for name, _ in VIEWS), sets, strict=True))
    return results


def read(conn: psycopg.Connection[Any]) -> dict[str, Rows]:
    """The metrics views' rows, read in one round trip."""
    with translated(), conn.cursor() as cur:
        cur.execute(SCRIPT)
        sets: list[Rows] = []
        while True:
            sets.append(cur.fetchall())
            if not cur.nextset():
                break
    return _collect(sets)


async def aread(conn: psycopg.AsyncConnection[Any]) -> dict[str, Rows]:
    """As read(), awaited."""
    with translated():
        async with conn.cursor() as cur:
            await cur.execute(SCRIPT)
            sets: list[Rows] = []
            while True:
                sets.append(await cur.fetchall())
                if not cur.nextset():
                    break
    return _collect(sets)


def _timed(reader: Callable[[], dict[str, Rows]]) -> str:
    started = time.perf_counter()
    return render(reader(), time.perf_counter() - started)


def scrape(conn: psycopg.Connection[Any]) -> str:
    """The exposition's text, read from ``conn`` (an approver or operator login).
    Errors (the views missing, a login that may not read them) are raised."""
    return _timed(lambda: read(conn))


async def ascrape(conn: psycopg.AsyncConnection[Any]) -> str:
    """As scrape(), awaited."""
    started = time.perf_counter()
    results = await aread(conn)
    return render(results, time.perf_counter() - started)


def failed(exc: BaseException, duration: float = 0.0) -> str:
    """The exposition of a scrape that could not read the views: undolog_up 0."""
    return render(None, duration, error=f"{type(exc).__name__}: {exc}")


__all__ = [
    "CONTENT_TYPE",
    "METRICS",
    "METRIC_NAMES",
    "VIEWS",
    "aread",
    "ascrape",
    "exposition",
    "failed",
    "family",
    "read",
    "render",
    "sample",
    "scrape",
]
