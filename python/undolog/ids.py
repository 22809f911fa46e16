"""The short form of an id that people read and type back (``…9f3a01bc``): printed by the
demos, taken back by ``undolog sessions show`` (undolog.cli._ids)."""

from __future__ import annotations

import uuid

SHORT_ID = 8


def short_id(value: uuid.UUID | str) -> str:
    """A short form of an id that tells apart ids made in the same millisecond: its last
    8 hex digits, after an ellipsis (``…9f3a01bc``). The ids are UUIDv7, whose first 12
    hex digits are the creation time: a prefix of 8 is the same for every id of the same
    minute."""
    return "…" + str(value).replace("-", "")[-SHORT_ID:]
