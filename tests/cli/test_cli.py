"""The `undolog` command against a real database: tables for people, --json for scripts,
exit codes that mean something."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg

from undolog import engine

Conn = psycopg.Connection[Any]


def undolog(dsn: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


def _journal(conn: Conn) -> tuple[uuid.UUID, uuid.UUID]:
    """A session with a committed call and an irreversible one awaiting approval."""
    session = engine.begin_session(conn, agent="cli-test")
    found = engine.intercept(
        conn,
        session,
        0,
        "create_user",
        "compensable",
        {"email": "ada@example.com"},
        {"name": "delete_user"},
    )
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"user_id": 1})
    payout = engine.intercept(conn, session, 1, "process_payout", "irreversible", {"cents": 5})
    assert payout.approval_id is not None
    return session, payout.approval_id


def test_sessions_list_and_show(dsn: str, conn: Conn) -> None:
    session, _ = _journal(conn)
    listed = undolog(dsn, "sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert "SESSION_ID" in listed.stdout and str(session) in listed.stdout
    assert "awaiting_approval" in listed.stdout

    as_json = json.loads(undolog(dsn, "sessions", "list", "--json").stdout)
    assert as_json[0]["session_id"] == str(session) and as_json[0]["calls"] == 2

    shown = undolog(dsn, "sessions", "show", str(session), "--json")
    assert shown.returncode == 0, shown.stderr
    timeline = json.loads(shown.stdout)["timeline"]
    assert [(e["tool_name"], e["to_state"]) for e in timeline] == [
        ("create_user", "executing"),  # created executing: one event, not two
        ("create_user", "committed"),
        ("process_payout", "pending"),
    ]
    human = undolog(dsn, "sessions", "show", str(session))
    assert "timeline:" in human.stdout and "process_payout" in human.stdout


def test_unknown_session_exits_3(dsn: str) -> None:
    out = undolog(dsn, "sessions", "show", str(uuid.uuid4()))
    assert out.returncode == 3
    assert out.stderr.startswith("undolog: unknown session")


def test_approvals_list_and_approve_then_the_call_executes(dsn: str, conn: Conn) -> None:
    session, approval = _journal(conn)
    pending = json.loads(undolog(dsn, "approvals", "list", "--json").stdout)
    assert [(p["approval_id"], p["tool_name"]) for p in pending] == [
        (str(approval), "process_payout")
    ]
    decided = undolog(
        dsn, "approvals", "approve", str(approval), "--by", "alice", "--reason", "checked"
    )
    assert decided.returncode == 0, decided.stderr
    first, *what = decided.stdout.splitlines()
    assert first == f"approval {approval}: approved"
    assert "process_payout" in what[0]  # what was approved, restated
    again = engine.intercept(conn, session, 1, "process_payout", "irreversible", {"cents": 5})
    assert again.action == "execute"
    twice = undolog(dsn, "approvals", "reject", str(approval), "--by", "bob")
    assert twice.returncode == 1 and "already" in twice.stderr


def test_deciding_an_unknown_approval_exits_3(dsn: str) -> None:
    out = undolog(dsn, "approvals", "reject", str(uuid.uuid4()), "--by", "alice")
    assert out.returncode == 3


def test_usage_errors_exit_2(dsn: str) -> None:
    assert undolog(dsn, "approvals", "approve", "not-a-uuid", "--by", "x").returncode == 2
    assert undolog(dsn, "sessions").returncode == 2
    assert undolog(dsn, "worker", "--app", "nocolon").returncode == 2


def test_recover_and_worker_walk_a_dead_agents_session(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    session = engine.begin_session(conn, agent="dies")
    found = engine.intercept(
        conn,
        session,
        0,
        "create_user",
        "compensable",
        {"email": "x@example.com"},
        {"name": "delete_user"},
    )
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"user_id": 3})
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 s'"
        " WHERE session_id = %s",
        (session,),
    )
    marker = tmp_path / "undone.txt"
    (tmp_path / "agentapp.py").write_text(
        textwrap.dedent(f"""
        from undolog import UndoLog
        ul = UndoLog()

        @ul.compensation("delete_user")
        def delete_user(call):
            with open({str(marker)!r}, "a") as f:
                f.write(f"{{call.result['user_id']}}\\n")
    """)
    )
    worked = undolog(dsn, "worker", "--app", "agentapp:ul", "--once", cwd=tmp_path)
    assert worked.returncode == 0, worked.stderr
    assert worked.stdout.strip() == f"session {session}: compensated"
    assert marker.read_text() == "3\n"
    assert json.loads(undolog(dsn, "recover", "--json").stdout) == []


def test_partitions_maintain_and_drop(dsn: str) -> None:
    maintained = undolog(dsn, "partitions", "maintain", "--months-ahead", "4", "--json")
    assert maintained.returncode == 0, maintained.stderr
    created = [r["partition"] for r in json.loads(maintained.stdout) if r["action"] == "created"]
    assert any(name.startswith("undolog_effect_log_") for name in created)
    again = json.loads(undolog(dsn, "partitions", "ensure", "--months-ahead", "4", "--json").stdout)
    assert again == []  # idempotent
    no_zone = undolog(dsn, "partitions", "drop", "--older-than", "2020-01-01")
    assert no_zone.returncode == 2 and "no time zone" in no_zone.stderr
    dropped = undolog(dsn, "partitions", "drop", "--older-than", "2020-01-01T00:00:00Z")
    assert dropped.returncode == 0 and "(none)" in dropped.stdout


def test_dsn_and_json_work_before_the_subcommand_too(dsn: str, conn: Conn) -> None:
    _journal(conn)
    out = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", dsn, "--json", "sessions", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["agent"] == "cli-test"
    wrong_db = psycopg.conninfo.make_conninfo(dsn, dbname="no_such_db")
    wrong = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", wrong_db, "migrate"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert wrong.returncode == 1


def test_an_app_that_cannot_be_imported_is_a_usage_error(dsn: str) -> None:
    out = undolog(dsn, "worker", "--app", "no_such_module:ul", "--once")
    assert out.returncode == 2
    assert "no_such_module" in out.stderr and "Traceback" not in out.stderr
