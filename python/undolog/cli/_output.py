"""Printing: rows as an aligned table a person reads, or as JSON (--json)."""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import shutil
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from undolog.cli._common import Rows
from undolog.names import spell_ascii_name, spell_unseen


def plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID | datetime.datetime | datetime.timedelta | decimal.Decimal):
        return str(value)
    return value


def printable(text: str, *, name: bool = False) -> str:
    """Agents write much of what is shown (names, errors, args): no control character of
    theirs reaches the terminal, and none a reader would not see: each is written out as
    the dashboard writes it (``\\u001b``, ``\\u202e``, ``\\u3164``:
    :func:`undolog.names.spell_unseen`), and any other character that is not printable
    (U+00A0, a private-use one) as ``?``.

    ``name=True`` spells a name (a tool's, the one an agent gives itself) as an approver
    must read it, two names never alike (the dashboard's twin: ``shown_name``): every
    white space but a single space between two other characters, every character that is
    not printable ASCII, and the backslash written out as escapes (``\\n``, ``\\t``,
    ``\\u0020``, ``\\u0440``, ``\\\\``), and a name that is not plain ASCII marked
    `` (non-ASCII)``: "pay" written with Cyrillic er and a reads ``\\u0440\\u0430y
    (non-ASCII)``, never "pay"."""
    if not name:
        return "".join(ch if ch.isprintable() else "?" for ch in spell_unseen(text))
    return spell_ascii_name(text)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


# A read's table: the same command again with --json prints every value whole.
READ_AGAIN_WHOLE = "--json prints them whole"


def emit(
    args: argparse.Namespace,
    rows: Rows,
    columns: Sequence[str],
    title: str = "",
    whole: str | None = READ_AGAIN_WHOLE,
) -> None:
    """Rows as JSON (--json) or as an aligned table a person can read. A cell wider than
    its column is cut and marked …, and a hint on standard error says where to read it
    whole (``whole``): what was cut may be what matters (an amount after a long memo).
    A command that changed something passes where to read the result (running it again
    with --json would act again, or be refused), or None for no hint."""
    if args.json:
        print_json([{c: plain(r.get(c)) for c in columns} for r in rows])
        return
    if title:
        print(title)
    if not rows:
        print("  (none)")
        return

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        if isinstance(value, datetime.datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(value, datetime.timedelta):
            return str(value).split(".")[0]
        return printable(str(value))

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [min(max(len(c), *(len(row[i]) for row in table)), 60) for i, c in enumerate(columns)]
    widths = fit(widths, terminal_width())
    print("  ".join(c.upper()[:w].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in table:
        print("  ".join(cut(v, w).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if whole and any(len(v) > w for row in table for v, w in zip(row, widths, strict=True)):
        print(f"hint: cells marked … are cut; {whole}", file=sys.stderr)


def say_progress(command: str, text: str) -> None:
    """How far a long command got, on standard error (standard output is its result's,
    JSON with --json), flushed at once: ``undolog <command>: <text>``, the form of every
    command's progress lines."""
    print(f"undolog {command}: {text}", file=sys.stderr, flush=True)


MIN_COLUMN = 8  # a column is never narrowed below this (a short id, a state's start)


def terminal_width() -> int | None:
    """The terminal's width when a person reads it (COLUMNS overrides it); None for a
    pipe or a file, which gets whole cells (up to 60 characters) for grep and scripts."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def fit(widths: list[int], total: int | None) -> list[int]:
    """Narrow the widest columns, one character at a time, until the row fits ``total``."""
    widths = list(widths)
    if total is None:
        return widths
    gaps = 2 * (len(widths) - 1)
    while sum(widths) + gaps > total:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= MIN_COLUMN:
            break
        widths[widest] -= 1
    return widths


def cut(value: str, width: int) -> str:
    """``value`` in at most ``width`` characters: cut at a word boundary when one is near,
    and marked with … so that a cut text is not read as the whole."""
    if len(value) <= width:
        return value
    head = value[: width - 1]
    space = head.rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip() + "…"
