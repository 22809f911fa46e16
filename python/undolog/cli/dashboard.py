"""``undolog dashboard``: the web dashboard (the extra ``undolog[dashboard]``), imported
only when asked for, so that ``undolog`` works without the extra installed (then a clear
message naming it, exit 2)."""

from __future__ import annotations

import argparse
import sys

from undolog._argtypes import idle_minutes, port_number
from undolog.cli._common import EXIT_USAGE, Parser, Subparsers


def configure_dashboard_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser(
        "dashboard", parents=[common], help="the web dashboard (extra: dashboard)"
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    p.add_argument("--port", type=port_number, default=8765, help="default: %(default)s")
    p.add_argument("--idle-timeout", type=idle_minutes, default=30.0, help="minutes (default: 30)")
    p.add_argument("--demo", action="store_true", help="fill a throwaway database with the demo")
    # the same flag as undolog.dashboard.server's, which cannot be imported here: the
    # extra may be missing
    p.add_argument(
        "--i-know-this-creates-demo-logins",
        dest="demo_logins_ok",
        action="store_true",
        help="with --demo on a database the demo did not make: yes, create the demo's "
        "password logins (password 'demo') in it",
    )
    p.add_argument(
        "--metrics-token-file",
        metavar="PATH",
        help="a file holding the bearer token a scraper sends to GET /metrics "
        "(default: UNDOLOG_METRICS_TOKEN; none: only a logged-in operator reads /metrics)",
    )
    p.add_argument(
        "--metrics-dsn",
        help="the login a scraper's /metrics reads as: approver or operator "
        "(default: UNDOLOG_METRICS_DSN)",
    )
    p.set_defaults(func=_cmd_dashboard)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from undolog.dashboard.server import run_from_args
    except ImportError as exc:
        print(
            "undolog dashboard needs the 'dashboard' extra: "
            f"pip install 'undolog[dashboard]' ({exc})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return run_from_args(args)
