"""`undolog migrate` on a database in use: what it refuses, whom it names when a lock is
held, and what a killed migrate leaves behind (docs/how-to/upgrading.md)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from undolog import migrations
from undolog.engine_check import version_key
from undolog.migrations import MigrationError, MigrationLockTimeout, migrate

ROOT = Path(__file__).resolve().parents[2]


def _engine_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the engine's sql/ that migrate reads instead, to edit as a release does."""
    root = tmp_path / "sql"
    shutil.copytree(ROOT / "sql", root)
    monkeypatch.setattr(migrations, "sql_root", lambda: root)
    return root


def _body(c: psycopg.Connection[Any], function: str) -> str:
    row = c.execute(
        "SELECT prosrc FROM pg_proc WHERE pronamespace = 'undolog'::regnamespace AND proname = %s",
        (function,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _engine_tables(c: psycopg.Connection[Any]) -> list[str]:
    """The engine's tables, not the runner's own records."""
    rows = c.execute(
        "SELECT 'undolog.' || relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
        " AND relkind IN ('r', 'p') AND NOT relispartition"
        " AND relname NOT IN ('undolog_migrations', 'undolog_repeatables') ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


# --- an older package against a newer engine --------------------------------------------


def test_version_key_orders_releases() -> None:
    ordered = ["0.1.0", "0.2.0.dev1", "0.2.0a1", "0.2.0b2", "0.2.0rc1", "0.2", "0.2.0.post1"]
    keys = [version_key(v) for v in ordered]
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert version_key("0.2") == version_key("0.2.0")
    assert version_key("0.10.0") > version_key("0.9.3")  # type: ignore[operator]
    assert version_key("not a version") is None


def test_an_older_package_refuses_an_engine_a_newer_release_installed(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer release that changed only functions has no migration the older package
    does not know: without a version check, the older package's migrate saw the newer
    functions as 'changed' and put its own older ones back (a silent downgrade), and its
    status told the operator to do so."""
    root = _engine_copy(tmp_path, monkeypatch)
    commit = root / "functions" / "commit.sql"
    commit.write_text(commit.read_text("utf-8").replace("\nBEGIN\n", "\nBEGIN\n    -- 0.2\n", 1))
    monkeypatch.setattr(migrations, "engine_version", lambda: "0.2.0")
    migrate(conn)  # the newer release's upgrade
    assert conn.execute("SELECT undolog.version()").fetchone() == ("0.2.0",)
    monkeypatch.undo()  # back to this package: its sql/, its version
    assert migrations.engine_version() != "0.2.0"
    assert version_key(migrations.engine_version()) < version_key("0.2.0")  # type: ignore[operator]

    for attempt in (migrations.status, migrate):
        with pytest.raises(MigrationError, match="newer than this package") as raised:
            attempt(conn)
        assert "undolog 0.2.0" in str(raised.value)
        assert "upgrade the package" in str(raised.value)
    assert "-- 0.2" in _body(conn, "commit")  # nothing put back
    assert conn.execute("SELECT undolog.version()").fetchone() == ("0.2.0",)

    cli = [sys.executable, "-m", "undolog.cli"]
    for command in ("status", "migrate"):
        ran = subprocess.run([*cli, command, "--dsn", dsn], capture_output=True, text=True)
        assert ran.returncode == 1, ran.stdout
        assert "newer than this package" in ran.stderr
    assert "-- 0.2" in _body(conn, "commit")


# --- whom a lock timeout names ----------------------------------------------------------


def test_a_lock_timeout_names_the_long_transaction_not_the_agents_queued_behind_migrate(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analyst's read holds the undo stack; agents' calls queue behind migrate's lock
    request and get the table the moment migrate gives up. The error must name the
    analyst (the one to look at), not the agents, and give SQL that runs."""
    root = _engine_copy(tmp_path, monkeypatch)
    policy = root / "policies" / "undolog_undo_stack.sql"
    policy.write_text(policy.read_text("utf-8") + "-- the next release\n", "utf-8")
    agents = [psycopg.connect(dsn, autocommit=True) for _ in range(6)]
    analyst = psycopg.connect(dsn, application_name="analyst")
    held = analyst.info.backend_pid
    queued = [a.info.backend_pid for a in agents]
    try:
        # the analyst's backend is the newest: an answer ordered by pid lists it last
        newest = max(agents, key=lambda a: a.info.backend_pid)
        if newest.info.backend_pid > analyst.info.backend_pid:
            pytest.skip("pids wrapped around: the analyst's backend is not the newest")
        analyst.execute("SELECT count(*) FROM undolog.undolog_undo_stack")  # stays open
        migrator = psycopg.connect(dsn, autocommit=True)
        raised: list[BaseException] = []

        def run() -> None:
            try:
                migrate(migrator, lock_timeout="1s")
            except BaseException as exc:  # asserted below
                raised.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted"
        deadline = time.monotonic() + 5
        while conn.execute(waiting, (migrator.info.backend_pid,)).fetchone() == (0,):
            assert time.monotonic() < deadline, "migrate never waited for the lock"
            time.sleep(0.01)
        # agents' calls now queue behind migrate, then hold the table a while
        calls = [
            threading.Thread(
                target=a.execute,
                args=("SELECT count(*), pg_sleep(1.5) FROM undolog.undolog_undo_stack",),
            )
            for a in agents
        ]
        for t in calls:
            t.start()
        thread.join(10)
        for t in calls:
            t.join(10)
        migrator.close()
    finally:
        analyst.close()
        for a in agents:
            a.close()
    (error,) = raised
    assert isinstance(error, MigrationLockTimeout)
    message = str(error)
    assert f"pid {held} " in message and "'analyst'" in message, message
    for pid in queued:
        assert f"pid {pid} " not in message, message
    assert f"SELECT pg_terminate_backend({held})" in message
    assert len(error.holders) == 1


def test_the_advice_to_end_several_holders_is_sql_that_runs(conn: psycopg.Connection[Any]) -> None:
    """pg_terminate_backend takes one pid (and a timeout): a list of pids is not a call."""
    advice = migrations._terminate_advice([2147483000, 2147483001])
    assert "unnest" in advice
    with psycopg.connect(conn.info.dsn, autocommit=True) as c:
        assert c.execute(advice).fetchall() == [(False,), (False,)]  # no such backends


# --- a killed migrate ---------------------------------------------------------------------

_MIGRATE_IN_A_PROCESS = """
import pathlib, sys, psycopg
from undolog import migrations
migrations.sql_root = lambda: pathlib.Path(sys.argv[1])
with psycopg.connect(sys.argv[2], autocommit=True) as c:
    print(migrations.migrate(c))
"""


def test_a_killed_migrate_lets_agents_go_within_seconds_and_the_next_one_finishes(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """migrate is killed (SIGKILL) in a migration that holds a table's ACCESS EXCLUSIVE
    lock (as 0014 does for its rewrite). Its backend, left without a client, used to run
    the statement to its end with the lock held: agents waited for all of it. It must
    notice its client is gone and roll back within about a second; the next migrate then
    does the whole job."""
    root = _engine_copy(tmp_path, monkeypatch)
    slow = root / "migrations" / "9000_slow_rewrite.sql"
    slow.write_text(
        "LOCK TABLE undolog.undolog_sessions IN ACCESS EXCLUSIVE MODE;\n"
        "SELECT pg_sleep(12);\n"
        "ALTER TABLE undolog.undolog_sessions ADD COLUMN note text;\n",
        "utf-8",
    )
    proc = subprocess.Popen([sys.executable, "-c", _MIGRATE_IN_A_PROCESS, str(root), dsn])
    sleeping = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE '%%pg_sleep(12)%%' AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + 8
    while (row := conn.execute(sleeping).fetchone()) is None:
        assert proc.poll() is None and time.monotonic() < deadline, "migrate never started"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as agent:
        agent.execute("SET lock_timeout = '8s'")
        agent.execute("SELECT count(*) FROM undolog.undolog_sessions")
    stalled = time.monotonic() - killed_at
    print(f"\nagents waited {stalled * 1000:.0f} ms after migrate was killed")
    assert stalled < 3.5
    # the orphaned backend is gone (it leaves pg_stat_activity just after its locks)
    deadline = time.monotonic() + 3
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", row).fetchone():
        assert time.monotonic() < deadline, "the killed migrate's backend stayed"
        time.sleep(0.05)
    # consistent: nothing of the killed run is in the database
    assert migrations.status(conn).pending == ["9000_slow_rewrite"]
    slow.write_text("ALTER TABLE undolog.undolog_sessions ADD COLUMN note text;\n", "utf-8")
    assert migrate(conn)[:1] == ["9000_slow_rewrite"]
    assert migrations.status(conn).up_to_date


# --- an up-to-date database: migrate takes no lock ----------------------------------------


def test_migrate_of_a_current_database_waits_for_no_table(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    """Every engine table locked ACCESS EXCLUSIVE by someone else: a migrate with nothing
    to do still answers at once (it reads only its own records and the catalog)."""
    with psycopg.connect(dsn) as other:
        other.execute(f"LOCK TABLE {', '.join(_engine_tables(other))} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        assert migrate(conn, lock_timeout="200ms") == []
        assert time.monotonic() - started < 2
        other.rollback()


# --- a login that is not the engine's owner -------------------------------------------------


def test_migrate_by_a_login_that_is_not_the_owner_names_the_owner(
    conn: psycopg.Connection[Any],
    dsn: str,
    login: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator (undolog_operator, CREATE on the database) runs migrate: it must fail
    before it touches anything, name the owner, and not advise granting a group role
    (which the login already holds and which would not help)."""
    root = _engine_copy(tmp_path, monkeypatch)
    commit = root / "functions" / "commit.sql"
    commit.write_text(commit.read_text("utf-8") + "-- the next release\n", "utf-8")
    operator = login("undolog_operator")
    name = operator.info.user
    conn.execute(
        sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(name)
        )
    )
    try:
        assert migrations.status(operator).changed == ["functions/commit.sql"]  # may read
        owner = conn.execute(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'undolog'"
        ).fetchone()
        assert owner is not None
        for attempt in (migrate, migrations.apply_repeatables):
            with pytest.raises(MigrationError, match="must run as the owner") as raised:
                attempt(operator)
            assert f"login {owner[0]}" in str(raised.value)
            assert f"this login is {name}" in str(raised.value)
        assert "the next release" not in _body(conn, "commit")
        assert operator.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        monkeypatch.undo()
        ran = subprocess.run(
            [sys.executable, "-m", "undolog.cli", "migrate", "--dsn", operator.info.dsn],
            capture_output=True,
            text=True,
        )
        assert ran.returncode == 1
        assert "must run as the owner" in ran.stderr
        assert "grant the login one of" not in ran.stderr
    finally:
        conn.execute(
            sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(
                sql.Identifier(conn.info.dbname), sql.Identifier(name)
            )
        )
    assert migrate(conn) == []  # the owner: up to date (the package's own files)
