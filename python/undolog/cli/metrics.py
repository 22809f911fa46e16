"""``undolog metrics``: the engine's metrics for Prometheus, over HTTP.

    undolog metrics [--listen 127.0.0.1:9464] [--once]

Serves ``GET /metrics`` (the text exposition, format 0.0.4, of undolog.metrics) until
SIGTERM or SIGINT; ``--once`` prints one scrape and exits. The login (--dsn) must hold
undolog_approver or undolog_operator: the metrics views count every login's sessions.
One connection serves every scrape, one at a time; a lost connection is opened again at
the next scrape, and a scrape that cannot read the views answers ``undolog_up 0``.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import psycopg

from undolog import metrics
from undolog.cli._common import (
    EXIT_OK,
    Parser,
    Subparsers,
    UsageError,
    connect,
    one_line,
)

log = logging.getLogger("undolog.cli")
DEFAULT_LISTEN = "127.0.0.1:9464"


def listen_address(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:9464)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {value!r}")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    return host, int(port)


def configure_metrics_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser(
        "metrics", parents=[common], help="serve the engine's metrics to Prometheus"
    )
    p.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"where to serve GET /metrics (default: {DEFAULT_LISTEN})",
    )
    p.add_argument("--once", action="store_true", help="print one scrape and exit")
    p.set_defaults(func=_cmd_metrics)


class Scraper:
    """One connection, opened when first needed and again after it broke; one scrape at
    a time on it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None

    def text(self) -> str:
        with self.lock:
            started = time.perf_counter()
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = connect(self.args)
                return metrics.scrape(self.conn)
            except Exception as exc:  # reported as undolog_up 0; the next scrape tries again
                log.warning("metrics scrape failed: %s", one_line(exc))
                if self.conn is not None and self.conn.broken:
                    self.conn.close()
                return metrics.failed(exc, time.perf_counter() - started)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()


def make_server(scraper: Scraper, host: str, port: int) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "undolog-metrics"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, scraper.text(), metrics.CONTENT_TYPE)
            elif path == "/":
                self._answer(200, "UndoLog metrics: GET /metrics\n", "text/plain")
            else:
                self._answer(404, "not found: GET /metrics\n", "text/plain")

        def _answer(self, status: int, text: str, content_type: str) -> None:
            body = text.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return http.server.ThreadingHTTPServer((host, port), Handler)


def _cmd_metrics(args: argparse.Namespace) -> int:
    if args.once:
        with connect(args) as conn:
            sys.stdout.write(metrics.scrape(conn))
        return EXIT_OK
    host, port = args.listen
    scraper = Scraper(args)
    try:
        server = make_server(scraper, host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to return: not from its own thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bound_port = server.server_address[1]
    print(f"UndoLog metrics on http://{host}:{bound_port}/metrics", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        scraper.close()
    return EXIT_OK
