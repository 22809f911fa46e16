"""The SQL layout's promises, proven on a real PostgreSQL:

* an engine installed at the baseline, used (a journal in it), then migrated to HEAD is
  the same schema as a fresh install of HEAD (pg_dump --schema-only and the catalog's
  functions, views, policies, grants, triggers, constraints, comments);
* every function, view, trigger and policy of schema undolog has exactly one source file,
  and every source file's object exists (no orphans either way);
* applying the repeatable sources again changes nothing;
* ready for Citus: every journal table carries session_id, and every key includes it;
* ``undolog status`` / ``migrate --check`` / ``--version`` / ``undolog.version()``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import schema_dump
from undolog import approvals, chain, engine, migrations, saga
from undolog.migrations import (
    MigrationError,
    Repeatable,
    apply_repeatables,
    available_migrations,
    engine_version,
    migrate,
    repeatables,
    status,
)

Conn = psycopg.Connection[Any]
SQL = Path(__file__).resolve().parents[2] / "sql"

# The migration runner's own records, the one-row partition-maintenance lock and the tool
# registry (keyed by owner login, small, read by every session: a reference table under
# Citus): not journal tables, never distributed by session, exempt from the Citus key
# rule.
RUNNER_TABLES = {
    "undolog_migrations",
    "undolog_repeatables",
    "undolog_maintenance_lock",
    "undolog_tools",
    # configuration like the tool registry: where approval requests are announced
    "undolog_notification_channels",
    # the history chains' anchors: one chain for the whole database, on the coordinator
    "undolog_chain_anchors",
}


# The catalog, as text without oids: what pg_dump shows and what it could hide (e.g. a
# function's exact definition and ACL, a trigger's enabled state, a policy's roles).
CATALOG_QUERIES = {
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text,
               obj_description(p.oid, 'pg_proc')
        FROM pg_proc AS p WHERE p.pronamespace = 'undolog'::regnamespace ORDER BY 1""",
    "relations": """
        SELECT c.relname, c.relkind, c.relacl::text, c.relrowsecurity, c.relforcerowsecurity,
               obj_description(c.oid, 'pg_class'),
               CASE c.relkind WHEN 'v' THEN pg_get_viewdef(c.oid) END,
               c.reloptions::text
        FROM pg_class AS c WHERE c.relnamespace = 'undolog'::regnamespace ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, a.attidentity, pg_get_expr(d.adbin, d.adrelid),
               col_description(c.oid, a.attnum)
        FROM pg_class AS c
        JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'undolog'::regnamespace ORDER BY 1, 2""",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint AS c WHERE c.connamespace = 'undolog'::regnamespace
        ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'undolog'
        ORDER BY 1""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
        FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'undolog'::regnamespace AND NOT t.tgisinternal
        ORDER BY 1, 2""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = 'undolog' ORDER BY 1, 2""",
    "schema": """
        SELECT nspacl::text FROM pg_namespace WHERE nspname = 'undolog'""",
    "default privileges": """
        SELECT defaclobjtype, defaclacl::text FROM pg_default_acl
        WHERE defaclnamespace = 'undolog'::regnamespace ORDER BY 1""",
    "roles": """
        SELECT rolname, rolcanlogin, rolsuper, rolbypassrls FROM pg_roles
        WHERE rolname LIKE 'undolog\\_%' ORDER BY 1""",
}


def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {name: c.execute(q).fetchall() for name, q in CATALOG_QUERIES.items()}


def fingerprint(dsn: str) -> tuple[str, dict[str, list[tuple[Any, ...]]]]:
    return schema_dump(dsn), catalog(dsn)


def use_the_journal(c: Conn) -> None:
    """A journal in use: committed calls, an approved and a rejected irreversible call, a
    completed session, and a failed one whose compensation ran."""
    done = engine.begin_session(c, agent="upgrade-test")
    call = engine.intercept(
        c, done, 0, "create_user", "compensable", {"u": 1}, {"name": "delete_user"}
    )
    assert call.effect_id is not None
    engine.commit(c, call.effect_id, {"id": 1})
    gated = engine.intercept(c, done, 1, "send_email", "irreversible", {"to": "ada"})
    assert gated.approval_id is not None
    approvals.approve(c, gated.approval_id, "ada@example.com", "looks right")
    again = engine.intercept(c, done, 1, "send_email", "irreversible", {"to": "ada"})
    assert again.action == "execute" and again.effect_id is not None
    engine.commit(c, again.effect_id, {"sent": True})
    assert engine.complete_session(c, done) == "completed"

    undone = engine.begin_session(c, agent="upgrade-test")
    call = engine.intercept(
        c, undone, 0, "charge_card", "compensable", {"cents": 5}, {"name": "refund"}
    )
    assert call.effect_id is not None
    engine.commit(c, call.effect_id, {"charge": "ch_1"})
    engine.fail_session(c, undone, "the agent crashed")
    claim = saga.claim_compensation(c, undone)
    assert claim is not None
    saga.complete_compensation(c, claim.undo_id, claim.attempt)

    rejected = engine.begin_session(c, agent="upgrade-test")
    gated = engine.intercept(c, rejected, 0, "drop_table", "irreversible", {"t": "users"})
    assert gated.approval_id is not None
    approvals.reject(c, gated.approval_id, "ada@example.com", "no")


def test_upgrade_through_every_release_equals_a_fresh_install(
    fresh_db: Any,
    old_engine: Path,
    engine_before_reject_option: Path,
    engine_last_release: Path,
    migrate_as: Any,
) -> None:
    """Each earlier release's migrations with that release's own sources, one at a time,
    with a journal in use between them, as a user upgrades; then the current release's
    in one migrate: the same schema and catalog as a fresh install, and the journal
    written by the oldest release still there."""
    fresh = fresh_db("layout_fresh")
    with psycopg.connect(fresh, autocommit=True) as c:
        migrate(c)
    upgraded = fresh_db("layout_upgraded")
    releases = [old_engine, engine_before_reject_option, engine_last_release]
    first: dict[str, Path] = {}
    for root in reversed(releases):
        first.update({m.name: root for m in available_migrations(root)})
    with psycopg.connect(upgraded, autocommit=True) as c:
        for m in available_migrations():
            if m.name not in first:
                break  # the current release: its sources are today's, applied at once
            migrate_as(c, first[m.name], target=m.name)  # that release's own sources
            if first[m.name] is old_engine:  # the release before the registry
                if m.name == "0002_perf":
                    use_the_journal(c)
                continue
            session = engine.begin_session(c)
            call = engine.intercept(
                c,
                session,
                0,
                "create_user",
                "compensable",
                {"email": f"{m.name}@example.com"},
                compensation={"name": "delete_user"},
            )
            assert call.effect_id is not None
            engine.commit(c, call.effect_id, {"id": 1})
        migrate(c)
        journal = c.execute(
            "SELECT count(*) FILTER (WHERE tool_id IS NULL) FROM undolog.undolog_effect_log"
        ).fetchone()
        # the rows journaled before the hash chains existed were linked by their migration
        linked = chain.verify(c)
    assert linked.ok and linked.rows > 10, linked.findings
    assert journal == (4,)  # the oldest release's journal survived; its rows have no tool
    assert fingerprint(upgraded) == fingerprint(fresh)


def test_0019_replaces_the_two_argument_chain_functions(
    fresh_db: Any, engine_before_verify_ranges: Path, migrate_as: Any
) -> None:
    """A database at 0018 with its functions and a journal in it, migrated: the
    functions of a range of sessions replace the two-argument ones (none left beside
    them, which would make a two-argument call ambiguous), the journal verifies whole and
    by a range, assert_chain's two-argument call still resolves, and the schema is a
    fresh install's."""
    fresh = fresh_db("ranges_fresh")
    with psycopg.connect(fresh, autocommit=True) as c:
        migrate(c)
    upgraded = fresh_db("ranges_upgraded")
    with psycopg.connect(upgraded, autocommit=True) as c:
        migrate_as(c, engine_before_verify_ranges)
        sessions = [engine.begin_session(c, agent="upgrade-test") for _ in range(3)]
        # and 0021 replaces the four-argument chain_events in turn (p_records)
        replacing = {"0019_verify_chain_session_range", "0021_chain_events_records_optional"}
        assert replacing <= set(migrate(c))
        assert chain.verify(c) == chain.Report(3, 3, [])
        assert chain.verify(c, sessions[0]).ok
        ranged = "SELECT count(*) FROM undolog.verify_chain(p_through_session => %s)"
        assert c.execute(ranged, (min(sessions),)).fetchone() == (0,)
        assert c.execute("SELECT undolog.assert_chain()").fetchone() == (3,)
    assert fingerprint(upgraded) == fingerprint(fresh)


def test_migrate_twice_changes_nothing(fresh_db: Any) -> None:
    dsn = fresh_db("layout_twice")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        use_the_journal(c)
        before = fingerprint(dsn)
        assert migrate(c) == []
        assert status(c).up_to_date
    assert fingerprint(dsn) == before


def test_applying_the_repeatables_twice_changes_nothing(fresh_db: Any) -> None:
    dsn = fresh_db("layout_reapply")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        use_the_journal(c)
        once = fingerprint(dsn)
        assert apply_repeatables(c) == [r.path for r in repeatables()]
        twice = fingerprint(dsn)
        apply_repeatables(c)
        assert status(c).up_to_date
    assert twice == once
    assert fingerprint(dsn) == once


# --- one source file per object, no orphans ------------------------------------------


def _defined(kind: str, path: Path) -> list[str]:
    """The names a source file creates: CREATE OR REPLACE <kind> undolog.<name>."""
    pattern = {
        "FUNCTION": r"CREATE OR REPLACE FUNCTION undolog\.(\w+)\(",
        "VIEW": r"CREATE OR REPLACE VIEW undolog\.(\w+)",
        "TRIGGER": r"CREATE OR REPLACE TRIGGER (\w+)\s",
        "POLICY": r"CREATE POLICY (\w+) ON undolog\.(\w+)",
    }[kind]
    text = path.read_text(encoding="utf-8")
    return [m if isinstance(m, str) else ".".join(m) for m in re.findall(pattern, text)]


def _stems(folder: str) -> set[str]:
    return {p.stem for p in (SQL / folder).glob("*.sql")}


def test_every_function_has_exactly_one_file_and_every_file_its_function(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT proname, count(*) FROM pg_proc WHERE pronamespace = 'undolog'::regnamespace"
        " GROUP BY proname"
    ).fetchall()
    # one function a name (no overloads), so a name is a file
    assert [name for name, n in rows if n != 1] == []
    for path in (SQL / "functions").glob("*.sql"):
        assert _defined("FUNCTION", path) == [path.stem], path
    assert {name for name, _ in rows} == _stems("functions")


def test_every_view_has_exactly_one_file_and_every_file_its_view(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
        " AND relkind IN ('v', 'm')"
    ).fetchall()
    for path in (SQL / "views").glob("*.sql"):
        assert _defined("VIEW", path) == [path.stem], path
    assert {r[0] for r in rows} == _stems("views")
    assert len(rows) >= 4


def test_every_trigger_has_exactly_one_file_and_every_file_its_trigger(conn: Conn) -> None:
    rows = conn.execute(
        """
        SELECT t.tgname, c.relname, c.relispartition, t.tgparentid <> 0,
               p.inhparent::regclass::text
        FROM pg_trigger AS t
        JOIN pg_class AS c ON c.oid = t.tgrelid
        LEFT JOIN pg_inherits AS p ON p.inhrelid = c.oid
        WHERE c.relnamespace = 'undolog'::regnamespace AND NOT t.tgisinternal
        """
    ).fetchall()
    on_tables = {(name, table) for name, table, is_partition, _, _ in rows if not is_partition}
    # A partition's triggers come with the partition: row triggers cloned from the parent,
    # and the TRUNCATE guard that create_month_partitions (a month) or the baseline (the
    # default partition) gives it, named after the parent's.
    for name, table, is_partition, cloned, parent in rows:
        if is_partition:
            assert cloned or name == parent.removeprefix("undolog.") + "_no_truncate", (
                name,
                table,
            )
    for path in (SQL / "triggers").glob("*.sql"):
        assert _defined("TRIGGER", path) == [path.stem], path
        (table,) = re.findall(r"\sON undolog\.(\w+)\s", path.read_text(encoding="utf-8"))
        # sql/triggers/<table>_<name>.sql: the trigger's name starts with its table's
        assert path.stem.startswith(table + "_"), path
        assert (path.stem, table) in on_tables, path
    assert {name for name, _ in on_tables} == _stems("triggers")
    assert len(on_tables) == len(_stems("triggers"))


def test_every_policy_is_in_its_tables_file_and_every_file_its_policies(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT tablename, policyname FROM pg_policies WHERE schemaname = 'undolog'"
    ).fetchall()
    in_db = {f"{policy}.{table}" for table, policy in rows}
    in_files: list[str] = []
    for path in (SQL / "policies").glob("*.sql"):
        defined = _defined("POLICY", path)
        assert defined and all(d.endswith("." + path.stem) for d in defined), path
        in_files += defined
    assert sorted(in_files) == sorted(in_db)
    assert len(in_db) >= 9


def test_no_migration_defines_a_repeatable_object() -> None:
    """A function's (view's, policy's, grant's) text lives only in its repeatable file.

    A migration may DROP such an object (what CREATE OR REPLACE cannot do); the one
    exception is the baseline's TRUNCATE guards of the default partitions, which belong
    to the partitions it creates."""
    for m in available_migrations():
        text = re.sub(r"--[^\n]*", "", m.text)
        assert not re.search(r"CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|VIEW|POLICY)", text), m.name
        assert not re.search(r"\bGRANT\b", text), m.name
        for table in re.findall(
            r"CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+\w+\s.*?ON\s+(\S+)", text, re.S
        ):
            assert table.endswith("_default"), (m.name, table)


def test_every_sql_file_has_its_place() -> None:
    """sql/ holds the runner's bootstrap, numbered migrations, repeatables and grants."""
    known = {"bootstrap.sql", migrations.GRANTS_FILE}
    known |= {f"migrations/{m.path.name}" for m in available_migrations()}
    known |= {r.path for r in repeatables()}
    found = {p.relative_to(SQL).as_posix() for p in SQL.rglob("*") if p.is_file()}
    assert found == known


def raise_statements(text: str) -> list[str]:
    """Every ``RAISE EXCEPTION`` statement of a PL/pgSQL source, to its closing ``;``
    (one outside a string literal)."""
    found = []
    for start in (m.start() for m in re.finditer(r"\bRAISE\s+EXCEPTION\b", text)):
        i, quoted = start, False
        while i < len(text) and (quoted or text[i] != ";"):
            if text[i] == "'":
                quoted = not quoted  # '' inside a literal toggles twice
            i += 1
        found.append(text[start : i + 1])
    return found


def test_every_error_of_the_engine_says_what_to_do_next() -> None:
    """Each RAISE EXCEPTION of sql/functions names a SQLSTATE of the project's (UL, or
    42501 for a login acting beyond its role) and a HINT: what the caller does next
    (docs/reference/errors.md lists the SQLSTATEs). An internal invariant (XX000) says so
    in its hint as well."""
    missing = []
    statements = 0
    for path in sorted((SQL / "functions").glob("*.sql")):
        for stmt in raise_statements(path.read_text(encoding="utf-8")):
            statements += 1
            line = stmt.splitlines()[0]
            if not re.search(r"\bUSING\b", stmt):
                missing.append(f"{path.name}: {line} (no USING ERRCODE, MESSAGE, HINT)")
            elif not re.search(r"ERRCODE\s*=\s*'(UL\d{3}|42501|XX000)'", stmt):
                missing.append(f"{path.name}: {line} (no project SQLSTATE)")
            elif not re.search(r"\bHINT\s*=", stmt):
                message = re.search(r"MESSAGE\s*=\s*(.{0,70})", stmt)
                missing.append(f"{path.name}: no HINT for {message and message.group(1)}")
    assert statements > 100
    assert not missing, "\n".join(missing)


def test_the_raise_scanner_ends_at_the_statement_not_a_semicolon_in_a_string() -> None:
    text = "RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'a; b''c;', HINT = 'x';\nEND"
    assert raise_statements(text) == [text[: text.index("\n")]]


# --- Citus readiness ------------------------------------------------------------------

KEYS_WITHOUT_SESSION_ID = """
SELECT c.relname || ': ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
FROM pg_constraint AS k
JOIN pg_class AS c ON c.oid = k.conrelid
WHERE c.relnamespace = 'undolog'::regnamespace AND NOT c.relispartition
  AND c.relname <> ALL (%(runner)s)
  AND k.contype IN ('p', 'u', 'f', 'x')
  AND NOT EXISTS (SELECT FROM pg_attribute AS a
                  WHERE a.attrelid = c.oid AND a.attname = 'session_id'
                    AND a.attnum = ANY (k.conkey)
                    AND (k.contype <> 'f' OR EXISTS (
                        SELECT FROM pg_attribute AS r
                        WHERE r.attrelid = k.confrelid AND r.attname = 'session_id'
                          AND r.attnum = ANY (k.confkey))))
UNION ALL
SELECT c.relname || ': unique index ' || i.indexrelid::regclass::text
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indrelid
WHERE c.relnamespace = 'undolog'::regnamespace AND NOT c.relispartition
  AND c.relname <> ALL (%(runner)s)
  AND i.indisunique
  AND NOT EXISTS (SELECT FROM pg_attribute AS a
                  WHERE a.attrelid = c.oid AND a.attname = 'session_id'
                    AND a.attnum = ANY (i.indkey))
ORDER BY 1
"""


def keys_without_session_id(c: Conn) -> list[str]:
    """Every primary key, unique constraint or index, exclusion constraint and foreign key
    of a journal table that does not include session_id (a foreign key: on both sides)."""
    rows = c.execute(KEYS_WITHOUT_SESSION_ID, {"runner": sorted(RUNNER_TABLES)}).fetchall()
    return [str(r[0]) for r in rows]


def journal_tables(c: Conn) -> list[str]:
    rows = c.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
        " AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows if r[0] not in RUNNER_TABLES]


def test_citus_every_journal_table_carries_session_id(conn: Conn) -> None:
    found = {
        str(r[0])
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
            " AND relkind IN ('r', 'p')"
        ).fetchall()
    }
    assert found >= RUNNER_TABLES  # the exemption names tables that exist
    tables = journal_tables(conn)
    assert len(tables) == 11  # with the chain heads and what the last anchor recorded
    without = conn.execute(
        "SELECT c.relname FROM pg_class AS c WHERE c.relname = ANY (%s)"
        " AND c.relnamespace = 'undolog'::regnamespace AND NOT EXISTS ("
        " SELECT FROM pg_attribute AS a WHERE a.attrelid = c.oid"
        " AND a.attname = 'session_id' AND a.attnotnull)",
        (tables,),
    ).fetchall()
    assert without == []


def test_citus_every_key_includes_session_id(conn: Conn) -> None:
    assert keys_without_session_id(conn) == []


def test_citus_check_catches_a_later_key_without_session_id(conn: Conn) -> None:
    """The rule above is not vacuous: a key added later without session_id is found."""
    with conn.transaction(force_rollback=True):
        conn.execute(
            "CREATE UNIQUE INDEX later_signature_key ON undolog.undolog_undo_stack (call_signature)"
        )
        conn.execute(
            "ALTER TABLE undolog.undolog_undo_history"
            " ADD CONSTRAINT later_fk FOREIGN KEY (undo_id, session_id)"
            " REFERENCES undolog.undolog_undo_stack (undo_id, session_id)"
        )
        conn.execute(
            "CREATE TABLE undolog.later_table (id uuid PRIMARY KEY, session_id uuid NOT NULL)"
        )
        assert keys_without_session_id(conn) == [
            "later_table: later_table_pkey PRIMARY KEY (id)",
            "later_table: unique index undolog.later_table_pkey",
            "undolog_undo_stack: unique index undolog.later_signature_key",
        ]


def test_signatures_are_unique_per_session_only(conn: Conn) -> None:
    keys = conn.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = 'undolog.undolog_undo_stack'::regclass AND indisunique"
        " AND pg_get_indexdef(indexrelid) LIKE '%%call_signature%%'"
        " ORDER BY 1"
    ).fetchall()
    assert [k[0].split(" USING btree ")[1] for k in keys] == ["(session_id, call_signature)"]


# --- status, --check, --version, version() --------------------------------------------


def test_status_says_what_migrate_would_do(fresh_db: Any) -> None:
    dsn = fresh_db("layout_status")
    with psycopg.connect(dsn, autocommit=True) as c:
        before = status(c)
        assert before.pending == [m.name for m in available_migrations()]
        assert before.changed == [r.path for r in repeatables()]
        assert not before.up_to_date
        assert c.execute("SELECT to_regnamespace('undolog')").fetchone() == (None,)  # read-only
        migrate(c)
        assert status(c).up_to_date
        # a function whose text differs from what was applied (as after a code change)
        c.execute(
            "UPDATE undolog.undolog_repeatables SET checksum = 'old'"
            " WHERE source_file = 'functions/intercept.sql'"
        )
        c.execute(
            "INSERT INTO undolog.undolog_repeatables (source_file, checksum)"
            " VALUES ('functions/gone.sql', 'x')"
        )
        after = status(c)
        assert (after.pending, after.changed, after.removed) == (
            [],
            ["functions/intercept.sql"],
            ["functions/gone.sql"],
        )
        assert migrate(c) == ["functions/intercept.sql"]
        assert status(c).up_to_date


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args], capture_output=True, text=True, check=False
    )


def test_cli_status_and_check_exit_1_until_migrated(fresh_db: Any) -> None:
    dsn = fresh_db("layout_cli_status")
    for command in (["status"], ["migrate", "--check"]):
        behind = _cli(*command, "--dsn", dsn)
        assert behind.returncode == 1, behind.stderr
        # Not installed at all: one line, not every migration and file it would apply.
        assert behind.stdout.splitlines() == [
            "the UndoLog engine is not installed in this database: run `undolog migrate`"
        ]
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT to_regnamespace('undolog')").fetchone() == (None,)
    installed = _cli("migrate", "--dsn", dsn)
    assert installed.returncode == 0
    assert installed.stdout.splitlines() == [
        *(f"applied {m.name}" for m in available_migrations()),
        f"applied {len(repeatables())} repeatable sources",
    ]
    current = _cli("status", "--dsn", dsn)
    assert (current.returncode, current.stdout.strip()) == (
        0,
        f"up to date (undolog {engine_version()})",
    )
    checked = _cli("--json", "migrate", "--check", "--dsn", dsn)
    assert checked.returncode == 0
    assert '"up_to_date": true' in checked.stdout
    with psycopg.connect(dsn, autocommit=True) as c:  # as after editing one function
        c.execute(
            "UPDATE undolog.undolog_repeatables SET checksum = 'old'"
            " WHERE source_file = 'functions/heartbeat.sql'"
        )
    behind = _cli("status", "--dsn", dsn)
    assert (behind.returncode, behind.stdout.strip()) == (1, "changed functions/heartbeat.sql")
    again = _cli("migrate", "--dsn", dsn)
    assert (again.returncode, again.stdout.strip()) == (0, "applied functions/heartbeat.sql")


def test_cli_status_refuses_an_edited_migration(fresh_db: Any) -> None:
    dsn = fresh_db("layout_cli_edited")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        c.execute("UPDATE undolog.undolog_migrations SET checksum = 'edited'")
    edited = _cli("status", "--dsn", dsn)
    assert edited.returncode == 1
    assert "changed after it was applied" in edited.stderr


def test_a_database_from_a_newer_or_unknown_release_is_refused(fresh_db: Any) -> None:
    dsn = fresh_db("layout_unknown")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        c.execute(
            "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES ('9999_future', 'x')"
        )
        with pytest.raises(MigrationError, match="does not know: 9999_future"):
            migrate(c)
        with pytest.raises(MigrationError, match="does not know: 9999_future"):
            status(c)


def test_version_has_one_source(conn: Conn) -> None:
    """python/undolog/_version.py is the only place the version is written: pyproject.toml
    declares it dynamic and reads that file, and the package, the CLI and the database
    answer what it says."""
    import tomllib

    from hatchling.metadata.core import ProjectMetadata
    from hatchling.plugin.manager import PluginManager

    import undolog
    from undolog import _version

    root = SQL.parent
    source = root / "python" / "undolog" / "_version.py"
    (written,) = re.findall(r'^__version__ = "([^"]+)"$', source.read_text("utf-8"), re.M)
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"] == {"path": "python/undolog/_version.py"}
    # what the build backend puts into the wheel's metadata
    assert ProjectMetadata(str(root), PluginManager()).version == written
    assert _version.__version__ == undolog.__version__ == engine_version() == written
    assert conn.execute("SELECT undolog.version()").fetchone() == (written,)
    shown = _cli("--version")
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0] == f"undolog {written}"
    # no other file of the package (faces included) or the SQL writes it down
    for path in [*(root / "python" / "undolog").rglob("*.py"), *SQL.rglob("*.sql")]:
        if path != source:
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"version\s*=\s*['\"]" + re.escape(written), text), path


def test_any_engine_role_may_ask_the_version(conn: Conn) -> None:
    for role in ("undolog_agent", "undolog_approver", "undolog_operator"):
        with conn.transaction(force_rollback=True):
            conn.execute(f"SET LOCAL ROLE {role}")
            assert conn.execute("SELECT undolog.version()").fetchone() == (engine_version(),)


# --- one transaction: a failure applies nothing ---------------------------------------


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (
            Repeatable(
                "functions/zz_broken.sql",
                "CREATE OR REPLACE FUNCTION undolog.zz_broken() RETURNS integer"
                " LANGUAGE sql AS $$ SELECT undolog.no_such_function() $$;",
            ),
            "validating the functions",
        ),
        (
            Repeatable("views/zz_broken.sql", "CREATE VIEW undolog.zz AS SELECT no_such_column;"),
            "views/zz_broken.sql",
        ),
    ],
    ids=["sql-function-body", "view"],
)
def test_a_broken_source_applies_nothing(
    fresh_db: Any, monkeypatch: pytest.MonkeyPatch, broken: Repeatable, message: str
) -> None:
    dsn = fresh_db("layout_broken")
    real = repeatables()
    monkeypatch.setattr(migrations, "repeatables", lambda: [*real, broken])
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(MigrationError, match=message):
            migrate(c)
        # the bootstrap, the baseline and every source went with the failed transaction
        assert c.execute("SELECT to_regnamespace('undolog')").fetchone() == (None,)
        monkeypatch.setattr(migrations, "repeatables", lambda: real)
        assert migrate(c)[0] == "0001_baseline"
        recorded = c.execute("SELECT count(*) FROM undolog.undolog_migrations").fetchone()
        assert recorded == (len(available_migrations()),)


def test_apply_repeatables_refuses_pending_migrations(fresh_db: Any) -> None:
    dsn = fresh_db("layout_pending")
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(MigrationError):
        apply_repeatables(c)
