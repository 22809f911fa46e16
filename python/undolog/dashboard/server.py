"""Serve the dashboard with uvicorn: ``undolog dashboard`` and ``python -m undolog.dashboard``.

    undolog dashboard [--dsn DSN] [--host 127.0.0.1] [--port 8765] [--demo]
                      [--i-know-this-creates-demo-logins]

The DSN names the database (host, port, dbname); it needs no user or password, and any
given are not used for what people see or do: each person logs in as themselves. With
--demo the demo's stories are run into that database first, and the dashboard keeps
serving them. The demo creates password logins (password ``demo``), so it refuses any
database but the throwaway one ``make dashboard-demo`` makes, unless
--i-know-this-creates-demo-logins says the database is disposable.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from undolog import _serving, logs
from undolog._argtypes import idle_minutes, port_number

if TYPE_CHECKING:
    import uvicorn

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


DEMO_LOGINS_FLAG = "--i-know-this-creates-demo-logins"


def uvicorn_server(app: Any, **options: Any) -> uvicorn.Server:
    """The server ``undolog dashboard`` runs ``app`` in (``options``: uvicorn.Config's):
    the faces' (_serving.uvicorn_server), whose own 400, sent before the app is called
    (bytes that are no HTTP request), carries the dashboard's security headers as every
    response of the app does."""
    from undolog.dashboard.app import SECURITY_HEADERS

    return _serving.uvicorn_server(app, error_headers=tuple(SECURITY_HEADERS), **options)


def serve(
    dsn: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    demo: bool = False,
    demo_logins_ok: bool = False,
    idle_timeout: float = 30 * 60,
    metrics_token: str | None = None,
    metrics_dsn: str | None = None,
) -> int:
    from undolog.dashboard.app import create_app

    logs.basic_config(logging.INFO, "%(levelname)s %(name)s: %(message)s")
    if demo:
        # The demo creates LOGIN roles whose password is "demo": in a real database that
        # is a door anyone can open. Only a database the demo's own run made (and will
        # delete), or an explicit yes, gets them.
        throwaway = os.environ.get("UNDOLOG_THROWAWAY_DSN")
        if not demo_logins_ok and not (throwaway and throwaway == dsn):
            print(
                "undolog dashboard: --demo refused: it creates the LOGIN roles demo_approver, "
                "demo_operator and demo_agent with the password 'demo' in the database, and "
                "this is not a throwaway database the demo made (`make dashboard-demo` "
                "without UNDOLOG_DSN makes one). If this database is disposable, add "
                f"{DEMO_LOGINS_FLAG}.",
                file=sys.stderr,
            )
            return 2
        from undolog.demos.dashboard import fill

        fill(dsn)
    print(f"UndoLog dashboard on http://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    server = uvicorn_server(
        create_app(
            dsn, idle_timeout=idle_timeout, metrics_token=metrics_token, metrics_dsn=metrics_dsn
        ),
        host=host,
        port=port,
        log_level="info",
        log_config=logs.uvicorn_log_config(),
        timeout_graceful_shutdown=2,
    )
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises the signal it stopped at
        server.run()
    return 0 if server.started else 3  # as uvicorn.run exits when the server did not start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="listen address (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help="default: %(default)s"
    )
    parser.add_argument(
        "--idle-timeout",
        type=idle_minutes,
        default=30.0,
        help="minutes before an idle web session is logged out (default: %(default)s)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="run the demo's stories into the (throwaway) database first, then serve them",
    )
    parser.add_argument(
        DEMO_LOGINS_FLAG,
        dest="demo_logins_ok",
        action="store_true",
        help="with --demo on a database the demo did not make: yes, create the demo's "
        "password logins (password 'demo') in it",
    )


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of /metrics for a scraper (also declared by undolog.cli.dashboard, which
    cannot import this module: the extra may be missing)."""
    parser.add_argument(
        "--metrics-token-file",
        metavar="PATH",
        help="a file holding the bearer token a scraper sends to GET /metrics "
        "(default: UNDOLOG_METRICS_TOKEN; none: only a logged-in operator reads /metrics)",
    )
    parser.add_argument(
        "--metrics-dsn",
        help="the login a scraper's /metrics reads as: approver or operator "
        "(default: UNDOLOG_METRICS_DSN)",
    )


class MetricsAccessError(Exception):
    """The flags of /metrics for a scraper do not make sense: a usage error (exit 2)."""


def metrics_access(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(token, dsn) of /metrics for a scraper: both, or neither (then an error)."""
    path = getattr(args, "metrics_token_file", None)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token: str | None = f.read().strip()
        except OSError as exc:
            raise MetricsAccessError(f"--metrics-token-file {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise MetricsAccessError(f"--metrics-token-file {path}: not UTF-8 text") from exc
    else:
        token = os.environ.get("UNDOLOG_METRICS_TOKEN", "").strip()
    dsn = getattr(args, "metrics_dsn", None) or os.environ.get("UNDOLOG_METRICS_DSN")
    token = token or None
    if (token is None) != (dsn is None):
        raise MetricsAccessError(
            "a metrics bearer token needs --metrics-dsn (or UNDOLOG_METRICS_DSN) and the "
            "other way round"
        )
    return token, dsn


def run_from_args(args: argparse.Namespace) -> int:
    dsn = args.dsn if getattr(args, "dsn", None) is not None else os.environ.get("UNDOLOG_DSN", "")
    try:
        metrics_token, metrics_dsn = metrics_access(args)
    except MetricsAccessError as exc:
        print(f"undolog dashboard: {exc}", file=sys.stderr)
        return 2
    return serve(
        dsn,
        args.host,
        args.port,
        demo=args.demo,
        demo_logins_ok=args.demo_logins_ok,
        idle_timeout=args.idle_timeout * 60,
        metrics_token=metrics_token,
        metrics_dsn=metrics_dsn,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="undolog dashboard", description=__doc__)
    parser.add_argument("--dsn", default=None, help="database (default: UNDOLOG_DSN, PG* vars)")
    add_arguments(parser)
    add_metrics_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
