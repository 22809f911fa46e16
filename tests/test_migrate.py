"""`undolog migrate`: idempotent, safe when installers race, refuses edited history, and
an upgrade through every migration builds the same schema as a fresh install."""

from __future__ import annotations

import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import bindir, schema_dump, throwaway_cluster
from undolog import engine, migrations
from undolog.migrations import (
    MigrationError,
    available_migrations,
    install_script,
    migrate,
    repeatables,
)

ROOT = Path(__file__).resolve().parents[1]


def _fresh_db(admin: psycopg.Connection[Any], name: str) -> str:
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}"')
    info = admin.info
    return f"host={info.host} port={info.port} user={info.user} dbname={name}"


@pytest.fixture
def admin(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    return conn


def test_migrate_twice_applies_nothing_the_second_time(admin: psycopg.Connection[Any]) -> None:
    dsn = _fresh_db(admin, "mig_twice")
    with psycopg.connect(dsn, autocommit=True) as c:
        first = migrate(c)
        second = migrate(c)
        recorded = c.execute("SELECT name FROM undolog.undolog_migrations ORDER BY name").fetchall()
    names = [m.name for m in available_migrations()]
    assert first == names + [r.path for r in repeatables()]
    assert second == []
    assert [r[0] for r in recorded] == names


def test_racing_installers_apply_each_migration_once(admin: psycopg.Connection[Any]) -> None:
    dsn = _fresh_db(admin, "mig_race")
    results: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def install() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                start.wait()
                results.append(migrate(c))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # exactly one installer did the work, the others found it done
    assert sorted(results, key=len)[:-1] == [[], [], []]
    names = [m.name for m in available_migrations()]
    assert [name for r in results for name in r if name in names] == names


def _migrate_at_once(dsns: list[str]) -> list[BaseException]:
    """Run migrate into each database at the same moment; answer what was raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(dsns))

    def install(dsn: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as db:
                start.wait()
                migrate(db)
        except BaseException as exc:  # collected and asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=install, args=(d,)) for d in dsns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_installs_into_two_databases_of_a_new_cluster_at_once() -> None:
    """Roles are cluster-wide but the migrate lock is per database: two installs racing
    into two databases of a cluster without the roles must both succeed."""
    for _ in range(3):
        with throwaway_cluster() as cluster, psycopg.connect(cluster.dsn, autocommit=True) as c:
            for name in ("race_a", "race_b"):
                c.execute(f"CREATE DATABASE {name}")
            dsns = [
                cluster.dsn.replace("dbname=postgres", f"dbname={n}") for n in ("race_a", "race_b")
            ]
            assert _migrate_at_once(dsns) == []


def test_a_changed_migration_is_refused(admin: psycopg.Connection[Any]) -> None:
    dsn = _fresh_db(admin, "mig_tamper")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        c.execute(
            "UPDATE undolog.undolog_migrations SET checksum = 'edited' WHERE name = %s",
            (available_migrations()[0].name,),
        )
        with pytest.raises(MigrationError, match="changed after it was applied"):
            migrate(c)


def test_migrate_refuses_an_unknown_target(admin: psycopg.Connection[Any]) -> None:
    dsn = _fresh_db(admin, "mig_target")
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(MigrationError):
        migrate(c, target="9999_nope")


def test_upgrade_through_every_release_equals_fresh_install(
    admin: psycopg.Connection[Any],
    old_engine: Path,
    engine_before_reject_option: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = _fresh_db(admin, "mig_fresh")
    with psycopg.connect(fresh, autocommit=True) as c:
        migrate(c)
    upgraded = _fresh_db(admin, "mig_upgraded")
    with psycopg.connect(upgraded, autocommit=True) as c:
        # one migration at a time, with a journal in use between them, as a user upgrades
        # each migration with the sources of the first release that had it
        releases = [old_engine, engine_before_reject_option]
        first: dict[str, Path] = {}
        for root in reversed(releases):
            first.update({m.name: root for m in available_migrations(root)})
        for m in available_migrations():
            with monkeypatch.context() as patched:  # that release's own sources
                if m.name in first:
                    root = first[m.name]
                    patched.setattr(migrations, "sql_root", lambda root=root: root)
                migrate(c, target=m.name)
            session = engine.begin_session(c)
            found = engine.intercept(
                c,
                session,
                0,
                "create_user",
                "compensable",
                {"email": f"{m.name}@example.com"},
                compensation={"name": "delete_user"},
            )
            assert found.effect_id is not None
            engine.commit(c, found.effect_id, {"id": 1})
    assert schema_dump(upgraded) == schema_dump(fresh)


def test_install_sql_script_installs_the_same_schema(admin: psycopg.Connection[Any]) -> None:
    by_migrate = _fresh_db(admin, "mig_by_migrate")
    with psycopg.connect(by_migrate, autocommit=True) as c:
        migrate(c)
    by_psql = _fresh_db(admin, "mig_by_psql")
    subprocess.run(
        [str(bindir() / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", by_psql],
        input=install_script(),
        text=True,
        check=True,
        capture_output=True,
    )
    assert schema_dump(by_psql) == schema_dump(by_migrate)
    with psycopg.connect(by_psql, autocommit=True) as c:
        assert migrate(c) == []  # recorded, so migrate sees it as up to date


def test_cli_migrate_reports_and_exits_zero(admin: psycopg.Connection[Any]) -> None:
    dsn = _fresh_db(admin, "mig_cli")
    cli = [sys.executable, "-m", "undolog.cli", "migrate", "--dsn", dsn]
    first = subprocess.run(cli, capture_output=True, text=True, check=False)
    second = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert "applied 0001_baseline" in first.stdout
    assert (second.returncode, second.stdout.strip()) == (0, "up to date")


def test_cli_migrate_fails_clearly_without_a_database() -> None:
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "undolog.cli",
            "migrate",
            "--dsn",
            "host=127.0.0.1 port=1 connect_timeout=2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("undolog: ")


def test_the_wheel_ships_the_sql(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("undolog-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = (
        {"undolog/sql/bootstrap.sql"}
        | {f"undolog/sql/migrations/{m.path.name}" for m in available_migrations()}
        | {f"undolog/sql/{r.path}" for r in repeatables()}
    )
    assert expected <= names
