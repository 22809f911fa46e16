"""undolog.names' look-alike scan finds the words that may hold a look-alike by searching
the whole text (names._candidates), not by asking each word: it must find exactly what
asking each word finds (the rule's cases are tests/binding/test_lookalikes.py). And a
purpose, shown with its own double quotes as they are, has no quote look-alikes. Pure
Python. So must the two patterns every text not ASCII is searched with (the unseen
characters, the stacked marks), now of the BMP alone for a text with nothing beyond it."""

from __future__ import annotations

import random
import re

import pytest

from undolog import names

# Characters of every kind the rule tells apart: ASCII letters, digits and the characters
# of identifiers, the ends of words, Latin letters beyond ASCII, letters of other scripts
# (drawn as ASCII ones or not), Han, the look-alikes wherever they are (a mathematical
# digit, a fullwidth letter, an Arabic-Indic digit, the quotes of rule (e)), those of rule
# (e) that are look-alikes where they are (and what they are told by: a digit before, a
# Hebrew letter around, a letter under), combining marks, an okina.
ALPHABET = (
    "aZp9@.-_ \n\"',;[]{}\u00ab\u2014\u3000"
    "\u00e9\u0131\u0261\u1d18"
    "\u0430\u0440\u0441\u0422\u0416\u044f\u03bf\u039f\u03bb\u0585\ua4d1"
    "\u6771\u30b7"
    "\U0001d7f7\uff21\u0663\u00b2"
    "\u02ba\uff02\u1cd3\u2036\u02dd\u02ee"
    "\u2033\u2032\u05f4\u05d0\u0307\u030b\u030e\u0301\u02bb"
)


def every_word(text: str, quotes: bool) -> list[int]:
    """The scan as it was: each word that is not ASCII asked (names._word_positions)."""
    found: list[int] = []
    for word in names._WORD.finditer(text):
        if not word.group().isascii():
            found.extend(word.start() + i for i in names._word_positions(word.group(), quotes))
    return found


def texts() -> list[str]:
    rng = random.Random(20261207)
    made = []
    for _ in range(300):
        # few kinds of character in one text: the rare pairs (a Latin letter and a
        # Cyrillic one in a word, a digit and a Greek one) come up often
        kinds = rng.sample(ALPHABET, rng.randint(2, 8))
        made.append("".join(rng.choice(kinds) for _ in range(rng.randint(1, 120))))
    return made


# Texts whose words that may hold one come close together (names._DENSE), found forwards
# (a Latin letter before the Cyrillic one) or backwards (after it), between stretches of
# prose that holds none: each part is asked word by word, or searched.
PROSE = "\u0441\u0430\u0445\u0430\u0440 \u0438 \u043c\u0443\u043a\u0430 " * 40
DENSE = [
    PROSE + "acct-\u04401 " * 40 + PROSE,
    PROSE + "\u0440ay " * 40 + PROSE,
    "\u0440ay " * 40 + PROSE + "acct-\u04401 " * 40,
    ("\u0440ay " * 20 + PROSE) * 3 + "x\u02ba, \uff02to\u2033: 1 " * 30,
]


@pytest.mark.parametrize("quotes", [True, False])
def test_the_search_finds_what_asking_every_word_finds(quotes: bool) -> None:
    for text in texts() + DENSE:
        assert names._lookalike_positions(text, quotes) == every_word(text, quotes), text


def test_long_words_and_prose_of_one_script_are_scanned_whole() -> None:
    """A word the length of the text (a MiB of mathematical digits is one word), words
    that are candidates at both ends, and prose whose words are none."""
    digits = "\U0001d7f7" * 5000
    assert names._lookalike_positions(digits) == list(range(5000))
    russian = "\u0441\u0430\u0445\u0430\u0440 \u0438 \u043c\u0443\u043a\u0430 " * 500
    assert names._lookalike_positions(russian) == []
    # a Cyrillic a then Latin letters; a digit, Cyrillic zhe, a Latin p; zhe then a p
    ends = "\u0430" + "x" * 3000 + " 1" + "\u0416" * 3000 + "p " + "\u0416" * 3000 + "p"
    assert names._lookalike_positions(ends) == [0, *range(3003, 6003), *range(6005, 9005)]
    assert names._lookalike_positions(ends) == every_word(ends, True)


def classes_as_they_were() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """names._unseen_pattern and names._stacked_marks_pattern as they were: each a class
    (of alternatives) tried at every character."""
    categories = names._categories()
    unseen = sorted(
        code
        for category in names._UNSEEN_CATEGORIES
        for code in categories[category]
        if chr(code) not in "\t\n\r"
    )
    ignorable = "".join(
        f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in names._DEFAULT_IGNORABLE
    )
    marks = sorted(code for category in names._MARK_CATEGORIES for code in categories[category])
    bmp = names._ranges([code for code in marks if code <= 0xFFFF])
    astral = names._ranges([code for code in marks if code > 0xFFFF])
    mark = f"(?:[{bmp}]|(?=[\U00010000-\U0010ffff])[{astral}])"
    return (
        re.compile("[" + names._ranges(unseen) + ignorable + "]"),
        re.compile(f"{mark}{{{names.GENERAL_MARKS_KEPT + 1},}}"),
    )


def test_the_unseen_and_stacked_marks_patterns_find_what_they_found() -> None:
    # unseen ones (a bidi override, a zero-width space, a tag, a musical format
    # character, a variation selector and its supplement's, a soft hyphen, a control),
    # marks of the BMP and beyond it, letters and digits of the BMP and beyond it
    alphabet = (
        "a\u0416 \n\t\u202e\u200b\U000e0041\U0001d173\ufe0f\U000e0100\u00ad\x07"
        "\u0301\u0302\u05b0\u0483\U0001d167\U000101fd\U0001d7f7\U0001f600"
    )
    unseen, stacked = classes_as_they_were()
    rng = random.Random(7)
    for _ in range(300):
        kinds = rng.sample(alphabet, rng.randint(1, 6))
        text = "".join(rng.choice(kinds) for _ in range(rng.randint(1, 60)))
        beyond = names._BEYOND_BMP.search(text) is not None
        for was, now in (
            (unseen, names._unseen_pattern(beyond)),
            (stacked, names._stacked_marks_pattern(beyond)),
        ):
            assert [m.span() for m in now.finditer(text)] == [m.span() for m in was.finditer(text)]


# Letters of every script of the BMP, for hostile values of thousands of distinct
# characters (an agent's payload made to cost the dashboard its time).
LETTERS = [chr(code) for code in range(0x100, 0x10000) if chr(code).isalpha()]


def many_kinds() -> list[str]:
    """Texts of more distinct characters not ASCII than names._MANY_CHARS: anywhere, only
    after the first 4096 (found by names._non_ascii's searches), past them, and at the
    bound itself; mixed with ALPHABET's, so the rule's cases come up among them."""
    rng = random.Random(20261208)
    made = []
    for n in (names._MANY_CHARS, names._MANY_CHARS + 1, 200, 3000):
        for _ in range(6):
            kinds = rng.sample(LETTERS, n) + list(ALPHABET)
            made.append("".join(rng.choice(kinds) for _ in range(rng.randint(n, 3 * n))))
    for first, after in ((10, 30), (10, 300), (40, 40), (300, 3000)):
        chosen = rng.sample(LETTERS, first + after)
        head = "".join(rng.choice(chosen[:first] + list(ALPHABET)) for _ in range(4096))
        tail = "".join(rng.choice(chosen[first:] + list(ALPHABET)) for _ in range(2 * after))
        made.append(head + tail)
    return made


@pytest.mark.parametrize("quotes", [True, False])
def test_texts_of_many_distinct_characters_are_marked_as_every_word_asked(
    quotes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past names._MANY_CHARS distinct characters, every word is asked rather than a
    search built for them: the marks are the same either way."""
    hostile = many_kinds()
    for text in hostile:
        assert names._lookalike_positions(text, quotes) == every_word(text, quotes), text[:80]
    monkeypatch.setattr(names, "_MANY_CHARS", 10**6)  # the search, whatever the text
    for text in hostile:
        assert names._lookalike_positions(text, quotes) == every_word(text, quotes), text[:80]


def test_a_text_of_many_distinct_characters_builds_no_search_for_them() -> None:
    """A search's character classes hold each distinct character: a value of 3,000 of
    them took some 50 ms to build one (and 256 such values, the cache, made each new one
    pay again), new characters past the first 4096 some 120 ms (16 searches, each of
    all those found before). Past names._MANY_CHARS none is built."""
    rng = random.Random(5)
    chosen = rng.sample(LETTERS, 3000)
    anywhere = " ".join("".join(chosen[i : i + 8]) + "x1" for i in range(0, 3000, 8))
    late = "".join(chosen[:2000]) + "b" * 2096 + "".join(chosen[2000:])
    names._candidates.cache_clear()
    for text in (anywhere, late):
        assert names._non_ascii(text) is None
        names.lookalike_runs(text)
    assert names._candidates.cache_info().currsize == 0
    few = "p\u0430ypal " * 1000 + "".join(chosen[: names._MANY_CHARS - 1])  # at the bound
    assert names._non_ascii(few) == frozenset({*chosen[: names._MANY_CHARS - 1], "\u0430"})
    assert names._lookalike_positions(few) == every_word(few, True)
