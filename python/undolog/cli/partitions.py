"""``undolog partitions``: the effect log's month partitions (operators)."""

from __future__ import annotations

import argparse
import logging

from undolog import partitions
from undolog.cli._common import EXIT_OK, OPERATOR, Parser, Subparsers, connect, timestamptz
from undolog.cli._output import emit


def configure_partitions_parser(subparsers: Subparsers, common: Parser) -> None:
    parts = subparsers.add_parser(
        "partitions", parents=[common], help="month partitions (operators)"
    ).add_subparsers(dest="partitions_command", required=True, metavar="ACTION")
    months_ahead_help = "months to create beyond the current one, 0 to 120 (default 3)"
    p = parts.add_parser("ensure", parents=[common], help="create the coming months")
    p.add_argument("--months-ahead", type=int, default=3, help=months_ahead_help)
    p.set_defaults(func=_cmd_partitions_ensure, needed_role=OPERATOR)
    p = parts.add_parser("drop", parents=[common], help="drop (or detach) old months")
    p.add_argument(
        "--older-than",
        type=timestamptz,
        required=True,
        help="months ending at or before this instant: ISO 8601 with a zone, e.g. "
        "2025-01-01Z or 2025-01-01T00:00:00+00:00",
    )
    p.add_argument("--detach", action="store_true", help="detach instead of drop")
    p.add_argument("--force", action="store_true", help="even months that unfinished sessions need")
    p.set_defaults(func=_cmd_partitions_drop, needed_role=OPERATOR)
    p = parts.add_parser("maintain", parents=[common], help="ensure, then apply retention")
    p.add_argument("--months-ahead", type=int, default=3, help=months_ahead_help)
    p.add_argument(
        "--retention-months",
        type=int,
        default=None,
        help="keep this many past months (default: the database setting)",
    )
    p.set_defaults(func=_cmd_partitions_maintain, needed_role=OPERATOR)


def _partitions_logging() -> None:
    # maintain() logs a WARNING for each month it keeps because a session still needs it
    logging.basicConfig(level=logging.WARNING, format="undolog: %(message)s")


def _cmd_partitions_ensure(args: argparse.Namespace) -> int:
    _partitions_logging()
    with connect(args) as conn:
        created = partitions.ensure(conn, args.months_ahead)
    emit(args, [{"action": "created", "partition": p} for p in created], ["action", "partition"])
    return EXIT_OK


def _cmd_partitions_drop(args: argparse.Namespace) -> int:
    _partitions_logging()
    verb = "detached" if args.detach else "dropped"
    with connect(args) as conn:
        done = partitions.drop(conn, args.older_than, detach_only=args.detach, force=args.force)
    emit(args, [{"action": verb, "partition": p} for p in done], ["action", "partition"])
    return EXIT_OK


def _cmd_partitions_maintain(args: argparse.Namespace) -> int:
    _partitions_logging()
    with connect(args) as conn:
        done = partitions.maintain(conn, args.months_ahead, args.retention_months)
    emit(args, [{"action": a, "partition": p} for a, p in done], ["action", "partition"])
    return EXIT_OK
