"""Install or upgrade the engine: ``undolog migrate``.

A migration is a folder ``sql/migrations/NNNN_name/`` whose ``.sql`` files run in name
order, in one transaction, together with the row that records it in
``undolog.undolog_migrations`` (name + checksum). Every transaction first takes one
advisory lock, so two installers racing each other apply each migration once: the second
waits, then finds it recorded. A recorded migration whose files have since changed is an
error, never silently skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from undolog._sql import sql_root

# pg_advisory_xact_lock key held by every migrate transaction (arbitrary, fixed).
MIGRATE_LOCK_KEY = 7557806069434771456


@dataclass(frozen=True)
class Migration:
    name: str
    files: tuple[Path, ...]

    @property
    def sql(self) -> str:
        return "\n".join(f.read_text(encoding="utf-8") for f in self.files)

    @property
    def checksum(self) -> str:
        digest = hashlib.sha256()
        for f in self.files:
            digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        return digest.hexdigest()


class MigrationError(RuntimeError):
    """The database's recorded migrations disagree with this package's."""


def available_migrations(root: Path | None = None) -> list[Migration]:
    base = (root or sql_root()) / "migrations"
    return [
        Migration(d.name, tuple(sorted(d.glob("*.sql"))))
        for d in sorted(p for p in base.iterdir() if p.is_dir())
    ]


def _lock(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (MIGRATE_LOCK_KEY,))


def applied_migrations(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """name -> checksum of what the database has recorded (empty before install)."""
    if conn.execute("SELECT to_regclass('undolog.undolog_migrations')").fetchone() == (None,):
        return {}
    rows = conn.execute("SELECT name, checksum FROM undolog.undolog_migrations").fetchall()
    return {str(name): str(checksum) for name, checksum in rows}


def migrate(conn: psycopg.Connection[Any], target: str | None = None) -> list[str]:
    """Apply every pending migration (up to ``target`` included); answer their names.

    ``conn`` must not be inside a transaction; each migration commits on its own.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise MigrationError("migrate needs a connection outside any transaction")
    migrations = available_migrations()
    names = [m.name for m in migrations]
    if target is not None and target not in names:
        raise MigrationError(f"unknown migration {target!r}; known: {', '.join(names)}")
    with conn.transaction():
        _lock(conn)
        conn.execute((sql_root() / "bootstrap.sql").read_text(encoding="utf-8"))
    done: list[str] = []
    for migration in migrations:
        with conn.transaction():
            _lock(conn)
            applied = applied_migrations(conn)
            if migration.name in applied:
                if applied[migration.name] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.name} was changed after it was applied "
                        "(checksum differs); write a new migration instead"
                    )
            else:
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES (%s, %s)",
                    (migration.name, migration.checksum),
                )
                done.append(migration.name)
        if migration.name == target:
            break
    return done


def install_script() -> str:
    """The whole install as one plain SQL script, for ``psql -f`` without Python."""
    parts = [
        "BEGIN;",
        f"SELECT pg_catalog.pg_advisory_xact_lock({MIGRATE_LOCK_KEY});",
        (sql_root() / "bootstrap.sql").read_text(encoding="utf-8"),
        "COMMIT;",
    ]
    for m in available_migrations():
        parts += [
            "BEGIN;",
            f"SELECT pg_catalog.pg_advisory_xact_lock({MIGRATE_LOCK_KEY});",
            f"-- migration {m.name}",
            m.sql,
            "INSERT INTO undolog.undolog_migrations (name, checksum) "
            f"VALUES ('{m.name}', '{m.checksum}');",
            "COMMIT;",
        ]
    return "\n".join(parts) + "\n"
