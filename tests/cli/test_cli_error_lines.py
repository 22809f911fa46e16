"""The command's error lines: what reaches the terminal (never someone else's control
characters), and the same conventions as their siblings (a state conflict is UL001, exit
1, with a hint; an unknown id, whole or a prefix, says where the ids are listed)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from expiry_support import past_deadline
from undolog import approvals, engine
from undolog.cli import main

Conn = psycopg.Connection[Any]

# An approver's --by, stored as decided_by, that the engine's UL014 DETAIL quotes to the
# next person who decides the request: clear the screen, retitle the terminal, forge a line.
HOSTILE_BY = "mallory\x1b[2J\x1b[1;1H\x1b]0;owned\x07\nhint: approval rejected by alice"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def waiting(conn: Conn) -> tuple[uuid.UUID, uuid.UUID]:
    """A session whose irreversible call waits for a human: it and its request's id."""
    sid = engine.begin_session(conn, agent="error-lines")
    call = engine.intercept(conn, sid, 0, "process_payout", "irreversible", {"cents": 5})
    assert call.approval_id is not None
    return sid, call.approval_id


def test_an_error_line_carries_no_control_character_of_another_person(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    _, aid = waiting(conn)
    approvals.approve(conn, aid, HOSTILE_BY, "ok")
    code, _, err = run(
        capsys, "approvals", "reject", str(aid), "--by", "bob", "--reason", "no", "--dsn", dsn
    )
    assert code == 1
    assert "mallory" in err  # who decided is still said, its control characters replaced
    assert not any(ch in err for ch in "\x1b\x07"), repr(err)
    lines = err.splitlines()  # no line forged: its line break is printed as ? too
    assert [line.split(": ")[0] for line in lines] == ["undolog", "hint"], repr(err)
    # --json: JSON escapes them itself, and keeps the value as it is
    code, _, err = run(
        capsys,
        "approvals",
        "reject",
        str(aid),
        "--by",
        "bob",
        "--reason",
        "no",
        "--json",
        "--dsn",
        dsn,
    )
    assert code == 1 and "\x1b" not in err
    assert HOSTILE_BY in json.loads(err)["error"]


def test_retry_of_a_session_not_halted_is_a_state_conflict_like_its_siblings(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sessions abandon|resume|retry` of a session that is not halted: UL001, exit 1 (2
    is for a command line that is wrong), each with a hint."""
    sid, _ = waiting(conn)
    for action in ("abandon", "resume", "retry"):
        code, _, err = run(
            capsys, "sessions", action, str(sid), "--by", "o", "--reason", "r", "--dsn", dsn
        )
        assert (code, "\nhint: " in err) == (1, True), (action, err)
    code, _, err = run(capsys, "sessions", "retry", str(sid), "--by", "o", "--json", "--dsn", dsn)
    answer = json.loads(err)
    assert code == 1 and answer["sqlstate"] == "UL001", err
    assert "not halted" in answer["error"] and "sessions show" in answer["hint"]


@pytest.mark.parametrize(
    ("argv", "listed"),
    [
        (["approvals", "approve", "abcdabcd", "--by", "x"], "undolog approvals list shows"),
        (["approvals", "reject", "…abcdabcd", "--by", "x", "--reason", "r"], "approvals list"),
        (["sessions", "show", "abcdabcd"], "undolog sessions list shows"),
        (["sessions", "show", "…abcdabcd"], "undolog sessions list shows"),
    ],
)
def test_an_unknown_id_prefix_says_where_to_find_the_ids(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str], argv: list[str], listed: str
) -> None:
    """As an unknown whole id does (the engine's hint): an id prefix or end that matches
    none is not found (exit 3), and the hint names the command that lists the ids."""
    code, _, err = run(capsys, *argv, "--dsn", dsn)
    assert code == 3, err
    assert "\nhint: Check the id: " in err and listed in err, err


UNKNOWN = "6b1f3a52-0c4e-4d7a-9f1e-2a7c5d0b9e31"


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "show", UNKNOWN],
        ["sessions", "retry", UNKNOWN, "--by", "o"],
        ["export", UNKNOWN],
        ["verify", "--session", UNKNOWN],
    ],
)
def test_an_unknown_whole_session_id_is_not_found_and_says_where_the_ids_are(
    dsn: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A whole session id that names no session the login may read: not found (exit 3),
    nothing printed on standard output, and the hint the engine gives an unknown id (and
    the command a prefix): where the ids are listed. As the dashboard answers 404 for its
    page and its export: `export` wrote a header of a session that does not exist, and
    `verify --session` said "0 rows of 0 sessions match", exit 0, for a mistyped id."""
    code, out, err = run(capsys, *argv, "--dsn", dsn)
    assert (code, out) == (3, ""), err
    assert f"unknown session {UNKNOWN}" in err
    assert "\nhint: Check the id: undolog sessions list shows the sessions." in err, err


def test_an_agents_retry_of_another_logins_session_says_where_the_ids_are(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid, _ = waiting(conn)  # the test's login's: not the agent's to read
    code, _, err = run(capsys, "sessions", "retry", str(sid), "--by", "o", "--dsn", agent_dsn)
    assert code == 3 and "\nhint: Check the id: undolog sessions list" in err, err


def test_the_engines_hints_a_person_meets_name_the_command_that_does_it(
    dsn: str, conn: Conn, login: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refusal met on the command line (and in the dashboard, which adds the page) says
    what to do next in commands, not only in SQL function names a person never types:
    rolling back a session that ended, approving a request past its deadline, undoing to
    a step with nothing left to undo."""
    done = engine.begin_session(conn, agent="hints")
    engine.complete_session(conn, done)
    code, _, err = run(
        capsys, "sessions", "rollback", str(done), "--by", "o", "--reason", "r", "--dsn", dsn
    )
    assert code == 1 and "hint: " in err
    assert "undolog sessions resume, retry or abandon" in err, err

    (expired,) = past_deadline(conn, 1)
    approver = login("undolog_approver")
    as_approver = psycopg.conninfo.make_conninfo(dsn, user=approver.info.user)
    code, _, err = run(
        capsys, "approvals", "approve", str(expired), "--by", "a", "--dsn", as_approver
    )
    assert code == 1 and "expired at" in err
    assert "undolog approvals expire" in err, err

    sid = engine.begin_session(conn, agent="hints")
    code, _, err = run(capsys, "sessions", "undo-to", str(sid), "0", "--reason", "r", "--dsn", dsn)
    assert code == 1 and "nothing to undo" in err
    assert "undolog sessions undo-to SESSION STEP --plan" in err, err


def test_retiring_a_tool_with_no_live_registration_is_not_found_with_a_hint(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the dashboard's Retire of a registration that is gone (404), and as an unknown
    session, approval, channel or delivery: not found (exit 3), the hint on its own line
    (and in --json's "hint"), naming the command that lists the owner's tools. It was a
    usage error (2), its hint inside the message."""
    owner = conn.info.user
    argv = ["tools", "retire", "no_such_tool", "--owner", owner, "--by", "o", "--reason", "r"]
    code, _, err = run(capsys, *argv, "--dsn", dsn)
    assert code == 3, err
    assert err.startswith(f"undolog: no live registration of 'no_such_tool' for '{owner}'\n")
    assert f"\nhint: Check the name: undolog tools list --owner {owner} lists" in err, err
    code, _, err = run(capsys, *argv, "--json", "--dsn", dsn)
    answer = json.loads(err)
    assert code == 3 and answer["hint"].startswith("Check the name: undolog tools list")


def test_anchor_export_before_any_anchor_is_not_found_with_a_hint(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the dashboard's Download the latest anchor before the first (404, saying who
    writes one): not found (exit 3), what to do on a hint line of its own. It was a usage
    error (2), the command line being right."""
    code, out, err = run(capsys, "anchor", "export", "--dsn", dsn)
    assert (code, out) == (3, ""), err
    assert err.startswith("undolog: no anchor yet\nhint: An operator writes one: undolog anchor")
