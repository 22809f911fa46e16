"""What every command shares: the exit codes, the parser class and its option types,
connecting to the database and reading from it."""

from __future__ import annotations

import argparse
import datetime
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeAlias

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import Composed

from undolog._conninfo import UNREACHABLE_HINT, pin_search_path, with_connect_timeout
from undolog.engine import translated
from undolog.errors import EXIT_ERROR as EXIT_ERROR
from undolog.errors import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from undolog.errors import EXIT_USAGE as EXIT_USAGE

# The command's exit codes: an error's is its class's ``exit_code`` (undolog.errors)
EXIT_OK = 0
Rows = list[dict[str, Any]]
# The group role of an operator's commands (a parser's needed_role: the hint of a
# permission denied names it)
OPERATOR = "undolog_operator"
# ... of the commands a person of either staff role runs (stop or undo a session)
PERSON = "undolog_operator (or undolog_approver)"
# Seconds a command waits for the database to answer its connection, unless the DSN's
# connect_timeout or PGCONNECT_TIMEOUT says otherwise (a host that accepts and never
# answers would hold it for ever)
CONNECT_TIMEOUT = 10
# What a command group's configure_<group>_parser adds its commands to
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


class UsageError(Exception):
    """A bad command line: exit 2."""

    exit_code = EXIT_USAGE


class NotFound(Exception):
    """Something the command looked up itself that is not there (a tool's live
    registration): exit 3, as an unknown session, approval, channel or delivery, with the
    hint where to find what is there."""

    exit_code = EXIT_NOT_FOUND

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class ConnectError(Exception):
    """The database could not be reached: the message says where we looked, the hint what
    to check."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is raised (and reported by main, as JSON under
    --json) instead of printed here."""

    def error(self, message: str) -> NoReturn:
        # self.prog is the subcommand's own ("undolog approvals list"): its help is the one
        # that lists the choices refused here
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# --- connecting, querying, printing --------------------------------------------------------


def dsn_of(args: argparse.Namespace) -> str:
    return str(args.dsn) if args.dsn is not None else os.environ.get("UNDOLOG_DSN", "")


def connect(
    args: argparse.Namespace, conninfo: Callable[[str], str] = str
) -> psycopg.Connection[Any]:
    """The command's connection, to the DSN given (``conninfo`` adds the parameters a
    command sets itself, such as a scrape's timeouts)."""
    dsn = dsn_of(args)
    try:
        conn = psycopg.connect(
            with_connect_timeout(conninfo(dsn), CONNECT_TIMEOUT), autocommit=True
        )
    except psycopg.ProgrammingError as exc:  # the DSN itself does not parse
        raise UsageError(f"invalid --dsn / UNDOLOG_DSN: {one_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        if dsn:
            where, hint = "the DSN given", UNREACHABLE_HINT
        else:
            where = "no DSN given (--dsn absent, UNDOLOG_DSN unset), so libpq's defaults were used"
            hint = "set UNDOLOG_DSN or pass --dsn, e.g. --dsn postgresql://USER@HOST:5432/DBNAME"
        message = f"cannot connect to PostgreSQL with {where}: {one_line(exc)}"
        raise ConnectError(message, hint) from exc
    try:
        pin_search_path(conn)  # names resolve in pg_catalog only (_conninfo)
    except BaseException:
        conn.close()
        raise
    return conn


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def query(conn: psycopg.Connection[Any], sql: str | Composed, params: Any = ()) -> Rows:
    with translated():
        return conn.cursor(row_factory=dict_row).execute(sql, params).fetchall()


# --- option types ---------------------------------------------------------------------------


def timestamptz(value: str) -> datetime.datetime:
    """An ISO 8601 instant with its zone: 2025-01-01T00:00:00Z, 2025-01-01 00:00+00,
    or a date with a zone, 2025-01-01Z (its midnight)."""
    text = value.strip()
    date_with_zone = re.fullmatch(r"(\d{4}-\d{2}-\d{2})([Zz]|[+-]\d{2}(?::?\d{2})?)", text)
    if date_with_zone:
        text = f"{date_with_zone[1]}T00:00:00{date_with_zone[2]}"
    try:
        ts = datetime.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {value!r}") from exc
    if ts.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{value!r} has no time zone: e.g. 2025-01-01T00:00:00Z")
    return ts


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {number}")
    return number


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return number
