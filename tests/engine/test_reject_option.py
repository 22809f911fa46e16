"""on_reject: what a human's rejection of an IRREVERSIBLE call does to its session.

"fail_session" (the default) fails it and its undo walk runs; "continue" keeps it active
and the call raises ApprovalRejectedError with the person's reason, so the caller can go
on. Both through the decorator, sync and async, against a real PostgreSQL; and a session
run again after a rejection raises ApprovalRejectedError whether or not a worker has
already undone its earlier calls.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest

from undolog import (
    ApprovalRejectedError,
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    approvals,
    undolog_tool,
)
from undolog.errors import InvalidStateTransition, ToolRegistrationMismatch

Conn = psycopg.Connection[Any]


def _state(conn: Conn, session_id: uuid.UUID) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.sessions_list WHERE session_id = %s", (session_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


class Shop:
    """Tools whose bodies record what they did, and a compensation that undoes users."""

    def __init__(self, ul: UndoLog | AsyncUndoLog, *, on_reject: Any = "fail_session") -> None:
        self.users: list[str] = []
        self.notes: list[str] = []
        self.emails: list[str] = []
        self.ran = 0

        @ul.compensation("delete_user")
        def delete_user(call: CompensationCall) -> None:
            self.users.remove(call.call_args["email"])

        @undolog_tool(
            tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user")
        )
        def create_user(email: str) -> str:
            self.ran += 1
            self.users.append(email)
            return email

        @undolog_tool(
            tier=ToolTier.COMPENSABLE,
            compensation=CompensationDescriptor.new("delete_user"),
            name="create_user",
        )
        async def acreate_user(email: str) -> str:
            return create_user.__wrapped__(email)  # type: ignore[attr-defined,no-any-return]

        @undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject=on_reject)
        def send_email(to: str) -> str:
            self.emails.append(to)
            return to

        @undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject=on_reject, name="send_email")
        async def asend_email(to: str) -> str:
            return send_email.__wrapped__(to)  # type: ignore[attr-defined,no-any-return]

        self.create_user, self.acreate_user = create_user, acreate_user
        self.send_email, self.asend_email = send_email, asend_email


def _ask(ul: UndoLog, shop: Shop) -> tuple[uuid.UUID, uuid.UUID]:
    """The first run: a user created, then an email that waits for a person."""
    with pytest.raises(AwaitingApprovalError) as asked, ul.session(agent="shop") as s:
        shop.create_user("ada@example.com")
        shop.send_email("all@example.com")
    return s.session_id, asked.value.approval_id


# ---------------------------------------------------------------------------------------
# continue
# ---------------------------------------------------------------------------------------


def test_continue_a_caught_rejection_lets_the_session_go_on(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    shop = Shop(ul, on_reject="continue")
    sid, approval = _ask(ul, shop)
    before = datetime.now().astimezone()
    assert ul.reject(approval, "bob@example.com", "not to the whole company") == "rejected"
    assert _state(conn, sid) == "active"

    with ul.session(sid) as s:
        shop.create_user("ada@example.com")  # replays
        with pytest.raises(ApprovalRejectedError) as refused:
            shop.send_email("all@example.com")
        shop.create_user("bob@example.com")  # a new call in the same session
    err = refused.value
    assert err.reason == "not to the whole company"
    assert err.decided_by == "bob@example.com"
    assert err.decided_at is not None and err.decided_at >= before
    assert err.session_continues is True
    assert err.decision == "rejected"
    assert err.approval_id == approval
    assert "not to the whole company" in str(err) and "catch ApprovalRejectedError" in str(err)
    assert s.state == "completed"
    assert shop.users == ["ada@example.com", "bob@example.com"]  # nothing undone
    assert shop.emails == [] and shop.ran == 2


def test_continue_uncaught_fails_the_session_like_any_exception(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    shop = Shop(ul, on_reject="continue")
    sid, approval = _ask(ul, shop)
    ul.reject(approval, "bob@example.com", "no")
    with pytest.raises(ApprovalRejectedError) as refused, ul.session(sid) as s:
        shop.create_user("ada@example.com")
        shop.send_email("all@example.com")
    assert refused.value.session_continues is True  # it could have; nobody caught it
    assert s.state == "compensated"
    assert shop.users == [] and shop.emails == []


def test_continue_the_session_history_records_the_refusal(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    shop = Shop(ul, on_reject="continue")
    sid, approval = _ask(ul, shop)
    ul.reject(approval, "bob@example.com", "wrong list")
    row = conn.execute(
        "SELECT from_state, to_state, detail FROM undolog.session_state_history"
        " WHERE session_id = %s ORDER BY at DESC LIMIT 1",
        (sid,),
    ).fetchone()
    assert row is not None
    assert row[:2] == ("awaiting_approval", "active")
    refused = row[2]["refused"]
    assert [(r["approval_id"], r["decided_by"], r["reason"]) for r in refused] == [
        (str(approval), "bob@example.com", "wrong list")
    ]


def test_continue_async(dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(dsn)
    shop = Shop(ul, on_reject="continue")

    async def run() -> tuple[uuid.UUID, ApprovalRejectedError, str]:
        with pytest.raises(AwaitingApprovalError) as asked:
            async with ul.session(agent="shop") as first:
                await shop.acreate_user("ada@example.com")
                await shop.asend_email("all@example.com")
        await ul.reject(asked.value.approval_id, "bob@example.com", "ask me tomorrow")
        async with ul.session(first.session_id) as s:
            await shop.acreate_user("ada@example.com")
            try:
                await shop.asend_email("all@example.com")
            except ApprovalRejectedError as exc:
                caught = exc
            await shop.acreate_user("eve@example.com")
        return s.session_id, caught, s.state

    sid, err, state = asyncio.run(run())
    assert (err.reason, err.decided_by, err.session_continues) == (
        "ask me tomorrow",
        "bob@example.com",
        True,
    )
    assert state == "completed" == _state(conn, sid)
    assert shop.users == ["ada@example.com", "eve@example.com"] and shop.emails == []


# ---------------------------------------------------------------------------------------
# fail_session (the default) keeps today's rule, now with the decision on the error
# ---------------------------------------------------------------------------------------


def test_default_rejection_undoes_the_session_and_says_who_and_why(dsn: str) -> None:
    ul = UndoLog(dsn)
    shop = Shop(ul)
    sid, approval = _ask(ul, shop)
    ul.reject(approval, "carol@example.com", "wrong account")
    ul.run_walk(sid)
    assert shop.users == []
    with pytest.raises(ApprovalRejectedError) as refused, ul.session(sid) as s:
        shop.create_user("ada@example.com")
        shop.send_email("all@example.com")
    err = refused.value
    assert (err.reason, err.decided_by, err.session_continues) == (
        "wrong account",
        "carol@example.com",
        False,
    )
    assert err.approval_id == approval and err.decided_at is not None
    assert "start a new session" in str(err)
    assert s.state == "compensated" and shop.ran == 1


def test_default_async_rerun_after_the_walk(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)
    shop = Shop(ul)

    async def run() -> ApprovalRejectedError:
        with pytest.raises(AwaitingApprovalError) as asked:
            async with ul.session(agent="shop") as first:
                await shop.acreate_user("ada@example.com")
                await shop.asend_email("all@example.com")
        await ul.reject(asked.value.approval_id, "carol@example.com", "no")
        await ul.run_walk(first.session_id)
        with pytest.raises(ApprovalRejectedError) as refused:
            async with ul.session(first.session_id):
                await shop.acreate_user("ada@example.com")
        return refused.value

    err = asyncio.run(run())
    assert (err.reason, err.decided_by, err.session_continues) == ("no", "carol@example.com", False)
    assert shop.users == []


# ---------------------------------------------------------------------------------------
# Declaring it
# ---------------------------------------------------------------------------------------


def test_on_reject_is_checked_when_declared() -> None:
    with pytest.raises(ValueError, match=r"'fail_session'.*'continue'"):
        undolog_tool(tier=ToolTier.IRREVERSIBLE, on_reject="maybe")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="IRREVERSIBLE"):
        undolog_tool(
            tier=ToolTier.COMPENSABLE,
            compensation=CompensationDescriptor.new("x"),
            on_reject="continue",
        )


@pytest.mark.unregistered_tools
def test_on_reject_is_part_of_the_registration(dsn: str) -> None:
    ul = UndoLog(dsn)

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="wire")
    def wire_default(amount: int) -> None: ...

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="wire", on_reject="continue")
    def wire_continue(amount: int) -> None: ...

    with pytest.raises(AwaitingApprovalError), ul.session():
        wire_default(1)
    with pytest.raises(ToolRegistrationMismatch, match="on_reject"), ul.session():
        wire_continue(1)


# ---------------------------------------------------------------------------------------
# A rejected session run again while a worker walks it
# ---------------------------------------------------------------------------------------


@pytest.fixture
def worker(dsn: str) -> Iterator[tuple[UndoLog, list[BaseException]]]:
    """A worker thread with its own connections: a pass every 0.2 s, as `undolog worker`."""
    ul = UndoLog(dsn)
    stop, errors = threading.Event(), []

    def loop() -> None:
        while not stop.wait(0.2):
            try:
                ul.work()
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield ul, errors
    stop.set()
    thread.join()


def test_rerun_of_a_rejected_session_races_the_worker(
    dsn: str, conn: Conn, worker: tuple[UndoLog, list[BaseException]]
) -> None:
    walker, errors = worker
    undone: list[str] = []

    @walker.compensation("delete_user")
    def delete_user(call: CompensationCall) -> None:
        undone.append(call.call_args["email"])

    ul = UndoLog(dsn)
    shop = Shop(ul)
    ahead_of_the_walk = behind_it = 0
    for run in range(15):
        sid, approval = _ask(ul, shop)
        ul.reject(approval, "carol@example.com", f"run {run}: no")
        time.sleep(0.03 * run)  # from before the worker's next pass to well after it
        try:
            with ul.session(sid):
                shop.create_user("ada@example.com")
                shop.send_email("all@example.com")
        except ApprovalRejectedError as err:
            refused = err
        except InvalidStateTransition as err:  # what this race raised before
            pytest.fail(f"run {run}: {err}")
        else:
            pytest.fail(f"run {run}: the rejected session ran")
        assert (refused.reason, refused.decided_by) == (f"run {run}: no", "carol@example.com")
        assert refused.approval_id == approval and refused.session_continues is False
        if "was undone because" in str(refused):
            behind_it += 1
        else:
            ahead_of_the_walk += 1
    deadline = time.monotonic() + 10
    while len(undone) < 15 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert errors == []
    assert len(undone) == 15  # the worker undid every run's user
    assert behind_it >= 1, "no run came after the worker's walk: the race was not exercised"
    assert ahead_of_the_walk + behind_it == 15


# ---------------------------------------------------------------------------------------
# The tutorial's example (docs/tutorials/approvals.md), run as a reader runs it
# ---------------------------------------------------------------------------------------


def test_the_rejection_example_runs(
    agent_dsn: str, conn: Conn, run_asking_example: Callable[..., tuple[list[str], list[str]]]
) -> None:
    first, rest = run_asking_example(
        "rejection_feedback.py",
        agent_dsn,
        lambda approval: approvals.reject(conn, approval, "bob", "not to every customer"),
    )
    assert rest[1:] == [
        "decision: rejected",
        "rejected by bob: not to every customer",
        "draft 1 saved for review: Spring sale",
        "session completed",
    ], rest
    session = uuid.UUID(first[-1])
    assert _state(conn, session) == "completed"
    rows = conn.execute(
        "SELECT tool_name, state FROM undolog.session_calls WHERE session_id = %s"
        " ORDER BY step_index",
        (session,),
    ).fetchall()
    assert rows == [("send_newsletter", "rejected"), ("save_draft", "committed")]
