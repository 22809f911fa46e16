"""Partition maintenance: the journal's months ahead, and retention behind.

One function per SQL entry point, one round trip each, for a scheduler or the CLI:

- ``maintain``: what to schedule (e.g. daily). Drains the default partitions, drops the
  months past retention (keeping, with a logged warning, any month an unfinished session
  still needs), creates the months ahead. Answers ``(action, partition)`` pairs.
- ``ensure``: create the months from the current one through ``months_ahead`` later.
- ``drop``: drop (or detach) the months that end at or before a cut-off; refuses months
  that unfinished sessions hold (``PartitionInUse``, UL016) unless forced.

The connection's role needs ``undolog_operator``. With an autocommit connection each call
is its own transaction; otherwise it joins the caller's, which must commit it (and holds
the partition-maintenance lock until then). A server-side ``lock_timeout`` (e.g.
``PGOPTIONS='-c lock_timeout=5s'``) bounds how long a drop may queue for its catalog lock
behind long readers of the journal. Errors come out as ``UndoLogError`` subclasses.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime

from psycopg.errors import Diagnostic

from undolog.engine import Connection, translated
from undolog.errors import InvalidArgument
from undolog.queries import QUERIES

log = logging.getLogger(__name__)


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


def ensure(conn: Connection, months_ahead: int = 3) -> list[str]:
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
    conn: Connection, months_ahead: int = 3, retention_months: int | None = None
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


__all__ = ["drop", "ensure", "maintain"]
