"""Ids on the command line: a whole one, a unique prefix of one (``701f4cbc``), or the
end of one as undolog.ids.short_id prints it (``…9f3a01bc``)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg

from undolog.cli._common import UsageError, query
from undolog.errors import UndoLogError, UnknownApproval, UnknownNotification, UnknownSession
from undolog.queries import QUERIES

# The ids of each kind in a range (a prefix padded with 0s and fs), and ending with some
# hex digits: at most 4 of them, to tell one match from an ambiguous text.
_BETWEEN = {
    "session": QUERIES["session_ids_between"],
    "approval": QUERIES["approval_ids_between"],
    "delivery": QUERIES["delivery_ids_between"],
}
_ENDING = {
    "session": QUERIES["session_ids_ending"],
    "approval": QUERIES["approval_ids_ending"],
    "delivery": QUERIES["delivery_ids_ending"],
}
_NOT_FOUND: dict[str, type[UndoLogError]] = {
    "session": UnknownSession,
    "approval": UnknownApproval,
    "delivery": UnknownNotification,
}
# Where the ids of each kind are listed: the engine's hint for an unknown whole id (its
# UL002, UL013, UL025), given as well for a prefix or an end the command resolves itself.
_WHERE_LISTED = {
    "session": "Check the id: undolog sessions list shows the sessions.",
    "approval": "Check the id: undolog approvals list shows the pending requests, undolog "
    "sessions show ID every request of a session.",
    "delivery": "Check the id: undolog notifications deliveries shows them.",
}
_PREFIX = re.compile(r"[0-9a-fA-F-]{1,36}")
MIN_PREFIX = 4  # as git's short ids: fewer would match by chance more often than not


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def not_found(kind: str, message: str) -> UndoLogError:
    """Not found (exit 3), with the hint an unknown whole id gets: where the ids are. For
    an id the command looked up itself (a prefix, an end, or a whole id that no row the
    login reads has), as the engine's hint says it for one it was given."""
    error = _NOT_FOUND[kind](message)
    error.hint = _WHERE_LISTED[kind]
    return error


def resolve_id(conn: psycopg.Connection[Any], kind: str, text: str) -> uuid.UUID:
    """A whole id as given, or the one id of ``kind`` that starts with ``text`` (the
    short ids the demo and people print: ``701f4cbc``, ``701f4cbc…``)."""
    given = text.strip().rstrip("…").rstrip(".")
    try:
        return uuid.UUID(given)
    except ValueError:
        pass
    for mark in ("…", "..."):
        if given.startswith(mark):  # a short_id: the id's end
            return _resolve_suffix(conn, kind, text, given.removeprefix(mark))
    digits = given.replace("-", "").lower()
    if not _PREFIX.fullmatch(given) or not MIN_PREFIX <= len(digits) <= 32:
        raise UsageError(
            f"{text!r} is not {_article(kind)} {kind} id, nor an id prefix of "
            f"{MIN_PREFIX} to 32 hex digits"
        )
    rows = query(
        conn,
        _BETWEEN[kind],
        {"low": uuid.UUID(digits.ljust(32, "0")), "high": uuid.UUID(digits.ljust(32, "f"))},
    )
    if not rows:
        raise not_found(kind, f"unknown {kind} {given} (no {kind} id starts with it, or not yours)")
    if len(rows) > 1:
        shown = ", ".join(str(r["id"]) for r in rows[:3])
        more = ", ..." if len(rows) > 3 else ""
        raise UsageError(
            f"{kind} id prefix {given!r} is ambiguous: it matches {shown}{more}; "
            "give more characters"
        )
    return uuid.UUID(str(rows[0]["id"]))


def _resolve_suffix(conn: psycopg.Connection[Any], kind: str, text: str, tail: str) -> uuid.UUID:
    digits = tail.replace("-", "").lower()
    if not re.fullmatch(r"[0-9a-f]+", digits) or len(digits) < MIN_PREFIX:
        raise UsageError(
            f"{text!r} is not {_article(kind)} {kind} id, nor an id's end of at least "
            f"{MIN_PREFIX} hex digits"
        )
    # reversed, so that the end is a prefix: an index range (queries.sql, *_ids_ending)
    rows = query(conn, _ENDING[kind], {"reversed_pattern": digits[::-1] + "%"})
    if not rows:
        raise not_found(kind, f"unknown {kind} {text} (no {kind} id ends with it, or not yours)")
    if len(rows) > 1:
        shown = ", ".join(str(r["id"]) for r in rows[:3])
        raise UsageError(f"{kind} id end {text!r} is ambiguous: it matches {shown}; give more")
    return uuid.UUID(str(rows[0]["id"]))
