"""Log lines a person reads in a terminal or a log file.

Much of what the long-running commands log is written by agents: a tool's name and its
compensation's (an agent login registers its own), an error that quotes a call's
arguments. A line break in one forged a line of the log's own ("undolog worker: INFO
compensated ..."), and an escape sequence reached the operator's terminal (one that
clears it hides the lines above). So every character of a record that is not printable
is written as its escape (``\\n``, ``\\x1b``, ``\\u2028``), as the CLI's output is
(``cli._output.printable``); a traceback keeps its line breaks, and only its other
characters are escaped.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, TextIO

from undolog.names import ascii_or_escape, is_unseen, over_stacked

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


def escaped(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character that is not printable (a control character, a line
    or paragraph separator, a format character such as a bidirectional override) written
    as Python writes it in a string's repr, and every other one no reader sees (a Hangul
    filler, a variation selector: :func:`undolog.names.is_unseen`) as ``\\u3164``, and so
    is a combining mark stacked past what a writing system stacks (zalgo text, which
    draws over the lines above and below: :func:`undolog.names.over_stacked`);
    ``keep_newlines``: ``\\n`` kept as it is. A backslash is left as it is (a path stays
    readable): text may read like an escape, but no line break or escape sequence gets
    through."""
    if text.isascii() and text.isprintable():
        return text
    over = over_stacked(text)
    return "".join(
        ch
        if keep_newlines and ch == "\n"
        else ascii_or_escape(ch)
        if i in over
        else _escaped_char(ch)
        for i, ch in enumerate(text)
    )


def _escaped_char(ch: str) -> str:
    if not ch.isprintable():
        return repr(ch)[1:-1]
    if is_unseen(ch):  # printable to Python, seen by nobody
        return ascii_or_escape(ch)
    return ch


def _continued(text: str) -> str:
    """A traceback's lines after its first indented, so that none of them, whatever an
    exception's message holds, begins as a line of the log's own."""
    return text.replace("\n", "\n    ")


class PrintableFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose lines hold nothing but printable characters,
    and whose only line breaks are a traceback's, each followed by an indent."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escaped(super().formatMessage(record))

    def formatException(self, ei: _ExcInfo) -> str:
        return _continued(escaped(super().formatException(ei), keep_newlines=True))

    def formatStack(self, stack_info: str) -> str:
        return _continued(escaped(super().formatStack(stack_info), keep_newlines=True))


class _EscapingFormatter(logging.Formatter):
    """Another formatter's lines made printable: for a handler that was there before
    (an application's module configured logging when the worker imported it)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return _continued(escaped(self.inner.format(record), keep_newlines=True))


def basic_config(level: int, fmt: str, stream: TextIO | None = None) -> None:
    """:func:`logging.basicConfig` with its lines written by a
    :class:`PrintableFormatter`; when the root logger has handlers already (set up by
    whoever came first), their lines are made printable instead, and undolog's own
    loggers log at ``level``."""
    root = logging.getLogger()
    if root.handlers:
        for handler in root.handlers:
            inner = handler.formatter or logging.Formatter()
            if not isinstance(inner, (PrintableFormatter, _EscapingFormatter)):
                handler.setFormatter(_EscapingFormatter(inner))
        logging.getLogger("undolog").setLevel(level)
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PrintableFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's ``log_config`` for a command that called :func:`basic_config` first (the
    dashboard, the MCP proxy over HTTP): uvicorn's loggers keep no handler of their own
    and pass their records to the root logger's, so that its access lines (a client
    address a trusted proxy's ``X-Forwarded-For`` names), its warnings and an
    application's traceback are written in the command's format, made printable, to
    standard error with the rest of its log. uvicorn's own configuration wrote them raw
    (its access lines to standard output).

    The two formatters no handler uses are there for uvicorn: given ``use_colors=``, it
    sets that flag on its ``default`` and ``access`` formatters of whatever configuration
    it was handed (a KeyError without them)."""
    quiet: dict[str, Any] = {"handlers": [], "level": "INFO", "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": {}, "access": {}},
        "loggers": {name: dict(quiet) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
