"""A failed session is rolled back through the registered compensations, last first,
by the session itself (sync and async) or by the worker."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]
undone: list[tuple[str, Any]] = []
seen: list[CompensationCall] = []


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("delete_user", args={"soft": True}),
)
def create_user(email: str) -> dict[str, Any]:
    return {"user_id": abs(hash(email)) % 1000}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("retract"))
def send_email(to: str) -> dict[str, Any]:
    if to.endswith("@invalid"):
        raise ConnectionError("no such domain")
    return {"message_id": f"<{to}>"}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("adelete"))
async def acreate_user(email: str) -> dict[str, Any]:
    return {"user_id": 9}


def _app(dsn: str, **kwargs: Any) -> UndoLog:
    ul = UndoLog(dsn, **kwargs)

    @ul.compensation("delete_user")
    def delete_user(call: CompensationCall) -> None:
        seen.append(call)
        undone.append(("delete_user", call.result["user_id"]))

    @ul.compensation("retract")
    def retract(call: CompensationCall) -> None:
        seen.append(call)
        undone.append(("retract", call.call_args["to"]))

    return ul


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()
    seen.clear()


def _state(conn: Conn, session_id: uuid.UUID) -> str:
    return engine.session_state(conn, session_id)


def test_failure_runs_compensations_last_first(dsn: str, conn: Conn) -> None:
    ul = _app(dsn)
    with pytest.raises(RuntimeError, match="agent gave up"), ul.session() as session:
        user = create_user("ada@example.com")
        send_email("ada@example.com")
        raise RuntimeError("agent gave up")
    assert undone == [("retract", "ada@example.com"), ("delete_user", user["user_id"])]
    assert _state(conn, session.session_id) == "compensated"
    delete = seen[1]
    assert delete.args == {"soft": True}
    assert delete.call_args == {"email": "ada@example.com"}
    assert delete.attempt == 1
    assert len({c.undo_id for c in seen}) == 2


def test_a_call_that_failed_is_not_compensated(dsn: str, conn: Conn) -> None:
    ul = _app(dsn)
    with pytest.raises(ConnectionError), ul.session() as session:
        create_user("bob@example.com")
        send_email("bob@invalid")  # reported failure: it never took effect
    assert [name for name, _ in undone] == ["delete_user"]
    assert _state(conn, session.session_id) == "compensated"


def test_a_failing_compensation_is_retried_with_the_same_undo_id(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn + " options='-c undolog.retry_base=50ms'")
    attempts: list[CompensationCall] = []

    @ul.compensation("delete_user")
    def flaky(call: CompensationCall) -> None:
        attempts.append(call)
        if call.attempt == 1:
            raise TimeoutError("directory service busy")

    @ul.compensation("retract")
    def retract(call: CompensationCall) -> None:
        pass

    with pytest.raises(RuntimeError), ul.session() as session:
        create_user("cy@example.com")
        raise RuntimeError("stop")
    assert [a.attempt for a in attempts] == [1, 2]
    assert attempts[0].undo_id == attempts[1].undo_id
    assert _state(conn, session.session_id) == "compensated"


def test_a_missing_compensation_halts_the_session(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn, walk_wait=0.5)  # nothing registered
    with pytest.raises(RuntimeError), ul.session() as session:
        create_user("dee@example.com")
        raise RuntimeError("stop")
    # retried with backoff up to max_attempts; the session is left for the worker
    assert _state(conn, session.session_id) in ("compensating", "halted")
    row = conn.execute(
        "SELECT last_error FROM undolog.undolog_undo_stack WHERE session_id = %s",
        (session.session_id,),
    ).fetchone()
    assert row is not None and "no compensation registered under 'delete_user'" in row[0]


def test_the_worker_walks_sessions_failed_elsewhere(dsn: str, conn: Conn) -> None:
    ul = _app(dsn)
    session = engine.begin_session(conn)
    found = engine.intercept(
        conn,
        session,
        0,
        "create_user",
        "compensable",
        {"email": "eve@example.com"},
        {"name": "delete_user", "args": {"soft": True}},
    )
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"user_id": 5})
    engine.fail_session(conn, session, "agent process died")
    assert ul.work() == {session: "compensated"}
    assert undone == [("delete_user", 5)]


def test_async_session_runs_async_compensations(dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(dsn)
    ran: list[uuid.UUID] = []

    @ul.compensation("adelete")
    async def adelete(call: CompensationCall) -> None:
        await asyncio.sleep(0)
        ran.append(call.undo_id)

    async def agent() -> uuid.UUID:
        async with ul.session() as session:
            await acreate_user("fay@example.com")
            raise RuntimeError("stop")
        return session.session_id  # pragma: no cover

    with pytest.raises(RuntimeError):
        asyncio.run(agent())
    assert len(ran) == 1
    row = conn.execute("SELECT state FROM undolog.undolog_sessions").fetchone()
    assert row == ("compensated",)


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def payout(cents: int) -> dict[str, Any]:
    undone.append(("payout ran", cents))
    return {"paid": cents}


def test_wait_for_decision_wakes_on_approval_and_the_call_runs_once(dsn: str) -> None:
    ul = _app(dsn)
    session_id = uuid.uuid4()
    with pytest.raises(AwaitingApprovalError) as waiting, ul.session(session_id):
        payout(700)
    approval = waiting.value.approval_id
    assert ul.wait_for_decision(approval, timeout=0.2) is None  # nobody decided yet

    timer = threading.Timer(0.3, ul.approve, args=(approval, "alice", "ok"))
    timer.start()
    started = time.monotonic()
    assert ul.wait_for_decision(approval, timeout=10, poll_interval=30) == "approved"
    assert time.monotonic() - started < 5  # woken by NOTIFY, not by the 30 s poll
    timer.join()
    with ul.session(session_id):
        assert payout(700) == {"paid": 700}
    with ul.session(session_id):
        assert payout(700) == {"paid": 700}  # replayed
    assert undone == [("payout ran", 700)]


def test_async_wait_for_decision_sees_a_rejection(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)

    async def scenario() -> str | None:
        with pytest.raises(AwaitingApprovalError) as waiting:
            async with ul.session():
                await adelete("prod")
        approval = waiting.value.approval_id
        sync = UndoLog(dsn)
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, sync.reject, approval, "bob", "no")
        return await ul.wait_for_decision(approval, timeout=10, poll_interval=30)

    assert asyncio.run(scenario()) == "rejected"


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def adelete(name: str) -> dict[str, Any]:
    return {"dropped": name}


def test_async_client_approves_rejects_and_works(dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(dsn)
    ran: list[str] = []

    @ul.compensation("adelete")
    async def adelete_undo(call: CompensationCall) -> None:
        ran.append(call.tool_name)

    async def scenario() -> tuple[str, str, dict[uuid.UUID, str]]:
        with pytest.raises(AwaitingApprovalError) as first:
            async with ul.session():
                await adelete("a")
        with pytest.raises(AwaitingApprovalError) as second:
            async with ul.session():
                await acreate_user("x@example.com")
                await adelete("b")
        approved = await ul.approve(first.value.approval_id, "alice")
        rejected = await ul.reject(second.value.approval_id, "alice", "no")
        return approved, rejected, await ul.work()

    approved, rejected, walked = asyncio.run(scenario())
    assert (approved, rejected) == ("approved", "rejected")
    assert list(walked.values()) == ["compensated"]  # the rejected session was rolled back
    assert ran == ["acreate_user"]


def test_malformed_ids_are_invalid_arguments(dsn: str) -> None:
    from undolog import InvalidArgument

    ul = UndoLog(dsn)
    with pytest.raises(InvalidArgument), ul.session(session_id="nope"):  # type: ignore[arg-type]
        pass
    with pytest.raises(InvalidArgument):
        ul.approve("nope", "alice")  # type: ignore[arg-type]
