"""Shared by the dashboard's HTTP and browser tests: real logins with real passwords,
sessions made by a real agent login, and a few states to act on."""

from __future__ import annotations

import contextlib
import html
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from undolog import (
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.walk import CompensationCall

PASSWORD = "s3cret-Dash!"
# Members of this group authenticate with scram-sha-256 (see password_auth), even on a
# test cluster that trusts every other local connection.
PASSWORD_GROUP = "undolog_dashboard_pw"
LOGINS = {
    "dash_approver": ["undolog_approver"],
    "dash_approver2": ["undolog_approver"],
    "dash_operator": ["undolog_operator"],
    "dash_agent": ["undolog_agent"],
    "dash_agent2": ["undolog_agent"],
    "dash_both": ["undolog_agent", "undolog_approver"],
    "dash_nobody": [],
}
HBA_LINES = (
    f"host all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n"
    f"host all +{PASSWORD_GROUP} ::1/128 scram-sha-256\n"
)


def create_logins(conn: psycopg.Connection[Any]) -> None:
    """The test logins (cluster-wide, so created once and reused by every database)."""
    if (
        conn.execute("SELECT FROM pg_roles WHERE rolname = %s", (PASSWORD_GROUP,)).fetchone()
        is None
    ):
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            conn.execute(f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN")
    for login, groups in LOGINS.items():
        if conn.execute("SELECT FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None:
            with contextlib.suppress(psycopg.errors.DuplicateObject):
                conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{PASSWORD}'")
        for group in [*groups, PASSWORD_GROUP]:
            conn.execute(f"GRANT {group} TO {login}")


@contextlib.contextmanager
def password_auth(conn: psycopg.Connection[Any]) -> Iterator[bool]:
    """Make the test logins authenticate by password (a pg_hba.conf line for their group,
    ahead of the cluster's 'trust'); answers False when the file is not ours to edit."""
    hba_file = conn.execute("SHOW hba_file").fetchone()
    assert hba_file is not None
    path = str(hba_file[0])
    try:
        with open(path, encoding="utf-8") as f:
            original = f.read()
        if HBA_LINES not in original:
            with open(path, "w", encoding="utf-8") as f:
                f.write(HBA_LINES + original)
    except OSError:
        yield False
        return
    conn.execute("SELECT pg_reload_conf()")
    try:
        yield True
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(original)
        conn.execute("SELECT pg_reload_conf()")


def as_login(dsn: str, login: str, password: str = PASSWORD) -> str:
    params = conninfo_to_dict(dsn)
    params.update(user=login, password=password)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def without_user(dsn: str) -> str:
    params = conninfo_to_dict(dsn)
    params.pop("user", None)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


# --- tools of the test agent ----------------------------------------------------------


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("cancel_booking", max_attempts=1),
)
def book(item: str, note: str = "") -> dict[str, Any]:
    return {"booking": f"B-{item}"}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def pay(cents: int, note: str = "") -> dict[str, Any]:
    return {"paid": cents}


@dataclass
class Waiting:
    session_id: uuid.UUID
    approval_id: uuid.UUID


def waiting_session(
    dsn: str,
    login: str = "dash_agent",
    *,
    agent: str | None = None,
    metadata: dict[str, Any] | None = None,
    item: str = "room",
    **pay_args: Any,
) -> Waiting:
    """A session of ``login`` whose irreversible call waits for a human (after booking
    ``item``); ``agent`` is the name it gives itself, ``metadata`` its session metadata."""
    ul = UndoLog(as_login(dsn, login))
    sid = uuid.uuid4()
    try:
        with ul.session(sid, agent=agent or f"agent-{login}", metadata=metadata):
            book(item)
            pay(pay_args.pop("cents", 500), **pay_args)
    except AwaitingApprovalError as exc:
        return Waiting(sid, uuid.UUID(str(exc.approval_id)))
    raise AssertionError("the irreversible call did not wait for approval")


def active_session(dsn: str, login: str = "dash_agent") -> uuid.UUID:
    """A live session of ``login`` (an hour's lease) with one committed compensable call,
    left running as an agent would between two calls."""
    with psycopg.connect(as_login(dsn, login), autocommit=True) as conn:
        sid = engine.begin_session(conn, None, "live-agent", {}, timedelta(hours=1))
        call = engine.intercept(
            conn, sid, 0, "book", "compensable", {"item": "live"}, {"name": "cancel_booking"}
        )
        assert call.effect_id is not None and call.action == "execute"
        engine.commit(conn, call.effect_id, {"booking": "B-live"})
    return sid


def halted_session(dsn: str) -> uuid.UUID:
    """A session (of the installer's login) halted by a compensation that failed for good."""
    ul = UndoLog(dsn, walk_wait=0.0)

    @ul.compensation("cancel_booking")
    def cancel_booking(call: CompensationCall) -> None:
        raise ConnectionError("booking API down")

    sid = uuid.uuid4()
    quiet = logging.getLogger("undolog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the walk's own log of the halt is expected here
    try:
        with contextlib.suppress(RuntimeError), ul.session(sid, agent="travel"):
            book("flight")
            raise RuntimeError("the trip is off")
    finally:
        quiet.setLevel(level)
    return sid


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def reject_one(client: Any, token: str, approval_id: uuid.UUID, reason: str) -> Any:
    """Posts the inbox's reject button of one request, with its reason (one step: a
    rejection is not confirmed). `client` is a logged-in Starlette TestClient."""
    return client.post(
        "/approvals/decide",
        data={"csrf": token, "reject_one": str(approval_id), f"reason_{approval_id}": reason},
    )


def confirm_form(page: str) -> dict[str, list[str]]:
    """The hidden fields of the page asking to confirm an irreversible approval: posting
    them is the second, explicit step."""
    found = re.search(r'<form[^>]*id="confirm-form"[^>]*>(.*?)</form>', page, re.S)
    assert found, "not the confirmation page"
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(1)
    ):
        fields.setdefault(html.unescape(name), []).append(html.unescape(value))
    return fields


def session_state(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def operator_actions(conn: psycopg.Connection[Any], sid: uuid.UUID) -> list[tuple[str, str]]:
    """The session's operator actions, oldest first: (action, performed_by)."""
    rows = conn.execute(
        "SELECT action, performed_by FROM undolog.undolog_operator_actions "
        "WHERE session_id = %s ORDER BY action_id",
        (sid,),
    ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


@contextlib.contextmanager
def running_in_thread(server: Any) -> Iterator[None]:
    """A uvicorn ``server`` running in a thread for the block: started (its sockets
    listening) when the block begins, stopped when it ends."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def served_dashboard(app: Any, **options: Any) -> Iterator[str]:
    """A dashboard's ``app`` on the server `undolog dashboard` runs (uvicorn as the faces
    serve it, its own 400s carrying the security headers), in a thread on a free port:
    its base URL. ``options``: uvicorn.Config's."""
    from pgcluster import free_port
    from undolog.dashboard.server import uvicorn_server

    port = free_port()
    server = uvicorn_server(app, host="127.0.0.1", port=port, log_level="warning", **options)
    with running_in_thread(server):
        yield f"http://127.0.0.1:{port}"
