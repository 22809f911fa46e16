"""`undolog verify`, `undolog export` and `undolog anchor` against a real database: a clean
journal verifies (exit 0); a tampered one names the row (exit 4), online and from an
export checked offline; a kept anchor catches a rewritten anchor; a verification the
server cancels is a database error (exit 1) with a hint; refusals are usage errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import chain, engine
from undolog.cli import main
from undolog.errors import EXIT_MISMATCH
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]


def undolog(
    dsn: str | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    tail = ["--dsn", dsn] if dsn is not None else []
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, *tail],
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def journal(conn: Conn) -> uuid.UUID:
    """A session with a committed call and an approval request: rows of three tables."""
    session = engine.begin_session(conn, agent="verify-test")
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
    return session


def tamper(conn: Conn, sql: str, params: Any = ()) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(sql, params)


def test_clean_then_tampered_online(dsn: str, conn: Conn) -> None:
    session = journal(conn)
    clean = undolog(dsn, "verify")
    assert clean.returncode == 0, clean.stderr
    assert "rows of 1 sessions match their chains" in clean.stdout
    tamper(
        conn,
        "UPDATE undolog.undolog_effect_log SET committed_by = 'someone else'"
        " WHERE session_id = %s AND committed_at IS NOT NULL",
        (session,),
    )
    broken = undolog(dsn, "verify")
    assert broken.returncode == EXIT_MISMATCH == 4, broken.stderr
    assert "altered: undolog_effect_log effect_id=" in broken.stdout
    assert f"session {session}" in broken.stdout
    as_json = json.loads(undolog(dsn, "verify", "--json", "--session", str(session)[:8]).stdout)
    assert as_json["ok"] is False
    (finding,) = as_json["findings"]
    assert finding["table"] == "undolog_effect_log" and finding["problem"] == "altered"
    assert finding["expected"] != finding["found"]
    # the summary counts findings, not rows (a row can have two; an anchor's are no row)
    assert broken.stdout.splitlines()[0] == (
        f"verify: {as_json['rows']} rows of 1 sessions checked: "
        "1 finding where the chains do not match"
    )
    # --since after every row: nothing to check, nothing wrong
    assert undolog(dsn, "verify", "--since", "2999-01-01Z").returncode == 0


def test_export_and_offline_verify(dsn: str, conn: Conn, tmp_path: Path) -> None:
    session = journal(conn)
    out = tmp_path / "session.jsonl"
    exported = undolog(dsn, "export", str(session), "--output", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["session_id"] == str(session) and header["head"]["seq"] == len(lines) - 1
    assert {json.loads(line)["table"] for line in lines[1:]} == {
        "undolog_session_history",
        "undolog_effect_log",  # a call's creation and commit (its own row's links)
        "undolog_approval_requests",
    }
    ok = undolog(None, "verify", "--file", str(out))
    assert ok.returncode == 0, ok.stdout + ok.stderr

    # the file itself edited: a record changed, a line dropped, two lines swapped
    row = json.loads(lines[2])
    assert row["record"]["event"] == "committed"  # the call's one link: the whole call
    row["record"]["tool_name"] = "delete_user"
    row["canonical"] = row["canonical"].replace('"create_user"', '"delete_user"')
    assert row["canonical"] != json.loads(lines[2])["canonical"]
    edited = [*lines[:2], json.dumps(row), *lines[3:]]
    for name, text, problem in [
        ("edited", edited, "altered"),
        ("dropped", lines[:2] + lines[3:], "missing"),
        ("swapped", [lines[0], lines[2], lines[1], *lines[3:]], "link"),
    ]:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(text) + "\n")
        got = undolog(None, "verify", "--file", str(path), "--json")
        assert got.returncode == EXIT_MISMATCH, (name, got.stdout, got.stderr)
        assert problem in [f["problem"] for f in json.loads(got.stdout)["findings"]], name

    # the database tampered: its export says so too
    tamper(
        conn,
        "DELETE FROM undolog.undolog_session_history WHERE session_id = %s"
        " AND to_state = 'awaiting_approval'",
        (session,),
    )
    undolog(dsn, "export", str(session), "--output", str(out))
    offline = undolog(None, "verify", "--file", str(out))
    assert offline.returncode == EXIT_MISMATCH
    assert "head: undolog_chain_heads" in offline.stdout or "missing" in offline.stdout


def test_anchor_export_and_check(dsn: str, conn: Conn, tmp_path: Path) -> None:
    journal(conn)
    assert undolog(dsn, "anchor", "export").returncode == 3  # none yet: not found
    written = undolog(dsn, "anchor", "export", "--write")
    assert written.returncode == 0, written.stderr
    kept = tmp_path / "anchor.json"
    kept.write_text(written.stdout)
    anchor = json.loads(written.stdout)
    assert anchor["anchor_id"] == 1 and len(anchor["hash"]) == 64
    assert undolog(dsn, "verify", "--anchor", str(kept)).returncode == 0
    tamper(
        conn, "UPDATE undolog.undolog_chain_anchors SET written_at = written_at - interval '1 day'"
    )
    broken = undolog(dsn, "verify", "--anchor", str(kept))
    assert broken.returncode == EXIT_MISMATCH
    assert "undolog_chain_anchors anchor_id=1" in broken.stdout


def test_refusals(dsn: str, tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\n")
    got = undolog(None, "verify", "--file", str(junk))
    assert got.returncode == 2 and "not an UndoLog chain export" in got.stderr
    both = undolog(dsn, "verify", "--file", str(junk), "--session", "abcd")
    assert both.returncode == 2
    assert undolog(None, "verify", "--file", str(tmp_path / "absent")).returncode == 2


def _header() -> bytes:
    return json.dumps({"format": chain.EXPORT_FORMAT, "session_id": str(uuid.uuid4())}).encode()


def test_a_damaged_export_is_a_usage_error_or_a_mismatch_never_a_traceback(
    tmp_path: Path,
) -> None:
    """docs/reference/cli.md: `verify` exits 2 for a file that is not an export, 4 for rows
    that do not match their chains; a file damaged in any way gets one of the two."""
    link = b'"prev": "' + b"0" * 64 + b'", "hash": "' + b"0" * 64 + b'"'
    damaged = {
        "deep-nesting": (_header() + b"\n" + b"[" * 100_000 + b"\n", 2, "nested too deeply"),
        "deep-header": (b"[" * 100_000 + b"\n", 2, "not an UndoLog chain export"),
        "not-utf8-in-header": (b"\xff" + _header() + b"\n", 2, "not UTF-8"),
        "not-utf8-past-8k": (_header() + b"\n" + b" " * 20_000 + b"\xff\n", 2, "not UTF-8"),
        "lone-surrogate": (
            _header() + b'\n{"seq": 1, ' + link + b', "canonical": "\\ud800", "record": null, '
            b'"table": "t", "key": "k"}\n',
            EXIT_MISMATCH,
            "altered",
        ),
        "lone-surrogates-shown": (
            b'{"format": "' + chain.EXPORT_FORMAT.encode() + b'", "session_id": "\\ud800"}\n'
            b'{"seq": 1, ' + link + b', "canonical": "{}", "record": {}, '
            b'"table": "\\ud800", "key": "\\udcff"}\n',
            EXIT_MISMATCH,
            "altered: \\ud800 \\udcff (session \\ud800, seq 1)",
        ),
    }
    for name, (body, exit_code, words) in damaged.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(body)
        got = undolog(None, "verify", "--file", str(path))
        assert got.returncode == exit_code, (name, got.stderr[-600:])
        assert "Traceback" not in got.stderr, name
        assert words in got.stdout + got.stderr, (name, got.stdout, got.stderr)


def test_a_verification_the_server_cancels_is_a_database_error_with_a_hint(
    dsn: str, conn: Conn
) -> None:
    """Not the verdict "rows do not match" (EXIT_MISMATCH): exit 1, and a hint to verify
    less at once or give it more time. The history locked, the statement times out."""
    journal(conn)
    with conn.transaction():
        conn.execute("LOCK TABLE undolog.undolog_session_history IN ACCESS EXCLUSIVE MODE")
        got = undolog(dsn, "verify", "--json", env={"PGOPTIONS": "-c statement_timeout=200"})
    assert got.returncode == 1, got.stdout + got.stderr
    error = json.loads(got.stderr)
    assert error["sqlstate"] == "57014"
    assert "--session" in error["hint"] and "--since" in error["hint"]
    assert "statement_timeout" in error["hint"]
    with conn.transaction():
        conn.execute("LOCK TABLE undolog.undolog_session_history IN ACCESS EXCLUSIVE MODE")
        plain = undolog(dsn, "verify", env={"PGOPTIONS": "-c statement_timeout=200"})
    assert plain.returncode == 1 and "hint: verify less at once" in plain.stderr


def test_export_to_a_folder_that_does_not_exist_is_a_usage_error(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    session = journal(conn)
    target = tmp_path / "absent" / "session.jsonl"
    got = undolog(dsn, "export", str(session), "--output", str(target))
    assert got.returncode == 2, got.stderr
    assert f"cannot write {target}" in got.stderr
    assert "Traceback" not in got.stderr


def test_an_export_reads_its_head_and_rows_in_one_snapshot(dsn: str, conn: Conn) -> None:
    """A call journaled between the export's read of the session's head and its read of
    the rows must not land in the file after its head: the file would not verify."""
    session = journal(conn)
    other = psycopg.connect(dsn, autocommit=True)

    class JournalsAfterTheHead(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            done = super().execute(query, params, **kwargs)
            if query is QUERIES["chain_head"]:  # the agent goes on meanwhile
                # a second request while the first waits: its call and its request linked
                asked = engine.intercept(other, session, 2, "process_payout", "irreversible", {})
                assert asked.approval_id is not None
            return done

    with other, psycopg.connect(dsn, autocommit=True) as reader:
        reader.cursor_factory = JournalsAfterTheHead
        lines = list(chain.export_session(reader, session))
        report = chain.verify_export(lines)
        assert report.ok, report
        # the calls journaled meanwhile are in the journal, not in this export
        assert len(list(chain.export_session(other, session))) > len(lines)


def test_an_export_inside_the_callers_transaction_reads_in_it(dsn: str, conn: Conn) -> None:
    """Called in a transaction (a savepoint could not set its isolation), the export reads
    in the caller's snapshot; on a connection of the other kind, in one of its own."""
    session = journal(conn)
    with psycopg.connect(dsn, autocommit=True) as auto, auto.transaction():
        inside = list(chain.export_session(auto, session))
    with psycopg.connect(dsn) as plain:  # not autocommit: idle, then its own transaction
        own = list(chain.export_session(plain, session))
        assert plain.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert inside == own and chain.verify_export(own).ok


def test_a_seq_that_is_not_a_number_is_reported_in_json_that_parses(tmp_path: Path) -> None:
    """A header's head.seq, or a row's seq, may hold any JSON in a damaged export: a list
    nested 600 deep (which json reads), NaN (which it reads too), a string, true. The
    report's seq is then none (null), never that value: --json printed no JSON for NaN
    and raised RecursionError for the list. What was there is shown, shortened."""
    deep = "[" * 600 + "1" + "]" * 600
    link = '"prev": "' + "0" * 64 + '", "hash": "' + "0" * 64 + '"'
    for name, value in {"deep": deep, "nan": "NaN", "text": '"7"', "bool": "true"}.items():
        for where in ("head", "row"):
            header = f'{{"format": "{chain.EXPORT_FORMAT}", "session_id": "{uuid.uuid4()}"'
            if where == "head":
                body = f'{header}, "head": {{"seq": {value}, "hash": "x"}}}}\n'
            else:
                body = (
                    f"{header}}}\n"
                    f'{{"seq": {value}, {link}, "canonical": "{{}}", "record": {{}}, '
                    '"table": "t", "key": "k"}\n'
                )
            path = tmp_path / f"{name}-{where}.jsonl"
            path.write_text(body)
            got = undolog(None, "verify", "--file", str(path), "--json")
            assert got.returncode == EXIT_MISMATCH, (name, where, got.stderr[-600:])
            assert "Traceback" not in got.stderr, (name, where)
            report = json.loads(got.stdout, parse_constant=not_json)
            (finding,) = report["findings"]
            assert finding["seq"] is None, (name, where)
            assert len(finding["found"]) < 200, (name, where, finding["found"])
    # and as text
    got = undolog(None, "verify", "--file", str(tmp_path / "deep-head.jsonl"))
    assert got.returncode == EXIT_MISMATCH and "Traceback" not in got.stderr
    assert "head: undolog_chain_heads" in got.stdout and "seq [[" in got.stdout


def not_json(constant: str) -> Any:
    raise AssertionError(f"{constant} is not JSON")


def test_a_byte_order_mark_before_the_header_is_not_part_of_it(tmp_path: Path) -> None:
    """An export saved again by an editor on Windows begins with a UTF-8 byte order mark:
    the header is still there, and the export verifies (a file, or lines handed to
    verify_export)."""
    header = json.dumps({"format": chain.EXPORT_FORMAT, "session_id": str(uuid.uuid4())})
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + header.encode() + b"\r\n")
    got = undolog(None, "verify", "--file", str(path))
    assert got.returncode == 0, (got.stdout, got.stderr[-600:])
    assert "no header line" not in got.stdout + got.stderr
    assert chain.verify_export(["\ufeff" + header + "\n"]).ok


PROGRESS = re.compile(
    r"undolog verify: ([\d,]+) of ([\d,]+) rows \((\d+)%\) in ([\d,]+) of ([\d,]+) sessions"
)


def test_verify_of_every_session_shows_its_progress_on_stderr(
    dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations/audit.md: a line on standard error after each batch of sessions;
    standard output is the report's alone. With --json, no progress (standard error is
    an error's JSON object alone). One session is one call, without progress."""
    sessions = [journal(conn) for _ in range(3)]
    heads = conn.execute("SELECT seq FROM undolog.chain_heads ORDER BY session_id").fetchall()
    rows = sum(seq for (seq,) in heads)

    monkeypatch.setattr(chain, "BATCH_ROWS", 1)  # a batch per session
    assert main(["verify", "--json", "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": True, "sessions": 3, "rows": rows, "findings": []}
    assert err == ""
    assert main(["verify", "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert out == f"verify: {rows} rows of 3 sessions match their chains\n"
    lines = err.splitlines()
    assert [PROGRESS.fullmatch(line) is not None for line in lines] == [True] * 3, err
    done = 0
    for n, (line, (seq,)) in enumerate(zip(lines, heads, strict=True), start=1):
        done += seq
        assert (
            line
            == f"undolog verify: {done} of {rows} rows ({done * 100 // rows}%) in {n} of 3 sessions"
        )

    assert main(["verify", "--session", str(sessions[0]), "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("verify: ")

    # the command as a user runs it: one batch of the default size, 100%, on stderr
    got = undolog(dsn, "verify")
    assert got.returncode == 0, got.stderr
    assert got.stderr == f"undolog verify: {rows} of {rows} rows (100%) in 3 of 3 sessions\n"
    assert got.stdout == f"verify: {rows} rows of 3 sessions match their chains\n"


def test_a_json_error_after_a_batch_is_stderr_alone(
    dsn: str, conn: Conn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reference/cli.md: with --json an error is one JSON object on standard error.
    A verification that fails after a batch (here: the kept anchor is no anchor, checked
    once every session was verified) leaves stderr that one object, as `approvals
    expire --json` does (no progress lines with --json)."""
    journal(conn)
    kept = tmp_path / "anchor.json"
    kept.write_text(json.dumps({"anchor_id": 1}), encoding="utf-8")
    assert main(["verify", "--json", "--anchor", str(kept), "--dsn", dsn]) != 0
    _, err = capsys.readouterr()
    assert "not an UndoLog anchor" in json.loads(err)["error"], err


@pytest.mark.parametrize(
    ("shown", "why"),
    [
        (True, "a boolean for the integer 1 (Python's True == 1)"),
        (1.0, "a float for the integer 1 (1.0 == 1)"),
        ({"user_id": 1}, "the value nested one level more"),
    ],
)
def test_an_exports_record_for_reading_must_be_its_canonical_text_exactly(
    conn: Conn, shown: Any, why: str
) -> None:
    """The record a person reads is the hashed text parsed, exactly: a file whose record
    shows another value than its canonical text is altered, however Python compares the
    two (True == 1 == 1.0). Before, `verify --file` passed a record showing `true`."""
    session = journal(conn)
    lines = list(chain.export_session(conn, session))
    assert chain.verify_export(lines).ok
    row = json.loads(lines[2])
    assert row["record"]["event"] == "committed" and row["record"]["result"] == {"user_id": 1}
    row["record"]["result"]["user_id"] = shown
    report = chain.verify_export([*lines[:2], json.dumps(row), *lines[3:]])
    assert [(f.problem, f.seq) for f in report.findings] == [("altered", row["seq"])], why


def test_an_exports_record_with_a_key_twice_is_altered(conn: Conn) -> None:
    """A record line that names a key twice reads one way in one viewer and another in
    the next (the first or the last): it is not its canonical text."""
    session = journal(conn)
    lines = list(chain.export_session(conn, session))
    row = lines[2]
    first = '"record": {"table": "effect_log"'
    assert first in row
    twice = row.replace(first, '"record": {"tool_name": "drop_db", "table": "effect_log"')
    report = chain.verify_export([*lines[:2], twice, *lines[3:]])
    assert [f.problem for f in report.findings] == ["altered"]


def test_an_exports_header_is_read_as_its_records_are(conn: Conn) -> None:
    """The header is a line a person reads too: a head whose seq is true or 1.0 for 1
    (Python's True == 1 == 1.0) is not the chain's head, and a header naming its session
    twice (a viewer shows the first, json.loads keeps the last) is altered. Both verified
    clean before."""
    session = journal(conn)
    lines = list(chain.export_session(conn, session))
    header = json.loads(lines[0])
    assert chain.verify_export(lines).ok
    for shown in (True, 1.0 * header["head"]["seq"]):
        changed = {**header, "head": {**header["head"], "seq": shown}}
        report = chain.verify_export([json.dumps(changed), *lines[1:]])
        assert [f.problem for f in report.findings] == ["head"], shown
    other = str(uuid.uuid4())
    twice = re.sub(
        r'"session_id": ?', f'"session_id": "{other}", "session_id": ', lines[0], count=1
    )
    assert twice != lines[0]
    report = chain.verify_export([twice, *lines[1:]])
    assert [(f.table, f.problem) for f in report.findings] == [("export header", "altered")]
