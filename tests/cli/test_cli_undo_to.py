"""`undolog sessions undo-to`: the plan, the undo, and the refusals with their exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest

from undolog import engine, saga
from undolog.cli import main

Conn = psycopg.Connection[Any]


def undolog(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        check=False,
    )


def _session(conn: Conn, calls: int) -> uuid.UUID:
    sid = engine.begin_session(conn)
    for step in range(calls):
        got = engine.intercept(
            conn, sid, step, "book", "compensable", {"n": step}, {"name": "unbook"}
        )
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"n": step})
    return sid


def _state(conn: Conn, sid: uuid.UUID) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_plan_then_undo_to(dsn: str, conn: Conn) -> None:
    sid = _session(conn, 3)
    plan = undolog(dsn, "sessions", "undo-to", str(sid), "1", "--plan", "--reason", "look")
    assert plan.returncode == 0, plan.stderr
    assert "nothing changed (--plan)" in plan.stdout and _state(conn, sid) == "active"
    done = undolog(
        dsn,
        "sessions",
        "undo-to",
        str(sid)[:13],
        "1",
        "--by",
        "ann",
        "--reason",
        "why",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["state"] == "compensating"
    assert [(r["order"], r["step_index"], r["action"]) for r in answer["plan"]] == [
        (1, 2, "undo"),
        (2, 1, "undo"),
    ]
    assert _state(conn, sid) == "compensating"
    again = undolog(dsn, "sessions", "undo-to", str(sid), "0", "--reason", "again")
    assert again.returncode == 1 and "only an active session" in again.stderr  # UL001


def test_refusals(dsn: str, conn: Conn) -> None:
    sid = _session(conn, 1)
    nothing = undolog(dsn, "sessions", "undo-to", str(sid), "5", "--reason", "r")
    assert nothing.returncode == 1 and "nothing to undo at or after step 5" in nothing.stderr
    negative = undolog(dsn, "sessions", "undo-to", str(sid), "-1", "--reason", "r")
    assert negative.returncode == 2
    no_reason = undolog(dsn, "sessions", "undo-to", str(sid), "0")
    assert no_reason.returncode == 2
    unknown = undolog(dsn, "sessions", "undo-to", str(uuid.uuid4()), "0", "--reason", "r")
    assert unknown.returncode == 3
    assert _state(conn, sid) == "active"


def test_a_call_journaled_after_the_plan_was_read_is_not_undone_unseen(
    dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent journals another call between the plan's read and rollback_to's lock on
    the session (a narrow window, opened wide here): undo-to would undo a call it never
    printed. It is refused (UL001, exit 1), changes nothing, and says to read the plan
    again, as the dashboard's Undo from here asks again (one rule:
    saga.rollback_to_as_planned)."""
    sid = _session(conn, 3)
    real = saga.rollback_to_plan

    def a_call_lands_after(c: Any, s: uuid.UUID, step: int) -> list[saga.PlannedUndo]:
        plan = real(c, s, step)
        monkeypatch.setattr(saga, "rollback_to_plan", real)  # once
        got = engine.intercept(conn, sid, 3, "book", "compensable", {"n": 3}, {"name": "unbook"})
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"n": 3})
        return plan

    monkeypatch.setattr(saga, "rollback_to_plan", a_call_lands_after)
    argv = ["sessions", "undo-to", str(sid), "1", "--by", "ann", "--reason", "r", "--dsn", dsn]
    code = main(argv)
    out = capsys.readouterr()
    assert code == 1, out.err
    assert out.out == ""  # no plan printed: none was carried out
    assert "moved on" in out.err and "nothing changed" in out.err
    assert f"hint: Look at the plan again: undolog sessions undo-to {sid} 1 --plan" in out.err
    assert _state(conn, sid) == "active"
    row = conn.execute(
        "SELECT undo_to FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row == (None,)
    # run again, it undoes what it prints: the new call too
    assert main([*argv, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [r["step_index"] for r in answer["plan"]] == [3, 2, 1]
    assert _state(conn, sid) == "compensating"


def test_a_cut_cell_of_an_undo_done_points_at_a_read_not_at_the_undo_again(
    dsn: str, conn: Conn
) -> None:
    """The undo is done: the same command with --json would be refused (the session is
    being undone), so the hint names the session's read, which prints the names whole."""
    tool = "book_" + "x" * 70
    sid = engine.begin_session(conn)
    for step in range(2):
        got = engine.intercept(
            conn, sid, step, tool, "compensable", {"n": step}, {"name": "unbook"}
        )
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"n": step})
    done = undolog(dsn, "sessions", "undo-to", str(sid), "0", "--by", "ann", "--reason", "why")
    assert done.returncode == 0, done.stderr
    assert "…" in done.stdout and tool not in done.stdout
    hint = f"hint: cells marked … are cut; undolog sessions show {sid} --json prints them whole"
    assert hint in done.stderr, done.stderr
    read = undolog(dsn, "sessions", "show", str(sid), "--json")
    assert read.returncode == 0 and tool in read.stdout, read.stderr
