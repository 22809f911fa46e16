"""MkDocs hook: the command-line reference is the parser's own help, so it cannot drift.

A page that contains the line ``<!-- undolog-cli-help -->`` gets it replaced by the
``--help`` text of ``undolog`` and of every subcommand, one section each.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

from undolog.cli import build_parser

MARKER = "<!-- undolog-cli-help -->"


def _subcommands(
    parser: argparse.ArgumentParser, prog: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _subcommands(child, f"{prog} {name}")


def cli_reference() -> str:
    # a fixed width, so the page is the same whatever terminal builds it
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"
    try:
        sections = [
            f"### `{prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"
            for prog, parser in _subcommands(build_parser(), "undolog")
        ]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(sections)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
