"""The catalogue of the SQL that Python sends (undolog/queries.sql): well formed, every
query used, every name a module asks for defined, parameters named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from undolog import queries
from undolog.queries import QUERIES, CatalogueError, parse

PACKAGE = Path(queries.__file__).parent
USE = re.compile(r"""QUERIES\[\s*["']([a-z0-9_]+)["']\s*\]""")


def _uses() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in USE.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    return found


def test_every_query_a_module_names_is_in_the_catalogue() -> None:
    missing = {name: where for name, where in _uses().items() if name not in QUERIES}
    assert not missing, f"named but not in queries.sql: {missing}"


def test_every_query_in_the_catalogue_is_used() -> None:
    unused = sorted(set(QUERIES) - set(_uses()))
    assert not unused, f"in queries.sql but used by no module: {unused}"


def test_the_catalogues_queries_take_named_parameters_only() -> None:
    positional = sorted(name for name, sql in QUERIES.items() if re.search(r"%s", sql))
    assert not positional, f"positional %s parameters in: {positional}"


def test_a_query_is_its_statement_without_header_or_description() -> None:
    parsed = parse("-- name: one\n-- what it does\nSELECT 1;\n\n-- name: two\nSELECT\n  2\n")
    assert parsed == {"one": "SELECT 1", "two": "SELECT\n  2"}


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "defined twice"),
        ("-- name: a\n-- only a description\n", "has no statement"),
        ("SELECT 1\n-- name: a\nSELECT 2\n", "before the first query header"),
    ],
)
def test_a_malformed_catalogue_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(CatalogueError, match=complaint):
        parse(text)
