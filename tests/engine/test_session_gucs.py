"""Settings a login controls in its own session (SET before calling the engine's
functions) must not change what the engine records for a deadline another login keeps:
an approval request's, a session's lease (docs/design/roles.md: every login may be an
adversary of every other)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from undolog import approvals, engine, saga
from worker_support import failed_session

Conn = psycopg.Connection[Any]


def _dst_tomorrow(conn: Conn) -> str:
    """A POSIX TimeZone any login may SET: 12 hours ahead of UTC, and for one day from
    tomorrow's local midnight 12 hours behind it (a "summer time" of minus 24 hours, on
    any day of the year: POSIX day n counts from 0, February 29 included). Tomorrow is
    the zone's: from 12:00 UTC its standard time is already in the next UTC day (a rule
    made from the UTC date had begun, and '1 day' was 24 hours again)."""
    row = conn.execute(
        "SELECT extract(doy FROM (now() AT TIME ZONE 'UTC' + interval '12 hours')::date + 1)::int"
    ).fetchone()
    assert row is not None
    tomorrow = row[0] - 1  # its POSIX n; January 1 is 0, in the year after
    return f"AAA-12BBB+12,{tomorrow}/0,{tomorrow + 1}/0"


def test_an_agents_time_zone_does_not_stretch_its_approval_deadline(
    conn: Conn, login: Callable[..., Conn]
) -> None:
    """undolog.approval_timeout = '1 day' is an operator's rule for every request. The
    deadline was requested_at + '1 day' done in the agent's TimeZone, which a POSIX zone
    of its own choosing moved a whole day: the request stayed open 48 hours."""
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 day'")
    agent = login("undolog_agent")
    agent.execute("SELECT set_config('TimeZone', %s, false)", (_dst_tomorrow(agent),))
    stretch = agent.execute("SELECT now() + interval '1 day' - now()").fetchone()
    assert stretch == (timedelta(days=2),)  # what the zone does to timestamptz arithmetic
    session = engine.begin_session(agent, agent="a")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    open_for = conn.execute(
        "SELECT expires_at - requested_at FROM undolog.undolog_approval_requests"
        " WHERE approval_id = %s",
        (call.approval_id,),
    ).fetchone()
    assert open_for == (timedelta(days=1),)


def test_an_approvers_time_zone_does_not_move_the_agents_lease(
    login: Callable[..., Conn],
) -> None:
    """A decision renews the session's lease by its lease_duration; done in the approver's
    TimeZone, a zone of the approver's choosing made a '1 day' lease two (an hour, in a
    real zone's change of clocks, shorter or longer): the worker waits as long to fail a
    session whose agent died."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    session = engine.begin_session(agent, agent="a", lease=timedelta(days=1))
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    approver.execute("SELECT set_config('TimeZone', %s, false)", (_dst_tomorrow(approver),))
    assert approver.execute("SELECT now() + interval '1 day' - now()").fetchone() == (
        timedelta(days=2),
    )
    approvals.approve(approver, call.approval_id, "ann")
    lease = agent.execute(
        "SELECT lease_expires_at - now() FROM undolog.undolog_sessions WHERE session_id = %s",
        (session,),
    ).fetchone()
    assert lease is not None and timedelta(days=1) - timedelta(minutes=1) < lease[0]
    assert lease[0] <= timedelta(days=1)


def test_a_deciders_date_style_and_time_zone_do_not_write_the_agents_record(
    conn: Conn, login: Callable[..., Conn]
) -> None:
    """A request closed past its deadline records, in the agent's call, "approval expired
    at <deadline>": written with the decider's DateStyle and TimeZone, a POSIX zone named
    UTC ten hours ahead of it wrote "08/12/2026 20:07:12 UTC" for 10:07 UTC, day first,
    in another login's history. Written now as the hash chain writes times."""
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1 second'")
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    session = engine.begin_session(agent, agent="a")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    approver.execute("SET DateStyle = 'SQL, DMY'")
    approver.execute("SET TimeZone = 'UTC-10'")
    time.sleep(1.2)
    approvals.reject(approver, call.approval_id, "ann", "too late")
    error, deadline = conn.execute(
        "SELECT e.error, undolog.chain_time(a.expires_at)"
        " FROM undolog.undolog_effect_log AS e"
        " JOIN undolog.undolog_approval_requests AS a USING (session_id, effect_id)"
        " WHERE a.approval_id = %s",
        (call.approval_id,),
    ).fetchone() or (None, None)
    assert error == f"approval expired at {deadline} (closed by ann): too late"


def test_a_walkers_time_zone_does_not_stretch_its_claim(
    conn: Conn, login: Callable[..., Conn]
) -> None:
    """A claim of '1 day' is the longest another walker waits before it takes the entry
    over; added in the claiming login's TimeZone, a POSIX zone of its choosing made it
    two days."""
    sid = failed_session(conn, "delete_user", 1)
    worker = login("undolog_operator")
    worker.execute("SELECT set_config('TimeZone', %s, false)", (_dst_tomorrow(worker),))
    assert worker.execute("SELECT now() + interval '1 day' - now()").fetchone() == (
        timedelta(days=2),
    )
    claim = saga.claim_compensation(worker, sid, timedelta(days=1))
    assert claim is not None
    held_for = conn.execute(
        "SELECT claimed_until - claimed_at FROM undolog.undolog_undo_stack WHERE session_id = %s",
        (sid,),
    ).fetchone()
    assert held_for == (timedelta(days=1),)
