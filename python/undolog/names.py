"""How a name (a tool's, the one an agent gives itself) is spelled to an approver.

The CLI (``printable(..., name=True)``) and the dashboard (``shown(..., name=True)``)
both spell names by :func:`spell_name`, so that two names an approver reads alike are
never two names: white space is where lookalikes hide in both faces. What each face
does with the other characters differs (a terminal shows escapes for everything not
ASCII, a browser shows the letters and marks them), so that part is theirs.
"""

from __future__ import annotations

from collections.abc import Callable

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
