"""Between releases (the same version on both sides) the clients' engine check also
compares the engine's applied migrations (undolog.undolog_migrations) with the ones this
package ships (sql/migrations): a database migrated by an older tree of this version is
refused, naming the first migration it lacks, until `undolog migrate` runs with this
package (undolog.engine_check, docs/reference/python.md). Before, the check passed and
the package's statements then met the older engine (42883, or worse)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    CompensationDescriptor,
    EngineVersionMismatch,
    ToolTier,
    UndoLog,
    engine_check,
    undolog_tool,
    walk,
)
from undolog._sql import sql_root
from undolog._version import __version__ as PACKAGE
from undolog.migrations import VERSION_PLACEHOLDER, available_migrations, migrate

Conn = psycopg.Connection[Any]
SHIPPED = [m.name for m in available_migrations()]
LAST, BEFORE_LAST = SHIPPED[-1], SHIPPED[-2]
ran: list[str] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("forget"))
def note(x: int) -> int:
    ran.append(f"note {x}")
    return x


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("forget"))
async def note_async(x: int) -> int:
    ran.append(f"note_async {x}")
    return x


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def _sync(dsn: str) -> None:
    with UndoLog(dsn).session(agent="migrations"):
        note(1)


def _async(dsn: str) -> None:
    async def run() -> None:
        async with AsyncUndoLog(dsn).session(agent="migrations"):
            await note_async(1)

    asyncio.run(run())


def _durable(dsn: str) -> None:
    with UndoLog(dsn, durable_results=True).session(agent="migrations"):
        note(1)


def _checked(dsn: str) -> None:
    """engine_check.check on a connection of one's own (the walks' and the worker's)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        engine_check.check(c)


WAYS: dict[str, Callable[[str], None]] = {
    "UndoLog": _sync,
    "AsyncUndoLog": _async,
    "UndoLog durable_results": _durable,
    "engine_check.check": _checked,
}


def _journal(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT (SELECT count(*) FROM undolog.undolog_sessions),"
            " (SELECT count(*) FROM undolog.undolog_effect_log)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _engine_answers(conn: Conn, version: str) -> None:
    """undolog.version() answers ``version`` (its source, applied as migrate does)."""
    text = (sql_root() / "functions" / "version.sql").read_text("utf-8")
    conn.execute(text.replace(VERSION_PLACEHOLDER, version).encode("utf-8"))


@pytest.fixture
def behind(fresh_db: Callable[..., str]) -> Iterator[tuple[str, Conn]]:
    """A database migrated by an older tree of this very version: every migration but
    this package's last, and this package's version(). (DSN, an owner's connection.)"""
    dsn = fresh_db()
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c, BEFORE_LAST)
        assert c.execute("SELECT undolog.version()").fetchone() == (PACKAGE,)
        recorded = c.execute("SELECT name FROM undolog.undolog_migrations ORDER BY name")
        assert [r[0] for r in recorded.fetchall()] == SHIPPED[:-1]
        yield dsn, c


@contextlib.contextmanager
def _agent(conn: Conn, dsn: str) -> Iterator[str]:
    """The DSN of a new agent login (roles are the cluster's: dropped after)."""
    name = f"agent_{secrets.token_hex(4)}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_agent")
    try:
        yield psycopg.conninfo.make_conninfo(dsn, user=name)
    finally:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def test_the_rule_names_the_first_missing_migration() -> None:
    got = engine_check.refusal(PACKAGE, PACKAGE, applied=SHIPPED[:-1])
    assert got is not None
    assert f"lacks this package's migration {LAST}" in str(got)
    assert "run `undolog migrate` with this package" in str(got)
    assert (got.installed, got.package) == (PACKAGE, PACKAGE)
    two = engine_check.refusal(PACKAGE, PACKAGE, applied=[SHIPPED[0]])
    assert two is not None and f"migration {SHIPPED[1]} (and {len(SHIPPED) - 2} more)" in str(two)
    # all of them, or more (a newer tree of this version migrated it): accepted
    assert engine_check.refusal(PACKAGE, PACKAGE, applied=SHIPPED) is None
    assert engine_check.refusal(PACKAGE, PACKAGE, applied=[*SHIPPED, "9999_later"]) is None
    # unknown (the caller did not read them): the version alone decides, as before
    assert engine_check.refusal(PACKAGE, PACKAGE) is None
    # migrate's pending migrations are the same set difference
    assert engine_check.missing_migrations(SHIPPED[:-1]) == [LAST]


@pytest.mark.parametrize("way", sorted(WAYS))
def test_an_engine_missing_this_trees_migration_is_refused_until_migrate(
    behind: tuple[str, Conn], way: str
) -> None:
    dsn, owner = behind
    with pytest.raises(EngineVersionMismatch) as got:
        WAYS[way](dsn)
    message = str(got.value)
    assert f"undolog {PACKAGE}, this package's version" in message, message
    assert f"lacks this package's migration {LAST}" in message, message
    assert "run `undolog migrate` with this package" in message, message
    assert (got.value.installed, got.value.package) == (PACKAGE, PACKAGE)
    assert ran == []
    assert _journal(dsn) == (0, 0)

    assert migrate(owner)[:1] == [LAST]
    WAYS[way](dsn)
    if way != "engine_check.check":
        assert len(ran) == 1
        assert _journal(dsn) == (1, 1)


def test_an_agent_login_is_refused_too_and_served_after_migrate(
    behind: tuple[str, Conn],
) -> None:
    """Agents read the migrations' names (grants.sql grants the column), so the check
    folded into their session's first statement works for them as for the owner."""
    dsn, owner = behind
    with _agent(owner, dsn) as agent:
        for way in (_sync, _async):
            with pytest.raises(EngineVersionMismatch, match=f"migration {LAST}"):
                way(agent)
        migrate(owner)
        _sync(agent)
        _async(agent)
    assert ran == ["note 1", "note_async 1"]


def test_an_agent_of_an_engine_whose_grants_predate_the_check_is_told_to_migrate(
    conn: Conn, dsn: str
) -> None:
    """An engine migrated by a tree whose grants.sql did not yet let agents read the
    migrations' names: the agent's check cannot read them (42501), which says that this
    tree's grants were never applied: run `undolog migrate`."""
    conn.execute("REVOKE SELECT (name) ON undolog.undolog_migrations FROM undolog_agent")
    conn.execute(
        "UPDATE undolog.undolog_repeatables SET checksum = 'older tree'"
        " WHERE source_file = 'grants.sql'"
    )
    with _agent(conn, dsn) as agent:
        for way in (_sync, _async):
            with pytest.raises(EngineVersionMismatch, match="run `undolog migrate`") as got:
                way(agent)
            assert isinstance(got.value.__cause__, psycopg.errors.InsufficientPrivilege)
        assert migrate(conn) == ["grants.sql"]
        _sync(agent)
    assert ran == ["note 1"]


@pytest.mark.parametrize("way", sorted(WAYS))
def test_more_migrations_than_the_package_ships_are_accepted(
    conn: Conn, dsn: str, way: str
) -> None:
    """A newer tree of this version, or a newer patch release, migrated the database:
    it has every migration this package ships, and more."""
    conn.execute(
        "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES ('9999_later', 'x')"
    )
    WAYS[way](dsn)
    _engine_answers(conn, _newer_patch())
    WAYS[way](dsn)


def _newer_patch() -> str:
    key = engine_check.version_key(PACKAGE)
    assert key is not None
    major, minor, patch = (*key[0], 0, 0, 0)[:3]
    return f"{major}.{minor}.{patch + 1}"


def test_a_newer_patch_release_is_not_held_to_this_trees_migrations(
    behind: tuple[str, Conn],
) -> None:
    """The migrations rule applies between releases only: a newer patch engine is
    accepted whatever it lacks of this tree (the version rule's promise)."""
    dsn, owner = behind
    _engine_answers(owner, _newer_patch())
    _sync(dsn)
    assert ran == ["note 1"]


def test_the_worker_refuses_an_engine_missing_a_migration(behind: tuple[str, Conn]) -> None:
    dsn, _owner = behind
    run = walk.Worker(lambda: psycopg.connect(dsn, autocommit=True), {}, interval=0.0)
    with pytest.raises(walk.WorkerConfigError) as refused:
        run.run(once=True)
    assert LAST in str(refused.value) and "undolog migrate" in str(refused.value)
    assert isinstance(refused.value.__cause__, EngineVersionMismatch)


def test_the_migrations_are_read_only_when_the_versions_are_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The comparison is made between releases only: an engine of another version is
    judged by its version, and the package's migrations are not listed for it."""
    listed: list[str] = []

    def shipped() -> tuple[str, ...]:
        listed.append("read")
        return tuple(SHIPPED)

    monkeypatch.setattr(engine_check, "shipped_migrations", shipped)
    assert engine_check.refusal(_newer_patch(), PACKAGE, applied=SHIPPED[:-1]) is None
    assert listed == []
    assert engine_check.refusal(PACKAGE, PACKAGE, applied=SHIPPED[:-1]) is not None
    assert listed == ["read"]


def test_a_package_whose_migrations_cannot_be_read_skips_the_comparison(
    monkeypatch: pytest.MonkeyPatch, conn: Conn, dsn: str
) -> None:
    """A frozen install without sql/migrations on disk: the check judges the version
    alone, rather than failing every connection with FileNotFoundError."""

    def gone() -> tuple[str, ...]:
        raise FileNotFoundError("sql/migrations")

    monkeypatch.setattr(engine_check, "shipped_migrations", gone)
    assert engine_check.missing_migrations(SHIPPED[:-1]) == []
    assert engine_check.refusal(PACKAGE, PACKAGE, applied=SHIPPED[:-1]) is None
    conn.execute("DELETE FROM undolog.undolog_migrations WHERE name = %s", (LAST,))
    _sync(dsn)
    assert ran == ["note 1"]
    # the version rule still holds
    assert engine_check.refusal("0.0.0", PACKAGE, applied=[]) is not None


def test_the_dashboard_rule_names_the_first_missing_migration() -> None:
    """engine_check.judgement: what the Maintenance page says, by the clients' one rule."""
    assert engine_check.judgement(PACKAGE, SHIPPED, PACKAGE) == (None, None)
    assert engine_check.judgement(PACKAGE, SHIPPED[:-1], PACKAGE) == ("migrations", LAST)
    assert engine_check.judgement(None, [], PACKAGE) == ("missing", None)
    assert engine_check.judgement(_newer_patch(), SHIPPED[:-1], PACKAGE) == (None, None)
    assert engine_check.judgement("0.0.0", SHIPPED, PACKAGE)[0] == "older"
