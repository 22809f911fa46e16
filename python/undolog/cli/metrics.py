"""``undolog metrics``: the engine's metrics for Prometheus, over HTTP.

    undolog metrics [--listen 127.0.0.1:9464] [--once]

Serves ``GET /metrics`` (the text exposition, format 0.0.4, of undolog.metrics) until
SIGTERM or SIGINT; ``--once`` prints one scrape and exits. The login (--dsn) must hold
undolog_approver or undolog_operator: the metrics views count every login's sessions.
One connection serves every scrape, one at a time; a lost connection is opened again at
the next scrape, and a scrape that cannot read the views answers ``undolog_up 0``: so does
one that the bounds below cut short (a server that accepts and never answers, a journal
table locked by a migration). The server closes a connection that has not sent its whole
request within REQUEST_TIMEOUT (undolog._serving), and serves at most MAX_HANDLERS at
once: one more closes the one that has waited longest for its request.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import logging
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

import psycopg

from undolog import metrics
from undolog._argtypes import port_number
from undolog._serving import REQUEST_TIMEOUT, LongestWaiting
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

# The HTTP server: a connection holds a thread until it is answered, so connections that
# never finish a request must neither hold one for ever nor add threads without end, nor,
# by filling the cap, keep a scrape out.
MAX_HANDLERS = 16  # connections served at once; one more closes the longest waiting


def listen_address(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:9464)."""
    host, sep, port = value.rpartition(":")
    try:
        if not sep or not port.isdigit():
            raise argparse.ArgumentTypeError(value)
        number = port_number(port)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {value!r}") from None
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    return host, number


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
    # the metrics views are granted to approver and operator (sql/grants.sql)
    p.set_defaults(func=_cmd_metrics, needed_role="undolog_approver (or undolog_operator)")


class Scraper:
    """One connection, opened when first needed and again after it broke; one scrape at
    a time on it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None

    def text(self) -> str:
        started = time.perf_counter()
        # a scrape stuck past the server-side bounds (a server that stopped answering once
        # connected) holds the lock: the scrapes after it answer undolog_up 0 within
        # metrics.SCRAPE_TIMEOUT instead of queueing behind it
        if not self.lock.acquire(timeout=metrics.SCRAPE_TIMEOUT):
            stuck = TimeoutError(
                f"the scrape before this one still runs after {metrics.SCRAPE_TIMEOUT} s"
            )
            log.warning("metrics scrape failed: %s", stuck)
            return metrics.failed(stuck, time.perf_counter() - started)
        try:
            if self.conn is None or self.conn.closed:
                self.conn = connect(self.args, metrics.scrape_conninfo)
            return metrics.scrape(self.conn)
        except Exception as exc:  # reported as undolog_up 0; the next scrape tries again
            log.warning("metrics scrape failed: %s", one_line(exc))
            if self.conn is not None and self.conn.broken:
                self.conn.close()
            return metrics.failed(exc, time.perf_counter() - started)
        finally:
            self.lock.release()

    def close(self) -> None:
        # a scrape still stuck keeps its connection: the process is ending anyway
        if self.lock.acquire(timeout=metrics.SCRAPE_TIMEOUT):
            try:
                if self.conn is not None:
                    self.conn.close()
            finally:
                self.lock.release()


class BoundedHTTPServer(http.server.ThreadingHTTPServer):
    """A thread per connection, as ThreadingHTTPServer, with two bounds. A connection that
    has not sent its whole request ``request_timeout`` after it was accepted is closed
    (checked at each turn of serve_forever's loop, every 0.5 s): the socket's timeout
    bounds each read, not the request, and a client sending a header line every few
    seconds kept its thread for ever. And at most ``max_handlers`` connections are served
    at once: one more closes the one that has waited longest for its request, so that
    connections that send nothing, opened again and again, cannot keep a scrape out (its
    request arrives with its connection); when every one has sent its request (scrapes,
    each bounded), the new one is closed, never given a thread."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[http.server.BaseHTTPRequestHandler],
        max_handlers: int,
        request_timeout: float,
    ) -> None:
        super().__init__(address, handler)
        self.request_timeout = request_timeout
        self.lock = threading.Lock()  # held around every call of self.connections
        # the connections counted against max_handlers, and of those the ones with no
        # whole request yet
        self.connections: LongestWaiting[Any] = LongestWaiting(max_handlers, _shut)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        with self.lock:
            admitted = self.connections.admit(request)
        if not admitted:  # every one has sent its request: no thread for this one
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its place is free again
            self._forget(request)
            raise

    def process_request_thread(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def request_read(self, request: Any) -> bool:
        """The handler has read its request's line and headers: False when the server
        closed the connection meanwhile (too late, or over the cap)."""
        with self.lock:
            return self.connections.answered(request)

    def service_actions(self) -> None:
        too_late = time.monotonic() - self.request_timeout
        with self.lock:
            for request in self.connections.waiting_since(too_late):
                self.connections.release(request)
                _shut(request)

    def _forget(self, request: Any) -> None:
        with self.lock:
            self.connections.release(request)


def _shut(request: Any) -> None:
    """Its thread's read returns at once, and the thread ends."""
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)


def make_server(
    scraper: Scraper,
    host: str,
    port: int,
    *,
    request_timeout: float = REQUEST_TIMEOUT,
    max_handlers: int = MAX_HANDLERS,
) -> BoundedHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "undolog-metrics"
        timeout = request_timeout  # the socket's, for each read and write

        def parse_request(self) -> bool:
            read = super().parse_request()
            if not server.request_read(self.request):  # closed by the server meanwhile
                self.close_connection = True
                return False
            return read

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

    server = BoundedHTTPServer((host, port), Handler, max_handlers, request_timeout)
    return server


def _cmd_metrics(args: argparse.Namespace) -> int:
    if args.once:
        with connect(args, metrics.scrape_conninfo) as conn:
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
