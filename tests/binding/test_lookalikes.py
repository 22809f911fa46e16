"""undolog.names' rule for look-alike characters in a value an approver reads (an
argument, edited arguments, a purpose): marked by every face, never changed; and for
combining marks stacked past what a writing system stacks (zalgo), written out. Pure
Python: the faces' own tests read a page and a notice."""

from __future__ import annotations

import pytest

from undolog import names

# (text, the look-alike characters the rule finds in it): ordinary text of any language
# has none; what an approver could read as another ASCII value has them.
CASES = [
    ("acct-1234", ""),
    ("caf\u00e9 cr\u00e8me br\u00fbl\u00e9e", ""),  # French
    ("\u6771\u4eac\u30bf\u30ef\u30fc\u3001T\u30b7\u30e3\u30c4", ""),  # Japanese, and "T"+kana
    ("\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440", ""),  # a Russian sentence
    ("\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5", ""),  # Greek
    ("\u0440ay", "\u0440"),  # Cyrillic er, Latin a y
    ("g\u03bfogle.com", "\u03bf"),  # Greek omicron
    ("p\u0430ypal.com/login", "\u0430"),
    ("acct-\u0440123", "\u0440"),  # one word: the hyphen joins it
    ("?to=\u0430\u0441\u0435", "\u0430\u0441\u0435"),  # and = : "?to=ace"
    ("AT&\u0422", "\u0422"),  # and &
    ('{"note":"\u0441\u0430\u0445\u0430\u0440","to":"bob"}', ""),  # JSON's " and , part
    ("acct-\U0001d7f7\U0001d7f8\U0001d7f9", "\U0001d7f7\U0001d7f8\U0001d7f9"),  # math digits
    ("\U0001d41a\U0001d41b", "\U0001d41a\U0001d41b"),  # mathematical bold a b
    ("\uff21\uff22\uff23", "\uff21\uff22\uff23"),  # fullwidth ABC
    ("acct-\u2460\u00b2", "\u2460\u00b2"),  # circled one, superscript two
    ("\u0663\u0664", "\u0663\u0664"),  # Arabic-Indic digits
    ("\u0969", "\u0969"),  # Devanagari three
    ("\u3001\uff01\uff08\u2026\u2116\u2122", ""),  # punctuation and symbols
    ("\U0001f600 \U0001f468\u200d\U0001f469\u200d\U0001f467", ""),  # emoji, a ZWJ sequence
    ("Hawai\u02bbi", ""),  # the okina, a modifier letter
    ("e\u0323\u0302", ""),  # Vietnamese in NFD: two diacritics
    # Latin letters no language writes, drawn as ASCII ones (NFKC keeps them)
    ("\u1d18\u1d00\u028f.com", "\u1d18\u1d00\u028f"),  # small capitals: "pay.com"
    ("\u0261oogle.com", "\u0261"),  # script g
    ("paypa\u01c0.com", "\u01c0"),  # dental click, drawn as l
    # and the letters of languages are not: Turkish, Polish, Twi, German, Vietnamese
    ("\u0131l\u0131k \u0130stanbul \u0141\u00f3d\u017a \u0254k\u0254m Stra\u00dfe", ""),
    ("Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u", ""),
    # a word of another script all of whose letters are drawn as ASCII ones, shaped as an
    # identifier (a digit, an @, a dot inside): Cyrillic "TAX-2024", "pay.io"
    ("\u0422\u0410\u0425-2024", "\u0422\u0410\u0425"),
    ("\u0440\u0430\u0443.\u0456\u043e", "\u0440\u0430\u0443\u0456\u043e"),
    ("\ua4d1\ua4ee\ua4ec-1", "\ua4d1\ua4ee\ua4ec"),  # Lisu "PAY-1"
    # and Russian prose is not: "sugar.", "LLC", "the 90s", "2nd floor", "T-34", "i.e."
    ("\u0441\u0430\u0445\u0430\u0440. \u041e\u041e\u041e 90-\u0445 2-\u0439", ""),
    ("\u0422-34 \u0442.\u0435. \u0443\u043b. \u0422\u0432\u0435\u0440\u0441\u043a\u0430\u044f", ""),
    # drawn as a JSON text's quote, where a value's own quotes are shown escaped: a
    # modifier letter double prime, a fullwidth quotation mark, a double prime; and
    # the curly quotes of prose and the corner brackets of Japanese are not
    ("x\u02ba, \uff02to\u2033: 1", "\u02ba\uff02\u2033"),
    ("\u201cquoted\u201d \u300c\u5f15\u7528\u300d", ""),
    ("pay\u0131\u0307n", "\u0131\u0307"),  # a dotless i dotted again, drawn as i
    # the next quotes the same attacker reaches for: a Vedic sign nihshvasa, a reversed
    # double prime, two primes, a Hebrew gershayim outside a Hebrew word
    ("x\u1cd3, \u2036to: 1", "\u1cd3\u2036"),
    ("x, \u05f4to: 1", "\u05f4"),
    # and text: a height (a key's opening quote never follows a digit), a Hebrew acronym
    ("5\u203210\u2033 and 5\u203210\u2032\u2032", ""),
    ("1\u2033, \u2033to: 1", "\u2033"),
    ("\u05e6\u05d4\u05f4\u05dc \u05ea\u05e9\u05e4\u05f4\u05d2", ""),
    # a combining double acute on a space is drawn as a quote; on a letter it is
    # Hungarian (o U+030B, decomposed: "ho\u030bseg")
    ("x, \u030bto: 1", "\u030b"),
    ("ho\u030bse\u0301g", ""),
]


@pytest.mark.parametrize(("text", "found"), CASES)
def test_the_rule_finds_the_lookalikes_and_only_them(text: str, found: str) -> None:
    assert names.lookalikes(text) == found
    runs = names.lookalike_runs(text)
    assert "".join(run for run, _ in runs) == text  # marked, never changed
    assert "".join(run for run, marked in runs if marked) == found


def test_two_primes_drawn_as_a_quote_are_marked_together() -> None:
    assert names.lookalike_runs("x, \u2032\u2032to: 1") == [
        ("x, ", False),
        ("\u2032\u2032", True),
        ("to: 1", False),
    ]


def test_the_runs_and_the_line_under_a_value() -> None:
    assert names.lookalike_runs("p\u0430ypal \u0440\u0440 \uff11\uff12") == [
        ("p", False),
        ("\u0430", True),
        ("ypal \u0440\u0440 ", False),  # a word of Cyrillic letters only: ordinary text
        ("\uff11\uff12", True),
    ]
    assert names.lookalike_list("acct-\U0001d7f7\U0001d7f7 \u0440ay") == (
        "\U0001d7f7 U+1D7F7 MATHEMATICAL MONOSPACE DIGIT ONE, "
        "\u0440 U+0440 CYRILLIC SMALL LETTER ER"
    )
    assert names.lookalike_list("caf\u00e9") == ""
    many = "".join(chr(0x1D7CE + i) for i in range(25))  # 25 mathematical digits
    assert names.lookalike_list(many).endswith(", and 5 more")


STACK = "\u0301\u0302\u0303\u0304\u0305\u0306"


def test_marks_stacked_past_a_writing_systems_are_written_out() -> None:
    # zalgo: the third general-purpose diacritic on a letter is written out, and after it
    assert names.spell_unseen("z" + STACK + "a") == ("z\u0301\u0302\\u0303\\u0304\\u0305\\u0306a")
    assert names.spell_unseen("e\u0323\u0302") == "e\u0323\u0302"  # Vietnamese: kept
    # a script's own marks: pointed Hebrew (3), Tibetan stacks (3) kept; the fifth written
    for text in ("\u05e9\u05bc\u05c1\u05b8", "\u0f66\u0f92\u0fb2\u0f74\u0f56"):
        assert names.spell_unseen(text) == text
    hebrew = "\u05e9" + "\u05bc\u05c1\u05b8\u0591\u05bd"
    assert names.spell_unseen(hebrew) == hebrew[:5] + "\\u05bd"
    # a name (a tool's, an agent's) is spelled a character at a time, by the same rule
    assert names.spell_name("z" + STACK, lambda ch: ch) == "z\u0301\u0302" + "".join(
        f"\\u{ord(mark):04x}" for mark in STACK[2:]
    )
    # an emoji keycap's one enclosing mark is kept (its variation selector is unseen)
    assert names.spell_unseen("1\ufe0f\u20e3") == "1\\ufe0f\u20e3"


def test_a_long_run_of_lookalikes_is_one_run() -> None:
    # an agent's 1 MiB argument of them is shown whole on the confirmation page: cut once,
    # when the run ends (grown a character at a time it was quadratic, 8 s for 300,000;
    # bench/bench_lookalikes.py times it)
    text = "\U0001d7f7" * 3_000
    assert names.lookalike_runs("acct-" + text + "!") == [
        ("acct-", False),
        (text, True),
        ("!", False),
    ]


def test_ascii_text_does_not_pay_for_the_scan_of_every_code_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the first traceback an agent's process logs (ASCII, with line breaks), the first
    # page of pretty JSON: the character classes made by the scan of 1,114,112 code
    # points (_categories, some 0.3 s) are not asked for by them
    from undolog import logs

    def not_for_ascii() -> None:
        raise AssertionError("the code points' scan, for ASCII text")

    for made in ("_stacked_marks_pattern", "_unseen_pattern", "_categories"):
        monkeypatch.setattr(names, made, not_for_ascii)
    assert logs.escaped("Traceback:\n  x\x1b", keep_newlines=True) == "Traceback:\n  x\\x1b"
    assert names.spell_unseen('{\n  "a": "\x1b\x7f"\n}') == '{\n  "a": "\\u001b\\u007f"\n}'


def test_stacked_marks_are_found_in_a_page_of_text() -> None:
    # one class of the BMP's marks, those beyond it asked only of a character beyond it
    # (bench/bench_lookalikes.py times a MiB of Russian text: 0.33 s before, 0.02 s)
    text = "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 " * 4_000
    assert names.over_stacked(text + "a\u0301\u0302\u0303") == {len(text) + 3}
    beyond = "\U0001d167\U0001d168\U0001d169\U0001d17b\U0001d17c"  # musical marks
    assert names.over_stacked("x" + beyond) == {5}
