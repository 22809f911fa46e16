"""``undolog partitions``: the effect log's month partitions (operators)."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
from collections.abc import Callable

from undolog import logs, partitions
from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    PERSON,
    Parser,
    Subparsers,
    UsageError,
    connect,
    timestamptz,
)
from undolog.cli._output import emit, plain, print_json


def configure_partitions_parser(subparsers: Subparsers, common: Parser) -> None:
    parts = subparsers.add_parser(
        "partitions", parents=[common], help="month partitions (operators)"
    ).add_subparsers(dest="partitions_command", required=True, metavar="ACTION")
    p = parts.add_parser(
        "list",
        parents=[common],
        help="the months that exist, with their estimated rows and size",
        description="The effect log's and its history's month partitions, newest first, "
        "then each one's DEFAULT partition, with their rows and size as the database "
        "estimates them (read from the catalog only: no table is locked), as the "
        "dashboard's Maintenance page lists them.",
    )
    p.set_defaults(func=_cmd_partitions_list, needed_role=PERSON)
    p = parts.add_parser(
        "plan",
        parents=[common],
        help="what `partitions maintain` would do now; change nothing",
        description="What `undolog partitions maintain` (with the same flags) would do now, "
        "as the dashboard's Maintenance page says it: the months past retention it would "
        "drop (a month an unfinished session holds is kept), the months it would create, "
        "the months created ahead still to attach, the DEFAULT partitions with rows to "
        "move. Changes nothing.",
    )
    _months_options(p, retention=True)
    p.set_defaults(func=_cmd_partitions_plan, needed_role=PERSON)
    p = parts.add_parser("ensure", parents=[common], help="create the coming months")
    _months_options(p, retention=False)
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
    p.add_argument(
        "--plan",
        action="store_true",
        help="list the months it would drop (or detach), with their estimated rows and "
        "size, as the dashboard's Drop form does before it asks; drop nothing",
    )
    p.set_defaults(func=_cmd_partitions_drop, needed_role=OPERATOR)
    p = parts.add_parser("maintain", parents=[common], help="ensure, then apply retention")
    _months_options(p, retention=True)
    p.set_defaults(func=_cmd_partitions_maintain, needed_role=OPERATOR)


def _partitions_logging() -> None:
    # maintain() logs a WARNING for each month it keeps because a session still needs it
    logs.basic_config(logging.WARNING, "undolog: %(message)s")


def _cmd_partitions_ensure(args: argparse.Namespace) -> int:
    _partitions_logging()
    with connect(args) as conn:
        created = partitions.ensure(conn, args.months_ahead)
    emit(
        args,
        [{"action": "created", "partition": p} for p in created],
        ["action", "partition"],
        whole=None,
    )
    return EXIT_OK


def _cmd_partitions_drop(args: argparse.Namespace) -> int:
    _partitions_logging()
    verb = "detached" if args.detach else "dropped"
    if args.plan:
        return _drop_plan(args)
    with connect(args) as conn:
        done = partitions.drop(conn, args.older_than, detach_only=args.detach, force=args.force)
    emit(
        args, [{"action": verb, "partition": p} for p in done], ["action", "partition"], whole=None
    )
    return EXIT_OK


def _drop_plan(args: argparse.Namespace) -> int:
    """``drop --plan``: the months a drop at ``--older-than`` would take, every one of
    them (partitions.months_to_drop over every partition, the dashboard's Drop form's
    rule and list), oldest first; nothing is dropped."""
    with connect(args) as conn:
        rows, _ = partitions.listed(conn)
        _, month_start = partitions.retention_setting(conn)
    if args.older_than > month_start:
        raise UsageError(
            f"--older-than {args.older_than.isoformat()} is after the start of the current "
            f"month ({month_start.astimezone(dt.UTC):%Y-%m-%d}Z), which is being written and is "
            "never dropped: the drop would be refused"
        )
    doomed = sorted(
        partitions.months_to_drop(rows, args.older_than),
        key=lambda p: (p["lower_bound"], p["parent"]),
    )
    if args.json:
        emit(args, doomed, LIST_COLUMNS)
        return EXIT_OK
    verb = "detach" if args.detach else "drop"
    cutoff = args.older_than.isoformat()
    if not doomed:
        print(f"no month ends by {cutoff}: nothing to {verb}")
        return EXIT_OK
    emit(
        args,
        doomed,
        LIST_COLUMNS,
        title=f"{len(doomed)} partitions end by {cutoff}: `partitions drop` would {verb} "
        "them (nothing was done)",
    )
    if args.force:
        print("--force: even a month holding calls of an unfinished session goes")
    else:
        print("if an unfinished session holds one of them, the drop is refused (--force)")
    return EXIT_OK


def _cmd_partitions_maintain(args: argparse.Namespace) -> int:
    _partitions_logging()
    with connect(args) as conn:
        done = partitions.maintain(conn, args.months_ahead, args.retention_months)
    emit(
        args, [{"action": a, "partition": p} for a, p in done], ["action", "partition"], whole=None
    )
    return EXIT_OK


def _months_options(p: argparse.ArgumentParser, *, retention: bool) -> None:
    """--months-ahead (and --retention-months) as plan, ensure and maintain take them:
    one parser (partitions' bounds, digits 0-9 only), so they refuse the same values."""
    p.add_argument(
        "--months-ahead",
        type=_bounded(*partitions.MONTHS_AHEAD_RANGE),
        default=partitions.MONTHS_AHEAD,
        help="months to create beyond the current one, 0 to 120 (default "
        f"{partitions.MONTHS_AHEAD}); digits 0-9 only",
    )
    if retention:
        p.add_argument(
            "--retention-months",
            type=_bounded(*partitions.RETENTION_MONTHS_RANGE),
            default=None,
            help="keep this many past months, 1 to 1200 (default: the database setting "
            "undolog.retention_months, else 12); digits 0-9 only",
        )


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            return partitions.months_given(value, (low, high))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


LIST_COLUMNS = [
    "parent",
    "name",
    "is_default",
    "lower_bound",
    "upper_bound",
    "est_rows",
    "est_bytes",
]


def _cmd_partitions_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows, _ = partitions.listed(conn)
    emit(args, rows, LIST_COLUMNS)
    return EXIT_OK


def _cmd_partitions_plan(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows, _ = partitions.listed(conn)
        pending = partitions.pending(conn)
        setting, month_start = partitions.retention_setting(conn)
    plan = partitions.maintenance_plan(
        rows, pending, setting, month_start, args.months_ahead, args.retention_months
    )
    if args.json:
        print_json({k: plain(v) for k, v in plan.items()})
        return EXIT_OK
    if plan["retention"] is None:
        print(
            f"retention: the setting undolog.retention_months = {setting!r} is not a number "
            "of months from 1 to 1200: maintenance would refuse to run until it is fixed"
        )
    else:
        whence = (
            "--retention-months"
            if plan["retention_given"]
            else "the default: undolog.retention_months is not set"
            if setting is None
            else f"undolog.retention_months = {setting}"
        )
        print(
            f"retention: keep {plan['retention']} months ({whence}): drop the months that "
            f"end by {plan['cutoff'].isoformat()}"
        )
    for key, label, none in (
        ("to_drop", "to drop (a month an unfinished session holds is kept)", "none"),
        (
            "to_create",
            f"to create (the current month and {plan['months_ahead']} ahead)",
            "none, they exist",
        ),
        ("pending", "to attach (created ahead, their locks were busy)", "none"),
        ("to_drain", "rows to move out of a DEFAULT partition", "none (by the estimates)"),
    ):
        print(f"{label}: {', '.join(plan[key]) or none}")
    print("and write an anchor of the history chains")
    return EXIT_OK
