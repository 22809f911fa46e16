"""undolog.blank.is_blank is the journal's undolog.is_blank, character for character."""

from __future__ import annotations

from typing import Any

import psycopg

from undolog.blank import is_blank


def test_python_and_the_journal_call_the_same_characters_blank(
    conn: psycopg.Connection[Any],
) -> None:
    """Every code point PostgreSQL's text holds (no U+0000, no surrogates), one by one."""
    rows = conn.execute(
        "SELECT c FROM generate_series(1, 1114111) AS c"
        " WHERE c NOT BETWEEN 55296 AND 57343 AND undolog.is_blank(chr(c))"
    ).fetchall()
    journal = {int(row[0]) for row in rows}
    python = {c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF and is_blank(chr(c))}
    assert python == journal, (sorted(python - journal), sorted(journal - python))
    assert {0x200B, 0x00AD, 0xFEFF, 0x2060, 0x2064, 0x180E, 0x20} <= journal


def test_texts() -> None:
    assert is_blank(None) and is_blank("") and is_blank(" \t\u200b\ufeff")
    assert not is_blank("\u200bx") and not is_blank(".")
