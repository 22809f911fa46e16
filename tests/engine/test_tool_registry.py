"""The agent never chooses its call's tier or what undoes it: the engine admits a call
only for a tool registered for the session's owner, the undo walk runs the registered
compensation, and ``undolog worker --owner ROLE`` walks only the sessions of the logins it
serves. Real processes where it matters: the worker is a subprocess of `undolog worker`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import UndoLog, engine, errors, undolog_tool
from undolog.signature import call_signature
from undolog.tiers import CompensationDescriptor, ToolTier
from worker_support import WorkerProcess, app_dir, failed_session, start_worker, wait_until

Conn = psycopg.Connection[Any]
PAYOUT = {"name": "mcp:payments/process_payout", "args": {"to": "mallory", "cents": 10**6}}

__all__ = ["app_dir", "start_worker"]  # fixtures of worker_support, used here


@pytest.fixture
def agent_login(login: Callable[..., Conn]) -> Callable[[], Conn]:
    """agent_login() -> an autocommit connection of a new LOGIN role holding undolog_agent."""
    return lambda: login("undolog_agent")


def _sid(c: Conn) -> uuid.UUID:
    return engine.begin_session(c, agent="probe")


@pytest.mark.unregistered_tools
def test_a_call_naming_no_registered_tool_is_refused(agent_login: Callable[[], Conn]) -> None:
    agent = agent_login()
    sid = _sid(agent)
    with pytest.raises(errors.UnknownTool, match="not registered"):
        engine.intercept(agent, sid, 0, "drop_db", "compensable", {}, {"name": "undrop"})


@pytest.mark.unregistered_tools
def test_a_forged_descriptor_is_refused_and_nothing_is_journaled(
    agent_login: Callable[[], Conn],
) -> None:
    agent = agent_login()
    engine.register_tool(agent, "read_profile", "compensable", {"name": "noop"})
    sid = _sid(agent)
    with pytest.raises(errors.ToolRegistrationMismatch, match="differs from its registration"):
        engine.intercept(agent, sid, 0, "read_profile", "compensable", {"id": 1}, PAYOUT)
    with pytest.raises(errors.ToolRegistrationMismatch):
        engine.intercept(agent, sid, 0, "read_profile", "irreversible", {"id": 1})
    rows = agent.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s", (sid,)
    ).fetchone()
    assert rows == (0,)


@pytest.mark.unregistered_tools
def test_another_agents_registration_admits_nothing(agent_login: Callable[[], Conn]) -> None:
    a, b = agent_login(), agent_login()
    engine.register_tool(a, "create_user", "compensable", {"name": "delete_user"})
    sid = _sid(b)
    with pytest.raises(errors.UnknownTool):
        engine.intercept(b, sid, 0, "create_user", "compensable", {}, {"name": "delete_user"})


@pytest.mark.unregistered_tools
def test_the_decorator_registers_its_tool_once_per_connection(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    sent: list[str] = []

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    def create_user(email: str) -> dict[str, Any]:
        return {"email": email}

    real = engine.register_tool

    def counting(*a: Any, **k: Any) -> uuid.UUID:
        sent.append(a[1])
        return real(*a, **k)

    engine.register_tool = counting
    try:
        with ul.session(agent="t"):
            create_user("a@example.com")
            create_user("b@example.com")
    finally:
        engine.register_tool = real
    assert sent == ["create_user"]
    row = conn.execute(
        "SELECT tier, compensation FROM undolog.undolog_tools WHERE tool_name = 'create_user'"
    ).fetchone()
    assert row == ("compensable", {"name": "delete_user", "args": {}})


@pytest.mark.unregistered_tools
def test_a_call_by_tool_id_takes_the_registrations_tier_and_compensation(
    agent_login: Callable[[], Conn],
) -> None:
    agent = agent_login()
    tool_id = engine.register_tool(agent, "create_user", "compensable", {"name": "delete_user"})
    sid = _sid(agent)
    args = {"email": "a@example.com"}
    signature = call_signature(sid, 0, "create_user", args)
    got = engine.intercept_tool(agent, sid, tool_id, 0, args, signature)
    assert (got.action, got.state) == ("execute", "executing")
    assert got.effect_id is not None
    engine.commit(agent, got.effect_id, {"user_id": 1})
    # the same call by name: one journal
    again = engine.intercept(
        agent, sid, 0, "create_user", "compensable", args, {"name": "delete_user"}
    )
    assert (again.effect_id, again.action, again.result_snapshot) == (
        got.effect_id,
        "replay",
        {"user_id": 1},
    )


@pytest.mark.unregistered_tools
def test_another_logins_tool_id_admits_nothing(agent_login: Callable[[], Conn]) -> None:
    a, b = agent_login(), agent_login()
    tool_a = engine.register_tool(a, "create_user", "compensable", {"name": "delete_user"})
    sid = _sid(b)
    with pytest.raises(errors.UnknownTool, match=f"tool {tool_a} is not registered"):
        engine.intercept_tool(b, sid, tool_a, 0, {}, call_signature(sid, 0, "create_user", {}))


@pytest.mark.unregistered_tools
def test_a_cached_tool_id_of_a_retired_tool_is_registered_again(dsn: str, conn: Conn) -> None:
    """The decorator names its tool by the id it cached: once an operator retired that
    registration, the engine refuses the id (UL017); the decorator registers the tool
    again, once, and the call goes on under the new id, a new call or a replay."""
    ul = UndoLog(dsn)
    sent: list[str] = []
    ran: list[str] = []

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
    def create_user(email: str) -> dict[str, Any]:
        ran.append(email)
        return {"email": email}

    real = engine.register_tool

    def counting(*a: Any, **k: Any) -> uuid.UUID:
        sent.append(a[1])
        return real(*a, **k)

    def retire(tool_id: uuid.UUID) -> None:
        conn.execute("SELECT undolog.retire_tool(%s, 'ada', 'moved')", (tool_id,))

    engine.register_tool = counting
    try:
        with ul.session(agent="t") as session:
            create_user("a@example.com")
            (first,) = ul.registered_tools.values()
            retire(first)
            create_user("b@example.com")  # a new call under the cached, retired id
            (second,) = ul.registered_tools.values()
        assert sent == ["create_user", "create_user"]
        assert second != first
        retire(second)
        with ul.session(session.session_id):  # its calls replay, under a third id
            assert create_user("a@example.com") == {"email": "a@example.com"}
            assert create_user("b@example.com") == {"email": "b@example.com"}
        # the latest registration (the new session's connection may be another one)
        third = list(ul.registered_tools.values())[-1]
    finally:
        engine.register_tool = real
    assert sent == ["create_user"] * 3
    assert third not in (first, second)
    assert ran == ["a@example.com", "b@example.com"]  # replayed, not run again
    rows = conn.execute(
        "SELECT tool_id FROM undolog.undolog_effect_log WHERE session_id = %s ORDER BY step_index",
        (session.session_id,),
    ).fetchall()
    assert rows == [(first,), (second,)]  # each effect keeps the registration it had


@pytest.mark.unregistered_tools
def test_another_definition_under_a_cached_name_is_refused_on_the_same_connection(
    dsn: str, conn: Conn
) -> None:
    """Two decorated tools with one name and different compensations, called on the same
    connection: the second is registered (its definition is not the cached one's) and
    refused, never run under the first one's registration."""
    ul = UndoLog(dsn)
    ran: list[str] = []

    @undolog_tool(
        tier=ToolTier.COMPENSABLE, name="payout", compensation=CompensationDescriptor.new("undo")
    )
    def payout(cents: int) -> None:
        ran.append(f"first {cents}")

    @undolog_tool(
        tier=ToolTier.COMPENSABLE,
        name="payout",
        compensation=CompensationDescriptor.new("undo", {"soft": True}),
    )
    def payout_soft(cents: int) -> None:
        ran.append(f"second {cents}")

    @ul.compensation("undo")
    def undo(call: Any) -> None:
        ran.append("undone")

    with pytest.raises(errors.ToolRegistrationMismatch), ul.session(agent="t") as session:
        payout(1)
        payout_soft(2)
    assert ran == ["first 1", "undone"]  # the session failed, and its one call was undone
    rows = conn.execute(
        "SELECT step_index FROM undolog.undolog_effect_log WHERE session_id = %s",
        (session.session_id,),
    ).fetchall()
    assert rows == [(0,)]  # the second call was never journaled


@pytest.mark.unregistered_tools
def test_the_worker_walks_only_the_owners_it_serves(
    dsn: str,
    conn: Conn,
    agent_login: Callable[[], Conn],
    app_dir: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """A rogue agent login journals a harmless call whose registration (its own) names a
    compensation the worker's app has, and fails its session: a worker that serves only
    the trusted login does not run it. The trusted login's session is walked."""
    trusted, rogue = agent_login(), agent_login()
    for c in (trusted, rogue):
        engine.register_tool(c, "create_user", "compensable", {"name": "delete_user"})
    # The rogue cannot bring the payout as its call's compensation ...
    rogue_sid = _sid(rogue)
    with pytest.raises(errors.ToolRegistrationMismatch):
        engine.intercept(rogue, rogue_sid, 0, "create_user", "compensable", {"u": 7}, PAYOUT)
    # ... and what it may journal, the worker serving the trusted login leaves alone.
    engine.fail_session(rogue, rogue_sid, "never mind")
    rogue_sid = failed_session(rogue, "delete_user", 666)
    trusted_sid = failed_session(trusted, "delete_user", 1)
    worker = start_worker(dsn, "--owner", trusted.info.user)
    wait_until(lambda: engine.session_state(conn, trusted_sid) == "compensated", what="walk")
    time.sleep(0.5)  # a few more passes of the worker
    worker.stop()
    assert (app_dir / "undone.txt").read_text() == "1\n"
    assert engine.session_state(conn, rogue_sid) in ("failed", "compensating")
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_undo_stack"
        " WHERE session_id = %s AND state <> 'pending'",
        (rogue_sid,),
    ).fetchone() == (0,)


@pytest.mark.unregistered_tools
@pytest.mark.parametrize("choice", [(), ("--all-owners",)], ids=["no choice", "all owners"])
def test_a_worker_that_serves_every_login_says_so_unless_told_to(
    dsn: str,
    conn: Conn,
    agent_login: Callable[[], Conn],
    app_dir: Path,
    start_worker: Callable[..., WorkerProcess],
    choice: tuple[str, ...],
) -> None:
    """Without --owner the worker walks every login's sessions, the rogue's too (the
    default is kept, so a supervisor's unit goes on walking after an upgrade), and it
    says at start what that lets any agent login do, and what to pass; --all-owners is
    the same walk, chosen, and says nothing."""
    trusted, rogue = agent_login(), agent_login()
    for c in (trusted, rogue):
        engine.register_tool(c, "create_user", "compensable", {"name": "delete_user"})
    rogue_sid = failed_session(rogue, "delete_user", 666)
    trusted_sid = failed_session(trusted, "delete_user", 1)
    worker = start_worker(dsn, *choice)
    walked = (rogue_sid, trusted_sid)
    wait_until(
        lambda: all(engine.session_state(conn, s) == "compensated" for s in walked), what="walk"
    )
    worker.stop()
    assert sorted((app_dir / "undone.txt").read_text().split()) == ["1", "666"]
    warned = "walking every login's sessions" in worker.stderr()
    assert warned == (choice == ()), worker.stderr()
    if warned:
        assert "--owner LOGIN" in worker.stderr() and "--all-owners" in worker.stderr()


def test_a_worker_is_given_owners_or_all_owners_not_both(dsn: str, app_dir: Path) -> None:
    argv = ["worker", "--app", "agentapp:ul", "--once", "--owner", "x", "--all-owners"]
    out = subprocess.run(
        [sys.executable, "-m", "undolog.cli", *argv, "--dsn", dsn],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert "--owner and --all-owners" in out.stderr


def test_an_operator_lists_and_retires_a_registration_from_the_cli(
    login: Callable[..., Conn], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from undolog.cli import main

    agent = login("undolog_agent")
    owner = str(agent.info.user)
    engine.register_tool(agent, "send_mail", "compensable", {"name": "unsend"})
    operator = login("undolog_operator")
    as_operator = f"{dsn} user={operator.info.user}"
    as_agent = f"{dsn} user={owner}"

    assert main(["tools", "list", "--owner", owner, "--dsn", as_operator, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["tool_name"], row["tier"], row["live"]) == ("send_mail", "compensable", True)

    # An agent cannot retire its own tool to change its tier: that is an operator's.
    argv = ["tools", "retire", "send_mail", "--owner", owner, "--by", "mallory"]
    assert main([*argv, "--reason", "mine", "--dsn", as_agent]) == 1
    assert "undolog_operator" in capsys.readouterr().err
    with pytest.raises(errors.ToolRegistrationMismatch):
        engine.register_tool(agent, "send_mail", "irreversible", None)

    argv = ["tools", "retire", "send_mail", "--owner", owner, "--by", "ada"]
    assert main([*argv, "--reason", "it pays out now", "--dsn", as_operator]) == 0
    assert "retired at" in capsys.readouterr().out
    engine.register_tool(agent, "send_mail", "irreversible", None)  # its author may again
    assert main(["tools", "list", "--owner", owner, "--all", "--dsn", as_operator, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((r["tier"], r["live"], r["retire_reason"]) for r in rows) == [
        ("compensable", False, "it pays out now"),
        ("irreversible", True, None),
    ]


def test_an_operator_registers_an_agents_tool_from_the_cli(
    login: Callable[..., Conn], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator action register_tool(p_owner => ...) from the command line: the
    agent's own registration must then agree with it."""
    from undolog.cli import main

    agent = login("undolog_agent")
    owner = str(agent.info.user)
    operator = login("undolog_operator")
    as_operator = f"{dsn} user={operator.info.user}"
    argv = ["tools", "register", "pay_out", "--owner", owner, "--tier", "irreversible"]
    assert main([*argv, "--dsn", as_operator, "--json"]) == 0
    tool_id = json.loads(capsys.readouterr().out)["tool_id"]
    assert str(engine.register_tool(agent, "pay_out", "irreversible", None)) == tool_id
    with pytest.raises(errors.ToolRegistrationMismatch):  # the agent cannot choose the tier
        engine.register_tool(agent, "pay_out", "compensable", {"name": "refund"})
    # the same registration again is the same tool; an agent may not pin another's
    assert main([*argv, "--dsn", as_operator, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tool_id"] == tool_id
    other = str(login("undolog_agent").info.user)
    pin = ["tools", "register", "pay_out", "--owner", other, "--tier", "compensable"]
    assert main([*pin, "--compensation", '{"name": "refund"}', "--dsn", f"{dsn} user={owner}"]) == 1
    assert "only an operator may register a tool for" in capsys.readouterr().err
    bad = ["tools", "register", "refund", "--owner", owner, "--tier", "compensable"]
    assert main([*bad, "--compensation", "{nope", "--dsn", as_operator]) == 2
    assert "--compensation is not JSON" in capsys.readouterr().err
    assert main([*bad, "--dsn", as_operator]) == 1  # a compensable tool needs its undo
    assert "hint: Give the tool its undo" in capsys.readouterr().err


def test_an_operator_replaces_an_agents_registration_in_one_transaction(
    login: Callable[..., Conn], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Retired and registered in two commands, a tool is the agent's again in between:
    its binding registers a retired tool again on its next call (UL017, then
    register_tool), with the tier its code says, and the operator's registration is then
    refused (UL018), however often it is tried. `tools register --replace` retires and
    registers in one transaction, recorded with --by and --reason."""
    from undolog.cli import main

    agent = login("undolog_agent")
    owner = str(agent.info.user)
    as_operator = f"{dsn} user={login('undolog_operator').info.user}"
    theirs = engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"})
    pin = ["tools", "register", "pay_out", "--owner", owner, "--tier", "irreversible"]

    retire = ["tools", "retire", "pay_out", "--owner", owner, "--by", "ada", "--reason", "pays"]
    assert main([*retire, "--dsn", as_operator]) == 0
    theirs = engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"})
    assert main([*pin, "--dsn", as_operator]) == 1  # the gap: the agent's again
    assert "registered differently" in capsys.readouterr().err

    assert main([*pin, "--replace", "--dsn", as_operator]) == 2
    assert "--by and --reason" in capsys.readouterr().err
    replace = [*pin, "--replace", "--by", "ada", "--reason", "it pays out", "--json"]
    assert main([*replace, "--dsn", as_operator]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["retired"] == str(theirs)
    with pytest.raises(errors.ToolRegistrationMismatch):
        engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"})
    assert str(engine.register_tool(agent, "pay_out", "irreversible", None)) == answer["tool_id"]
    # the same definition again retires nothing
    assert main([*replace, "--dsn", as_operator]) == 0
    assert json.loads(capsys.readouterr().out) == {"tool_id": answer["tool_id"], "retired": None}
    assert main(["tools", "list", "--owner", owner, "--all", "--dsn", as_operator, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((r["tier"], r["live"], r["retired_by"], r["retire_reason"]) for r in rows) == [
        ("compensable", False, "ada", "it pays out"),
        ("compensable", False, "ada", "pays"),
        ("irreversible", True, None, None),
    ]


def test_an_agents_register_during_a_replacement_waits_for_it_then_is_refused(
    login: Callable[..., Conn], dsn: str
) -> None:
    """replace_tool retires and registers in the operator's one transaction: an agent's
    register_tool of the name meanwhile waits for it (no gap in which the name is the
    agent's again), then finds the operator's registration and is refused (UL018)."""
    import threading

    agent = login("undolog_agent")
    owner = str(agent.info.user)
    engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"})
    operator = psycopg.connect(f"{dsn} user={login('undolog_operator').info.user}")
    answered: list[BaseException | uuid.UUID] = []

    def register() -> None:
        try:
            answered.append(engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"}))
        except BaseException as exc:  # the answer the test asserts
            answered.append(exc)

    try:
        (tool_id, retired) = operator.execute(
            "SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL, %s,"
            " 'fail_session', 'ada', 'it pays out')",
            (owner,),
        ).fetchone() or (None, None)
        assert retired is not None
        racer = threading.Thread(target=register)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive() and answered == []  # waiting for the operator's transaction
        operator.commit()
        racer.join(10)
        (answer,) = answered
        assert isinstance(answer, errors.ToolRegistrationMismatch), answer
        assert engine.register_tool(agent, "pay_out", "irreversible", None) == tool_id
    finally:
        operator.close()


def test_a_replacement_meeting_an_identical_one_committed_meanwhile_retires_nothing(
    login: Callable[..., Conn], dsn: str, conn: Conn
) -> None:
    """replace_tool's register_tool finds the live registration different (UL018), then
    locks the live registration to retire it. Another operator's replacement with the
    same definition may commit between the two steps: the registration locked is then
    the one asked for, and it is answered (its id, nothing retired), not retired and
    registered again for nothing. The window is held open with locks: a retirement left
    open (then rolled back) holds the first operator's register_tool, and the second
    operator's LOCK TABLE, queued behind it, takes the table the moment the first one's
    register_tool ends, so the first one's lock waits while the second one replaces."""
    import threading

    agent = login("undolog_agent")
    owner = str(agent.info.user)
    theirs = engine.register_tool(agent, "pay_out", "compensable", {"name": "noop"})
    pausing = psycopg.connect(f"{dsn} user={login('undolog_operator').info.user}")
    first = psycopg.connect(f"{dsn} user={login('undolog_operator').info.user}")
    second = psycopg.connect(dsn)  # LOCK TABLE ... EXCLUSIVE: the tests' superuser
    replace = (
        "SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL, %s,"
        " 'fail_session', %s, 'it pays out')"
    )
    answered: list[BaseException | tuple[Any, ...] | None] = []
    locked: list[BaseException | None] = []

    def run_first() -> None:
        try:
            answered.append(first.execute(replace, (owner, "ada")).fetchone())
            first.commit()
        except BaseException as exc:  # the answer the test asserts
            answered.append(exc)

    def lock_table() -> None:
        try:
            second.execute("LOCK TABLE undolog.undolog_tools IN EXCLUSIVE MODE")
            locked.append(None)
        except BaseException as exc:  # the answer the test asserts
            locked.append(exc)

    def waits(pid: int, event: str) -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE pid = %s AND wait_event_type = 'Lock' AND wait_event = %s",
            (pid, event),
        ).fetchone()
        return row == (1,)

    try:
        pausing.execute("SELECT undolog.retire_tool(%s, 'bob', 'pause')", (theirs,))
        racer = threading.Thread(target=run_first)
        racer.start()
        wait_until(lambda: waits(first.info.backend_pid, "transactionid"), 10)
        locker = threading.Thread(target=lock_table)
        locker.start()
        wait_until(lambda: waits(second.info.backend_pid, "relation"), 10)
        pausing.rollback()  # the first one's register_tool: UL018, the table is the second's
        locker.join(10)
        assert locked == [None]
        wait_until(lambda: waits(first.info.backend_pid, "relation"), 10)
        mine = second.execute(replace, (owner, "bea")).fetchone()
        assert mine is not None and mine[1] == theirs
        second.commit()
        racer.join(10)
        assert answered == [(mine[0], None)]
        rows = conn.execute(
            "SELECT tool_id, retired_by FROM undolog.undolog_tools WHERE owner_role = %s"
            " ORDER BY registered_at",
            (owner,),
        ).fetchall()
        assert rows == [(theirs, "bea"), (mine[0], None)]
    finally:
        for c in (pausing, first, second):
            c.close()


@pytest.mark.unregistered_tools
def test_an_agents_open_registration_holds_an_operators_replace_for_a_bounded_time(
    login: Callable[..., Conn],
) -> None:
    """An agent login that registers a tool in a transaction it keeps open held an
    operator's replace_tool of that tool (its insert waits for the agent's to end) for as
    long as the agent liked: only the operator's own statement_timeout ended it. Bounded
    now as a session's lock is (undolog.session_lock_wait, 5 s), with UL030, the
    operator's lock_timeout as it was, and the replacement goes through once the agent's
    transaction ends."""
    agent = login("undolog_agent")
    operator = login("undolog_operator")
    agent.autocommit = False
    engine.fetch_one(
        agent, "SELECT undolog.register_tool('wire', 'compensable', '{\"name\": \"unwire\"}')"
    )
    operator.execute("SET statement_timeout = '9s'")  # before: canceled here
    replace = (
        "SELECT * FROM undolog.replace_tool('wire', 'irreversible', NULL, %s, 'fail_session',"
        " 'ops', 'pinned: it pays out')"
    )
    started = time.monotonic()
    with pytest.raises(errors.SessionBusy, match=r"tool wire of \S+ is being registered"):
        engine.fetch_one(operator, replace, (agent.info.user,))
    assert 4.5 < time.monotonic() - started < 8
    assert operator.execute("SHOW lock_timeout").fetchone() == ("0",)
    agent.commit()
    engine.fetch_one(operator, replace, (agent.info.user,))
    tier = operator.execute(
        "SELECT tier FROM undolog.undolog_tools WHERE owner_role = %s AND retired_at IS NULL",
        (agent.info.user,),
    ).fetchone()
    assert tier == ("irreversible",)
