"""undolog.logs: the long-running commands' log lines, which carry agents' text (tool
and compensation names, errors quoting a call's args), hold no control character and no
line that begins as one of the log's own: not in a message, not in a traceback, and not
when an application's module configured logging before the command did."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from undolog import logs

FORGED = "x\nundolog worker: INFO compensated everything\x1b[2J"


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level put back after the test (pytest's own
    capturing handlers are added for the test's call: each test removes them first)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    # and undolog's own level as no command set it: a command run in the same process
    # before (tests/cli's `partitions drop`, basic_config(WARNING)) left it at WARNING
    logging.getLogger("undolog").setLevel(logging.NOTSET)
    yield root
    root.handlers, root.level = handlers, level
    logging.getLogger("undolog").setLevel(logging.NOTSET)


def _logged(stream: io.StringIO) -> list[str]:
    log = logging.getLogger("undolog.test")
    log.info("tool %s", FORGED)
    try:
        raise RuntimeError(FORGED)
    except RuntimeError:
        log.exception("the walk raised")
    return stream.getvalue().splitlines()


def _no_forged_line(lines: list[str]) -> None:
    assert not any(line.startswith("undolog worker:") for line in lines), lines
    assert not any("\x1b" in line for line in lines), lines


def test_a_message_and_a_traceback_forge_no_line(root: logging.Logger) -> None:
    root.handlers = []
    stream = io.StringIO()
    logs.basic_config(logging.INFO, "undolog worker: %(levelname)s %(message)s", stream)
    lines = _logged(stream)
    assert (
        lines[0]
        == "undolog worker: INFO tool x\\nundolog worker: INFO compensated everything\\x1b[2J"
    )
    assert lines[1] == "undolog worker: ERROR the walk raised"
    assert lines[2] == "Traceback (most recent call last):"
    _no_forged_line(lines[2:])
    assert any(line.startswith("    ") and "compensated everything" in line for line in lines[2:])


def test_a_handler_configured_before_is_made_printable(root: logging.Logger) -> None:
    root.handlers = []
    stream = io.StringIO()
    logging.basicConfig(level=logging.WARNING, stream=stream, format="%(message)s")
    logs.basic_config(logging.INFO, "undolog worker: %(levelname)s %(message)s")
    lines = _logged(stream)
    assert lines[0].startswith("tool x")  # undolog's INFO logged, in the app's format
    _no_forged_line(lines)


@pytest.mark.parametrize("use_colors", [None, True, False])
def test_uvicorn_takes_the_configuration_with_or_without_colours(
    root: logging.Logger, use_colors: bool | None
) -> None:
    """uvicorn writes ``use_colors`` into the configuration's two formatters when it is
    given: the configuration must have them, and uvicorn's loggers must still pass their
    lines to the command's handler."""
    import uvicorn

    root.handlers = []
    stream = io.StringIO()
    logs.basic_config(logging.INFO, "undolog dashboard: %(levelname)s %(message)s", stream=stream)
    uvicorn.Config(lambda: None, log_config=logs.uvicorn_log_config(), use_colors=use_colors)
    logging.getLogger("uvicorn.access").info("%s - %s", "127.0.0.1\x1b[2J", "GET /")
    assert logging.getLogger("uvicorn.access").handlers == []
    assert stream.getvalue() == "undolog dashboard: INFO 127.0.0.1\\x1b[2J - GET /\n"


def test_what_no_reader_sees_is_written_out_as_the_other_faces_write_it() -> None:
    """A Hangul filler, a variation selector and the combining grapheme joiner are
    printable to Python and invisible to a reader: a compensation named "refund" + U+3164
    was logged as "refund", another tool's name. Escaped now, as a bidi override is."""
    assert logs.escaped("refund\u3164\ufe0f\u034f\u202e") == "refund\\u3164\\ufe0f\\u034f\\u202e"
    assert logs.escaped("tab\tkept\nline", keep_newlines=True) == "tab\\tkept\nline"


def test_marks_stacked_past_a_writing_systems_are_written_out_as_the_other_faces_do() -> None:
    """Zalgo text (a letter under a stack of combining marks) drew over the log's lines
    above and below it: the third general-purpose diacritic on a letter, and after, is
    written out as spell_unseen writes it; Vietnamese's two stay."""
    assert logs.escaped("z\u0301\u0302\u0303\u0304 \u1ec7") == "z\u0301\u0302\\u0303\\u0304 \u1ec7"
