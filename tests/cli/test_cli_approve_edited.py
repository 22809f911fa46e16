"""``undolog approvals approve ID --args JSON | --args-file F``: edit, then approve."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

from undolog import engine

Conn = psycopg.Connection[Any]


def undolog(dsn: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
    )


def _asked(conn: Conn, cents: int = 5000) -> tuple[uuid.UUID, uuid.UUID]:
    session = engine.begin_session(conn, agent="cli-test")
    got = engine.intercept(conn, session, 0, "process_payout", "irreversible", {"cents": cents})
    assert got.approval_id is not None
    return session, got.approval_id


def _approved_args(conn: Conn, approval: uuid.UUID) -> Any:
    row = conn.execute(
        "SELECT approved_args FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (approval,),
    ).fetchone()
    assert row is not None
    return row[0]


def test_approve_with_args_records_the_edit_and_the_call_runs_with_it(dsn: str, conn: Conn) -> None:
    session, approval = _asked(conn)
    out = undolog(
        dsn, "approvals", "approve", str(approval), "--by", "alice",
        "--args", '{"cents": 500}', "--reason", "a tenth is enough",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"approval {approval}: approved, with edited args"
    assert _approved_args(conn, approval) == {"cents": 500}
    again = engine.intercept(conn, session, 0, "process_payout", "irreversible", {"cents": 5000})
    assert again.action == "execute" and again.approval_id == approval
    assert again.effect_id is not None
    edit = engine.approval_edit(conn, session, again.effect_id)
    assert edit is not None and edit.approved_args == {"cents": 500}
    assert edit.reason == "a tenth is enough"
    twice = undolog(dsn, "approvals", "approve", str(approval), "--by", "bob", "--args", "{}")
    assert twice.returncode == 1 and "can no longer be edited" in twice.stderr


def test_approve_with_an_args_file_or_stdin_and_json_output(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    _, first = _asked(conn)
    path = tmp_path / "args.json"
    path.write_text('{"cents": 1}', encoding="utf-8")
    out = undolog(dsn, "approvals", "approve", str(first), "--by", "a", "--args-file", str(path))
    assert out.returncode == 0, out.stderr
    assert _approved_args(conn, first) == {"cents": 1}
    _, second = _asked(conn)
    out = undolog(
        dsn, "approvals", "approve", str(second), "--by", "a", "--args-file", "-", "--json",
        stdin='{"cents": 2}',
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "approval_id": str(second),
        "state": "approved",
        "approved_args": {"cents": 2},
    }


def test_bad_edited_args_exit_with_their_codes_and_decide_nothing(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    _, approval = _asked(conn)
    bad = [
        (["--args", "{not json"], 2, "--args is not JSON"),
        (["--args-file", str(tmp_path / "missing.json")], 2, "--args-file"),
        (["--args", "[1]"], 2, "must be a JSON object"),
        (["--args", '{"cents": 1, "to": "x"}'], 2, "same arguments"),
        (["--args", "{}", "--args-file", "x"], 2, "not allowed with"),
    ]
    for extra, code, says in bad:
        out = undolog(dsn, "approvals", "approve", str(approval), "--by", "a", *extra)
        assert (out.returncode, says in out.stderr) == (code, True), (extra, out.stderr)
    row = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s", (approval,)
    ).fetchone()
    assert row == ("pending",)
    # a refusal carries no args
    out = undolog(dsn, "approvals", "reject", str(approval), "--by", "a", "--args", "{}")
    assert out.returncode == 2


def test_edited_args_that_would_be_approved_otherwise_than_typed_decide_nothing(
    dsn: str, conn: Conn
) -> None:
    """The command approves at once, with no page to read first: what a person typed
    must be what is approved. A key typed twice kept the last silently ("cents": 100,
    then "cents": 1000000 approved a million), and a number a double does not hold
    (12345678901234567.5) was approved rounded (12345678901234568). Both are refused
    (exit 2), and NaN and Infinity, which are not JSON, too; nothing is decided."""
    _, approval = _asked(conn)
    for typed, says in [
        ('{"cents": 100, "cents": 1000000}', 'names "cents" twice'),
        ('{"cents": 12345678901234567.5}', "12345678901234567.5"),
        ('{"cents": 1e400}', "1e400"),
        ('{"cents": NaN}', "NaN"),
    ]:
        out = undolog(dsn, "approvals", "approve", str(approval), "--by", "a", "--args", typed)
        assert (out.returncode, says in out.stderr) == (2, True), (typed, out.stderr)
    row = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s", (approval,)
    ).fetchone()
    assert row == ("pending",)
    # a number written another way that is the same value is the number typed
    same = '{"cents": 1.50e2}'
    out = undolog(dsn, "approvals", "approve", str(approval), "--by", "a", "--args", same)
    assert out.returncode == 0, out.stderr
    assert _approved_args(conn, approval) == {"cents": 150}
