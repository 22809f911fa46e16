"""How an agent's text (a name, args, an error) is spelled to an approver.

Every face (the dashboard's ``shown``, the CLI's ``printable``, the notifications' Slack
and e-mail text) writes out the characters no reader sees as themselves by one rule,
:func:`spell_unseen`, so that a text an approver reads as "acct-1234" is never another.

The CLI (``printable(..., name=True)``), the notifications and the dashboard
(``shown(..., name=True)``) spell names by :func:`spell_name`, so that two names an
approver reads alike are never two names: white space is where lookalikes hide in every
face. What each face does with the other characters differs (a terminal and a notice
show escapes for everything not ASCII, :func:`spell_ascii_name`; a browser shows the
letters and marks them), so that part is theirs.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

# Characters a reader does not see as themselves: bidirectional controls (U+202E turns
# the rest of a line around, so "acct-1234" can be the text 4321-tcca), other format
# characters (zero-width ones, the invisible tag characters U+E0000-E007F that can carry a
# hidden text), line and paragraph separators, control characters but tab and newline,
# and every other Default_Ignorable_Code_Point of Unicode (DerivedCoreProperties: the 256
# variation selectors, which can smuggle a byte each behind a visible letter, the Hangul
# fillers, the Mongolian free variation selectors, the unassigned rest of the tag plane).
# Python's str.isprintable() calls several of them printable (U+3164, U+FE0F, U+034F):
# a face that only asked it showed them as they are.
_UNSEEN_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Cc"})
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def is_unseen(ch: str) -> bool:
    """Whether no reader sees the character ``ch`` as itself (above)."""
    code = ord(ch)
    return (unicodedata.category(ch) in _UNSEEN_CATEGORIES and ch not in "\t\n\r") or any(
        low <= code <= high for low, high in _DEFAULT_IGNORABLE
    )


@functools.cache
def _unseen_pattern() -> re.Pattern[str]:
    """Every character is_unseen() names, as one character class. Made the first time a
    text that is not plain ASCII is spelled, not at import: asking each of the 1,114,112
    code points its category takes some 0.2 s, which every `import undolog` (an agent's
    process, each CLI command) paid when this was a module constant."""
    return re.compile(
        "["
        + "".join(
            re.escape(chr(code))
            for code in range(0x110000)
            if unicodedata.category(chr(code)) in _UNSEEN_CATEGORIES and chr(code) not in "\t\n\r"
        )
        + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _DEFAULT_IGNORABLE)
        + "]"
    )


def _spelled(match: re.Match[str]) -> str:
    """JSON's escape of one character (a UTF-16 pair beyond the BMP, as JSON spells it)."""
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def spell_unseen(text: str) -> str:
    """``text`` with every character no reader sees as itself (:func:`is_unseen`) written
    out as its JSON escape, ``\\u202e``: in JSON text that is the same value (outside a
    string JSON holds none of them), and in plain text it is seen. Tab, newline and
    carriage return are left to the face (a page shows them; a one-line notice folds
    them)."""
    if text.isascii() and text.isprintable():
        return text
    return _unseen_pattern().sub(_spelled, text)


# Written out whatever the face: a backslash (so that an escape the face writes is never
# the name's own text) and the white space a terminal or HTML would not show as itself.
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def spell_name(name: str, spell_other: Callable[[str], str]) -> str:
    """``name`` with every white space but a single space between two other characters,
    and every backslash, written out as escapes (``\\u0020``, ``\\n``, ``\\t``,
    ``\\r``, ``\\\\``): "pay\\n\\t " never reads "pay". Every other character is
    ``spell_other(ch)``."""
    return _spaces_spelled(name, lambda ch: _ESCAPES.get(ch) or spell_other(ch))


def spell_spaces(text: str) -> str:
    """``text`` with every space but a single one between two other characters written
    ``\\u0020``, the rest as it is: for JSON text (where ``\\u0020`` inside a string is
    the same value), whose runs of spaces a terminal would wrap into a line of their own."""
    return _spaces_spelled(text, lambda ch: ch)


def _spaces_spelled(text: str, spell_other: Callable[[str], str]) -> str:
    out: list[str] = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch == " ":
            inner = 0 < i < last and text[i - 1] != " " and text[i + 1] != " "
            out.append(" " if inner else "\\u0020")
        else:
            out.append(spell_other(ch))
    return "".join(out)


def ascii_or_escape(ch: str) -> str:
    """``ch`` when it is printable ASCII, else its escape (``\\u0440``, ``\\U0001f4b8``)."""
    if ch.isascii() and ch.isprintable():
        return ch
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def spell_ascii_name(name: str) -> str:
    """A name as a terminal or a notice shows it to an approver: :func:`spell_name` with
    every character that is not printable ASCII escaped, and `` (non-ASCII)`` after a name
    that is not plain ASCII: "pay" written with Cyrillic er and a reads ``\\u0440\\u0430y
    (non-ASCII)``, never "pay"."""
    return spell_name(name, ascii_or_escape) + ("" if name.isascii() else " (non-ASCII)")
