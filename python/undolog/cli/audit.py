"""``undolog verify``, ``undolog export`` and ``undolog anchor``: the history's hash
chains (docs/operations/audit.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

from undolog import chain
from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    PERSON,
    NotFound,
    Parser,
    Subparsers,
    UsageError,
    connect,
    query,
    timestamptz,
)
from undolog.cli._errors import describe_error
from undolog.cli._errors import report as report_error
from undolog.cli._ids import not_found, resolve_id
from undolog.cli._output import print_json, say_progress
from undolog.errors import ChainMismatch, ExportInvalid
from undolog.queries import QUERIES

# A verification too large for the server's limits: cancelled (statement_timeout, 57014),
# out of memory or disk (class 53), past a program limit (class 54).
_TOO_LARGE = ("57014", "53", "54")
VERIFY_HINT = (
    "verify less at once: one session (--session ID) or the rows from an instant on "
    "(--since T); or give this run more time, e.g. PGOPTIONS='-c statement_timeout=0' "
    "undolog verify ..."
)


def configure_audit_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser(
        "verify",
        parents=[common],
        help="recompute the history's hash chains; exit 4 when a row does not match "
        "(1: a database error, the verification did not finish)",
    )
    p.add_argument("--session", default=None, help="only this session (id or unique prefix)")
    p.add_argument(
        "--since",
        type=timestamptz,
        default=None,
        help="only rows from this instant on (ISO 8601 with a zone, e.g. 2026-01-01Z)",
    )
    p.add_argument(
        "--file",
        type=Path,
        default=None,
        help="check this export (`undolog export`) offline, without a database",
    )
    p.add_argument(
        "--anchor",
        type=Path,
        default=None,
        help="also compare the database with this kept anchor (`undolog anchor export`)",
    )
    p.set_defaults(func=_cmd_verify, needed_role=PERSON)

    p = subparsers.add_parser(
        "export", parents=[common], help="a session's journal as JSON lines, with its chain"
    )
    p.add_argument("session", metavar="SESSION", help="session id or unique prefix")
    p.add_argument("--output", type=Path, default=None, help="write to this file (default: stdout)")
    p.set_defaults(func=_cmd_export, needed_role=PERSON)

    anchor = subparsers.add_parser(
        "anchor", parents=[common], help="anchors of the hash chains (write: operators)"
    ).add_subparsers(dest="anchor_command", required=True, metavar="ACTION")
    p = anchor.add_parser("write", parents=[common], help="write an anchor now and print it")
    p.set_defaults(func=_cmd_anchor_write, needed_role=OPERATOR)
    p = anchor.add_parser(
        "export", parents=[common], help="print the latest anchor, to keep outside the database"
    )
    p.add_argument("--write", action="store_true", help="write a new anchor first")
    p.set_defaults(func=_cmd_anchor_export, needed_role=PERSON)


def _shown(text: str) -> str:
    """``text`` as UTF-8 can print it: an export may hold lone surrogates (JSON's \\ud800)
    in any field, and a file's name bytes that are not UTF-8; each is shown escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _print_report(args: argparse.Namespace, report: chain.Report, what: str) -> int:
    what = _shown(what)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "sessions": report.sessions,
                "rows": report.rows,
                "findings": [f.as_dict() for f in report.findings],
            }
        )
    elif report.ok:
        print(f"{what}: {report.rows} rows of {report.sessions} sessions match their chains")
    else:
        # findings, not rows: a row can have two (missing and link), and an anchor's
        # findings are no row of a session
        n = len(report.findings)
        print(
            f"{what}: {report.rows} rows of {report.sessions} sessions checked: "
            f"{n} {'finding' if n == 1 else 'findings'} where the chains do not match"
        )
        for finding in report.findings:
            print(f"  {_shown(finding.describe())}")
    return EXIT_OK if report.ok else ChainMismatch.exit_code


def _show_progress(done: chain.Progress) -> None:
    """A verification of every session, after each batch: how far it is, on standard
    error. Not with --json, where standard error holds an error's JSON object alone."""
    say_progress(
        "verify",
        f"{done.rows:,} of {done.rows_total:,} rows ({done.percent}%) "
        f"in {done.sessions:,} of {done.sessions_total:,} sessions",
    )


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.file is not None:
        if args.session is not None or args.since is not None or args.anchor is not None:
            raise UsageError("--file checks the export alone: no --session, --since, --anchor")
        try:
            # utf-8-sig: a byte order mark before the header (an export saved again by
            # a Windows editor) is not part of it
            with args.file.open(encoding="utf-8-sig") as f:
                report = chain.verify_export(f)
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc
        return _print_report(args, report, str(args.file))
    anchor = None
    if args.anchor is not None:
        try:
            anchor = json.loads(args.anchor.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"cannot read {args.anchor}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ExportInvalid(f"{args.anchor} is not an anchor (not JSON)") from exc
        if not isinstance(anchor, dict):
            raise ExportInvalid(f"{args.anchor} is not an anchor (not a JSON object)")
    try:
        with connect(args) as conn:
            session = None if args.session is None else resolve_id(conn, "session", args.session)
            found = chain.verify(
                conn, session, args.since, on_progress=None if args.json else _show_progress
            )
            if anchor is not None:
                # the anchors' chain up to the kept one; verify of every session checks
                # it too: each problem is listed once
                seen = {(f.table, f.key, f.problem) for f in found.findings}
                extra = [
                    f
                    for f in chain.check_anchor(conn, anchor)
                    if (f.table, f.key, f.problem) not in seen
                ]
                found = chain.Report(found.sessions, found.rows, found.findings + extra)
            if session is not None and found.ok and not found.rows:
                _readable(conn, session)  # nothing checked: a session, or a mistyped id?
    except psycopg.Error as exc:
        if not (exc.sqlstate or "").startswith(_TOO_LARGE):
            raise  # main reports it, as any command's
        # a verification too large for the server's limits: the server gives no hint,
        # this says what to do about it (exit 1, a database error, not EXIT_MISMATCH)
        failed = describe_error(exc, args)
        return report_error(dataclasses.replace(failed, hint=failed.hint or VERIFY_HINT), args.json)
    return _print_report(args, found, "verify")


def _readable(conn: psycopg.Connection[Any], session: uuid.UUID) -> None:
    """Raise not found (exit 3, with where the ids are) unless the login reads the
    session: a whole id is taken as given, and `verify --session` of one no row holds
    said "0 rows of 0 sessions match their chains", `export` wrote a file of it."""
    if not query(conn, QUERIES["session_state"], {"session_id": session}):
        raise not_found("session", f"unknown session {session} (or not yours to read)")


def _cmd_export(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        session = resolve_id(conn, "session", args.session)
        lines = list(chain.export_session(conn, session))  # staff's: refused first
        if len(lines) == 1:  # its header alone: a session, or a mistyped id?
            _readable(conn, session)  # as the dashboard's export: no file of no session
    text = "".join(f"{line}\n" for line in lines)
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    return EXIT_OK


def _cmd_anchor_write(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        anchor = chain.write_anchor(conn)
    print(json.dumps(anchor))
    return EXIT_OK


def _cmd_anchor_export(args: argparse.Namespace) -> int:
    if args.write:  # writing one is the operator's (write_anchor), reading it staff's
        args.needed_role = OPERATOR
    with connect(args) as conn:
        anchor = chain.write_anchor(conn) if args.write else chain.latest_anchor(conn)
    if anchor is None:
        raise NotFound(
            "no anchor yet",
            "An operator writes one: undolog anchor write (undolog partitions maintain "
            "writes one on each run; the dashboard's Maintenance, Write an anchor now).",
        )
    print(json.dumps(anchor))
    return EXIT_OK
