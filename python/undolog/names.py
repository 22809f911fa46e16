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
    out: list[str] = []
    last = len(name) - 1
    for i, ch in enumerate(name):
        if ch == " ":
            inner = 0 < i < last and name[i - 1] != " " and name[i + 1] != " "
            out.append(" " if inner else "\\u0020")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            out.append(spell_other(ch))
    return "".join(out)
