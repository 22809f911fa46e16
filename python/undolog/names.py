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

In values (arguments, edited arguments, a purpose), the characters that look like ASCII
letters or digits and are not (mathematical digits, a Cyrillic letter in a Latin word)
are found by one rule, :func:`lookalike_runs`: the dashboard marks them and lists them
under the value (:func:`lookalike_list`), and so do the notices.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable

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
def _categories() -> dict[str, list[int]]:
    """The code points of the categories the rules below ask for (the unseen ones, the
    combining marks), in one pass over the 1,114,112 code points: made the first time a
    text that is not plain ASCII is spelled, not at import (the pass takes some 0.2 s,
    which every `import undolog`, an agent's process, each CLI command, paid when the
    character class was a module constant)."""
    wanted: dict[str, list[int]] = {c: [] for c in (*_UNSEEN_CATEGORIES, *_MARK_CATEGORIES)}
    for code in range(0x110000):
        found = wanted.get(unicodedata.category(chr(code)))
        if found is not None:
            found.append(code)
    return wanted


def _ranges(codes: list[int]) -> str:
    """``codes`` (ascending) as the ranges of a regular expression's character class."""
    out: list[str] = []
    start = prev = -2
    for code in [*codes, -1]:
        if code == prev + 1:
            prev = code
            continue
        if start >= 0:
            last = "" if prev == start else "-" + re.escape(chr(prev))
            out.append(re.escape(chr(start)) + last)
        start = prev = code
    return "".join(out)


@functools.cache
def _unseen_pattern(beyond_bmp: bool = True) -> re.Pattern[str]:
    """Every character is_unseen() names, as one character class (made when first asked
    for, not at import: :func:`_categories`); those of the BMP alone, for a text with no
    character beyond it (``beyond_bmp=False``: their few ranges beyond it were tried on
    every character, a third of the time of a MiB of Russian text)."""
    codes = sorted(
        {
            code
            for category in _UNSEEN_CATEGORIES
            for code in _categories()[category]
            if chr(code) not in "\t\n\r"
        }.union(*(range(low, high + 1) for low, high in _DEFAULT_IGNORABLE))
    )
    return re.compile(f"[{_ranges([code for code in codes if beyond_bmp or code <= 0xFFFF])}]")


_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")


# Combining marks stacked on one letter (zalgo text: "a" and fifty marks) draw over the
# characters around them, the lines above and below: what they cover is not seen. A
# writing system stacks a few: Vietnamese and Yoruba two of the general-purpose
# diacritics (U+0300-U+036F and their kin, whose names begin "COMBINING"), pointed Hebrew
# or Tibetan three or four of their own marks. Beyond that a mark is written out as its
# escape (\u0301), as an unseen character is: the third general-purpose diacritic on a
# letter, and the fifth mark of any kind.
_MARK_CATEGORIES = frozenset({"Mn", "Me"})
GENERAL_MARKS_KEPT = 2
MARKS_KEPT = 4


@functools.cache
def _stacked_marks_pattern(beyond_bmp: bool = True) -> re.Pattern[str]:
    """Three marks or more in a row (fewer are always kept). The marks beyond the BMP are
    asked for only of a character beyond it: one class of them all tried its hundreds of
    ranges on every character, 0.33 s a MiB of Russian text, 0.02 s so. For a text with
    no character beyond the BMP (``beyond_bmp=False``), the BMP's marks alone: one class,
    which the engine skips to by itself (a MiB of Russian text 0.09 s, 0.02 s so)."""
    codes = sorted(code for category in _MARK_CATEGORIES for code in _categories()[category])
    bmp = _ranges([code for code in codes if code <= 0xFFFF])
    if not beyond_bmp:
        return re.compile(f"[{bmp}]{{{GENERAL_MARKS_KEPT + 1},}}")
    astral = _ranges([code for code in codes if code > 0xFFFF])
    mark = f"(?:[{bmp}]|(?=[\U00010000-\U0010ffff])[{astral}])"
    return re.compile(f"{mark}{{{GENERAL_MARKS_KEPT + 1},}}")


def over_stacked(text: str) -> set[int]:
    """Where the marks of ``text`` stacked past the rule above are (each face writes
    them out in its own escapes: :func:`spell_unseen`, the logs)."""
    over: set[int] = set()
    if text.isascii():  # no marks: the code points' scan (_categories) not paid for it
        return over
    beyond_bmp = _BEYOND_BMP.search(text) is not None
    for stack in _stacked_marks_pattern(beyond_bmp).finditer(text):
        general = 0
        for count, ch in enumerate(stack.group(), 1):
            if unicodedata.name(ch, "").startswith("COMBINING"):
                general += 1
                if general > GENERAL_MARKS_KEPT:
                    over.add(stack.start() + count - 1)
            if count > MARKS_KEPT:
                over.add(stack.start() + count - 1)
    return over


def _written_out(text: str, over: set[int]) -> str:
    if not over:
        return text
    return "".join(_escape(ch) if i in over else ch for i, ch in enumerate(text))


def _spelled(match: re.Match[str]) -> str:
    return _escape(match.group())


def _escape(ch: str) -> str:
    """JSON's escape of one character (a UTF-16 pair beyond the BMP, as JSON spells it)."""
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# The characters of ASCII is_unseen() names: the control characters but tab and newline
# and carriage return (asked for alone, ASCII text does not pay for _categories' scan).
_ASCII_UNSEEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def spell_unseen(text: str) -> str:
    """``text`` with every character no reader sees as itself (:func:`is_unseen`) written
    out as its JSON escape, ``\\u202e``: in JSON text that is the same value (outside a
    string JSON holds none of them), and in plain text it is seen. So is each combining
    mark stacked on a letter beyond what a writing system stacks (the third of the
    general-purpose diacritics, the fifth mark of any kind: ``\\u0301``), which would
    draw over the characters around it. Tab, newline and carriage return are left to the
    face (a page shows them; a one-line notice folds them)."""
    if text.isascii():  # its control characters only (JSON text's line breaks kept)
        return text if text.isprintable() else _ASCII_UNSEEN.sub(_spelled, text)
    last = _LAST_SPELLED.get(len(text))
    if last is not None and last[0] == text:
        return last[1]
    spelled = _unseen_pattern(_BEYOND_BMP.search(text) is not None).sub(_spelled, text)
    spelled = _written_out(spelled, over_stacked(spelled))
    if len(text) >= _LONG:
        _LAST_SPELLED.clear()
        _LAST_SPELLED[len(text)] = (text, spelled)
    return spelled


# The last text of _LONG characters or more that spell_unseen spelled, and lookalike_runs
# cut (with its quotes), and what they answered: a page spells a long value, marks its
# look-alikes, then spells it again to list them under it (the dashboard's marked and
# lookalike_note), and a MiB is read once for both, not twice. By its length (a text of
# another length is not compared), one at a time: an entry is replaced whole.
_LONG = 4096
_LAST_SPELLED: dict[int, tuple[str, str]] = {}
_LAST_RUNS: dict[tuple[int, bool], tuple[str, tuple[tuple[str, bool], ...]]] = {}


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
    # marks stacked past a writing system's, as spell_unseen writes them out (each other
    # character is spelled alone, and one mark alone is no stack)
    over = set() if text.isascii() else over_stacked(text)
    for i, ch in enumerate(text):
        if ch == " ":
            inner = 0 < i < last and text[i - 1] != " " and text[i + 1] != " "
            out.append(" " if inner else "\\u0020")
        elif i in over:
            out.append(_escape(ch))
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


# --- look-alike characters in values ---------------------------------------------------
#
# A value an approver reads ("acct-1234", "paypal.com") may be written with characters
# that look like others: the approver reads a trusted account in an attacker's. Shown as
# they are (the approver of French, Japanese or Russian text reads their text), but each
# one marked, by one rule every face asks (:func:`lookalike_runs`). A character is a
# look-alike when it is not ASCII and
#   (a) a letter or a number whose compatibility form (NFKC) is ASCII letters or digits:
#       fullwidth forms (U+FF21), mathematical alphanumerics (U+1D7F7, U+1D41A),
#       superscripts (U+00B2), circled digits (U+2460), Roman numerals (U+216B),
#       ligatures (U+FB01), the Kelvin sign; or a Latin letter of no orthography drawn
#       as an ASCII letter (a small capital, U+1D18; the script g U+0261: below);
#   (b) a decimal digit other than 0-9 (Arabic-Indic U+0663, Devanagari U+0969): a digit
#       is where a value matters, and Python's int() reads Arabic-Indic 1000 as 1000;
#   (c) a letter of another script in a word that has Latin letters (a Cyrillic er in
#       "pay", a Greek omicron in "google"): a word in one script (Russian, Greek) is
#       ordinary text, and so is Latin mixed with Han, kana, Hangul or Bopomofo (Japanese
#       "T" and katakana, a T-shirt), which Unicode's restriction levels (UTS #39, "highly
#       restrictive") allow. A word is a run of characters between white space and the
#       ASCII punctuation that ends a word in prose or a JSON text (! " $ ' ( ) * , ; < >
#       [ \ ] ^ ` { | }): the characters of addresses and links (- _ . @ : / ? = & + % #
#       ~) are inside one, so that "acct-1234", "paypal.com", "john@example.com",
#       "?to=acct" and "AT&T" are one word each, whichever of their letters is Cyrillic
#       (split at = and &, a Cyrillic "ace" of "?to=ace" was a word of its own, and
#       ordinary text: the outside review).
#   (d) a letter of another script in a word whose every letter is drawn as an ASCII
#       letter or digit (_DRAWN_AS_ASCII: "ACCT-1234" in Cyrillic capitals) and that is
#       shaped as an identifier (a digit, an @, a dot inside, below): a word of prose in
#       Russian or Greek is not, however its letters are drawn.
#   (e) a character drawn as the double quote of a JSON text (the modifier letter double
#       prime U+02BA, the fullwidth quotation mark U+FF02, the Vedic sign nihshvasa
#       U+1CD3, the reversed double prime U+2036; the double prime U+2033 and two primes
#       U+2032 U+2032 unless after a digit, as in a height (5 feet 10); the Hebrew gershayim
#       U+05F4 unless between two Hebrew letters, as in an acronym): a value's own quotes
#       are shown escaped (\"), these are not, and draw a key of the value's own inside
#       it ("memo": "xʺ, ʺtoʺ: ʺevil"; a key's opening quote never follows a digit); or
#       a dotless i with a combining dot above (U+0131 U+0307), drawn as i, which no
#       orthography writes (Turkish writes i); a combining double acute U+030B or double
#       vertical line U+030E on no letter (after a space: drawn alone, as U+02DD; on a
#       letter, Hungarian o with U+030B, unmarked). The quotes of CJK text (U+3003, U+301D to
#       U+301F) end a word (_WORD) and stay unmarked, as the curly quotes. In a text shown
#       with its own quotes as they are (a purpose: prose, not JSON text), the characters
#       drawn as a quote draw nothing its own could not, and are not marked
#       (lookalike_runs(quotes=False)); the dotless i dotted again still is.
# Not marked: other punctuation and symbols (the fullwidth punctuation of Chinese text,
# its curly quotes, the ellipsis, the numero sign, the trade mark sign), which no account
# or amount is told by.

# Python's unicodedata has no Script property: a letter's script is the first word of
# its Unicode name ("CYRILLIC SMALL LETTER ER"), which Unicode gives every letter of a
# script. These begin the names of letters written beside Latin in one word in ordinary
# text (UTS #39's highly restrictive sets), or whose script is none (modifier letters,
# as the okina of Hawaii, U+02BB).
_HAN_SCRIPTS = frozenset(
    {"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "HALFWIDTH", "BOPOMOFO", "HANGUL"}
    | {"IDEOGRAPHIC", "VERTICAL"}
)
_WITH_LATIN = frozenset({"", "LATIN", "HAN"})
# What ends a word (a character class's inside): white space, the punctuation above, the
# guillemets, the general punctuation of U+2010-U+2027 (dashes, curly quotes), CJK's.
_WORD_ENDS = r"\s!\"$'()*,;<>\[-^`{|}\u00ab\u00bb\u2010-\u2027\u3000-\u303f"
_WORD = re.compile(f"[^{_WORD_ENDS}]+")
LOOKALIKES_LISTED = 20
# The words before lookalike_list()'s line, in every face that writes it.
LOOKALIKES_LABEL = "Look-alike characters"


@functools.lru_cache(maxsize=4096)
def _script(ch: str) -> str:
    """A letter's script ("LATIN", "CYRILLIC", "HAN" for the scripts written with Latin
    in one word); "" for what is no letter of a script (digits, marks, modifier letters)."""
    if not unicodedata.category(ch).startswith("L"):
        return ""
    if ch.isascii():
        return "LATIN"
    name = unicodedata.name(ch, "")
    if not name or name.startswith("MODIFIER LETTER"):
        return ""
    first = name.split(" ", 1)[0]
    return "HAN" if first in _HAN_SCRIPTS else first


# Rule (a) goes on: Latin letters no orthography writes, drawn as an ASCII letter and
# not folded to it by NFKC: the small capitals of one letter (U+1D18 LATIN LETTER SMALL
# CAPITAL P, of "fancy text": "ᴘᴀʏᴘᴀʟ"), the script g of phonetics (U+0261, drawn as
# g), the alpha (U+0251), the dotless j (U+0237), the click letters drawn as l and !
# (U+01C0, U+01C3). Not the letters of a language: the dotless i of Turkish, the open o
# of Twi, the Vietnamese letters with a dot below.
_SMALL_CAPITAL = re.compile(r"LATIN .*SMALL CAPITAL [A-Z]$")
_LATIN_LOOKALIKES = frozenset("\u0261\u0251\u0237\u01c0\u01c3")
# Rule (e): drawn as the ASCII double quote wherever they are (the Vedic sign
# nihshvasa U+1CD3 and the reversed double prime U+2036 too: the next the same attacker
# reaches for); and where they are: the dotless i dotted again, the double prime and two
# primes not after a digit (5\u203210\u2033, a height, is text), the Hebrew gershayim
# not between two Hebrew letters (an acronym's, as in tsahal, is text).
_QUOTE_LOOKALIKES = frozenset("\u02ba\u02ee\u02dd\uff02\u1cd3\u2036")
_IN_CONTEXT = re.compile(
    "\u0131\u0307"
    "|(?<![0-9])(?:\u2033|\u2032\u2032)"
    "|(?<![\u05d0-\u05ea])\u05f4|\u05f4(?![\u05d0-\u05ea])"
    # a combining double acute or double vertical line on no letter (after a space, at a
    # word's start) is drawn alone, as U+02DD; on a letter it is Hungarian (o U+030B)
    "|(?<![^\\W\\d_])[\u030b\u030e]"
)
_CONTEXT_CHARS = frozenset("\u0131\u2033\u2032\u05f4\u030b\u030e")
# ... in a text shown with its own quotes (lookalike_runs(quotes=False)): only the dotless
# i dotted again, the one of them not drawn as a double quote
_IN_CONTEXT_NO_QUOTES = re.compile("\u0131\u0307")
_CONTEXT_CHARS_NO_QUOTES = frozenset("\u0131")
_ASCII = frozenset(map(chr, range(128)))


@functools.lru_cache(maxsize=4096)
def looks_ascii(ch: str) -> bool:
    """Rules (a), (b) and (e)'s quotes above: ``ch``, wherever it is, is a look-alike."""
    if ch.isascii():
        return False
    category = unicodedata.category(ch)
    if category == "Nd" or ch in _QUOTE_LOOKALIKES:
        return True
    if category[0] not in "LN":
        return False
    folded = unicodedata.normalize("NFKC", ch)
    if folded.isascii() and any(c.isalnum() for c in folded):
        return True
    return ch in _LATIN_LOOKALIKES or bool(_SMALL_CAPITAL.match(unicodedata.name(ch, "")))


# Rule (d): the letters of other scripts drawn as an ASCII letter or digit (UTS #39's
# confusables whose prototype is one ASCII letter or digit, the unmistakable ones): a
# word made of them only ("ACCT-1234" in Cyrillic capitals, "pay.io" in Cyrillic small
# letters) reads as ASCII.
_DRAWN_AS_ASCII = frozenset(
    # Cyrillic: A B C E H I J K M O P S T X Y Y Q W I 3
    "\u0410\u0412\u0421\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0405\u0422"
    "\u0425\u0423\u04ae\u051a\u051c\u04c0\u0417"
    # Cyrillic: a c e o p x y s i j d h q w l y
    "\u0430\u0441\u0435\u043e\u0440\u0445\u0443\u0455\u0456\u0458\u0501\u04bb\u051b"
    "\u051d\u04cf\u04af"
    # Greek: A B E Z H I K M N O P T Y X, o v p i
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5"
    "\u03a7\u03bf\u03bd\u03c1\u03b9"
    # Armenian: U O o u n h q
    "\u054d\u0555\u0585\u057d\u0578\u0570\u0566"
    # Cherokee: A B C E H K L M P S T V W W Z D G J R
    "\u13aa\u13f4\u13df\u13ac\u13bb\u13e6\u13de\u13b7\u13e2\u13da\u13a2\u13d9\u13b3"
    "\u13d4\u13c3\u13a0\u13c0\u13ab\u13d2"
    # Lisu: A B C D E F G H I J K L M N O P R S T U V W X Y Z
    "\ua4ee\ua4d0\ua4da\ua4d3\ua4f0\ua4dd\ua4d6\ua4e7\ua4f2\ua4d9\ua4d7\ua4e1\ua4df"
    "\ua4e0\ua4f3\ua4d1\ua4e3\ua4e2\ua4d4\ua4f4\ua4e6\ua4ea\ua4eb\ua4ec\ua4dc"
)
# ... when the word is shaped as an identifier, not as a word of prose: it has an ASCII
# digit, an @, or a dot between two characters ("acct-1234", "a.b"), and two of those
# letters or more. So Russian "sugar", "LLC" (three Cyrillic O), "the 90s" (90 and ha),
# "2nd", "T-34" are text.
_IDENTIFIER_SHAPED = re.compile(r"[0-9@]|[^.]\.[^.]")


def _all_drawn_as_ascii(letters: str, scripts: dict[str, str]) -> bool:
    others = [ch for ch, script in scripts.items() if script]
    return (
        bool(others)
        and all(ch in _DRAWN_AS_ASCII for ch in others)
        and sum(ch in _DRAWN_AS_ASCII for ch in letters) >= 2
        and _IDENTIFIER_SHAPED.search(letters) is not None
    )


def _word_positions(letters: str, quotes: bool) -> list[int]:
    """Where the look-alikes of one word are (the rule above), as offsets into it."""
    # each of the word's characters asked about once (a page of text is some 10x faster
    # than asking for each of its characters), then found where it is
    scripts = {ch: _script(ch) for ch in set(letters)}
    mixed = "LATIN" in scripts.values() and any(s not in _WITH_LATIN for s in scripts.values())
    flagged = {
        ch
        for ch, script in scripts.items()
        if _anywhere(ch, quotes) or (mixed and script not in _WITH_LATIN)
    }
    if not mixed and _all_drawn_as_ascii(letters, scripts):  # rule (d)
        flagged |= {ch for ch, script in scripts.items() if script}
    at = [i for i, ch in enumerate(letters) if ch in flagged] if flagged else []
    if not _CONTEXT_CHARS.isdisjoint(scripts):  # rule (e)'s: where it is, not what
        placed = {
            i
            for m in (_IN_CONTEXT if quotes else _IN_CONTEXT_NO_QUOTES).finditer(letters)
            for i in range(*m.span())
        }
        at = sorted(placed.union(at))
    return at


def _anywhere(ch: str, quotes: bool) -> bool:
    """Whether ``ch`` is a look-alike wherever it is (:func:`looks_ascii`), but a quote's
    (rule (e)) in a text shown with its own quotes (``quotes=False``)."""
    return looks_ascii(ch) and (quotes or ch not in _QUOTE_LOOKALIKES)


@functools.lru_cache(maxsize=256)
def _candidates(chars: frozenset[str], quotes: bool) -> tuple[re.Pattern[str], ...]:
    """For a text whose characters not ASCII are ``chars``: patterns that find, in the
    text and in the text reversed, a character of each word that may hold a look-alike
    (every other word holds none, by the rule above). A word may hold one when it has

    - a character that is a look-alike wherever it is, or one of rule (e)'s that are
      where they are;
    - a Latin letter and a letter of a script not written with Latin (rule (c)): the
      first such letter after a Latin one is found from it, in the text (after it) and
      in the text reversed (before it);
    - an ASCII digit, an @ or a dot, and a letter of such a script (rule (d)), found so
      from the digit, the @ or the dot.

    Each pattern begins with one character class, of the characters its finds start
    from, which are rare in prose of one script: the regular expression engine skips to
    them by itself, so a MiB of Russian text is searched at its pace, not a word at a
    time. A find's run stops at the next character it starts from or at the word's end:
    the text is read a bounded number of times, however long its words are."""
    esc = functools.partial(_ranges_of, chars)
    context = _CONTEXT_CHARS if quotes else _CONTEXT_CHARS_NO_QUOTES
    anywhere = esc(lambda ch: _anywhere(ch, quotes) or ch in context)
    latin = "A-Za-z" + esc(lambda ch: _script(ch) == "LATIN")
    other = esc(lambda ch: _script(ch) not in _WITH_LATIN)
    shaped = "0-9@."
    starts: list[str] = []
    branches: list[str] = []
    if other:
        for first in (latin, shaped):
            starts.append(first)
            branches.append(f"(?<=[{first}])[^{_WORD_ENDS}{first}]*?[{other}]")
    backwards = [f"[{''.join(starts)}](?:{'|'.join(branches)})"] if branches else []
    if anywhere:
        starts.append(anywhere)
        branches.append(f"(?<=[{anywhere}])")
    forwards = [f"[{''.join(starts)}](?:{'|'.join(branches)})"] if branches else []
    return tuple(re.compile(pattern) for pattern in forwards + backwards)


def _ranges_of(chars: frozenset[str], wanted: Callable[[str], bool]) -> str:
    """The characters of ``chars`` that are ``wanted`` and in a word, as a character
    class's inside."""
    return _ranges(sorted(ord(ch) for ch in chars if wanted(ch) and _WORD.match(ch)))


# A text whose words that may hold a look-alike come closer than this many characters
# apart on average (after the first 16 of them) has every word asked instead, as a word
# found is asked: finding each one costs more than asking each word (names' own scan
# of a MiB of "acct-\u04401234 p\u0430ypal.com" words, 1.4 s so, was 1.9 s).
_DENSE = 64
_DENSE_AFTER = 16
# A text of more distinct characters not ASCII than this has every word asked, with no
# search built: the search's classes hold each of them, and an agent's value of 3,000
# (a few KiB) took some 50 ms to build one (each such value anew, past _candidates'
# cache), new ones past the first 4096 characters some 120 ms (_non_ascii's 16 searches,
# each of all those found before), a page of such values seconds. Asking every word is
# linear in the text, whatever its characters: prose of one script needs a few dozen.
_MANY_CHARS = 64


def _non_ascii(text: str) -> frozenset[str] | None:
    """The characters of ``text`` that are not ASCII, None when there are more than
    _MANY_CHARS of them. Those of its first 4096 characters, then each one not among
    them found by a search from where the last was, 16 at most, then the rest's: a MiB
    of prose in a few dozen letters is read once at the regular expression engine's pace
    (``set(text)`` makes a string of each character beyond Latin-1: 0.1 s a MiB of
    Russian text, 0.005 s so)."""
    found = set(text[:4096]) - _ASCII
    at = 4096
    for _ in range(16 if len(text) > at else 0):
        if len(found) > _MANY_CHARS:
            return None
        hit = re.compile(f"[^\\x00-\\x7f{_ranges(sorted(map(ord, found)))}]").search(text, at)
        if hit is None:
            break
        found.add(hit.group())
        at = hit.start() + 1
    else:
        found.update(text[at:])
        found -= _ASCII
    return frozenset(found) if len(found) <= _MANY_CHARS else None


def _lookalike_positions(text: str, quotes: bool = True) -> list[int]:
    chars = _non_ascii(text)
    if chars is None:
        return _every_word(text, quotes)
    patterns = _candidates(chars, quotes)
    if not patterns:
        return []
    forwards, *backwards = patterns
    size = len(text)
    backwards_text = text[::-1]
    found_at: dict[int, int] = {}  # the words that may hold one: start, end
    every_from, every_until = size, 0  # every word asked after, and before (dense)

    def word_at(i: int) -> tuple[int, int]:
        """The start and the end of the word that holds ``text[i]``."""
        before = _WORD.match(backwards_text, size - 1 - i)
        after = _WORD.match(text, i)
        assert before is not None and after is not None
        return i + 1 - (before.end() - before.start()), after.end()

    at = 0
    while (hit := forwards.search(text, at)) is not None:
        start, at = word_at(hit.start())
        found_at[start] = at
        if len(found_at) >= _DENSE_AFTER and at < len(found_at) * _DENSE:
            every_from = at
            break
    if backwards:  # backwards from where every word is asked, or the end
        at, hits = size - every_from, 0
        while (hit := backwards[0].search(backwards_text, at)) is not None:
            start, end = word_at(size - 1 - hit.start())
            found_at[start] = end
            at, hits = size - start, hits + 1
            if hits >= _DENSE_AFTER and every_from - start < hits * _DENSE:
                every_until = start
                break
    words = [
        *_WORD.finditer(text, 0, every_until),
        *(_WORD.match(text, start) for start in sorted(found_at) if start >= every_until),
        *_WORD.finditer(text, every_from),
    ]
    return _asked(words, quotes)


def _every_word(text: str, quotes: bool) -> list[int]:
    """Where the look-alikes of ``text`` are, each of its words asked (the rule itself,
    which the search above only narrows down)."""
    return _asked(_WORD.finditer(text), quotes)


def _asked(words: Iterable[re.Match[str] | None], quotes: bool) -> list[int]:
    found: list[int] = []
    for word in words:
        assert word is not None
        letters = word.group()
        if not letters.isascii():
            found.extend(word.start() + i for i in _word_positions(letters, quotes))
    return found


def lookalike_runs(text: str, *, quotes: bool = True) -> list[tuple[str, bool]]:
    """``text`` cut into runs, each with whether it is look-alike characters (the rule
    above): "p", then a Cyrillic "a" (True), then "ypal.com". Plain ASCII is one run.

    ``quotes=False`` for a text shown with its own double quotes as they are (a
    purpose: prose, not JSON text): rule (e)'s characters drawn as a double quote are
    not marked there, since they draw nothing the text's own quotes could not."""
    if text.isascii():
        return [(text, False)] if text else []
    last = _LAST_RUNS.get((len(text), quotes))
    if last is not None and last[0] == text:
        return list(last[1])
    runs = _runs(text, quotes)
    if len(text) >= _LONG:
        _LAST_RUNS.clear()
        _LAST_RUNS[len(text), quotes] = (text, tuple(runs))
    return runs


def _runs(text: str, quotes: bool) -> list[tuple[str, bool]]:
    runs: list[tuple[str, bool]] = []
    at = 0  # the end of the runs so far
    start = -1  # where the look-alike run being gathered began (cut once, when it ends:
    # adding to it a character at a time copied it each time, a page of them quadratic)
    for i in _lookalike_positions(text, quotes):
        if i == at and start >= 0:
            at = i + 1
            continue
        if start >= 0:
            runs.append((text[start:at], True))
        if i > at:
            runs.append((text[at:i], False))
        start, at = i, i + 1
    if start >= 0:
        runs.append((text[start:at], True))
    if at < len(text):
        runs.append((text[at:], False))
    return runs


def lookalikes(text: str, *, quotes: bool = True) -> str:
    """The look-alike characters of ``text``, each once, in the order they come
    (``quotes``: :func:`lookalike_runs`)."""
    marked = (
        ch for run, lookalike in lookalike_runs(text, quotes=quotes) if lookalike for ch in run
    )
    return "".join(dict.fromkeys(marked))


def code_points(text: str, *, glyph: bool = False) -> str:
    """Each character of ``text`` once, as its code point and Unicode name ("U+0440
    CYRILLIC SMALL LETTER ER"), after the character itself with ``glyph``."""
    return ", ".join(
        (f"{ch} " if glyph else "") + f"U+{ord(ch):04X} {unicodedata.name(ch, '(unnamed)')}"
        for ch in dict.fromkeys(text)
    )


def lookalike_list(text: str, *, quotes: bool = True) -> str:
    """The line every face writes under a value with look-alike characters, after
    "Look-alike characters: ": each one, its code point and its name ("<the character>
    U+1D7F7 MATHEMATICAL MONOSPACE DIGIT ONE, ..."), the first 20 and how many more; ""
    when there are none (``quotes``: :func:`lookalike_runs`)."""
    found = lookalikes(text, quotes=quotes)
    listed = code_points(found[:LOOKALIKES_LISTED], glyph=True)
    more = len(found) - LOOKALIKES_LISTED
    return listed + (f", and {more} more" if more > 0 else "")
