"""`undolog migrate`: idempotent, safe when installers race, refuses edited history, and
an upgrade through every migration builds the same schema as a fresh install."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import bindir, schema_dump, throwaway_cluster
from undolog import CompensationDescriptor, ToolTier, UndoLog, engine, migrations, undolog_tool
from undolog.migrations import (
    MigrationError,
    available_migrations,
    install_script,
    migrate,
    repeatables,
)

ROOT = Path(__file__).resolve().parents[2]


def test_migrate_twice_applies_nothing_the_second_time(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_twice")
    with psycopg.connect(dsn, autocommit=True) as c:
        first = migrate(c)
        second = migrate(c)
        recorded = c.execute("SELECT name FROM undolog.undolog_migrations ORDER BY name").fetchall()
    names = [m.name for m in available_migrations()]
    assert first == names + [r.path for r in repeatables()]
    assert second == []
    assert [r[0] for r in recorded] == names


def test_racing_installers_apply_each_migration_once(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_race")
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


def test_a_changed_migration_is_refused(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_tamper")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        c.execute(
            "UPDATE undolog.undolog_migrations SET checksum = 'edited' WHERE name = %s",
            (available_migrations()[0].name,),
        )
        with pytest.raises(MigrationError, match="changed after it was applied"):
            migrate(c)


def test_migrate_refuses_an_unknown_target(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_target")
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(MigrationError):
        migrate(c, target="9999_nope")


def test_install_sql_script_installs_the_same_schema(fresh_db: Callable[..., str]) -> None:
    by_migrate = fresh_db("mig_by_migrate")
    with psycopg.connect(by_migrate, autocommit=True) as c:
        migrate(c)
    by_psql = fresh_db("mig_by_psql")
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


def test_cli_migrate_reports_and_exits_zero(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_cli")
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


# --- migrate re-creates only what changed, and never waits long for a lock -------------


def _engine_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the engine's sql/ that migrate reads instead, for a test to edit as a
    developer edits the real files (an upgrade's new release)."""
    root = tmp_path / "sql"
    shutil.copytree(ROOT / "sql", root)
    monkeypatch.setattr(migrations, "sql_root", lambda: root)
    return root


def _mark_body(root: Path, function: str, mark: str) -> None:
    """Change a PL/pgSQL function's body: a comment line after its BEGIN (in prosrc, so
    the database shows whether the new text is the one installed)."""
    path = root / "functions" / f"{function}.sql"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("\nBEGIN\n", f"\nBEGIN\n    -- {mark}\n", 1), "utf-8")


def _body(c: psycopg.Connection[Any], function: str) -> str:
    row = c.execute(
        "SELECT prosrc FROM pg_proc WHERE pronamespace = 'undolog'::regnamespace AND proname = %s",
        (function,),
    ).fetchone()
    assert row is not None
    return str(row[0])


# Row versions of what an unneeded re-apply would rewrite: triggers, policies, views.
_OBJECT_VERSIONS = """
SELECT 'trigger ' || tgname, xmin::text FROM pg_trigger
WHERE tgrelid::regclass::text LIKE 'undolog.%' AND NOT tgisinternal
UNION ALL SELECT 'policy ' || polname, xmin::text FROM pg_policy
WHERE polrelid::regclass::text LIKE 'undolog.%'
UNION ALL SELECT 'relation ' || relname, xmin::text FROM pg_class
WHERE relnamespace = 'undolog'::regnamespace AND relkind = 'v'
ORDER BY 1
"""


def _tables(c: psycopg.Connection[Any]) -> list[str]:
    rows = c.execute(
        "SELECT 'undolog.' || relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
        " AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


def test_migrate_reapplies_only_the_changed_function(
    conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _engine_copy(tmp_path, monkeypatch)
    before = conn.execute(_OBJECT_VERSIONS).fetchall()
    _mark_body(root, "commit", "the next release")
    assert migrations.status(conn).changed == ["functions/commit.sql"]
    assert migrate(conn) == ["functions/commit.sql"]
    assert "the next release" in _body(conn, "commit")
    assert conn.execute(_OBJECT_VERSIONS).fetchall() == before  # nothing else re-created
    assert migrations.status(conn).up_to_date
    assert migrate(conn) == []


def test_a_changed_function_is_applied_while_agents_hold_every_table(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents' open transactions hold ROW EXCLUSIVE on the tables they write: a migrate
    that re-created any trigger or policy would wait for them. Re-creating a function
    only waits for nobody."""
    root = _engine_copy(tmp_path, monkeypatch)
    _mark_body(root, "heartbeat", "needs no table lock")
    with psycopg.connect(dsn) as agent:
        agent.execute(f"LOCK TABLE {', '.join(_tables(agent))} IN ROW EXCLUSIVE MODE")
        started = time.monotonic()
        assert migrate(conn, lock_timeout="200ms") == ["functions/heartbeat.sql"]
        assert time.monotonic() - started < 10
        agent.rollback()
    assert "needs no table lock" in _body(conn, "heartbeat")


def test_migrate_of_a_changed_function_while_agents_call(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four agents journal COMPENSABLE calls through the decorator, each on its own
    connection, while migrate re-applies commit() (the function every call runs) three
    times: every call succeeds, and none waits long."""
    root = _engine_copy(tmp_path, monkeypatch)

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo_n"))
    def record_n(agent: int, n: int) -> int:
        return n

    stop = threading.Event()
    calls: list[tuple[float, float]] = []  # (start, seconds) of each journaled call
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        ul = UndoLog(dsn)
        try:
            n = 0
            while not stop.is_set():
                with ul.session(agent=f"agent-{i}"):
                    for _ in range(10):
                        t0 = time.monotonic()
                        assert record_n(agent=i, n=n) == n
                        calls.append((t0, time.monotonic() - t0))
                        n += 1
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)  # the agents are under way
        windows = []
        for round_ in range(3):
            _mark_body(root, "commit", f"release {round_}")
            t0 = time.monotonic()
            assert migrate(conn, lock_timeout="2s") == ["functions/commit.sql"]
            windows.append((t0, time.monotonic()))
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    assert "release 2" in _body(conn, "commit")
    during = [s for t0, s in calls if any(a <= t0 <= b for a, b in windows)]
    slowest = max(s for _, s in calls)
    print(
        f"\n{len(calls)} calls, {len(during)} while migrate ran; migrate took"
        f" {[round(b - a, 3) for a, b in windows]} s; slowest call {slowest:.3f} s"
    )
    assert len(during) >= 4  # the agents kept calling while migrate ran
    # a call queued behind a table lock would wait for the whole migrate transaction; on
    # this shared 2-core machine a journaled call takes a few ms
    assert slowest < 2.0


def test_a_long_transaction_makes_migrate_fail_cleanly_after_lock_timeout(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger whose file changed needs its table's lock; an agent's transaction that
    stays open holds it. migrate gives up after lock_timeout, names the holder and what
    to do, and applies nothing (the function changed in the same release neither)."""
    root = _engine_copy(tmp_path, monkeypatch)
    _mark_body(root, "commit", "same release as the trigger")
    trigger = root / "triggers" / "undolog_sessions_no_delete.sql"
    trigger.write_text(trigger.read_text("utf-8") + "-- the next release\n", "utf-8")
    with psycopg.connect(dsn, application_name="stuck-agent") as agent:
        engine.begin_session(agent, agent="stuck")  # its transaction stays open
        holder = agent.info.backend_pid
        started = time.monotonic()
        with pytest.raises(migrations.MigrationLockTimeout) as raised:
            migrate(conn, lock_timeout="300ms")
        waited = time.monotonic() - started
        message = str(raised.value)
        assert 0.3 <= waited < 10
        assert message.startswith("triggers/undolog_sessions_no_delete.sql: gave up after")
        for said in (
            "lock_timeout 300ms",
            "undolog.undolog_sessions",
            "nothing was applied",
            f"pid {holder} ",
            "'stuck-agent'",
            "idle in transaction",
            f"pg_terminate_backend({holder})",
            "--lock-timeout",
        ):
            assert said in message, said
        assert raised.value.where == "triggers/undolog_sessions_no_delete.sql"
        assert isinstance(raised.value.__cause__, psycopg.errors.LockNotAvailable)
        # nothing half-applied: the function is the old one, both files still due
        assert "same release" not in _body(conn, "commit")
        assert migrations.status(conn).changed == [
            "functions/commit.sql",
            "triggers/undolog_sessions_no_delete.sql",
        ]
        agent.rollback()
    assert migrate(conn, lock_timeout="300ms") == [
        "functions/commit.sql",
        "triggers/undolog_sessions_no_delete.sql",
    ]
    assert "same release" in _body(conn, "commit")


def test_the_cli_names_the_lock_timeout_it_refuses(fresh_db: Callable[..., str]) -> None:
    dsn = fresh_db("mig_bad_timeout")
    cli = [sys.executable, "-m", "undolog.cli", "migrate", "--dsn", dsn, "--lock-timeout"]
    bad = subprocess.run([*cli, "soon"], capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "lock_timeout 'soon' is not a duration" in bad.stderr
    assert "'5s'" in bad.stderr
    good = subprocess.run([*cli, "1s"], capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr


def test_what_a_migration_drops_migrate_re_creates(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration that drops a view, a trigger and a policy (as re-creating a table
    would) leaves their files unchanged: migrate re-creates them anyway, and applies
    grants.sql after any migration (the re-created view has lost its grants), so the
    upgraded schema is the fresh one."""
    fresh = schema_dump(dsn)
    root = _engine_copy(tmp_path, monkeypatch)
    (root / "migrations" / "9000_drops.sql").write_text(
        "DROP VIEW undolog.sessions_list;\n"
        "DROP TRIGGER undolog_sessions_no_delete ON undolog.undolog_sessions;\n"
        "DROP POLICY undolog_agent_reads_own ON undolog.undolog_sessions;\n",
        "utf-8",
    )
    assert migrate(conn) == [
        "9000_drops",
        "views/sessions_list.sql",
        "triggers/undolog_sessions_no_delete.sql",
        "policies/undolog_sessions.sql",
        "grants.sql",
    ]
    assert schema_dump(dsn) == fresh
    assert migrate(conn) == []


def test_status_reports_an_object_dropped_by_hand_and_migrate_re_creates_it(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("DROP VIEW undolog.sessions_list")
    found = migrations.status(conn)
    assert found.missing == ["views/sessions_list.sql"]
    assert found.describe() == [
        "missing views/sessions_list.sql (its object is gone: migrate re-creates it)"
    ]
    assert migrate(conn) == ["views/sessions_list.sql"]
    assert migrations.status(conn).up_to_date
