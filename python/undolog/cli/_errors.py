"""What the command says about an error, and its exit code: the error class's own
(undolog.errors), the command line's (usage: 2), or a database or engine error (1)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

import psycopg

from undolog.cli._common import (
    EXIT_ERROR,
    EXIT_USAGE,
    ConnectError,
    NotFound,
    UsageError,
    connect,
    one_line,
)
from undolog.cli._output import printable
from undolog.errors import ROLES_HINT, UndoLogError, exit_code_of, permission_hint
from undolog.migrations import applied_migrations
from undolog.walk import WorkerConfigError


@dataclass(frozen=True)
class ErrorReport:
    message: str
    sqlstate: str | None
    hint: str | None
    code: int


# The engine's messages name its SQL parameters; on the command line they are flags.
_FLAGS = {
    "p_months_ahead": "--months-ahead",
    "p_retention_months": "--retention-months",
    "p_older_than": "--older-than",
    "p_detach_only": "--detach",
    "p_force": "--force",
    "p_by": "--by",
    "p_decided_by": "--by",
    "decided_by": "--by",
    "p_reason": "--reason",
    "p_session_id": "SESSION",
    "p_approval_id": "APPROVAL",
}
_PARAM = re.compile(r"\b(?:p_[a-z_]+|decided_by)\b")
# SQLSTATEs of a database without the engine, or with an older one
_NO_ENGINE = ("42P01", "42883", "3F000")


def _flags(message: str) -> str:
    return _PARAM.sub(lambda m: _FLAGS.get(m[0], m[0]), message)


def _sqlstate(exc: BaseException) -> str | None:
    for e in (exc, exc.__cause__):
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def _needed_role(args: argparse.Namespace | None) -> str | None:
    """The group role the command needs (its parser's ``needed_role``, sql/grants.sql): the
    hint names the missing one, not all three."""
    role = getattr(args, "needed_role", None)
    return None if role is None else str(role)


def _permission_hint(message: str, args: argparse.Namespace | None = None) -> str:
    hint = permission_hint(message)
    role = _needed_role(args)
    if hint == ROLES_HINT and role is not None:
        return f"grant the login {role}, which this command needs"
    return hint


def _engine_missing(args: argparse.Namespace) -> str:
    """Why an engine object is missing: not installed at all, or older than us."""
    try:
        with connect(args) as conn:
            applied = applied_migrations(conn)
    except Exception:
        applied = {}
    if not applied:
        return "the UndoLog engine is not installed in this database: run `undolog migrate`"
    return "the UndoLog engine in this database is older than this package: run `undolog migrate`"


def describe_error(exc: BaseException, args: argparse.Namespace | None = None) -> ErrorReport:
    """What to tell a person (and a script) about an error: message, SQLSTATE, hint,
    and the exit code."""
    sqlstate = _sqlstate(exc)
    if isinstance(exc, UsageError | WorkerConfigError | argparse.ArgumentTypeError):
        return ErrorReport(str(exc), sqlstate, None, EXIT_USAGE)
    if isinstance(exc, ConnectError):
        return ErrorReport(str(exc), None, exc.hint, EXIT_ERROR)
    if isinstance(exc, NotFound):
        return ErrorReport(str(exc), None, exc.hint, exc.exit_code)
    if isinstance(exc, UndoLogError) and exc.exit_code != EXIT_ERROR:
        # not found (3), or a value given on the command line refused (2): its message
        # says which, and the engine's hint what to do (where to find the ids)
        return ErrorReport(_flags(str(exc)), sqlstate, _engine_hint(exc), exc.exit_code)
    if sqlstate in _NO_ENGINE and args is not None:
        return ErrorReport(_engine_missing(args), sqlstate, None, EXIT_ERROR)
    if sqlstate == "42501":
        message = one_line(exc)
        # the engine's own refusal says what to do (an agent's undo-to where the database
        # does not allow it: an operator, or ALTER DATABASE); PostgreSQL's names no role
        hint = _engine_hint(exc) or _permission_hint(message, args)
        return ErrorReport(_flags(message), sqlstate, hint, exit_code_of(exc))
    if isinstance(exc, psycopg.Error):
        primary = exc.diag.message_primary or one_line(exc)
        return ErrorReport(_flags(primary), sqlstate, _engine_hint(exc), exit_code_of(exc))
    return ErrorReport(_flags(str(exc)), sqlstate, _engine_hint(exc), exit_code_of(exc))


def _engine_hint(exc: BaseException) -> str | None:
    """The engine's HINT (every error it raises has one): on the database error itself,
    or on the one an UndoLogError was translated from; or the hint the command gave an
    UndoLogError it raised itself (an unknown id prefix, a session not halted)."""
    for e in (exc, exc.__cause__):
        if isinstance(e, psycopg.Error) and e.diag.message_hint:
            return _flags(e.diag.message_hint)
    if isinstance(exc, UndoLogError) and exc.hint:
        return _flags(exc.hint)
    return None


def _terminal(text: str) -> str:
    """An error line as the terminal gets it: much of an error's text is someone else's
    (the engine's DETAIL quotes a decider's --by, a session's resolution, an agent's
    names), so none of their control characters (escape sequences, a line break that
    would forge a line of ours) reaches it, as printable() keeps them out of tables."""
    return printable(" ".join(text.splitlines()))


def report(report: ErrorReport, as_json: bool) -> int:
    if as_json:
        body = {"error": report.message, "sqlstate": report.sqlstate, "hint": report.hint}
        print(json.dumps(body), file=sys.stderr)
    else:
        # JSON escapes every control character itself (json.dumps: \u001b)
        print(f"undolog: {_terminal(report.message)}", file=sys.stderr)
        if report.hint:
            print(f"hint: {_terminal(report.hint)}", file=sys.stderr)
    return report.code
