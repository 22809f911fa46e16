"""Benchmark (not a test): what marking an approver's values costs (undolog.names).

The dashboard's confirmation pages and "see it whole" show an agent's payload whole (the
journal bounds it at 1 MiB), with its look-alike characters marked and listed
(docs/dashboard.md); the notices and the logs write out stacked marks. Times, for a MiB of
each kind of text an agent may send, the rule's parts (names.lookalike_runs,
names.lookalike_list, names.over_stacked, names.spell_unseen) and the dashboard's two
filters (marked, lookalike_note) and both of them as a confirmation page asks them for
one value ("dashboard page"), the median of --repeat runs, each run reading the text
afresh, after the code points' scan (names._categories, paid once a process: timed on
its own first).

    .venv/bin/python bench/bench_lookalikes.py [--size 1048576] [--repeat 3]

The tests check what the rule finds, at small sizes (tests/binding/test_lookalikes.py);
this is where its time is read (a run grown a character at a time took 8 s for 300,000
mathematical digits; the stacked marks' class 0.33 s a MiB of Russian text).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable

from undolog import names
from undolog.dashboard.app import lookalike_note, marked


def texts(size: int) -> dict[str, str]:
    """A JSON argument of about ``size`` characters of each kind."""

    def arg(unit: str) -> str:
        return json.dumps({"v": (unit * (size // len(unit) + 1))[:size]}, ensure_ascii=False)

    return {
        "ascii": arg("acct-1234 pay bob "),
        "russian prose": arg("\u0441\u0430\u0445\u0430\u0440 \u0438 \u043c\u0443\u043a\u0430 "),
        "mixed words": arg("acct-\u04401234 p\u0430ypal.com "),
        "math digits": arg("\U0001d7f7"),
        "zalgo": arg("a\u0301\u0302\u0303\u0304\u0305 "),
    }


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        names._LAST_SPELLED.clear()  # each run reads the text afresh
        names._LAST_RUNS.clear()
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def page(text: str) -> object:
    """What a confirmation page does with one value: marks it, then lists its look-alikes
    under it (the second reads what the first found: names._LAST_RUNS)."""
    return marked(text), lookalike_note(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    names._categories()  # the scan of every code point, once a process
    print(f"code points' scan (once a process): {time.perf_counter() - started:.3f} s")
    parts: dict[str, Callable[[str], object]] = {
        "lookalike_runs": names.lookalike_runs,
        "lookalike_list": names.lookalike_list,
        "over_stacked": names.over_stacked,
        "spell_unseen": names.spell_unseen,
        "dashboard marked": marked,
        "dashboard note": lookalike_note,
        "dashboard page": page,
    }
    samples = texts(args.size)
    print(f"seconds for {args.size:,} characters, median of {args.repeat}")
    print(f"{'':16}" + "".join(f"{kind:>15}" for kind in samples))
    for part, fn in parts.items():
        cells = "".join(
            f"{median_seconds(functools.partial(fn, text), args.repeat):>15.3f}"
            for text in samples.values()
        )
        print(f"{part:16}{cells}")


if __name__ == "__main__":
    main()
