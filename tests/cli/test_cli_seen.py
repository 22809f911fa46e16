"""`undolog sessions resume|retry|abandon --seen UPDATED_AT`: an operator's action applies
to the session as `sessions show` printed it, or not at all (undolog.expect_session, under
the session's lock, in the action's own transaction)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
import pytest

from dashboard_helpers import operator_actions
from undolog import engine, saga
from undolog.cli import main
from undolog.walk import run_walk

Conn = psycopg.Connection[Any]


@pytest.fixture(autouse=True)
def _dsn_env(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNDOLOG_DSN", dsn)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def refuses(call: Any) -> None:
    raise RuntimeError("the refund API is down")


def halted_session(conn: Conn) -> uuid.UUID:
    """A session whose only compensation failed for good: halted, waiting for a person."""
    sid = engine.begin_session(conn, agent="seen")
    hit = engine.intercept(
        conn, sid, 0, "create_user", "compensable", {"n": 1}, {"name": "undo", "max_attempts": 1}
    )
    assert hit.effect_id is not None
    engine.commit(conn, hit.effect_id, {"user_id": 1})
    engine.fail_session(conn, sid, "gave up")
    assert run_walk(conn, sid, {"undo": refuses}, wait=0) == "halted"
    return sid


def shown_seen(capsys: pytest.CaptureFixture[str], sid: uuid.UUID) -> str:
    """The value `sessions show` prints to pass as --seen."""
    code, out, err = run(capsys, "sessions", "show", str(sid))
    assert code == 0, err
    found = re.search(r"^updated_at: (\S+)  \(--seen (\S+): act on this state only\)$", out, re.M)
    assert found, out
    assert found[1] == found[2]
    return found[2]


def halt_again(conn: Conn, sid: uuid.UUID) -> None:
    """Another operator retries the failed compensation and it fails again: halted again."""
    row = conn.execute(
        "SELECT halt_undo_id FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    assert saga.retry_compensation(conn, row[0], "another_operator", "once more") == "compensating"
    assert run_walk(conn, sid, {"undo": refuses}, wait=0) == "halted"


@pytest.mark.parametrize("action", ["resume", "retry", "abandon"])
def test_seen_from_show_acts_and_a_stale_one_is_refused(
    conn: Conn, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    sid = halted_session(conn)
    seen = shown_seen(capsys, sid)
    halt_again(conn, sid)
    by = ("--by", "bob", "--reason", "by hand")
    code, out, err = run(capsys, "sessions", action, str(sid), *by, "--seen", seen)
    assert code == 1, (out, err)
    assert "changed since it was read: it is halted" in err
    assert "\nhint: Read the session again (undolog sessions show ID" in err and "--seen" in err
    assert operator_actions(conn, sid) == [("retry", "another_operator")]
    fresh = shown_seen(capsys, sid)
    assert fresh != seen
    code, out, err = run(capsys, "--json", "sessions", action, str(sid), *by, "--seen", fresh)
    assert code == 0, err
    assert json.loads(out)["action"] == action
    assert operator_actions(conn, sid)[-1] == (action, "bob")


def test_show_json_carries_the_value_too_and_bad_values_are_usage_errors(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = halted_session(conn)
    code, out, _ = run(capsys, "sessions", "show", str(sid), "--json")
    assert code == 0
    seen = json.loads(out)["session"]["updated_at"]
    for bad in ("yesterday", seen[:19]):  # not a time; no time zone
        code, _, err = run(
            capsys, "sessions", "abandon", str(sid), "--by", "b", "--reason", "r", "--seen", bad
        )
        assert code == 2 and "--seen" in err, err
    code, out, err = run(
        capsys, "sessions", "abandon", str(sid), "--by", "b", "--reason", "r", "--seen", seen
    )
    assert (code, out.strip()) == (0, f"session {sid}: halted"), err


def test_a_move_committed_while_the_command_waits_for_the_session_is_not_acted_on(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """The window held open: another operator's retry, which halts the session again, is
    uncommitted when the command starts and commits once it waits for the session. The
    command's check waits under the session's lock and then sees the new state: refused,
    and the retry it would have made on a halt its operator never saw is not made."""
    sid = halted_session(conn)
    seen = shown_seen(capsys, sid)
    command = [sys.executable, "-m", "undolog.cli", "sessions", "retry", str(sid)]
    command += ["--by", "bob", "--seen", seen, "--dsn", f"{dsn} application_name=seen-test"]
    with conn.transaction():
        halt_again(conn, sid)
        waiting = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 20
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not watcher.execute(
                "SELECT 1 FROM pg_stat_activity "
                "WHERE application_name = 'seen-test' AND wait_event_type = 'Lock'"
            ).fetchone():
                assert waiting.poll() is None, waiting.communicate()
                assert time.monotonic() < deadline, "the command never waited for the session"
                time.sleep(0.02)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1, (out, err)
    assert "changed since it was read" in err
    assert operator_actions(conn, sid) == [("retry", "another_operator")]
