"""The MCP proxy's own metrics: what it did with each call, counted in this process.

The engine's metrics (undolog.metrics, ``undolog metrics``) are read from the journal and
cover every login; these are the proxy's view, which the journal cannot see: SAFE calls
(never journaled), calls refused before they reached the journal, held calls waiting
now, results the proxy could not record after answering, the answers it awaited after
their call's timeout (late answers), and its upstreams' failures.
They live in the process (a restart starts the counters at 0, as Prometheus expects of a
counter) and are served by ``--metrics-listen HOST:PORT`` (or the policy's
``proxy.metrics_listen``) as ``GET /metrics``, in the text format of undolog.metrics.

Everything here runs on the proxy's event loop, the HTTP server included: no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Literal

from undolog._serving import REQUEST_TIMEOUT, LongestWaiting
from undolog.metrics import CONTENT_TYPE, exposition, family, sample

log = logging.getLogger("undolog.mcp_proxy")

# Each tier's outcomes, as the calls_total counter labels them (all present from the
# start, at 0, so that rate() and increase() see the first call).
OUTCOMES: dict[str, tuple[str, ...]] = {
    # relayed: answered by the upstream (an error result included); failed: the upstream
    # could not be reached or did not answer; refused: not sent, the client had
    # proxy.max_safe_calls_per_client SAFE calls in flight already (over HTTP)
    "safe": ("relayed", "failed", "refused"),
    # executed: ran, its result answered; replayed: answered from the journal, not run;
    # refused: not run (the journal or the proxy refused it); unknown: it may have acted
    # without its result reaching the journal; failed: the upstream did not run it or
    # answered an error (the journal records it as not having acted)
    "compensable": ("executed", "replayed", "refused", "unknown", "failed"),
    # held: a hold began (the call waits for a human); approved: it ran once approved;
    # rejected: a human (or the request's expiry) said no; timed_out: the hold ended
    # without a decision (the client is told to ask again); the others as compensable
    "irreversible": (
        "held",
        "approved",
        "rejected",
        "timed_out",
        "replayed",
        "refused",
        "unknown",
        "failed",
    ),
}
UpstreamError = Literal["down", "no_answer", "protocol", "error_result"]
UPSTREAM_ERRORS: tuple[UpstreamError, ...] = ("down", "no_answer", "protocol", "error_result")
# Why a result the upstream gave could not be recorded: the undo walk had taken its call
# (late), or the journal failed (error).
UNRECORDED = ("late", "error")
# Calls that did not answer within call_timeout_seconds, whose answer the proxy awaits in
# the background (proxy.late_answer_seconds): how the answer that came was recorded
# (committed: a result; failed: an error result or a JSON-RPC error, the call not having
# acted), and why one was given up on (expired: no answer within the wait, or the
# connection broke; bound: a call that timed out not awaited at all,
# proxy.max_late_answers were awaited already).
LATE_RECORDED = ("committed", "failed")
LATE_GIVEN_UP = ("expired", "bound")

# Every metric's name, type and help, in the exposition's order (the docs list these).
METRICS: tuple[tuple[str, str, str], ...] = (
    (
        "undolog_proxy_calls_total",
        "counter",
        "Tool calls the proxy answered, by tier and outcome (irreversible: held counts each "
        "hold begun, approved each approved call run).",
    ),
    ("undolog_proxy_holds_in_progress", "gauge", "Irreversible calls held open now."),
    ("undolog_proxy_sessions", "gauge", "UndoLog sessions the proxy has live now."),
    (
        "undolog_proxy_unrecorded_results_total",
        "counter",
        "Results an upstream gave that the journal could not record, by reason (late: "
        "the undo walk had taken the call; error: the journal failed); their calls' "
        "outcome is unknown and their sessions are rolled back.",
    ),
    (
        "undolog_proxy_late_answers_total",
        "counter",
        "COMPENSABLE results answered before their commit that then could not be recorded "
        "(counted in unrecorded_results_total too).",
    ),
    (
        "undolog_proxy_late_answers_awaited_total",
        "counter",
        "Journaled calls that did not answer within call_timeout_seconds whose answer was "
        "then awaited in the background (proxy.late_answer_seconds).",
    ),
    (
        "undolog_proxy_late_answers_recorded_total",
        "counter",
        "Answers that came late and were recorded, by outcome (committed: a result; "
        "failed: an error result or a JSON-RPC error, the call not having acted).",
    ),
    (
        "undolog_proxy_late_answers_given_up_total",
        "counter",
        "Calls of unknown outcome whose answer was given up on, by reason (expired: none "
        "came within late_answer_seconds, or the connection broke; bound: timed out and "
        "not awaited, max_late_answers were awaited already).",
    ),
    (
        "undolog_proxy_upstream_errors_total",
        "counter",
        "Upstream failures, by upstream and kind (down: not reachable; no_answer: no "
        "answer in time; protocol: an MCP error; error_result: the tool answered an error).",
    ),
)
METRIC_NAMES = frozenset(name for name, _, _ in METRICS)


class ProxyMetrics:
    """The counters and gauges; ``text()`` is the exposition."""

    def __init__(self, upstreams: tuple[str, ...] = ()) -> None:
        self.calls: dict[tuple[str, str], int] = {
            (tier, outcome): 0 for tier, outcomes in OUTCOMES.items() for outcome in outcomes
        }
        self.holds = 0
        self.unrecorded: dict[str, int] = dict.fromkeys(UNRECORDED, 0)
        self.late_answers = 0
        self.late_awaited = 0
        self.late_recorded: dict[str, int] = dict.fromkeys(LATE_RECORDED, 0)
        self.late_given_up: dict[str, int] = dict.fromkeys(LATE_GIVEN_UP, 0)
        self.upstream_errors: dict[tuple[str, str], int] = {
            (up, kind): 0 for up in upstreams for kind in UPSTREAM_ERRORS
        }
        # the live sessions, read at scrape time (set by the proxy)
        self.sessions: Callable[[], int] = lambda: 0

    def call(self, tier: str, outcome: str) -> None:
        self.calls[(tier, outcome)] = self.calls.get((tier, outcome), 0) + 1

    def upstream_error(self, upstream: str, kind: UpstreamError) -> None:
        key = (upstream, kind)
        self.upstream_errors[key] = self.upstream_errors.get(key, 0) + 1

    def unrecorded_result(self, reason: str, answered: bool) -> None:
        self.unrecorded[reason] = self.unrecorded.get(reason, 0) + 1
        if answered:
            self.late_answers += 1

    def late_answer(self, event: str) -> None:
        """A late answer's course: "awaited", one of LATE_RECORDED, or of LATE_GIVEN_UP."""
        if event == "awaited":
            self.late_awaited += 1
        elif event in self.late_recorded:
            self.late_recorded[event] += 1
        else:
            self.late_given_up[event] = self.late_given_up.get(event, 0) + 1

    def text(self) -> str:
        samples: dict[str, list[str]] = {
            "undolog_proxy_calls_total": [
                sample("undolog_proxy_calls_total", n, {"tier": tier, "outcome": outcome})
                for (tier, outcome), n in self.calls.items()
            ],
            "undolog_proxy_holds_in_progress": [
                sample("undolog_proxy_holds_in_progress", self.holds)
            ],
            "undolog_proxy_sessions": [sample("undolog_proxy_sessions", self.sessions())],
            "undolog_proxy_unrecorded_results_total": [
                sample("undolog_proxy_unrecorded_results_total", n, {"reason": reason})
                for reason, n in self.unrecorded.items()
            ],
            "undolog_proxy_late_answers_total": [
                sample("undolog_proxy_late_answers_total", self.late_answers)
            ],
            "undolog_proxy_late_answers_awaited_total": [
                sample("undolog_proxy_late_answers_awaited_total", self.late_awaited)
            ],
            "undolog_proxy_late_answers_recorded_total": [
                sample("undolog_proxy_late_answers_recorded_total", n, {"outcome": outcome})
                for outcome, n in self.late_recorded.items()
            ],
            "undolog_proxy_late_answers_given_up_total": [
                sample("undolog_proxy_late_answers_given_up_total", n, {"reason": reason})
                for reason, n in self.late_given_up.items()
            ],
            "undolog_proxy_upstream_errors_total": [
                sample("undolog_proxy_upstream_errors_total", n, {"upstream": up, "kind": kind})
                for (up, kind), n in sorted(self.upstream_errors.items())
            ],
        }
        lines: list[str] = []
        for name, kind, help_text in METRICS:
            lines.extend(family(name, kind, help_text, samples[name]))
        return exposition(lines)


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:9465); port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"metrics_listen takes HOST:PORT, e.g. 127.0.0.1:9465, not {value!r}")
    return host.removeprefix("[").removesuffix("]") or "127.0.0.1", int(port)


REQUEST_LIMIT = 16 * 1024  # a scrape's request is a line and a few headers
# Connections served at once. The listener has no authentication, and each connection
# holds a file descriptor of the proxy's process until it sends its request or
# REQUEST_TIMEOUT (undolog._serving) passes: without a bound, a client that opened
# connections and sent nothing used up the process's descriptors (its RLIMIT_NOFILE,
# 1,024 by default), and the proxy could then open no connection to the journal or an
# upstream, nor take a new client, for any client. One more connection closes the one
# that has waited longest for its request (refused, it let MAX_HANDLERS connections that
# send nothing, opened again every REQUEST_TIMEOUT, keep every scrape out); when every one
# has sent its request, the new one is closed at once. As `undolog metrics`.
MAX_HANDLERS = 16


async def serve_metrics(
    metrics: ProxyMetrics, host: str, port: int, *, max_handlers: int = MAX_HANDLERS
) -> asyncio.Server:
    """``GET /metrics`` on HOST:PORT, on the running loop (a minimal HTTP/1.1 server: one
    request per connection, then closed; at most ``max_handlers`` at once)."""
    # the connections served, and of those the ones with no request yet; closing one
    # ends its read at once, and its handler
    connections: LongestWaiting[asyncio.StreamWriter] = LongestWaiting(
        max_handlers, lambda writer: writer.transport.abort()
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not connections.admit(writer):  # every one answering: closed at once, nothing read
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        try:
            await answer(reader, writer)
        finally:
            connections.release(writer)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.perf_counter()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            connections.answered(writer)
            if len(head) > REQUEST_LIMIT:
                return
            method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body, ctype = "405 Method Not Allowed", "GET /metrics\n", "text/plain"
            elif path == "/metrics":
                status, body, ctype = "200 OK", metrics.text(), CONTENT_TYPE
            else:
                status, body, ctype = "404 Not Found", "not found: GET /metrics\n", "text/plain"
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(data)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            log.debug("metrics request answered in %.6f s", time.perf_counter() - started)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=REQUEST_LIMIT)
