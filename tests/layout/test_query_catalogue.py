"""The catalogue of the SQL that Python sends (undolog/queries.sql): well formed, every
query used, every name a module asks for defined, parameters named."""

from __future__ import annotations

import ast
import itertools
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


# The modules whose SQL lives in the catalogue: none of their string constants may carry a
# statement (docstrings aside). SQL composed at run time with psycopg.sql (identifiers,
# literals in a statement that takes no bind parameters) stays where it is composed: a
# string given straight to sql.SQL() is allowed. Add a module here when its SQL moves.
CONVERTED = [
    "aapprovals.py",
    "aengine.py",
    "approvals.py",
    "asaga.py",
    "chain.py",
    "cli/__init__.py",
    "cli/_ids.py",
    "cli/approvals.py",
    "cli/migrate.py",
    "cli/notifications.py",
    "cli/sessions.py",
    "cli/tools.py",
    "dashboard/app.py",
    "dashboard/queries.py",
    "dashboard/websessions.py",
    "demos/__init__.py",
    "demos/__main__.py",
    "demos/dashboard.py",
    "demos/stories.py",
    "engine.py",
    "engine_common.py",
    "engine_wire.py",
    "integrations/_alanggraph.py",
    "integrations/_arun.py",
    "integrations/_core.py",
    "integrations/_langchain_common.py",
    "integrations/_langgraph.py",
    "integrations/_run.py",
    "integrations/langchain.py",
    "mcp_proxy/proxy.py",
    "metrics.py",
    "notifications.py",
    "partitions.py",
    "saga.py",
    "walk.py",
]
SQL_TEXT = re.compile(
    r"\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+(\.\w+)?\s+SET|DELETE\s+FROM|CREATE|ALTER|DROP|GRANT"
    r"|REVOKE|WITH\s+\w+\s+AS)\b"
    r"|\b(FROM|JOIN)\s+(undolog|pg_catalog)\.\w+"
    r"|\bundolog\.\w+\s*\("
)


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            head = node.body[0] if node.body else None
            if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant):
                found.add(id(head.value))
        # an attribute's or constant's docstring: a string statement after an assignment
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for before, after in itertools.pairwise(body):
            if (
                isinstance(before, ast.Assign | ast.AnnAssign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
            ):
                found.add(id(after.value))
    return found


def _composed(tree: ast.AST) -> set[int]:
    """The strings given straight to psycopg.sql.SQL()."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "SQL")
            or (isinstance(node.func, ast.Name) and node.func.id == "SQL")
        ):
            found.update(id(arg) for arg in node.args if isinstance(arg, ast.Constant))
    return found


def _text(value: object) -> str | None:
    """A constant's text: a str, or a bytes (a statement for libpq, as the hot path's)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def sql_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string (or bytes) constant of ``source`` that reads as SQL."""
    tree = ast.parse(source)
    allowed = _docstrings(tree) | _composed(tree)
    return [
        (node.lineno, text)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and (text := _text(node.value)) is not None
        and id(node) not in allowed
        and SQL_TEXT.search(text)
    ]


@pytest.mark.parametrize("module", CONVERTED)
def test_a_converted_module_sends_the_catalogues_sql_only(module: str) -> None:
    found = sql_literals((PACKAGE / module).read_text(encoding="utf-8"))
    assert not found, f"{module}: SQL outside queries.sql at {found}"


@pytest.mark.parametrize(
    "source",
    [
        'conn.execute("SELECT state FROM undolog.sessions_list WHERE session_id = %s")',
        'Q = f"SELECT {column} FROM {table}"',
        'conn.execute("SELECT undolog.version()")',
        'conn.execute(f"GRANT {group} TO {login}")',
        'pgconn.send_prepare(b"hot", b"SELECT undolog.commit_effect($1::uuid)")',
        'def f():\n    """Doc."""\n    return "SELECT 1"\n',
    ],
)
def test_sql_in_a_string_constant_is_found(source: str) -> None:
    assert sql_literals(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""A docstring: SELECT * FROM undolog.sessions_list."""',
        'def f():\n    """Calls undolog.recover() (SELECT)."""\n',
        'log = logging.getLogger("undolog.walk")',
        'conn.execute(sql.SQL("GRANT {} TO {}").format(a, b))',
        "X = 1\n" + '"""X: what undolog.version() answers."""',
        'raise UsageError("select a session: undolog sessions list")',
    ],
)
def test_what_is_not_sql_is_not_found(source: str) -> None:
    assert not sql_literals(source)
