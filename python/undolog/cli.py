"""The ``undolog`` command: install, inspect, decide, recover.

    undolog migrate [--target NAME]            install or upgrade the engine
    undolog status | migrate --check           is the engine up to date? (exit 0 yes, 1 no)
    undolog install-sql                        print the install as one plain SQL script
    undolog sessions list [--state S]          sessions, newest first
    undolog sessions show SESSION_ID           one session and its effect timeline
    undolog approvals list                     requests waiting for a human
    undolog approvals approve|reject ID --by NAME [--reason TEXT]
    undolog recover                            fail expired sessions; name walks to run
    undolog worker --app MODULE:OBJECT         recover and walk, with the app's compensations
    undolog partitions ensure|drop|maintain    month partitions (operators)

Every command takes --dsn (default: UNDOLOG_DSN, then libpq's PG* variables) and --json
(machine-readable output). Exit codes: 0 success, 1 a database or engine error, 2 a usage
error, 3 not found (unknown session or approval).
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import importlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import psycopg
from psycopg.rows import dict_row

from undolog import approvals, partitions, saga
from undolog.engine import translated
from undolog.errors import UndoLogError, UnknownApproval, UnknownSession
from undolog.migrations import (
    MigrationError,
    describe_applied,
    engine_version,
    install_script,
    migrate,
)
from undolog.migrations import status as migration_status
from undolog.walk import work

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3
Rows = list[dict[str, Any]]


def _connect(args: argparse.Namespace) -> psycopg.Connection[Any]:
    dsn = args.dsn if args.dsn is not None else os.environ.get("UNDOLOG_DSN", "")
    return psycopg.connect(dsn, autocommit=True)


def _query(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Rows:
    with translated():
        return conn.cursor(row_factory=dict_row).execute(sql, params).fetchall()


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID | datetime.datetime | datetime.timedelta | decimal.Decimal):
        return str(value)
    return value


def _emit(args: argparse.Namespace, rows: Rows, columns: Sequence[str], title: str = "") -> None:
    """Rows as JSON (--json) or as an aligned table a person can read."""
    if args.json:
        print(json.dumps([{c: _plain(r.get(c)) for c in columns} for r in rows], indent=2))
        return
    if title:
        print(title)
    if not rows:
        print("  (none)")
        return

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        if isinstance(value, datetime.datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(value, datetime.timedelta):
            return str(value).split(".")[0]
        return str(value)

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [min(max(len(c), *(len(row[i]) for row in table)), 60) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in table:
        print("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _cmd_status(args: argparse.Namespace) -> int:
    """What migrate would do; exit 0 when the database is up to date, 1 when not."""
    with _connect(args) as conn:
        found = migration_status(conn)
    if args.json:
        print(json.dumps({"up_to_date": found.up_to_date, **asdict(found)}))
    else:
        print("\n".join(found.describe()) or f"up to date (undolog {engine_version()})")
    return EXIT_OK if found.up_to_date else EXIT_ERROR


def _cmd_migrate(args: argparse.Namespace) -> int:
    if getattr(args, "check", False):
        return _cmd_status(args)
    with _connect(args) as conn:
        applied = migrate(conn, target=args.target)
    if args.json:
        print(json.dumps({"applied": applied}))
    else:
        print("\n".join(f"applied {a}" for a in describe_applied(applied)) or "up to date")
    return EXIT_OK


def _cmd_install_sql(args: argparse.Namespace) -> int:
    sys.stdout.write(install_script())
    return EXIT_OK


SESSION_COLUMNS = [
    "session_id",
    "agent",
    "state",
    "calls",
    "committed_calls",
    "undone_calls",
    "replays",
    "created_at",
    "error",
]


def _cmd_sessions_list(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        rows = _query(
            conn,
            "SELECT * FROM undolog.sessions_overview WHERE %(state)s::text IS NULL"
            " OR state = %(state)s ORDER BY created_at DESC LIMIT %(limit)s",
            {"state": args.state, "limit": args.limit},  # type: ignore[arg-type]
        )
    _emit(args, rows, SESSION_COLUMNS)
    return EXIT_OK


TIMELINE_COLUMNS = [
    "at",
    "step_index",
    "tool_name",
    "tier",
    "event",
    "from_state",
    "to_state",
    "actor",
    "detail",
]


def _cmd_sessions_show(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        session = _query(
            conn,
            "SELECT * FROM undolog.sessions_overview WHERE session_id = %s",
            (args.session_id,),
        )
        if not session:
            raise UnknownSession(f"unknown session {args.session_id} (or not yours to read)")
        timeline = _query(
            conn,
            "SELECT * FROM undolog.effect_timeline WHERE session_id = %s ORDER BY history_id",
            (args.session_id,),
        )
    if args.json:
        print(
            json.dumps(
                {
                    "session": {k: _plain(v) for k, v in session[0].items()},
                    "timeline": [{c: _plain(r[c]) for c in TIMELINE_COLUMNS} for r in timeline],
                },
                indent=2,
            )
        )
        return EXIT_OK
    s = session[0]
    print(
        f"session {s['session_id']}  agent={s['agent'] or '-'}  state={s['state']}  "
        f"calls={s['calls']}  owner={s['owner_role']}"
    )
    if s["error"]:
        print(f"error: {s['error']}")
    _emit(args, timeline, TIMELINE_COLUMNS, title="\ntimeline:")
    return EXIT_OK


APPROVAL_COLUMNS = [
    "approval_id",
    "tool_name",
    "args",
    "agent",
    "session_id",
    "age",
    "expires_at",
    "expired",
]


def _cmd_approvals_list(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        rows = _query(conn, "SELECT * FROM undolog.pending_approvals ORDER BY requested_at")
    _emit(args, rows, APPROVAL_COLUMNS)
    return EXIT_OK


def _decide(decide: Callable[..., str]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _connect(args) as conn:
            state = decide(conn, args.approval_id, args.by, args.reason)
        if args.json:
            print(json.dumps({"approval_id": str(args.approval_id), "state": state}))
        else:
            print(f"approval {args.approval_id}: {state}")
        return EXIT_OK

    return run


def _cmd_recover(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        due = saga.recover(conn)
    _emit(
        args,
        [{"session_id": sid} for sid in due],
        ["session_id"],
        title="sessions whose undo walk must run:",
    )
    return EXIT_OK


def _load_app(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise argparse.ArgumentTypeError("--app takes MODULE:OBJECT, e.g. myagent.tools:ul")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"--app {spec}: {exc}") from exc


def _cmd_worker(args: argparse.Namespace) -> int:
    app = _load_app(args.app)
    compensations = getattr(app, "compensations", None)
    if not isinstance(compensations, dict):
        print(f"undolog: {args.app} is not an UndoLog (no compensations)", file=sys.stderr)
        return EXIT_USAGE
    with _connect(args) as conn:
        while True:
            walked = work(conn, compensations, wait=0.0)
            for sid, state in walked.items():
                print(
                    json.dumps({"session_id": str(sid), "state": state})
                    if args.json
                    else f"session {sid}: {state}",
                    flush=True,
                )
            if args.once:
                return EXIT_OK
            time.sleep(args.interval)


def _timestamptz(value: str) -> datetime.datetime:
    """An ISO 8601 instant with its zone, e.g. 2025-01-01T00:00:00Z."""
    try:
        ts = datetime.datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {value!r}") from exc
    if ts.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{value!r} has no time zone: e.g. 2025-01-01T00:00:00Z")
    return ts


def _cmd_partitions(args: argparse.Namespace) -> int:
    # maintain() logs a WARNING for each month it keeps because a session still needs it
    logging.basicConfig(level=logging.WARNING, format="undolog: %(message)s")
    with _connect(args) as conn:
        if args.action == "ensure":
            rows = [
                {"action": "created", "partition": p}
                for p in partitions.ensure(conn, args.months_ahead)
            ]
        elif args.action == "drop":
            if args.older_than is None:
                print("undolog: partitions drop needs --older-than", file=sys.stderr)
                return EXIT_USAGE
            verb = "detached" if args.detach else "dropped"
            rows = [
                {"action": verb, "partition": p}
                for p in partitions.drop(
                    conn, args.older_than, detach_only=args.detach, force=args.force
                )
            ]
        else:
            rows = [
                {"action": a, "partition": p}
                for a, p in partitions.maintain(conn, args.months_ahead, args.retention_months)
            ]
    _emit(args, rows, ["action", "partition"])
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    # --dsn and --json are accepted before or after the subcommand. SUPPRESS keeps a
    # subcommand's copy of the option from overwriting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="libpq connection string (default: UNDOLOG_DSN, PG* vars)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    parser = argparse.ArgumentParser(
        prog="undolog", description=(__doc__ or "").split("\n")[0], parents=[common]
    )
    parser.add_argument("--version", action="version", version=f"undolog {engine_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("migrate", parents=[common], help="install or upgrade the engine")
    p.add_argument("--target", help="stop after this migration (default: apply all)")
    p.add_argument("--check", action="store_true", help="change nothing: same as status")
    p.set_defaults(func=_cmd_migrate)
    p = sub.add_parser("status", parents=[common], help="is the engine up to date? (0 yes, 1 no)")
    p.set_defaults(func=_cmd_status)
    p = sub.add_parser("install-sql", parents=[common], help="print the plain-SQL install")
    p.set_defaults(func=_cmd_install_sql)

    sessions = sub.add_parser("sessions", help="list or show sessions").add_subparsers(
        dest="sessions_command", required=True
    )
    p = sessions.add_parser("list", parents=[common], help="sessions, newest first")
    p.add_argument("--state", help="only sessions in this state")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=_cmd_sessions_list)
    p = sessions.add_parser("show", parents=[common], help="one session and its timeline")
    p.add_argument("session_id", type=uuid.UUID)
    p.set_defaults(func=_cmd_sessions_show)

    appr = sub.add_parser("approvals", help="approval requests").add_subparsers(
        dest="approvals_command", required=True
    )
    p = appr.add_parser("list", parents=[common], help="requests waiting for a human")
    p.set_defaults(func=_cmd_approvals_list)
    for name, decide in (("approve", approvals.approve), ("reject", approvals.reject)):
        p = appr.add_parser(name, parents=[common], help=f"{name} a request")
        p.add_argument("approval_id", type=uuid.UUID)
        p.add_argument("--by", required=True, help="who decides (recorded)")
        p.add_argument("--reason", help="why (recorded)")
        p.set_defaults(func=_decide(decide))

    p = sub.add_parser("recover", parents=[common], help="fail expired sessions, list walks")
    p.set_defaults(func=_cmd_recover)
    p = sub.add_parser("worker", parents=[common], help="recover and walk, repeatedly")
    p.add_argument("--app", required=True, help="MODULE:OBJECT of the UndoLog instance")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between passes")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("partitions", parents=[common], help="month partitions (operators)")
    p.add_argument("action", choices=["ensure", "drop", "maintain"])
    p.add_argument("--months-ahead", type=int, default=3)
    p.add_argument("--retention-months", type=int, default=None)
    p.add_argument(
        "--older-than",
        type=_timestamptz,
        help="drop months ending at or before this instant (ISO 8601 with a zone)",
    )
    p.add_argument("--detach", action="store_true", help="detach instead of drop")
    p.add_argument("--force", action="store_true", help="even with unfinished sessions")
    p.set_defaults(func=_cmd_partitions)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # not set_defaults: the parents' option objects are shared, and a default set on them
    # would make each subcommand's copy overwrite a value given before the subcommand
    args.dsn = getattr(args, "dsn", None)
    args.json = getattr(args, "json", False)
    try:
        return int(args.func(args))
    except (UnknownSession, UnknownApproval) as exc:
        print(f"undolog: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (UndoLogError, psycopg.Error, MigrationError) as exc:
        print(f"undolog: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
        return EXIT_USAGE  # pragma: no cover (parser.error exits)


if __name__ == "__main__":
    sys.exit(main())
