"""undolog.names' rule for what no reader sees: one rule, asked two ways (a character at
a time, is_unseen; a whole text, spell_unseen's character class), made without costing
every process that imports undolog the time to build it."""

from __future__ import annotations

import subprocess
import sys

from undolog import names

# Where the characters no reader sees are (every one of them), and a sample of the rest:
# every code point would take the test some 10 s.
DENSE = [*range(0, 0x3200), *range(0xFE00, 0x10000), *range(0x1BC00, 0x1D200)]
DENSE += [*range(0xE0000, 0xE1000)]


def test_the_character_class_and_is_unseen_name_the_same_characters() -> None:
    pattern = names._unseen_pattern()
    codes = sorted({*DENSE, *range(0, 0x110000, 97)})
    differ = [
        f"U+{code:04X}"
        for code in codes
        if (pattern.fullmatch(chr(code)) is not None) != names.is_unseen(chr(code))
    ]
    assert not differ, differ[:20]


def test_spell_unseen_writes_out_what_no_reader_sees_and_leaves_the_rest() -> None:
    assert names.spell_unseen("acct-1234\u3164") == "acct-1234\\u3164"
    assert names.spell_unseen("\u202e4321") == "\\u202e4321"
    assert names.spell_unseen("tab\there\n") == "tab\there\n"  # the face's to fold
    assert names.spell_unseen("café 😀") == "café 😀"
    assert names.spell_unseen("a\U000e0041") == "a\\udb40\\udc41"  # JSON's UTF-16 pair


def test_importing_undolog_does_not_build_the_character_class() -> None:
    """Asking every code point its category takes some 0.2 s: a module constant made
    every agent process and every CLI command pay it at import."""
    probe = (
        "import undolog, undolog.cli, undolog.logs, undolog.names as n;"
        "print(n._unseen_pattern.cache_info().currsize)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "0"
