"""``undolog verify``, ``undolog export`` and ``undolog anchor``: the history's hash
chains (docs/operations/audit.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from undolog import chain
from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    Parser,
    Subparsers,
    UsageError,
    connect,
    timestamptz,
)
from undolog.cli._ids import resolve_id
from undolog.cli._output import print_json
from undolog.errors import ChainMismatch, ExportInvalid


def configure_audit_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser(
        "verify",
        parents=[common],
        help="recompute the history's hash chains; exit 1 when a row does not match",
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
    p.set_defaults(func=_cmd_verify, needed_role=OPERATOR)

    p = subparsers.add_parser(
        "export", parents=[common], help="a session's journal as JSON lines, with its chain"
    )
    p.add_argument("session", metavar="SESSION", help="session id or unique prefix")
    p.add_argument("--output", type=Path, default=None, help="write to this file (default: stdout)")
    p.set_defaults(func=_cmd_export, needed_role=OPERATOR)

    anchor = subparsers.add_parser(
        "anchor", parents=[common], help="anchors of the hash chains (operators)"
    ).add_subparsers(dest="anchor_command", required=True, metavar="ACTION")
    p = anchor.add_parser("write", parents=[common], help="write an anchor now and print it")
    p.set_defaults(func=_cmd_anchor_write, needed_role=OPERATOR)
    p = anchor.add_parser(
        "export", parents=[common], help="print the latest anchor, to keep outside the database"
    )
    p.add_argument("--write", action="store_true", help="write a new anchor first")
    p.set_defaults(func=_cmd_anchor_export, needed_role=OPERATOR)


def _print_report(args: argparse.Namespace, report: chain.Report, what: str) -> int:
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
        print(
            f"{what}: {len(report.findings)} of {report.rows} rows "
            f"({report.sessions} sessions) do not match their chains"
        )
        for finding in report.findings:
            print(f"  {finding.describe()}")
    return EXIT_OK if report.ok else ChainMismatch.exit_code


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.file is not None:
        if args.session is not None or args.since is not None or args.anchor is not None:
            raise UsageError("--file checks the export alone: no --session, --since, --anchor")
        try:
            with args.file.open(encoding="utf-8") as f:
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
    with connect(args) as conn:
        session = None if args.session is None else resolve_id(conn, "session", args.session)
        report = chain.verify(conn, session, args.since)
        if anchor is not None:
            extra = chain.check_anchor(conn, anchor)
            report = chain.Report(report.sessions, report.rows, report.findings + extra)
    return _print_report(args, report, "verify")


def _cmd_export(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        session = resolve_id(conn, "session", args.session)
        lines = list(chain.export_session(conn, session))
    text = "".join(f"{line}\n" for line in lines)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return EXIT_OK


def _cmd_anchor_write(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        anchor = chain.write_anchor(conn)
    print(json.dumps(anchor))
    return EXIT_OK


def _cmd_anchor_export(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        anchor = chain.write_anchor(conn) if args.write else chain.latest_anchor(conn)
    if anchor is None:
        raise UsageError("no anchor yet: `undolog anchor write` (or partitions maintain)")
    print(json.dumps(anchor))
    return EXIT_OK
