"""Serve the dashboard with uvicorn: ``undolog dashboard`` and ``python -m undolog.dashboard``.

    undolog dashboard [--dsn DSN] [--host 127.0.0.1] [--port 8765] [--demo]

The DSN names the database (host, port, dbname); it needs no user or password, and any
given are not used for what people see or do: each person logs in as themselves. With
--demo the demo's stories are run into that database first (it must be a throwaway one:
the demo creates logins), and the dashboard keeps serving them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def serve(
    dsn: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    demo: bool = False,
    idle_timeout: float = 30 * 60,
) -> int:
    import uvicorn

    from undolog.dashboard.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if demo:
        from undolog.dashboard.demo import fill

        fill(dsn)
    print(f"UndoLog dashboard on http://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    uvicorn.run(
        create_app(dsn, idle_timeout=idle_timeout),
        host=host,
        port=port,
        log_level="info",
        timeout_graceful_shutdown=2,
    )
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="listen address (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="default: %(default)s")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        help="minutes before an idle web session is logged out (default: %(default)s)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="run the demo's stories into the (throwaway) database first, then serve them",
    )


def run_from_args(args: argparse.Namespace) -> int:
    dsn = args.dsn if getattr(args, "dsn", None) is not None else os.environ.get("UNDOLOG_DSN", "")
    return serve(dsn, args.host, args.port, demo=args.demo, idle_timeout=args.idle_timeout * 60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="undolog dashboard", description=__doc__)
    parser.add_argument("--dsn", default=None, help="database (default: UNDOLOG_DSN, PG* vars)")
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
