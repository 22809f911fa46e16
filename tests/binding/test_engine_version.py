"""The clients check, the first time they use a connection, that the engine in its
database is one this package works with (undolog.engine_check): an engine older than the
package, or a newer release of another major.minor, is refused before a session begins,
and the check runs once per connection, folded into the session's first statement when
it has one (docs/reference/python.md, Errors)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from undolog import (
    AsyncUndoLog,
    CompensationDescriptor,
    EngineNotInstalled,
    EngineVersionMismatch,
    ToolTier,
    UndoLog,
    undolog_tool,
    walk,
)
from undolog._sql import sql_root
from undolog._version import __version__ as PACKAGE
from undolog.engine_check import mismatch, version_key
from undolog.migrations import VERSION_PLACEHOLDER

Conn = psycopg.Connection[Any]
ran: list[str] = []


def _release() -> tuple[int, int, int]:
    key = version_key(PACKAGE)
    assert key is not None, PACKAGE
    major, minor, patch = (*key[0], 0, 0, 0)[:3]
    return major, minor, patch


MAJOR, MINOR, PATCH = _release()
OLDER = "0.0.1"  # an older release
OLDER_PATCH = f"{MAJOR}.{MINOR}.{PATCH}.dev0"  # before this very release: older too
NEWER_PATCH = f"{MAJOR}.{MINOR}.{PATCH + 1}"  # a later patch release of this series
NEWER_MINOR = f"{MAJOR}.{MINOR + 1}.0"


def test_the_versions_these_tests_use_are_what_they_say() -> None:
    ours = version_key(PACKAGE)
    assert ours is not None
    for older in (OLDER, OLDER_PATCH):
        theirs = version_key(older)
        assert theirs is not None and theirs < ours, older
    assert mismatch(OLDER_PATCH, PACKAGE) == "older"
    assert mismatch(NEWER_PATCH, PACKAGE) is None  # accepted: same major.minor
    assert mismatch(NEWER_MINOR, PACKAGE) == "newer"
    assert mismatch(f"{MAJOR + 1}.0.0", PACKAGE) == "newer"
    assert mismatch(PACKAGE, PACKAGE) is None
    assert mismatch("not a version", PACKAGE) is None  # not compared, as migrate


def _engine_answers(conn: Conn, version: str) -> None:
    """The engine's undolog.version() answers ``version``: its source file applied as
    migrate applies it, with that version written in (what another release installs)."""
    text = (sql_root() / "functions" / "version.sql").read_text("utf-8")
    conn.execute(text.replace(VERSION_PLACEHOLDER, version).encode("utf-8"))


def _journal(conn: Conn) -> tuple[int, int]:
    """How many sessions and journaled calls the database holds."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_sessions),"
        " (SELECT count(*) FROM undolog.undolog_effect_log)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("forget"))
def remember(x: int) -> int:
    ran.append(f"remember {x}")
    return x


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("forget"))
async def remember_async(x: int) -> int:
    ran.append(f"remember_async {x}")
    return x


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def _sync_session(ul: UndoLog) -> None:
    with ul.session(agent="versioned"):
        remember(1)


def _async_session(ul: AsyncUndoLog) -> None:
    async def run() -> None:
        async with ul.session(agent="versioned"):
            await remember_async(1)

    asyncio.run(run())


def _dual_async_session(ul: UndoLog) -> None:
    async def run() -> None:
        async with ul.session(agent="versioned"):
            await remember_async(1)

    asyncio.run(run())


# Each way a session is opened: UndoLog (with), UndoLog (async with, through its
# AsyncUndoLog), AsyncUndoLog, each on a DSN; UndoLog on a pool; durable results.
WAYS: dict[str, Callable[[str], None]] = {
    "UndoLog": lambda dsn: _sync_session(UndoLog(dsn)),
    "UndoLog async with": lambda dsn: _dual_async_session(UndoLog(dsn)),
    "AsyncUndoLog": lambda dsn: _async_session(AsyncUndoLog(dsn)),
    "UndoLog durable_results": lambda dsn: _sync_session(UndoLog(dsn, durable_results=True)),
    "AsyncUndoLog durable_results": lambda dsn: _async_session(
        AsyncUndoLog(dsn, durable_results=True)
    ),
}


def _on_pool(dsn: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        _sync_session(UndoLog(pool=pool))


def _on_async_pool(dsn: str) -> None:
    async def run() -> None:
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False)
        async with pool, AsyncUndoLog(pool=pool).session(agent="versioned"):
            await remember_async(1)

    asyncio.run(run())


WAYS["UndoLog pool"] = _on_pool
WAYS["AsyncUndoLog pool"] = _on_async_pool


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("older", [OLDER, OLDER_PATCH])
def test_an_older_engine_is_refused_at_first_use_and_nothing_is_journaled(
    dsn: str, conn: Conn, way: str, older: str
) -> None:
    """A package upgraded without `undolog migrate`: before, its first statements ran on
    the older engine (begin_session, intercept...) and met its older functions."""
    _engine_answers(conn, older)
    with pytest.raises(EngineVersionMismatch) as got:
        WAYS[way](dsn)
    message = str(got.value)
    assert f"undolog {older}, older than this package (undolog {PACKAGE})" in message
    assert "run `undolog migrate` with this package" in message
    assert (got.value.installed, got.value.package) == (older, PACKAGE)
    assert isinstance(got.value, EngineNotInstalled)  # whoever catches that catches this
    assert ran == []  # no tool body ran
    assert _journal(conn) == (0, 0)  # no session begun, no call journaled


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_newer_release_of_another_minor_is_refused(dsn: str, conn: Conn, way: str) -> None:
    """Another host's newer package ran migrate: this older package must not drive it."""
    _engine_answers(conn, NEWER_MINOR)
    with pytest.raises(EngineVersionMismatch, match="upgrade the package") as got:
        WAYS[way](dsn)
    assert f"undolog {NEWER_MINOR}, a newer release than this package" in str(got.value)
    assert got.value.installed == NEWER_MINOR
    assert ran == []
    assert _journal(conn) == (0, 0)


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("version", [PACKAGE, NEWER_PATCH])
def test_the_current_engine_and_a_newer_patch_release_work(
    dsn: str, conn: Conn, way: str, version: str
) -> None:
    _engine_answers(conn, version)
    WAYS[way](dsn)
    assert ran == ["remember_async 1" if "async" in way.lower() else "remember 1"]
    assert _journal(conn) == (1, 1)


def test_no_engine_at_all_says_so(fresh_db: Callable[..., str]) -> None:
    empty = fresh_db()
    for way in sorted(WAYS):
        with pytest.raises(
            EngineNotInstalled, match=r"not installed.*run `undolog migrate`"
        ) as got:
            WAYS[way](empty)
        assert not isinstance(got.value, EngineVersionMismatch), way
        assert isinstance(got.value.__cause__, psycopg.errors.InvalidSchemaName), way
    assert ran == []


def test_an_engine_without_version_is_older_than_the_package(dsn: str, conn: Conn) -> None:
    """Its schema is there, its version() is not (an engine older than that function):
    before, the session began on it as if it were this package's."""
    conn.execute("DROP FUNCTION undolog.version()")
    for way in sorted(WAYS):
        with pytest.raises(EngineVersionMismatch, match=r"has no undolog\.version") as got:
            WAYS[way](dsn)
        assert got.value.installed is None
        assert "run `undolog migrate` with this package" in str(got.value)
        assert isinstance(got.value.__cause__, psycopg.errors.UndefinedFunction)
    assert ran == []
    assert _journal(conn) == (0, 0)


# What else a client does on a connection of its own, given the client and an id.
OTHER_USES: dict[str, Callable[[UndoLog, AsyncUndoLog, uuid.UUID], Any]] = {
    "approve": lambda ul, aul, i: ul.approve(i, "ops"),
    "reject": lambda ul, aul, i: ul.reject(i, "ops"),
    "wait_for_decision": lambda ul, aul, i: ul.wait_for_decision(i, 0.1),
    "run_walk": lambda ul, aul, i: ul.run_walk(i),
    "work": lambda ul, aul, i: ul.work(),
    "async approve": lambda ul, aul, i: asyncio.run(aul.approve(i, "ops")),
    "async reject": lambda ul, aul, i: asyncio.run(aul.reject(i, "ops")),
    "async wait_for_decision": lambda ul, aul, i: asyncio.run(aul.wait_for_decision(i, 0.1)),
    "async run_walk": lambda ul, aul, i: asyncio.run(aul.run_walk(i)),
    "async work": lambda ul, aul, i: asyncio.run(aul.work()),
}


@pytest.mark.parametrize("use", sorted(OTHER_USES))
def test_approvals_and_walks_check_their_connections_too(dsn: str, conn: Conn, use: str) -> None:
    """Every connection a client uses is checked: approve and reject (the client's
    connection), wait_for_decision (one of its own), run_walk and work (the async
    client's walk runs on a sync connection of its own)."""
    _engine_answers(conn, OLDER)
    with pytest.raises(EngineVersionMismatch, match="older than this package"):
        OTHER_USES[use](UndoLog(dsn), AsyncUndoLog(dsn), uuid.uuid4())


# --- once per connection --------------------------------------------------------------

COUNTING_VERSION = """
CREATE SEQUENCE IF NOT EXISTS public.version_asked;
CREATE OR REPLACE FUNCTION undolog.version() RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = undolog, pg_temp
AS $$ SELECT CASE WHEN nextval('public.version_asked') > 0 THEN %s::text END $$
"""


def _counting(conn: Conn, version: str = PACKAGE) -> Callable[[], int]:
    """undolog.version() answers ``version`` and counts how often it was asked (a
    sequence: its count survives the transactions that asked)."""
    conn.execute(COUNTING_VERSION.replace("%s", psycopg.sql.quote(version)))
    conn.execute("SELECT setval('public.version_asked', 1, false)")

    def asked() -> int:
        row = conn.execute(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.version_asked"
        ).fetchone()
        assert row is not None
        return int(row[0])

    return asked


@pytest.mark.parametrize("durable", [False, True])
def test_a_pooled_connection_is_checked_once(dsn: str, conn: Conn, durable: bool) -> None:
    asked = _counting(conn)
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        ul = UndoLog(pool=pool, durable_results=durable)
        for _ in range(3):
            _sync_session(ul)
        assert asked() == 1  # three sessions, one connection: one check
        # The engine changes under the checked connection: it is not asked again (once
        # per connection), while a new connection is refused.
        _engine_answers(conn, OLDER)
        _sync_session(ul)
        with pytest.raises(EngineVersionMismatch):
            _sync_session(UndoLog(dsn, durable_results=durable))
    assert ran == ["remember 1"] * 4


def test_a_pooled_connection_refused_goes_back_as_it_was(dsn: str, conn: Conn) -> None:
    """The refused check had set undolog.async_results on (the same statement): the
    connection goes back to the pool with it off again, and is checked again next time."""
    _engine_answers(conn, OLDER)
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        ul = UndoLog(pool=pool)
        for _ in range(2):
            with pytest.raises(EngineVersionMismatch):
                _sync_session(ul)
        with pool.connection() as c:
            row = c.execute("SELECT current_setting('undolog.async_results', true)").fetchone()
            assert row is not None and row[0] in ("off", "", None)
        _engine_answers(conn, PACKAGE)  # migrated: the same connection now serves
        _sync_session(ul)
    assert ran == ["remember 1"]
    assert _journal(conn) == (1, 1)


def test_each_new_connection_is_checked_once(dsn: str, conn: Conn) -> None:
    """A client on a DSN opens a connection per session: each is checked, once."""
    asked = _counting(conn)
    ul = AsyncUndoLog(dsn)

    async def two_sessions() -> None:
        for _ in range(2):
            async with ul.session(agent="versioned"):
                await remember_async(1)
                await remember_async(2)

    asyncio.run(two_sessions())
    assert asked() == 2
    assert ran == ["remember_async 1", "remember_async 2"] * 2


# --- round trips ----------------------------------------------------------------------


def _round_trips(trace: Path) -> int:
    """The statements the client sent, each waited for: a simple Query message (a
    statement without parameters), or the Sync that ends an extended-protocol one."""
    lines = trace.read_text().splitlines()
    return sum(1 for line in lines if line.split("\t")[1:4:2] in (["F", "Sync"], ["F", "Query"]))


@pytest.mark.parametrize(("durable", "extra"), [(False, 0), (True, 1)])
def test_the_check_costs_no_round_trip_of_its_own_with_async_results(
    dsn: str, durable: bool, extra: int
) -> None:
    """The first session on a connection sends what the later ones send, plus the check;
    with asynchronous results (the default) the check is the statement that sets them,
    so it costs no round trip; with durable_results, one, on the connection's first use.
    Counted in libpq's protocol trace of the pool's one connection (psycopg's automatic
    prepared statements off: preparing a statement run often adds a Sync of its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace"
        fd = os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        unprepared = {"prepare_threshold": None}
        try:
            with ConnectionPool(dsn, min_size=1, max_size=1, kwargs=unprepared) as pool:
                with pool.connection() as c:
                    c.pgconn.trace(fd)
                ul = UndoLog(pool=pool, durable_results=durable)
                counts = []
                for _ in range(4):
                    before = _round_trips(trace)
                    with ul.session(agent="counted"):
                        pass
                    with pool.connection() as c:  # untrace flushes the trace to the file
                        c.pgconn.untrace()
                        c.pgconn.trace(fd)
                    counts.append(_round_trips(trace) - before)
                with pool.connection() as c:
                    c.pgconn.untrace()
        finally:
            os.close(fd)
    first, *later = counts
    assert later[0] > 0 and set(later) == {later[0]}, counts
    assert first == later[0] + extra, counts


@pytest.mark.parametrize(
    ("installed", "says"), [(OLDER, "undolog migrate"), (NEWER_MINOR, "upgrade")]
)
def test_the_worker_refuses_an_engine_it_does_not_work_with(
    dsn: str, conn: Conn, installed: str, says: str
) -> None:
    """`undolog worker` (WorkerRun) checks the engine on each connection it makes: a
    worker whose report fails after the compensation ran, or the mail was sent, would do
    it again at the next claim. The refusal is a configuration error that says which of
    the two to upgrade."""
    _engine_answers(conn, installed)
    run = walk.Worker(lambda: psycopg.connect(dsn, autocommit=True), {}, interval=0.0)
    with pytest.raises(walk.WorkerConfigError) as refused:
        run.run(once=True)
    assert says in str(refused.value) and installed in str(refused.value)
    assert isinstance(refused.value.__cause__, EngineVersionMismatch)
