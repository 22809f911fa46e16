"""Found by a second review: an outcome that is unknown must never let a session complete,
a heartbeat survives a passing fault, irreversible intercepts do not deadlock, a forged
notification decides nothing, and fresh connections log in as the pool does."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationCall,
    CompensationDescriptor,
    InvalidStateTransition,
    ResultNotJSON,
    ToolTier,
    UndoLog,
    approvals,
    engine,
    undolog_tool,
)
from undolog.client import _conninfo_of

Conn = psycopg.Connection[Any]
undone: list[str] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def make_set(x: int) -> Any:
    return {x}  # a set: JSON cannot carry it


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
async def slow(x: int) -> int:
    await asyncio.sleep(5)
    return x


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def wire(cents: int) -> dict[str, int]:
    return {"cents": cents}


def _register(ul: UndoLog | AsyncUndoLog) -> None:
    @ul.compensation("undo")
    def undo(call: CompensationCall) -> None:
        undone.append(call.tool_name)


def _states(conn: Conn, sid: uuid.UUID) -> tuple[str, list[str]]:
    effects = conn.execute(
        "SELECT state FROM undolog.undolog_effect_log WHERE session_id = %s", (sid,)
    ).fetchall()
    return engine.session_state(conn, sid), [r[0] for r in effects]


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()


def test_a_caught_result_json_cannot_carry_fails_the_session_at_exit(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    _register(ul)
    caught: list[Exception] = []
    with pytest.raises(InvalidStateTransition, match="cannot complete"), ul.session() as s:
        try:
            make_set(1)
        except ResultNotJSON as exc:  # the agent carries on as if nothing happened
            caught.append(exc)
    assert len(caught) == 1
    assert _states(conn, s.session_id) == ("compensated", ["compensated"])
    assert undone == ["make_set"]


def test_a_cancelled_async_body_fails_the_session_at_exit(dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(dsn)
    _register(ul)

    async def agent() -> uuid.UUID:
        async with ul.session() as s:
            sid = s.session_id
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(slow(1), 0.2)
        return sid  # pragma: no cover (the exit raises)

    with pytest.raises(InvalidStateTransition):
        asyncio.run(agent())
    row = conn.execute("SELECT session_id FROM undolog.undolog_sessions").fetchone()
    assert row is not None
    assert _states(conn, row[0]) == ("compensated", ["compensated"])


def test_the_engine_refuses_to_complete_a_session_with_an_executing_call(conn: Conn) -> None:
    sid = engine.begin_session(conn)
    engine.intercept(conn, sid, 0, "t", "compensable", {}, {"name": "undo"})
    with pytest.raises(InvalidStateTransition, match="still executing"):
        engine.complete_session(conn, sid)


def test_one_failed_heartbeat_does_not_stop_the_heartbeat(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn + " options='-c lock_timeout=200ms'", lease=timedelta(seconds=1.5))
    with ul.session() as s:
        with conn.transaction():  # hold the session row past a heartbeat: it times out
            conn.execute(
                "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE",
                (s.session_id,),
            )
            time.sleep(0.8)
        time.sleep(2.5)  # past the lease: only later heartbeats keep the session alive
        conn.execute("SELECT undolog.recover()").fetchall()
        assert engine.session_state(conn, s.session_id) == "active"


def test_two_irreversible_intercepts_in_one_session_do_not_deadlock(dsn: str, conn: Conn) -> None:
    sid = engine.begin_session(conn)
    engine.register_tool(conn, "wire", "irreversible", None)
    holder = psycopg.connect(dsn)  # a compensable intercept in flight holds FOR SHARE
    holder.execute("SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR SHARE", (sid,))
    errors: list[str | None] = []

    def call(step: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                c.execute(
                    "SELECT * FROM undolog.intercept(%s, %s, 'wire', 'irreversible', '{}', %s)",
                    (sid, step, hashlib.sha256(str(step).encode()).hexdigest()),
                ).fetchone()
            except psycopg.Error as exc:
                errors.append(exc.sqlstate)

    threads = [threading.Thread(target=call, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(1)
    holder.commit()
    for t in threads:
        t.join()
    holder.close()
    # one call suspends the session; the other, waiting its turn on the session's lock,
    # asks too in the waiting session: two pending requests, no deadlock
    assert errors == []
    assert engine.session_state(conn, sid) == "awaiting_approval"
    pending = conn.execute(
        "SELECT count(*) FROM undolog.undolog_approval_requests"
        " WHERE session_id = %s AND state = 'pending'",
        (sid,),
    ).fetchone()
    assert pending == (2,)


def test_a_forged_notification_decides_nothing(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    with pytest.raises(AwaitingApprovalError) as waiting, ul.session():
        wire(5)
    approval = waiting.value.approval_id
    forged = (
        f'{{"approval_id": "{approval}", "session_id": "{uuid.uuid4()}", '
        f'"effect_id": "{uuid.uuid4()}", "state": "rejected"}}'
    )
    threading.Timer(
        0.2, lambda: conn.execute("SELECT pg_notify('undolog_approvals', %s)", (forged,))
    ).start()
    assert ul.wait_for_decision(approval, timeout=1.5, poll_interval=0.5) is None
    assert approvals.approval_state(conn, approval) == "pending"


def test_fresh_connections_log_in_as_the_pool_does() -> None:
    pool = ConnectionPool(
        "host=db dbname=app", kwargs={"user": "agent", "autocommit": True}, open=False
    )
    info = psycopg.conninfo.conninfo_to_dict(_conninfo_of("", pool))
    assert (info["host"], info["dbname"], info["user"]) == ("db", "app", "agent")
    assert "autocommit" not in info
