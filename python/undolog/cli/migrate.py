"""``undolog migrate``, ``status``, ``install-sql`` and ``health``: the engine in the
database, its version and whether it is served."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import psycopg

from undolog import health
from undolog.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    PERSON,
    ConnectError,
    Parser,
    Subparsers,
    UsageError,
    connect,
    non_negative_float,
    query,
)
from undolog.cli._output import print_json
from undolog.migrations import (
    DEFAULT_LOCK_TIMEOUT,
    MigrationError,
    applied_migrations,
    available_migrations,
    describe_applied,
    engine_version,
    install_script,
    migrate,
)
from undolog.migrations import status as migration_status
from undolog.queries import QUERIES


def configure_migrate_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser("migrate", parents=[common], help="install or upgrade the engine")
    p.add_argument("--target", help="stop after this migration (default: apply all)")
    p.add_argument("--check", action="store_true", help="change nothing: same as status")
    p.add_argument(
        "--lock-timeout",
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="DURATION",
        help="give up when a table lock is not granted within this (PostgreSQL duration,"
        f" e.g. 500ms, 30s; 0: no limit; default {DEFAULT_LOCK_TIMEOUT}); agents' calls on"
        " that table wait behind migrate meanwhile",
    )
    p.set_defaults(func=_cmd_migrate)
    p = subparsers.add_parser(
        "status", parents=[common], help="is the engine up to date? (0 yes, 1 no)"
    )
    p.set_defaults(func=_cmd_status, needed_role=PERSON)
    p = subparsers.add_parser("install-sql", parents=[common], help="print the plain-SQL install")
    p.set_defaults(func=_cmd_install_sql)
    p = subparsers.add_parser(
        "health",
        parents=[common],
        help="connection, engine schema, worker lag (exit 0 healthy, 1 not)",
    )
    p.add_argument(
        "--max-lag",
        type=non_negative_float,
        default=120.0,
        metavar="SECONDS",
        help="unhealthy when a session has waited longer than this for its undo walk (default 120)",
    )
    p.set_defaults(func=_cmd_health, needed_role=PERSON)


def _cmd_status(args: argparse.Namespace) -> int:
    """What migrate would do; exit 0 when the database is up to date, 1 when not."""
    with connect(args) as conn:
        found = migration_status(conn)
        installed = bool(applied_migrations(conn))
    if args.json:
        print(json.dumps({"up_to_date": found.up_to_date, "installed": installed, **asdict(found)}))
    elif not installed:
        # every migration and file would be listed: one line says the same
        print("the UndoLog engine is not installed in this database: run `undolog migrate`")
    else:
        print("\n".join(found.describe()) or f"up to date (undolog {engine_version()})")
    return EXIT_OK if found.up_to_date else EXIT_ERROR


def _cmd_migrate(args: argparse.Namespace) -> int:
    if getattr(args, "check", False):
        return _cmd_status(args)
    names = [m.name for m in available_migrations()]
    if args.target is not None and args.target not in names:
        raise UsageError(f"unknown --target {args.target!r}; known: {', '.join(names)}")
    with connect(args) as conn:
        before = applied_migrations(conn)
        if args.target is not None:
            # names sort in apply order (NNNN_); a newer package's migrations count too
            later = sorted(n for n in before if n > args.target)
            if later:
                message = (
                    f"the database is already past {args.target} (it has {', '.join(later)}):"
                    " nothing applied; migrations are never undone"
                )
                if args.json:
                    print(json.dumps({"applied": [], "already_past": later, "message": message}))
                else:
                    print(message)
                return EXIT_OK
        applied = migrate(conn, target=args.target, lock_timeout=args.lock_timeout)
    if args.json:
        print(json.dumps({"applied": applied}))
    else:
        print("\n".join(f"applied {a}" for a in describe_applied(applied)) or "up to date")
    return EXIT_OK


def _cmd_install_sql(args: argparse.Namespace) -> int:
    sys.stdout.write(install_script())
    return EXIT_OK


def _health_schema(conn: psycopg.Connection[Any]) -> tuple[bool, str]:
    """Whether the engine is installed and as current as this package (what `undolog
    status` reports)."""
    if not applied_migrations(conn):
        return False, "the UndoLog engine is not installed in this database: run `undolog migrate`"
    try:
        found = migration_status(conn)
    except MigrationError as exc:  # a recorded migration differs from this package's
        return False, str(exc)
    if not found.up_to_date:
        return False, f"behind this package ({'; '.join(found.describe())}): run `undolog migrate`"
    return True, f"current (undolog {engine_version()})"


def _cmd_health(args: argparse.Namespace) -> int:
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str, **extra: Any) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, **extra})

    try:
        conn = connect(args)
    except ConnectError as exc:
        check("connection", False, f"{exc}; set UNDOLOG_DSN or pass --dsn")
        return _report_health(args, checks)
    with conn:
        check("connection", True, f"{conn.info.user}@{conn.info.host}:{conn.info.port}")
        ok, detail = _health_schema(conn)
        check("schema", ok, detail)
        if ok:
            _health_locks(conn, check)
            _health_partitions(conn, check)
            _health_worker(conn, args.max_lag, check)
            _health_schemas(conn, check)
            _health_logins(conn, check)
    return _report_health(args, checks)


def _health_partitions(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """The months partition maintenance created ahead but could not attach yet (their
    locks were busy: an open read of the effect log); the next run attaches them."""
    (row,) = query(conn, QUERIES["may_list_pending_partitions"])
    if not row["allowed"]:
        return
    pending = [str(r["name"]) for r in query(conn, QUERIES["pending_partitions"])]
    check(
        "partitions",
        True,
        f"{len(pending)} months created ahead, still to attach (the next"
        f" `undolog partitions maintain` attaches them): {', '.join(pending)}"
        if pending
        else "every month created is attached",
        pending_partitions=pending,
    )


def _health_locks(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """Whether the engine's advisory locks are its own (undolog.health.locks, the
    dashboard's Maintenance page says the same)."""
    (row,) = query(conn, QUERIES["public_advisory_functions"])
    check(**health.locks(row))


def _health_schemas(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """Whether an agent login may create objects where another login's names resolve
    (undolog.health.schemas, the dashboard's Maintenance page says the same)."""
    (row,) = query(conn, QUERIES["schemas_open_to_agents"])
    check(**health.schemas(row))


def _health_logins(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """Whether one person may hold both sides of a call (undolog.health.logins; the
    dashboard's Maintenance page says the same)."""
    (row,) = query(conn, QUERIES["logins_that_may_become_another"])
    check(**health.logins(row))


def _health_worker(
    conn: psycopg.Connection[Any], max_lag: float, check: Callable[..., None]
) -> None:
    """Worker lag: how long the oldest session due for an undo walk has waited for a
    worker. Halted sessions are reported (they wait for a person, not for the worker)
    but do not make the check fail."""
    (row,) = query(conn, QUERIES["worker_lag"])
    lag, due = max(float(row["lag_seconds"]), 0.0), int(row["due"])
    check(
        "worker",
        lag <= max_lag,
        f"{due} sessions due for an undo walk, the oldest waiting {lag:.0f} s (max {max_lag:g} s)"
        if due
        else "no session waits for an undo walk",
        due_sessions=due,
        lag_seconds=round(lag, 3),
    )
    (row,) = query(conn, QUERIES["halted_sessions_unresolved"])
    halted = int(row["halted"])
    check(
        "operator",
        True,
        f"{halted} halted sessions wait for an operator (undolog sessions list --state halted)"
        if halted
        else "no halted session waits for an operator",
        halted_sessions=halted,
    )


def _report_health(args: argparse.Namespace, checks: list[dict[str, Any]]) -> int:
    healthy = all(c["ok"] for c in checks)
    if args.json:
        print_json({"healthy": healthy, "checks": checks})
    else:
        for c in checks:
            print(f"{'ok  ' if c['ok'] else 'FAIL'}  {c['name']:<10}  {c['detail']}")
        print("healthy" if healthy else "unhealthy")
    return EXIT_OK if healthy else EXIT_ERROR
