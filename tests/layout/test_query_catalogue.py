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


def _base_tables() -> set[str]:
    """Every table the migrations create (the engine's base tables)."""
    sql = Path(__file__).resolve().parents[2] / "sql" / "migrations"
    create = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?undolog\.([a-z_]+)", re.IGNORECASE)
    return {name for path in sql.glob("*.sql") for name in create.findall(path.read_text())}


def test_no_module_but_the_migration_runner_names_a_base_table() -> None:
    """The binding, the CLI and the faces read views and call functions: a base table's
    layout can change (Journal v2 moves rows between tables) without any of them noticing.
    The migration runner keeps its own bookkeeping tables (bootstrap.sql)."""
    tables = _base_tables()
    assert {"undolog_sessions", "undolog_effect_log"} <= tables  # the scan finds them
    # Schema-qualified, as every name in SQL is here (a metric or report may share a
    # table's name: undolog_sessions is also a gauge).
    named = re.compile(r"\bundolog\.(" + "|".join(sorted(tables, key=len, reverse=True)) + r")\b")
    found = {
        str(path.relative_to(PACKAGE)): sorted(set(named.findall(path.read_text("utf-8"))))
        for path in sorted(PACKAGE.rglob("*"))
        if path.suffix in (".py", ".sql", ".html") and path.name != "migrations.py"
    }
    assert {where: names for where, names in found.items() if names} == {}
