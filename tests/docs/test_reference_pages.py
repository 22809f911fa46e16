"""The reference pages name what the code has, and only that. The other reference checks
are in test_docs_examples.py (the SQLSTATE table, every function and view in sql.md)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

import undolog
from undolog import metrics
from undolog.cli import build_parser, main
from undolog.mcp_proxy.policy import PolicyError, load_policy

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


def unnamed(names: list[str], text: str) -> list[str]:
    """The names no code span of ``text`` begins with (`` `INTERRUPT` ``,
    `` `decide(state, item, ...)` ``)."""
    return [name for name in names if not re.search(rf"`{re.escape(name)}\b", text)]


def section(text: str, heading: str) -> str:
    """The part of a page under ``heading`` (a level-two heading), to the next one."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end == -1 else end]


@pytest.mark.parametrize(
    ("module", "heading"),
    [
        ("langchain", "## LangGraph"),
        ("openai_agents", "## OpenAI Agents"),
        ("pydantic_ai", "## pydantic-ai"),
    ],
)
def test_every_public_name_of_an_integration_is_on_its_page(module: str, heading: str) -> None:
    """Each name of an integration module's ``__all__`` (its functions, classes and the
    constants that name the keys of its approval payload) is named, in a code span, on
    docs/integrations.md: in the module's own section, or before the first section,
    which describes what every module has (``tools``, ``ResumedInAnotherSession``). A
    name under another module's heading documents that module's, not this one's."""
    integration = importlib.import_module(f"undolog.integrations.{module}")
    text = page("integrations.md")
    common = text[: text.index("\n## ")]
    where = common + section(text, heading)
    assert unnamed(["NOT_A_NAME", "INTERRUPTED"], where) == ["NOT_A_NAME", "INTERRUPTED"]
    missing = unnamed(list(integration.__all__), where)
    assert not missing, (
        f"undolog.integrations.{module}: not in its section of integrations.md: {missing}"
    )


# PostgreSQL's spelling of the types, and of the defaults, as sql.md writes them.
TYPE_NAMES = {"int": "integer", "timestamptz": "timestamp with time zone"}


def arguments(text: str) -> list[tuple[str, str, str | None]]:
    """``p_a uuid DEFAULT NULL::uuid, p_b int`` as (name, type, default) each; the
    default without its cast, an interval's as PostgreSQL prints it."""
    found: list[tuple[str, str, str | None]] = []
    for argument in filter(None, (a.strip() for a in text.split(","))):
        declared, _, given = argument.partition(" DEFAULT ")
        name, kind = declared.split(" ", 1)
        kind = TYPE_NAMES.get(kind, kind)
        default = re.sub(rf"::{re.escape(kind)}$", "", given)
        default = {"'5 minutes'": "'00:05:00'"}.get(default, default)
        found.append((name, kind, default or None))
    return found


def answers(text: str) -> list[str]:
    """What a function answers, ``TABLE(a uuid, b int)`` as its column names (the page may
    leave their types out), a scalar or ``SETOF`` as its type in PostgreSQL's spelling."""
    table = re.fullmatch(r"TABLE ?\((.*)\)", text)
    if table:
        return [column.split()[0] for column in table[1].split(",")]
    setof, _, kind = text.rpartition(" ")
    return [f"{setof} {TYPE_NAMES.get(kind, kind)}".strip()]


def test_the_sql_reference_gives_each_function_its_signature(conn: Any) -> None:
    """Each function a role may call is shown in docs/reference/sql.md with the argument
    names, types and defaults it has (an argument added, renamed or given a default is
    shown as it is), and what it answers (a type, or a table's columns)."""
    text = page("reference/sql.md")
    shown: dict[str, tuple[str, str]] = {}
    for block in re.findall(r"```text\n(.*?)\n```", text, re.DOTALL):
        flat = " ".join(block.split())
        match = re.match(r"(\w+)\((.*?)\) → (.*?)(?: -- .*)?$", flat)
        if match:
            shown[match[1]] = (match[2], match[3])
    rows = conn.execute(
        "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)"
        " FROM pg_proc p WHERE p.pronamespace = 'undolog'::regnamespace"
        " AND (has_function_privilege('undolog_agent', p.oid, 'EXECUTE')"
        " OR has_function_privilege('undolog_approver', p.oid, 'EXECUTE')"
        " OR has_function_privilege('undolog_operator', p.oid, 'EXECUTE'))"
    ).fetchall()
    assert len(rows) >= 50
    results = {name: result for name, _, result in rows}
    for name, catalogue, result in rows:
        assert name in shown, f"sql.md shows no signature of {name}"
        documented, answer = shown[name]
        assert arguments(documented) == arguments(catalogue), name
        same = re.fullmatch(r"the columns of (\w+)", answer)  # ending_decision's
        if same:
            assert result == results[same[1]], name
        else:
            assert answers(answer) == answers(result), name


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: child
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, child in action.choices.items()
    }


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def test_every_command_and_option_the_pages_name_exists() -> None:
    """A command line the pages write in backticks (`undolog sessions list --state`, or
    `verify --session` on the command-line page) names commands and options the parser
    has, each option on its command: a page does not keep an option that went. (The
    command-line page's "Every command" is the parser's own help, which cannot drift:
    tools/mkdocs_cli_reference.py.)"""
    root = build_parser()
    by_name: dict[str, list[argparse.ArgumentParser]] = {}

    def index(parser: argparse.ArgumentParser) -> None:
        for name, child in subcommands(parser).items():
            by_name.setdefault(name, []).append(child)
            index(child)

    index(root)
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    wrong = []
    checked = 0
    for path in pages:
        for span in re.findall(r"`([^`\n]+)`", path.read_text(encoding="utf-8")):
            words = span.split()
            if any(w.endswith(":") for w in words):
                continue  # what a command prints: `undolog verify: 25,100 of 50,200 rows`
            if words[:1] == ["undolog"]:
                words, parser = words[1:], root
            elif path.name == "cli.md" and len(by_name.get(words[0].split("|")[0], [])) == 1:
                parser = by_name[words[0].split("|")[0]][0]
                words = words[1:]
            else:
                continue
            known = options(root)
            for word in words:
                children = subcommands(parser)
                names = word.split("|")
                if children and all(re.fullmatch(r"[a-z][a-z-]*", n) for n in names):
                    if not all(n in children for n in names):
                        wrong.append(f"{path.name}: `{span}`: no command {word}")
                        break
                    parser = children[names[0]]
                    continue
                option = word.split("=")[0]
                if option.startswith("--") and option not in known | options(parser):
                    wrong.append(f"{path.name}: `{span}`: {option} is not an option of it")
                checked += 1
    assert checked >= 50
    assert not wrong, "\n".join(wrong)


def allowed_keys(tmp_path: Path, where: str, policy: str) -> set[str]:
    """The keys the policy's loader allows in a table, as its refusal of an unknown key
    lists them."""
    path = tmp_path / "policy.toml"
    path.write_text(policy, encoding="utf-8")
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    match = re.search(
        rf"{re.escape(where)}: unknown key\(s\) zz_unknown \(allowed: ([^)]*)\)", str(refused.value)
    )
    assert match is not None, str(refused.value)
    return set(match[1].split(", "))


def test_every_policy_key_of_the_mcp_proxy_is_documented(tmp_path: Path) -> None:
    """docs/mcp-proxy.md's reference of the policy file names every key the proxy reads,
    of [proxy], of an upstream and of a tool, in backticks."""
    text = page("mcp-proxy.md")
    section = text[
        text.index("- `[proxy]` (all optional)") : text.index("A policy for a desktop client")
    ]
    upstream = '[upstreams.crm]\ncommand = ["crm"]\n'
    tables = {
        "proxy": allowed_keys(tmp_path, "proxy", f"[proxy]\nzz_unknown = 1\n{upstream}"),
        "upstreams.crm": allowed_keys(tmp_path, "upstreams.crm", f"{upstream}zz_unknown = 1\n"),
        "upstreams.crm.tools.t": allowed_keys(
            tmp_path,
            "upstreams.crm.tools.t",
            f'{upstream}[upstreams.crm.tools.t]\ntier = "safe"\nzz_unknown = 1\n',
        ),
    }
    assert "durable_results" in tables["proxy"] and "roots" in tables["upstreams.crm"]
    for table, keys in tables.items():
        for key in keys:
            assert f"`{key}" in section or f".{key}." in section, f"[{table}] {key}"


def test_every_setting_the_engine_reads_is_documented() -> None:
    """Each ``undolog.*`` setting of the engine is set, with its default said, in
    examples/settings.sql, which concepts.md shows as the list of settings (and
    test_docs_examples.py runs); the two the engine and the binding set for themselves
    around one statement or connection (``current_setting``) are named on a page."""
    settings, internal = set(), set()
    for source in (ROOT / "sql" / "functions").glob("*.sql"):
        code = source.read_text(encoding="utf-8")
        settings |= set(
            re.findall(
                r"(?:database_setting(?:_integer)?|setting_integer|setting_interval)"
                r"\(\s*'undolog\.(\w+)'",
                code,
            )
        )
        internal |= set(re.findall(r"current_setting\('undolog\.(\w+)'", code))
    assert {"claim_timeout", "max_live_sessions", "notify_queue_percent"} <= settings
    listed = (ROOT / "examples" / "settings.sql").read_text(encoding="utf-8")
    unlisted = sorted(n for n in settings if f"SET undolog.{n} = " not in listed)
    assert not unlisted, f"settings examples/settings.sql does not set: {unlisted}"
    assert '--8<-- "examples/settings.sql"' in page("concepts.md")
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))
    unnamed = sorted(name for name in internal if f"undolog.{name}" not in text)
    assert not unnamed, f"settings the engine reads and no page names: {unnamed}"


def test_the_sql_reference_names_every_column_of_each_view(conn: Any) -> None:
    """Each view's section of docs/reference/sql.md names every column the view has, in
    backticks (one, or a list: `session_id, agent, state`)."""
    text = page("reference/sql.md")
    views = conn.execute(
        "SELECT c.relname, array_agg(a.attname::text ORDER BY a.attnum) FROM pg_class c"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind = 'v' GROUP BY 1"
    ).fetchall()
    assert len(views) >= 20
    missing = []
    for view, columns in views:
        section = re.search(rf"^### undolog\.{view}\n(.*?)(?=^#|\Z)", text, re.S | re.M)
        assert section is not None, view
        named = {
            word.strip()
            for span in re.findall(r"`([^`]+)`", section[1])
            for word in " ".join(span.split()).split(",")
        }
        missing += [f"{view}.{column}" for column in columns if column not in named]
    assert not missing, f"view columns sql.md does not name: {missing}"


def test_each_functions_section_names_the_sqlstates_its_own_file_raises() -> None:
    """A function's section of docs/reference/sql.md names every project SQLSTATE its own
    file raises to its caller (one it raises and catches itself, such as a sweep's UL030
    for a session it skips, is not the caller's). What it raises through the functions it
    calls is not checked here."""
    text = page("reference/sql.md")
    sections = re.split(r"^### undolog\.", text, flags=re.MULTILINE)[1:]
    checked = 0
    missing = []
    for section in sections:
        name = section.split("\n", 1)[0].strip()
        source = ROOT / "sql" / "functions" / f"{name}.sql"
        if not source.exists():
            continue  # a view
        code = source.read_text(encoding="utf-8")
        raised = set(re.findall(r"ERRCODE = '(UL\d{3})'", code))
        caught = set(re.findall(r"WHEN SQLSTATE '(UL\d{3})'", code))
        missing += [f"{name}: {c}" for c in sorted(raised - caught) if c not in section]
        checked += 1
    assert checked >= 50
    assert not missing, f"SQLSTATEs a function raises that its section does not name: {missing}"


def test_every_check_of_health_is_told_in_monitoring(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations/monitoring.md names each check `undolog health` reports, by the
    name it prints."""
    main(["--json", "health", "--dsn", dsn])
    checks = [c["name"] for c in json.loads(capsys.readouterr().out)["checks"]]
    assert len(checks) >= 6, checks
    text = page("operations/monitoring.md")
    section = text[text.index("## From the command line") : text.index("## Metrics")]
    missing = [name for name in checks if f"(`{name}`" not in section]
    assert not missing, f"health checks monitoring.md does not name: {missing}"


def test_every_metric_of_undolog_metrics_has_its_row_in_monitoring() -> None:
    """docs/operations/monitoring.md's table has a row for each metric `undolog metrics`
    and the dashboard's /metrics serve, and none for a metric they do not."""
    rows = set(re.findall(r"^\| `(undolog_\w+)[{`]", page("operations/monitoring.md"), re.M))
    assert rows == set(metrics.METRIC_NAMES)
