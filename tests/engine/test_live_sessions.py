"""A login's unfinished sessions are bounded (undolog.max_live_sessions, database-wide):
an agent login that began 1-second-lease sessions faster than the worker's sweep failed
them kept every worker's pass from reaching a walk (docs/design/roles.md). A new session
past the bound is refused (UL031) with nothing written; the login's existing sessions
still answer, another login has a bound of its own, and only the database's value counts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    InvalidArgument,
    TooManyLiveSessions,
    UndoLog,
    UndoLogError,
    engine,
    walk,
)

Conn = psycopg.Connection[Any]


def _set_bound(conn: Conn, value: str) -> None:
    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.max_live_sessions = {value}')


def _written(conn: Conn) -> tuple[int, int]:
    """The sessions and their history rows, as the engine's owner sees them."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_sessions),"
        " (SELECT count(*) FROM undolog.undolog_session_history)"
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_unset_a_login_may_have_100_000_unfinished_sessions(conn: Conn) -> None:
    assert conn.execute("SELECT undolog.max_live_sessions()").fetchone() == (100_000,)


def test_a_login_at_its_bound_is_refused_and_nothing_is_written(
    login: Callable[..., Conn], conn: Conn
) -> None:
    _set_bound(conn, "3")
    agent = login("undolog_agent")
    for _ in range(3):
        engine.begin_session(agent, agent="flood")
    before = _written(conn)
    with pytest.raises(TooManyLiveSessions, match="already has 3 unfinished sessions") as caught:
        engine.begin_session(agent, agent="flood")
    assert caught.value.sqlstate == "UL031"
    assert "undolog.max_live_sessions" in (caught.value.hint or "")
    # ... its id given too, and one statement of many begins stops at the bound
    with pytest.raises(TooManyLiveSessions):
        engine.begin_session(agent, uuid.uuid4())
    with pytest.raises(psycopg.Error) as flood:
        agent.execute("SELECT count(undolog.begin_session()) FROM generate_series(1, 10)")
    assert flood.value.sqlstate == "UL031"
    assert _written(conn) == before
    # another login has a bound of its own
    other = login("undolog_agent")
    for _ in range(3):
        engine.begin_session(other, agent="other")


def test_a_login_at_its_bound_still_renews_its_sessions(
    login: Callable[..., Conn], conn: Conn
) -> None:
    _set_bound(conn, "2")
    agent = login("undolog_agent")
    first = engine.begin_session(agent, agent="a")
    engine.begin_session(agent, agent="b")
    assert engine.begin_session(agent, first) == first  # a re-begin renews its lease
    engine.heartbeat(agent, first)
    with pytest.raises(TooManyLiveSessions):
        engine.begin_session(agent)


def test_a_finished_session_frees_a_place_and_a_failed_one_not_until_undone(
    login: Callable[..., Conn], conn: Conn
) -> None:
    _set_bound(conn, "2")
    agent = login("undolog_agent")
    done = engine.begin_session(agent)
    failed = engine.begin_session(agent)
    engine.complete_session(agent, done)
    engine.begin_session(agent)  # the completed one's place
    # a failed session still waits for the worker's walk: it keeps its place
    engine.fail_session(agent, failed, "the agent crashed")
    with pytest.raises(TooManyLiveSessions):
        engine.begin_session(agent)
    assert walk.run_walk(conn, failed, {}) == "compensated"
    engine.begin_session(agent)  # undone (nothing to undo): its place is free


def test_a_malformed_bound_is_refused_before_anything_is_written(
    login: Callable[..., Conn], conn: Conn
) -> None:
    agent = login("undolog_agent")
    for bad in ("'lots'", "'0'", "'10000001'"):
        _set_bound(conn, bad)
        before = _written(conn)
        with pytest.raises(InvalidArgument, match=r"undolog\.max_live_sessions must be"):
            engine.begin_session(agent)
        assert _written(conn) == before


def test_an_agents_own_settings_do_not_lift_its_bound(
    login: Callable[..., Conn], conn: Conn
) -> None:
    _set_bound(conn, "1")
    agent = login("undolog_agent")
    engine.begin_session(agent)
    agent.execute("SET undolog.max_live_sessions = '1000'")
    with pytest.raises(TooManyLiveSessions):
        engine.begin_session(agent)
    (me,) = agent.execute("SELECT session_user").fetchone() or ("",)
    conn.execute(f'ALTER ROLE "{me}" SET undolog.max_live_sessions = 1000')
    with psycopg.connect(conn.info.dsn, user=me, autocommit=True) as fresh:
        assert fresh.execute("SHOW undolog.max_live_sessions").fetchone() == ("1000",)
        with pytest.raises(TooManyLiveSessions):
            engine.begin_session(fresh)


def test_the_clients_raise_too_many_live_sessions_on_begin(dsn: str, conn: Conn) -> None:
    _set_bound(conn, "1")
    engine.begin_session(conn)
    with pytest.raises(TooManyLiveSessions), UndoLog(dsn).session():
        pytest.fail("the body ran")  # pragma: no cover

    async def agent() -> None:
        async with AsyncUndoLog(dsn).session():
            pytest.fail("the body ran")  # pragma: no cover

    with pytest.raises(TooManyLiveSessions):
        asyncio.run(agent())


@pytest.mark.parametrize("staff", ["undolog_operator", "undolog_approver"])
def test_a_login_at_its_bound_naming_another_logins_session_is_answered_as_below_it(
    login: Callable[..., Conn], conn: Conn, staff: str
) -> None:
    """The existence and ownership of a named session are settled before the bound is
    counted: a staff login that is an agent too, at its own bound, is answered another
    login's session unchanged (as below the bound), not UL031; a plain agent at its
    bound gets 42501 for it, as below the bound, not UL031."""
    owner = login("undolog_agent")
    theirs = engine.begin_session(owner, agent="theirs")
    staffer = login("undolog_agent", staff)
    agent = login("undolog_agent")
    below = {
        "staff": engine.begin_session(staffer, theirs),
        "agent": _refusal(lambda: engine.begin_session(agent, theirs)),
    }
    assert below == {"staff": theirs, "agent": "42501"}
    _set_bound(conn, "2")
    for who in (staffer, agent):
        for _ in range(2):
            engine.begin_session(who, agent="mine")
        with pytest.raises(TooManyLiveSessions):  # at the bound: a new session is refused
            engine.begin_session(who)
    before = _written(conn)
    at_bound = {
        "staff": engine.begin_session(staffer, theirs),
        "agent": _refusal(lambda: engine.begin_session(agent, theirs)),
    }
    assert at_bound == below
    assert _written(conn) == before
    row = conn.execute(
        "SELECT state, owner_role = current_user FROM undolog.undolog_sessions"
        " WHERE session_id = %s",
        (theirs,),
    ).fetchone()
    assert row == ("active", False)


def _refusal(call: Callable[[], object]) -> str | None:
    """The SQLSTATE of the error ``call`` raised (the engine's, translated)."""
    with pytest.raises(UndoLogError) as caught:
        call()
    return caught.value.sqlstate
