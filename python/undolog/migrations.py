"""Install or upgrade the engine: ``undolog migrate``.

The engine's SQL (``sql/``, shipped inside the wheel) has two kinds of files:

* numbered migrations, ``sql/migrations/NNNN_name.sql``: tables, columns, constraints,
  indexes, data changes. Each runs once per database and is recorded with the checksum of
  its file in ``undolog.undolog_migrations``; a recorded migration whose file has since
  changed is an error, never silently skipped. A migration may hold a line
  ``-- undolog:after-repeatables``: what follows it (data work that needs the engine's
  functions, e.g. creating the first partitions) runs after the repeatable sources.
* repeatable sources, one object a file: ``sql/functions/*.sql``, ``sql/views/*.sql``,
  ``sql/triggers/*.sql``, ``sql/policies/*.sql`` and ``sql/grants.sql``. They hold the
  one current definition of each object (CREATE OR REPLACE, or DROP IF EXISTS + CREATE
  for policies) and are applied again, all of them, whenever a migration is pending or
  one of their texts differs from what ``undolog.undolog_repeatables`` recorded. A
  database already current is left alone: no DDL, no table lock.

Apply order, in ONE transaction under one advisory lock (two installers racing: the
second waits, then finds everything recorded and does nothing):

1. ``sql/bootstrap.sql`` (the runner's own tables);
2. the pending migrations in number order, each up to its after-repeatables line;
3. ``functions/`` in file-name order with ``check_function_bodies = off``, as pg_dump
   does: a LANGUAGE sql body is otherwise validated at creation and would need every
   function it calls to exist already, so file names would have to encode dependencies.
   Once all are in, every function of the schema is validated (its language's validator,
   with bodies checked), so a broken body still fails the migrate;
4. ``views/`` (name order: a view that reads another view must sort after it),
   ``triggers/``, ``policies/``, then ``grants.sql``;
5. the after-repeatables parts of the migrations applied in step 2;
6. the records: migrations (name, checksum) and repeatables (source_file, checksum).

``undolog.version()`` is ``sql/functions/version.sql`` with the package's version
(python/undolog/_version.py, the one place it is written) filled in at apply time.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from undolog._sql import sql_root
from undolog._version import __version__

# pg_advisory_xact_lock key held by every migrate transaction (arbitrary, fixed).
MIGRATE_LOCK_KEY = 7557806069434771456

# The line of a migration after which its remaining text runs after the repeatables.
AFTER_REPEATABLES = "-- undolog:after-repeatables"

# Repeatable folders under sql/, in apply order; grants.sql comes last.
REPEATABLE_DIRS = ("functions", "views", "triggers", "policies")
GRANTS_FILE = "grants.sql"
VERSION_PLACEHOLDER = "@UNDOLOG_VERSION@"

_MIGRATION_NAME = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")


def engine_version() -> str:
    """The package's version: python/undolog/_version.py, the one place it is written
    (pyproject.toml reads it from there into the wheel's metadata). Read from the module,
    not from the installed metadata, which an editable install leaves stale after a bump."""
    return __version__


@dataclass(frozen=True)
class Migration:
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def parts(self) -> tuple[str, str]:
        """(the part before the repeatables, the part after them; often empty)."""
        before, mark, after = self.text.partition("\n" + AFTER_REPEATABLES + "\n")
        return before, after if mark else ""


@dataclass(frozen=True)
class Repeatable:
    path: str  # relative to sql/, e.g. "functions/intercept.sql"
    sql: str  # the text as applied (placeholders filled in)

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


class MigrationError(RuntimeError):
    """The database's recorded migrations disagree with this package's."""


def available_migrations(root: Path | None = None) -> list[Migration]:
    base = (root or sql_root()) / "migrations"
    found = []
    for path in sorted(base.iterdir()):
        if path.suffix != ".sql" or not path.is_file():
            raise MigrationError(f"{path}: a migration is one file NNNN_name.sql")
        if not _MIGRATION_NAME.match(path.stem):
            raise MigrationError(f"{path.name}: a migration is named NNNN_name.sql")
        found.append(Migration(path.stem, path))
    return found


def repeatables(root: Path | None = None) -> list[Repeatable]:
    """Every repeatable source, in apply order, with its text as it is applied."""
    base = root or sql_root()
    paths = [p for d in REPEATABLE_DIRS for p in sorted((base / d).glob("*.sql"))]
    paths.append(base / GRANTS_FILE)
    version = engine_version()
    return [
        Repeatable(
            p.relative_to(base).as_posix(),
            p.read_text(encoding="utf-8").replace(VERSION_PLACEHOLDER, version),
        )
        for p in paths
    ]


@dataclass(frozen=True)
class Status:
    """What ``migrate`` would do; ``up_to_date`` when nothing."""

    pending: list[str] = field(default_factory=list)  # migrations not yet applied
    changed: list[str] = field(default_factory=list)  # repeatables new or different
    removed: list[str] = field(default_factory=list)  # recorded, no longer a file

    @property
    def up_to_date(self) -> bool:
        return not (self.pending or self.changed or self.removed)

    def describe(self) -> list[str]:
        return (
            [f"pending migration {name}" for name in self.pending]
            + [f"changed {path}" for path in self.changed]
            + [f"removed {path} (a migration must drop its object)" for path in self.removed]
        )


def describe_applied(applied: list[str]) -> list[str]:
    """migrate()'s answer for a person: each migration, then the repeatable sources by
    path when a few changed (a developer's edit), or their count (a fresh install)."""
    names = {m.name for m in available_migrations()}
    done = [a for a in applied if a in names]
    sources = [a for a in applied if a not in names]
    if len(sources) > 5:
        return [*done, f"{len(sources)} repeatable sources"]
    return done + sources


def _lock(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (MIGRATE_LOCK_KEY,))


def _recorded(conn: psycopg.Connection[Any], table: str, key: str) -> dict[str, str]:
    if conn.execute("SELECT pg_catalog.to_regclass(%s)", (f"undolog.{table}",)).fetchone() == (
        None,
    ):
        return {}
    rows = conn.execute(f"SELECT {key}, checksum FROM undolog.{table}").fetchall()
    return {str(k): str(checksum) for k, checksum in rows}


def applied_migrations(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """name -> checksum of what the database has recorded (empty before install)."""
    return _recorded(conn, "undolog_migrations", "name")


def applied_repeatables(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """path -> checksum of the repeatable sources as last applied (empty before install)."""
    return _recorded(conn, "undolog_repeatables", "source_file")


def _plan(
    conn: psycopg.Connection[Any], target: str | None
) -> tuple[list[Migration], list[Repeatable], Status]:
    migrations = available_migrations()
    names = [m.name for m in migrations]
    if target is not None:
        if target not in names:
            raise MigrationError(f"unknown migration {target!r}; known: {', '.join(names)}")
        migrations = migrations[: names.index(target) + 1]
    applied = applied_migrations(conn)
    unknown = sorted(set(applied) - set(names))
    if unknown:
        # A newer release installed this database (downgrades are not supported), or a
        # pre-release layout that was folded into the baseline.
        raise MigrationError(
            f"the database has migrations this package does not know: {', '.join(unknown)}"
            f" (undolog {engine_version()} knows {', '.join(names)})"
        )
    for m in migrations:
        if m.name in applied and applied[m.name] != m.checksum:
            raise MigrationError(
                f"migration {m.name} was changed after it was applied "
                "(checksum differs); write a new migration instead"
            )
    pending = [m for m in migrations if m.name not in applied]
    sources = repeatables()
    recorded = applied_repeatables(conn)
    status = Status(
        pending=[m.name for m in pending],
        changed=[r.path for r in sources if recorded.get(r.path) != r.checksum],
        removed=sorted(set(recorded) - {r.path for r in sources}),
    )
    return pending, sources, status


def status(conn: psycopg.Connection[Any], target: str | None = None) -> Status:
    """What ``migrate`` would apply to this database; reads only."""
    return _plan(conn, target)[2]


# After the functions went in with check_function_bodies = off: every function of the
# schema passes its language's validator with bodies checked, so a broken body (a missing
# function or column in a LANGUAGE sql body, a PL/pgSQL syntax error) fails the install.
VALIDATE_FUNCTIONS = """
SET LOCAL check_function_bodies = on;
DO $validate$
DECLARE
    v_fn record;
BEGIN
    FOR v_fn IN
        SELECT p.oid, l.lanvalidator::regproc AS validator
        FROM pg_catalog.pg_proc AS p
        JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
        WHERE p.pronamespace = 'undolog'::regnamespace AND l.lanvalidator <> 0
        ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('SELECT %s(%s)', v_fn.validator, v_fn.oid);
    END LOOP;
END
$validate$;
"""


def _apply_repeatables(conn: psycopg.Connection[Any], sources: list[Repeatable]) -> None:
    conn.execute("SET LOCAL check_function_bodies = off")
    for r in sources:
        if r.path.startswith("functions/"):
            _execute(conn, r.path, r.sql)
    _execute(conn, "validating the functions", VALIDATE_FUNCTIONS)
    for r in sources:
        if not r.path.startswith("functions/"):
            _execute(conn, r.path, r.sql)


def _execute(conn: psycopg.Connection[Any], where: str, sql: str) -> None:
    try:
        conn.execute(sql.encode("utf-8"))
    except psycopg.Error as exc:
        raise MigrationError(f"{where}: {exc}") from exc


def migrate(conn: psycopg.Connection[Any], target: str | None = None) -> list[str]:
    """Bring the database up to date (migrations up to ``target`` included).

    Answers what was applied: the migrations' names, then the paths of the repeatable
    sources whose text was new or changed (all of them on a fresh install); ``[]`` when
    the database was already current. One transaction: on any error nothing is applied.
    ``conn`` must not be inside a transaction.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise MigrationError("migrate needs a connection outside any transaction")
    with conn.transaction():
        _lock(conn)
        conn.execute((sql_root() / "bootstrap.sql").read_text(encoding="utf-8"))
        pending, sources, plan = _plan(conn, target)
        if plan.up_to_date:
            return []
        for m in pending:
            _execute(conn, m.path.name, m.parts()[0])
        _apply_repeatables(conn, sources)
        for m in pending:
            after = m.parts()[1]
            if after.strip():
                _execute(conn, f"{m.path.name} (after the repeatables)", after)
        for m in pending:
            conn.execute(
                "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES (%s, %s)",
                (m.name, m.checksum),
            )
        _record_repeatables(conn, sources)
    return plan.pending + plan.changed


def apply_repeatables(conn: psycopg.Connection[Any]) -> list[str]:
    """Re-apply every repeatable source of an installed engine, whatever the records say.

    For a developer iterating on a function (``migrate`` does the same when a text
    changed), and for the test that applying them twice changes nothing. Refuses a
    database with pending migrations: the sources may need their tables.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise MigrationError("apply_repeatables needs a connection outside any transaction")
    with conn.transaction():
        _lock(conn)
        pending, sources, _ = _plan(conn, None)
        if pending:
            raise MigrationError(
                f"pending migrations {', '.join(m.name for m in pending)}: run migrate"
            )
        _apply_repeatables(conn, sources)
        _record_repeatables(conn, sources)
    return [r.path for r in sources]


def _record_repeatables(conn: psycopg.Connection[Any], sources: list[Repeatable]) -> None:
    conn.execute("DELETE FROM undolog.undolog_repeatables")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO undolog.undolog_repeatables (source_file, checksum) VALUES (%s, %s)",
            [(r.path, r.checksum) for r in sources],
        )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def install_script() -> str:
    """The whole install as one plain SQL script, for ``psql -f`` without Python.

    The same steps as ``migrate`` on an empty database, in one transaction. It is for a
    fresh install: against a database that has the engine already it fails (the records'
    primary keys) and changes nothing; use ``undolog migrate`` to upgrade.
    """
    migrations = available_migrations()
    sources = repeatables()
    parts = [
        "BEGIN;",
        f"SELECT pg_catalog.pg_advisory_xact_lock({MIGRATE_LOCK_KEY});",
        (sql_root() / "bootstrap.sql").read_text(encoding="utf-8"),
    ]
    parts += [f"-- migration {m.name}\n{m.parts()[0]}" for m in migrations]
    parts.append("SET LOCAL check_function_bodies = off;")
    parts += [f"-- {r.path}\n{r.sql}" for r in sources if r.path.startswith("functions/")]
    parts.append(VALIDATE_FUNCTIONS)
    parts += [f"-- {r.path}\n{r.sql}" for r in sources if not r.path.startswith("functions/")]
    parts += [
        f"-- migration {m.name}, after the repeatables\n{m.parts()[1]}"
        for m in migrations
        if m.parts()[1].strip()
    ]
    parts += [
        "INSERT INTO undolog.undolog_migrations (name, checksum) "
        f"VALUES ({_literal(m.name)}, {_literal(m.checksum)});"
        for m in migrations
    ]
    parts += [
        "INSERT INTO undolog.undolog_repeatables (source_file, checksum) "
        f"VALUES ({_literal(r.path)}, {_literal(r.checksum)});"
        for r in sources
    ]
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"
