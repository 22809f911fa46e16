"""Edit, then approve: a person approves an IRREVERSIBLE call with arguments of their own.

The agent's login begins the session (agent_dsn), the test's own login decides, as the
engine requires (no login approves its own call). The journal keeps the requested args
on the effect and the approved ones on the request; the body runs with the approved
args exactly once; the agent learns of the edit (undolog.last_edit); the same call made
again replays the edited call's result.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog import (
    ApprovalAlreadyDecided,
    ApprovalNotEditable,
    AsyncUndoLog,
    AwaitingApprovalError,
    EditChangesArguments,
    InvalidArgument,
    PayloadTooLarge,
    PermissionDenied,
    ToolTier,
    UndoLog,
    approvals,
    last_edit,
    undolog_tool,
)
from undolog.errors import exit_code_of, http_status_of

Conn = psycopg.Connection[Any]

ran: list[tuple[str, int]] = []


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def wire(account: str, cents: int) -> dict[str, Any]:
    ran.append((account, cents))
    return {"sent": cents, "to": account}


@undolog_tool(tier=ToolTier.IRREVERSIBLE, name="wire")
async def awire(account: str, cents: int) -> dict[str, Any]:
    ran.append((account, cents))
    return {"sent": cents, "to": account}


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def _asked(ul: UndoLog, cents: int = 100_000) -> tuple[uuid.UUID, uuid.UUID]:
    """A session whose wire call waits for a person: (session id, approval id)."""
    with pytest.raises(AwaitingApprovalError) as raised, ul.session() as session:
        wire("acct-1", cents)
    assert raised.value.approval_id is not None
    return session.session_id, uuid.UUID(str(raised.value.approval_id))


def _request(conn: Conn, approval_id: uuid.UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT a.state, a.approved_args, a.decided_by, a.reason, e.args, e.tool_name,"
        " e.session_id FROM undolog.undolog_approval_requests AS a"
        " JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)"
        " WHERE a.approval_id = %s",
        (approval_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_the_edited_call_runs_once_with_the_approved_args_and_replays(
    agent_dsn: str, conn: Conn
) -> None:
    ul = UndoLog(agent_dsn)
    session_id, approval_id = _asked(ul)
    edited = {"account": "acct-1", "cents": 10_000}
    assert approvals.approve(conn, approval_id, "alice", "over the limit", args=edited) == (
        "approved"
    )

    with ul.session(session_id):
        result = wire("acct-1", 100_000)  # the agent makes the very same call again
        edit = last_edit()
    assert result == {"sent": 10_000, "to": "acct-1"}
    assert ran == [("acct-1", 10_000)]  # once, with the approved args
    assert edit is not None and edit.approval_id == approval_id
    assert edit.requested_args == {"account": "acct-1", "cents": 100_000}
    assert edit.approved_args == edited
    assert edit.changes == {"cents": (100_000, 10_000)}
    assert edit.decided_by == "alice" and edit.reason == "over the limit"
    assert "alice changed the arguments" in edit.note and "100000 -> 10000" in edit.note

    state, approved, by, reason, args, tool, sid = _request(conn, approval_id)
    assert (state, approved, by, reason) == ("approved", edited, "alice", "over the limit")
    assert (args, tool, sid) == ({"account": "acct-1", "cents": 100_000}, "wire", session_id)
    history = conn.execute(
        "SELECT event, detail->>'edited_by' FROM undolog.undolog_effect_history"
        " WHERE session_id = %s ORDER BY history_id",
        (session_id,),
    ).fetchall()
    assert ("args_edited", "alice") in history

    with ul.session(session_id):  # run again: the same call (requested args) replays
        assert wire("acct-1", 100_000) == {"sent": 10_000, "to": "acct-1"}
        replayed = last_edit()
    assert ran == [("acct-1", 10_000)]
    assert replayed is not None and replayed.approved_args == edited


def test_an_async_tool_runs_with_the_approved_args(agent_dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(agent_dsn)

    async def agent(session_id: uuid.UUID | None) -> tuple[Any, Any]:
        async with ul.session(session_id) as session:
            got = await awire("acct-2", 500)
            return session.session_id, (got, last_edit())

    with pytest.raises(AwaitingApprovalError) as raised:
        asyncio.run(agent(None))
    approval_id = uuid.UUID(str(raised.value.approval_id))
    session_id = raised.value.session_id
    approvals.approve(conn, approval_id, "bob", args={"account": "acct-3", "cents": 500})
    _, (got, edit) = asyncio.run(agent(session_id))
    assert got == {"sent": 500, "to": "acct-3"} and ran == [("acct-3", 500)]
    assert edit is not None and edit.changes == {"account": ("acct-2", "acct-3")}


def test_approved_as_asked_is_no_edit(agent_dsn: str, conn: Conn) -> None:
    ul = UndoLog(agent_dsn)
    session_id, approval_id = _asked(ul, 7)
    approvals.approve(conn, approval_id, "alice", args={"cents": 7, "account": "acct-1"})
    with ul.session(session_id):
        wire("acct-1", 7)
        assert last_edit() is None
    assert ran == [("acct-1", 7)]
    assert _request(conn, approval_id)[1] is None


def test_an_agent_login_cannot_approve_or_edit(
    agent_dsn: str, conn: Conn, login: Callable[..., Conn]
) -> None:
    ul = UndoLog(agent_dsn)
    _, approval_id = _asked(ul)
    edited = {"account": "mallory", "cents": 100_000}
    with psycopg.connect(agent_dsn, autocommit=True) as agent, pytest.raises(PermissionDenied):
        approvals.approve(agent, approval_id, "me", args=edited)
    # A login that is agent and approver both cannot edit-approve a call it made itself.
    both = login("undolog_agent", "undolog_approver")
    own = UndoLog(_dsn_of(both))
    _, own_approval = _asked(own)
    with pytest.raises(PermissionDenied):
        approvals.approve(both, own_approval, "me", args=edited)
    assert _request(conn, approval_id)[0] == "pending"
    assert _request(conn, own_approval)[0] == "pending"
    assert ran == []


def _dsn_of(c: Conn) -> str:
    info = c.info
    return f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"


@pytest.mark.parametrize(
    ("edited", "error"),
    [
        (["acct-1", 1], InvalidArgument),
        ("acct-1", InvalidArgument),
        ({"account": "x" * (1024 * 1024 + 1), "cents": 1}, PayloadTooLarge),
        ({"account": "acct-1", "cents": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}, None),
        ({"account": "acct-1"}, EditChangesArguments),
        ({"account": "acct-1", "cents": 1, "tool_name": "drop_database"}, EditChangesArguments),
        ({"account": "acct-1", "cents": 1, "session_id": str(uuid.uuid4())}, EditChangesArguments),
    ],
    ids=["array", "string", "too-large", "nested-ok", "drops-one", "adds-tool", "adds-session"],
)
def test_edited_args_are_checked_like_any_args(
    agent_dsn: str, conn: Conn, edited: Any, error: type[Exception] | None
) -> None:
    ul = UndoLog(agent_dsn)
    session_id, approval_id = _asked(ul)
    if error is None:  # within the limits: the edit is taken as it is
        assert approvals.approve(conn, approval_id, "alice", args=edited) == "approved"
        return
    with pytest.raises(error):
        approvals.approve(conn, approval_id, "alice", args=edited)
    state, approved, _, _, args, tool, sid = _request(conn, approval_id)
    # nothing was decided, and the call is still the one asked, of the same tool and session
    assert (state, approved) == ("pending", None)
    assert (args, tool, sid) == ({"account": "acct-1", "cents": 100_000}, "wire", session_id)


def test_too_deep_edited_args_are_refused(agent_dsn: str, conn: Conn) -> None:
    ul = UndoLog(agent_dsn)
    _, approval_id = _asked(ul)
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(PayloadTooLarge):
        approvals.approve(conn, approval_id, "alice", args={"account": "acct-1", "cents": deep})
    assert _request(conn, approval_id)[0] == "pending"


def test_an_edit_of_a_decided_request_is_refused(agent_dsn: str, conn: Conn) -> None:
    ul = UndoLog(agent_dsn)
    _, approval_id = _asked(ul)
    approvals.approve(conn, approval_id, "alice", args={"account": "acct-1", "cents": 1})
    with pytest.raises(ApprovalNotEditable) as raised:
        approvals.approve(conn, approval_id, "bob", args={"account": "acct-1", "cents": 2})
    assert isinstance(raised.value, ApprovalAlreadyDecided)  # caught as before
    assert exit_code_of(raised.value) == 1 and http_status_of(raised.value) == 409
    assert _request(conn, approval_id)[1:3] == ({"account": "acct-1", "cents": 1}, "alice")
    _, rejected = _asked(ul)
    approvals.reject(conn, rejected, "alice", "no")
    with pytest.raises(ApprovalNotEditable):
        approvals.approve(conn, rejected, "alice", args={"account": "acct-1", "cents": 1})


class Bank:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    @undolog_tool(tier=ToolTier.IRREVERSIBLE, name="bank_wire")
    def wire(self, account: str, cents: int = 1) -> int:
        self.sent.append((account, cents))
        return cents


def test_a_method_keeps_its_instance_and_gets_the_approved_args(agent_dsn: str, conn: Conn) -> None:
    ul, bank = UndoLog(agent_dsn), Bank()
    with pytest.raises(AwaitingApprovalError) as raised, ul.session() as session:
        bank.wire("acct-1")
    approval_id = uuid.UUID(str(raised.value.approval_id))
    approvals.approve(conn, approval_id, "alice", args={"account": "acct-9", "cents": 1})
    with ul.session(session.session_id):
        assert bank.wire("acct-1") == 1
    assert bank.sent == [("acct-9", 1)]
