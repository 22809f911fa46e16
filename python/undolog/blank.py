"""What the journal calls blank, in Python: the one definition the engine's
``undolog.is_blank`` (sql/functions/is_blank.sql) applies to every name, operator,
reason and decided_by it requires, for a check made before the journal is asked (the
MCP proxy's undolog__undo_last, before a person is asked to approve an undo that the
journal would refuse). White space and the invisible format characters, in any script:
``str.strip()`` keeps U+200B (zero width space), U+00AD (soft hyphen), U+FEFF and the
like, which the journal counts as blank. tests/binding/test_blank.py compares the two
over every character."""

from __future__ import annotations

import re

# The characters of undolog.is_blank's class, as its regular expression lists them
_NOT_BLANK = re.compile(
    "[^\t\n\v\f\r \u0085\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f"
    "\u205f-\u2064\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]"
)


def is_blank(text: str | None) -> bool:
    """True when ``text`` is None or holds nothing but what undolog.is_blank calls blank."""
    return text is None or _NOT_BLANK.search(text) is None
