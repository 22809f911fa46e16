"""Partition maintenance: the journal's months ahead, and retention behind.

One function per SQL entry point, one round trip each, for a scheduler or the CLI:

- ``maintain``: what to schedule (e.g. daily). Drains the default partitions, drops the
  months past retention (keeping, with a logged warning, any month an unfinished session
  still needs), creates the months ahead. Answers ``(action, partition)`` pairs.
- ``ensure``: create the months from the current one through ``months_ahead`` later.
- ``drop``: drop (or detach) the months that end at or before a cut-off; refuses months
  that unfinished sessions hold (``PartitionInUse``, UL016) unless forced.

And what they work on, for the CLI (``undolog partitions list|plan``) and the dashboard's
Maintenance page alike: ``listed`` (the partitions, from the catalog only),
``maintenance_plan`` (what ``maintain`` would do now, from them) and ``months_to_drop``
(the months a ``drop`` at a cut-off takes, from them).

The connection's role needs ``undolog_operator``. With an autocommit connection each call
is its own transaction; otherwise it joins the caller's, which must commit it (and holds
the partition-maintenance lock until then). A server-side ``lock_timeout`` (e.g.
``PGOPTIONS='-c lock_timeout=5s'``) bounds how long a drop may queue for its catalog lock
behind long readers of the journal. Errors come out as ``UndoLogError`` subclasses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from psycopg.errors import Diagnostic
from psycopg.rows import dict_row

from undolog.engine import Connection, translated
from undolog.errors import InvalidArgument
from undolog.queries import QUERIES

log = logging.getLogger(__name__)

# What `maintain` and `ensure` do by default: three months ahead, the retention of the
# database setting (undolog.retention_months), else 12 months. The bounds are the
# engine's (ensure_partitions, maintain_partitions, undolog.retention_months), which
# refuse anything outside them with UL008.
MONTHS_AHEAD = 3
DEFAULT_RETENTION_MONTHS = 12
MONTHS_AHEAD_RANGE = (0, 120)
RETENTION_MONTHS_RANGE = (1, 1200)


@contextlib.contextmanager
def _server_warnings_logged(conn: Connection) -> Iterator[None]:
    """Log the server's WARNINGs during the call (e.g. which sessions kept a month), each
    with its hint: what the operator does about it."""

    def handler(diag: Diagnostic) -> None:
        if diag.severity_nonlocalized == "WARNING":
            detail = f" ({diag.message_detail})" if diag.message_detail else ""
            hint = f" {diag.message_hint}" if diag.message_hint else ""
            log.warning("%s%s.%s", diag.message_primary, detail, hint)

    conn.add_notice_handler(handler)
    try:
        yield
    finally:
        conn.remove_notice_handler(handler)


def ensure(conn: Connection, months_ahead: int = MONTHS_AHEAD) -> list[str]:
    """Create the missing months (current UTC month + ``months_ahead``, 0..120) of the
    effect log and its history, after moving any rows out of the default partitions into
    their months. Answers the partition names created; idempotent."""
    with translated(), _server_warnings_logged(conn):
        rows = conn.execute(QUERIES["ensure_partitions"], {"months_ahead": months_ahead}).fetchall()
    return [str(name) for (name,) in rows]


def drop(
    conn: Connection,
    older_than: datetime,
    *,
    detach_only: bool = False,
    force: bool = False,
) -> list[str]:
    """Drop every month partition that ends at or before ``older_than`` (timezone-aware;
    never the current month), pruning the undo entries (with their history) and approval
    rows of those effects. ``detach_only`` keeps the months as plain tables to archive;
    ``force`` drops even months holding effects of unfinished sessions. Answers the names
    dropped."""
    if older_than.utcoffset() is None:
        raise InvalidArgument(
            f"older_than must be timezone-aware (months are UTC's), not {older_than!r}"
        )
    with translated(), _server_warnings_logged(conn):
        rows = conn.execute(
            QUERIES["drop_partitions"],
            {"older_than": older_than, "detach_only": detach_only, "force": force},
        ).fetchall()
    return [str(name) for (name,) in rows]


def maintain(
    conn: Connection, months_ahead: int = MONTHS_AHEAD, retention_months: int | None = None
) -> list[tuple[str, str]]:
    """Drain the defaults, drop the months past retention (``retention_months``, else the
    server setting ``undolog.retention_months``, else 12), create ``months_ahead`` months.
    Answers ``(action, partition)`` pairs: action 'created', 'dropped', 'skipped' (a
    month that unfinished sessions still hold; a warning names them) or 'pending' (a
    month created ahead whose attachment waits for the next run: its locks were busy)."""
    with translated(), _server_warnings_logged(conn):
        rows = conn.execute(
            QUERIES["maintain_partitions"],
            {"months_ahead": months_ahead, "retention_months": retention_months},
        ).fetchall()
    return [(str(action), str(partition)) for action, partition in rows]


Row = dict[str, Any]


# How a number of months is written, wherever it comes from: ASCII digits alone (no sign,
# no '_', no other script's digits, which int() would take), at most 9 of them, as the
# engine reads an integer setting (undolog.integer_setting_value: '^[0-9]{1,9}$' after
# trimming spaces, so '00012' is 12); then the range.
MONTHS_DIGITS = re.compile(r"[0-9]{1,9}")


def months_given(text: str, bounds: tuple[int, int]) -> int:
    """A number of months a person typed (``--months-ahead``, ``--retention-months`` of
    ``partitions plan``, ``ensure`` and ``maintain``, the Maintenance page's fields):
    digits 0-9 alone, at most 9 of them (spaces around are trimmed), within ``bounds``
    (MONTHS_AHEAD_RANGE, RETENTION_MONTHS_RANGE: the engine's); ValueError saying what is
    wrong."""
    low, high = bounds
    digits = text.strip(" \t")
    if MONTHS_DIGITS.fullmatch(digits) is None:
        raise ValueError(f"not a whole number in digits 0-9: {text[:20]!r}")
    number = int(digits)
    if not low <= number <= high:
        raise ValueError(f"must be from {low} to {high}, not {number}")
    return number


def listed(conn: Connection, limit: int | None = None) -> tuple[list[Row], bool]:
    """The journal's partitions (the effect log's and its history's months, newest
    first, then each one's DEFAULT), with the catalog's estimates of their rows and size
    (``parent, name, is_default, lower_bound, upper_bound, est_rows, est_bytes``): read
    from the catalog only, so no table is locked. At most ``limit`` (None: all); and
    whether more were left off."""
    cap = 2**31 - 2 if limit is None else limit
    with translated():
        rows = (
            conn.cursor(row_factory=dict_row)
            .execute(QUERIES["dashboard_partitions"], {"limit": cap + 1})
            .fetchall()
        )
    return rows[:cap], len(rows) > cap


def pending(conn: Connection) -> list[str]:
    """The months created ahead whose attachment waits for the next maintenance run."""
    with translated():
        rows = conn.execute(QUERIES["pending_partitions"]).fetchall()
    return [str(name) for (name,) in rows]


def retention_setting(conn: Connection) -> tuple[str | None, dt.datetime]:
    """The setting undolog.retention_months (None: unset) and the current UTC month's
    first instant, as the database says them."""
    with translated():
        row = conn.execute(QUERIES["dashboard_retention"]).fetchone()
    assert row is not None
    return (None if row[0] is None else str(row[0])), row[1]


def _months_later(start: dt.datetime, months: int) -> dt.datetime:
    """The first instant of the month ``months`` after (or before) ``start``'s month."""
    index = start.year * 12 + start.month - 1 + months
    return start.replace(year=index // 12, month=index % 12 + 1, day=1)


def retention_of(setting: str | None) -> int | None:
    """The months maintenance keeps for the setting undolog.retention_months, as the
    engine reads it (undolog.integer_setting_value: spaces trimmed, empty or unset is
    the default, else 1 to 9 digits 0-9 within the range, so '00012' is 12), or None
    when maintenance would refuse it."""
    low, high = RETENTION_MONTHS_RANGE
    text = None if setting is None else setting.strip(" ")
    if not text:
        return DEFAULT_RETENTION_MONTHS
    if MONTHS_DIGITS.fullmatch(text) and low <= int(text) <= high:
        return int(text)
    return None


def months_to_drop(parts: list[Row], cutoff: dt.datetime) -> list[Row]:
    """The months of ``parts`` (every partition, as ``listed(conn)`` reads them: a list
    cut short would miss the oldest) that a drop at ``cutoff`` takes: each month of the
    effect log and of its history that ends at or before it, as undolog.drop_partitions
    chooses them (never a DEFAULT partition), in the order given. One rule for `undolog
    partitions plan` (its to_drop, at the retention's cut-off) and the Maintenance
    page's "Drop old months" list and confirmation."""
    return [p for p in parts if not p["is_default"] and p["upper_bound"] <= cutoff]


def maintenance_plan(
    parts: list[Row],
    pending: list[str],
    setting: str | None,
    month_start: dt.datetime,
    months_ahead: int = MONTHS_AHEAD,
    retention_months: int | None = None,
) -> dict[str, Any]:
    """What ``maintain(conn, months_ahead, retention_months)`` would do now, from the
    partitions listed: the months past retention it would drop (unless an unfinished
    session holds one), the months ahead it would create, the tables created ahead still
    to attach, and the DEFAULT partitions holding rows to move into their months."""
    current = month_start.astimezone(dt.UTC)
    months = retention_of(setting) if retention_months is None else retention_months
    cutoff = None if months is None else _months_later(current, -months)
    months_parts = [p for p in parts if not p["is_default"]]
    to_drop = [] if cutoff is None else [p["name"] for p in months_to_drop(parts, cutoff)]
    to_create: list[str] = []
    for parent in sorted({p["parent"] for p in parts}):
        for n in range(months_ahead + 1):
            start, end = _months_later(current, n), _months_later(current, n + 1)
            if not any(
                p["parent"] == parent and p["lower_bound"] < end and p["upper_bound"] > start
                for p in months_parts
            ):
                name = f"{parent}_{start:%Y_%m}"
                if name not in pending:
                    to_create.append(name)
    to_drain = [p["name"] for p in parts if p["is_default"] and p["est_rows"] > 0]
    return {
        "setting": setting,
        "retention": months,
        "retention_given": retention_months is not None,
        "cutoff": cutoff,
        "to_drop": to_drop,
        "to_create": to_create,
        "pending": pending,
        "to_drain": to_drain,
        "months_ahead": months_ahead,
    }


__all__ = [
    "drop",
    "ensure",
    "listed",
    "maintain",
    "maintenance_plan",
    "months_given",
    "months_to_drop",
    "pending",
    "retention_of",
    "retention_setting",
]
