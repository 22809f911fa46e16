"""The ``undolog`` command: install, inspect, decide, recover.

    undolog migrate [--target NAME]            install or upgrade the engine
    undolog status | migrate --check           is the engine up to date? (exit 0 yes, 1 no)
    undolog install-sql                        print the install as one plain SQL script
    undolog health [--max-lag SECONDS]         connection, engine schema, worker lag
    undolog sessions list [--state S] [--agent A] [--since T] [--until T] [--id-prefix HEX]
                          [--tool NAME] [--limit N (1 to 10000)]   sessions, newest first
    undolog sessions show SESSION              one session and its effect timeline
    undolog sessions resume SESSION --by NAME [--reason TEXT]    move a halted walk on
    undolog sessions retry SESSION --by NAME [--reason TEXT]     retry its failed compensation
    undolog sessions abandon SESSION --by NAME --reason TEXT     resolved by hand: stays halted
    undolog sessions rollback SESSION --by NAME --reason TEXT    undo an active/waiting session
    undolog sessions undo-to SESSION STEP --reason TEXT [--plan]  undo down to a step, go on
    undolog approvals list [--limit N]         requests waiting for a human, oldest first
    undolog approvals show APPROVAL            one of them whole: every argument, who asked
    undolog approvals decided [--since T] [--mine]   past decisions: who, when, why
    undolog approvals approve|reject APPROVAL --by NAME [--reason TEXT]
                                               (approve --args JSON: edit, then approve)
    undolog approvals expire                   close the requests past their deadline
    undolog tools list [--owner ROLE] [--all]  registered tools: tier and compensation
    undolog tools register TOOL --owner ROLE --tier T [--compensation JSON]   for an agent
    undolog tools retire TOOL --owner ROLE --by NAME --reason TEXT   end a registration
    undolog recover                            fail expired sessions; name walks to run
    undolog worker --app MODULE:OBJECT [--owner ROLE... | --all-owners] [--interval S]
                   [--max-backoff S] [--once]
                                               recover and walk, with the app's compensations
    undolog notifications add-webhook NAME URL --by NAME [--slack] [--secret-env VAR]
    undolog notifications add-email NAME --to ADDR... --smtp-host H --from ADDR --by NAME
    undolog notifications list | remove NAME --by NAME   the channels (never their secrets)
    undolog notifications deliveries [--approval ID] [--state S]   sent, failed, why
    undolog notifications retry DELIVERY --by NAME       send one again now
    undolog notify [--interval S] [--once]     deliver notifications (the worker does too)
    undolog partitions ensure [--months-ahead N]
    undolog partitions drop --older-than INSTANT [--detach] [--force]
    undolog partitions maintain [--months-ahead N] [--retention-months N]
    undolog partitions list                    the months, their estimated rows and size
    undolog partitions plan [--months-ahead N] [--retention-months N]
                                               what maintain would do now; changes nothing
    undolog metrics [--listen HOST:PORT] [--once]   serve GET /metrics to Prometheus
    undolog verify [--session ID] [--since T] [--anchor F] | --file F
                                               recompute the history's hash chains
                                               (exit 0 all match, 4 some do not)
    undolog export SESSION [--output F]        a session's journal as JSON lines, with its chain
    undolog anchor write | export [--write]    anchor the chains; print the latest anchor
    undolog dashboard [--host H] [--port P]    the web dashboard (extra: dashboard)
    undolog mcp-proxy --config F               the MCP proxy (extra: mcp)

SESSION and APPROVAL are a whole id or a unique prefix of one (``701f4cbc``; an ambiguous
prefix is a usage error). Every command takes --dsn (default: UNDOLOG_DSN, then libpq's
PG* variables) and --json (machine-readable output; errors then are one JSON object
``{"error", "sqlstate", "hint"}`` on stderr), before or after the subcommand.
``undolog --version`` prints the package's version.

Exit codes: 0 success (``health``: healthy), 1 a database or engine error (``health``:
unhealthy), 2 a usage error (bad flag or value, a value the engine refused, ambiguous id
prefix, a worker that is misconfigured), 3 not found (unknown session, approval, channel
or delivery, no live registration of the tool to retire, no anchor yet to export), 4
``verify`` found rows that do not match their chain. An engine error's
code is its class's, in the table of docs/reference/errors.md. A connection waits
10 seconds for the server unless the DSN's connect_timeout or PGCONNECT_TIMEOUT says
otherwise.

``undolog worker`` serves until SIGTERM or SIGINT: a halted session, a lost server
(reconnected with backoff), a compensation that outlives its claim, or one session's error
is logged and the worker goes on. On the signal it finishes the entry it holds and exits
0; a second signal stops it at once (the entry's claim then expires and is handed out
again).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import psycopg

from undolog._conninfo import pin_search_path
from undolog.cli._common import EXIT_OK, ConnectError, NotFound, Parser, UsageError
from undolog.cli._errors import ErrorReport, describe_error, report
from undolog.cli.approvals import configure_approvals_parser
from undolog.cli.audit import configure_audit_parser
from undolog.cli.dashboard import configure_dashboard_parser
from undolog.cli.mcp_proxy import configure_mcp_proxy_parser
from undolog.cli.metrics import configure_metrics_parser
from undolog.cli.migrate import configure_migrate_parser
from undolog.cli.notifications import configure_notifications_parser
from undolog.cli.partitions import configure_partitions_parser
from undolog.cli.sessions import configure_sessions_parser
from undolog.cli.tools import configure_tools_parser
from undolog.cli.worker import configure_worker_parser
from undolog.errors import UndoLogError
from undolog.migrations import MigrationError, engine_version
from undolog.queries import QUERIES

__all__ = ["ErrorReport", "build_parser", "describe_error", "main"]


class _Version(argparse.Action):
    """The package's version; then, when UNDOLOG_DSN (or libpq's defaults) reaches a
    database within two seconds, the engine installed in it, which may differ."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"undolog {engine_version()}")
        engine = _engine_version_here(os.environ.get("UNDOLOG_DSN", ""))
        if engine is not None:
            print(f"engine in this database: {engine}")
        parser.exit()


def _engine_version_here(dsn: str) -> str | None:
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=2)
    except psycopg.Error:
        return None  # no database here: the package's version says all there is
    with conn:
        try:
            pin_search_path(conn)  # names resolve in pg_catalog only, as every command's
            row = conn.execute(QUERIES["engine_version"]).fetchone()
        except psycopg.Error:
            return "not installed (run `undolog migrate`)"
    return str(row[0]) if row else None


def build_parser() -> argparse.ArgumentParser:
    # --dsn and --json are accepted before or after any subcommand. SUPPRESS keeps a
    # subcommand's copy of the option from overwriting a value given before it.
    common = Parser(add_help=False)
    common.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="libpq connection string (default: UNDOLOG_DSN, then libpq's PG* variables)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output; errors as a JSON object on stderr",
    )
    parser = Parser(
        prog="undolog",
        description="UndoLog: install, inspect, decide, recover.",
        parents=[common],
        epilog=(
            "Exit codes: 0 ok, 1 database or engine error, 2 usage error, 3 not found, "
            "4 verify found rows that do not match their chain."
        ),
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="the package's version, and the engine's"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # in the order `undolog --help` lists them
    for configure in (
        configure_migrate_parser,  # migrate, status, install-sql, health
        configure_sessions_parser,
        configure_approvals_parser,
        configure_tools_parser,
        configure_worker_parser,  # recover, worker
        configure_notifications_parser,  # notifications, notify
        configure_mcp_proxy_parser,
        configure_partitions_parser,
        configure_audit_parser,  # verify, export, anchor
        configure_dashboard_parser,
        configure_metrics_parser,
    ):
        configure(sub, common)
    return parser


def _reader_gone() -> None:
    """The reader of stdout went away (``undolog sessions list | head``): end quietly.
    Python would report the failed flush of the closed pipe at exit, so stdout is pointed
    at /dev/null, leaving nothing to flush."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _wants_json(argv: Sequence[str]) -> bool:
    return "--json" in argv


def _parse(argv: list[str]) -> argparse.Namespace:
    """parse_args, except that an unknown option sends to the subcommand's own help
    (argparse reports it from the top parser, whose help does not list the options)."""
    args, extra = build_parser().parse_known_args(argv)
    if extra:
        words = ["undolog"]
        command = getattr(args, "command", None)
        if command:
            words.append(command)
            action = getattr(args, f"{command}_command", None)
            if action:
                words.append(action)
        prog = " ".join(words)
        raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)")
    return args


def _not_utf8(exc: UnicodeEncodeError, args: argparse.Namespace, argv: Sequence[str]) -> UsageError:
    """A value PostgreSQL cannot take, its text being UTF-8: bytes of another encoding on
    the command line or in UNDOLOG_DSN, which Python keeps as lone surrogates (shown as
    those bytes), or another lone surrogate, as JSON's escape \\ud800 makes one (shown as
    its escape: no bytes stand for it)."""
    piece = exc.object[exc.start : exc.end]
    try:
        bad = piece.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        bad = piece.encode("utf-8", "backslashreplace")
    where = "a value given"
    if args.dsn is None and exc.object == os.environ.get("UNDOLOG_DSN"):
        where = "UNDOLOG_DSN"
    for dest, value in vars(args).items():
        if value == exc.object:
            flag = f"--{dest.replace('_', '-')}"
            given = any(word == flag or word.startswith(f"{flag}=") for word in argv)
            # not given as a flag: a positional argument, whose metavar is its name's
            where = flag if given else dest.upper()
    return UsageError(f"{where} is not UTF-8 text ({bad!r}): PostgreSQL takes UTF-8 only")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = _parse(argv)
        except UsageError as exc:
            return report(describe_error(exc), _wants_json(argv))
        # not set_defaults: the parents' option objects are shared, and a default set on
        # them would make each subcommand's copy overwrite a value given before it
        args.dsn = getattr(args, "dsn", None)
        args.json = getattr(args, "json", False)
        try:
            code = int(args.func(args))
        except (
            UndoLogError,
            psycopg.Error,
            MigrationError,
            UsageError,
            ConnectError,
            NotFound,
        ) as exc:
            return report(describe_error(exc, args), args.json)
        except UnicodeEncodeError as exc:  # raised by psycopg, encoding what it sends
            return report(describe_error(_not_utf8(exc, args, argv)), args.json)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _reader_gone()
        return EXIT_OK
