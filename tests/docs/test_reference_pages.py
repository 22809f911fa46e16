"""The reference pages name what the code has, and only that. The other reference checks
are in test_docs_examples.py (the SQLSTATE table, every function and view in sql.md)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import undolog

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ROLES = ("undolog_agent", "undolog_approver", "undolog_operator")


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def granted(conn: Any) -> dict[str, set[str]]:
    """Each group role's functions: those it may EXECUTE."""
    return {
        role: {
            name
            for (name,) in conn.execute(
                "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'undolog'::regnamespace"
                " AND has_function_privilege(%s, p.oid, 'EXECUTE')",
                (role,),
            ).fetchall()
        }
        for role in ROLES
    }


@pytest.mark.parametrize("name", ["design/roles.md", "how-to/roles.md"])
def test_the_role_tables_name_every_function_each_role_may_call(conn: Any, name: str) -> None:
    """Each role's row of the table ("may call") names, in backticks, every function the
    role may EXECUTE, and no function it may not."""
    functions = {
        name
        for (name,) in conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'undolog'::regnamespace"
        ).fetchall()
    }
    rows = {
        role: line.split(" | ")[1]
        for line in page(name).splitlines()
        for role in ROLES
        if line.startswith(f"| `{role}` | ")
    }
    assert set(rows) == set(ROLES), name
    for role, may_call in granted(conn).items():
        named = set(re.findall(r"`(\w+)`", rows[role])) & functions
        assert not may_call - named, f"{name}: {role} may call, unnamed: {may_call - named}"
        assert not named - may_call, f"{name}: {role} named, may not call: {named - may_call}"


def test_every_migration_is_told_in_the_upgrade_page() -> None:
    """docs/how-to/upgrading.md names each file of sql/migrations (in bold, as
    **0025_sweep_oldest_first**): what it changes, and what it holds while it runs."""
    text = page("how-to/upgrading.md")
    migrations = sorted(p.stem for p in (ROOT / "sql" / "migrations").glob("*.sql"))
    assert len(migrations) >= 24
    missing = [name for name in migrations if f"**{name}**" not in text]
    assert not missing, f"migrations the upgrade page does not tell: {missing}"


def rendered(entry: str) -> Any:
    """What a ``::: dotted.path`` entry of a page renders: a module, or a name of one."""
    module, _, name = entry.rpartition(".")
    try:
        return importlib.import_module(entry)
    except ImportError:
        return getattr(importlib.import_module(module), name)


def test_every_public_name_has_its_entry_in_the_python_reference() -> None:
    """Each name of ``undolog.__all__`` is rendered by docs/reference/python.md: its own
    ``::: module.Name`` entry, or its module's (``::: undolog.errors``); a type alias
    (``OnReject``), which has no entry, is named in the text."""
    text = page("reference/python.md")
    objects = [rendered(e) for e in re.findall(r"^::: ([\w.]+)$", text, re.MULTILINE)]
    shown = {id(o) for o in objects} | {
        id(member) for o in objects if inspect.ismodule(o) for member in vars(o).values()
    }
    missing = []
    for name in undolog.__all__:
        obj = getattr(undolog, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if id(obj) not in shown:
                missing.append(name)
        elif f"`{name}`" not in text:
            missing.append(name)
    assert not missing, f"public names without their entry in python.md: {missing}"
