"""The ``undolog`` command.

    undolog migrate [--dsn DSN] [--target NAME]   install or upgrade the engine
    undolog install-sql                            print the plain-SQL install script

The DSN comes from --dsn, else UNDOLOG_DSN, else libpq's PG* variables. Exit codes:
0 success, 1 a database or migration error, 2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from undolog.migrations import MigrationError, install_script, migrate


def _dsn(arg: str | None) -> str:
    return arg or os.environ.get("UNDOLOG_DSN", "")


def _cmd_migrate(args: argparse.Namespace) -> int:
    with psycopg.connect(_dsn(args.dsn), autocommit=True) as conn:
        applied = migrate(conn, target=args.target)
    if applied:
        for name in applied:
            print(f"applied {name}")
    else:
        print("up to date")
    return 0


def _cmd_install_sql(args: argparse.Namespace) -> int:
    sys.stdout.write(install_script())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="undolog", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("migrate", help="install or upgrade the engine's schema")
    p.add_argument("--dsn", help="libpq connection string (default: UNDOLOG_DSN, PG* vars)")
    p.add_argument("--target", help="stop after this migration (default: apply all)")
    p.set_defaults(func=_cmd_migrate)
    p = sub.add_parser("install-sql", help="print the install as one plain SQL script")
    p.set_defaults(func=_cmd_install_sql)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (psycopg.Error, MigrationError) as exc:
        print(f"undolog: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
