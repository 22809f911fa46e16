"""Bad input on the command line gets a clear message and the documented exit code (2, a
usage error), never a traceback; a permission denied names the role the command needs."""

from __future__ import annotations

import io
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import engine
from undolog.cli import main

Conn = psycopg.Connection[Any]
NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # as Python hands over such bytes in argv and environ


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def asked(conn: Conn) -> uuid.UUID:
    """A pending approval request, of this test's login."""
    session = engine.begin_session(conn, agent="cli-test")
    got = engine.intercept(conn, session, 0, "process_payout", "irreversible", {"cents": 5})
    assert got.approval_id is not None
    return got.approval_id


def test_an_args_file_that_is_not_utf8_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    latin1 = tmp_path / "args.json"
    latin1.write_bytes(b'{"note": "caf\xe9"}')
    approval = str(uuid.uuid4())
    code, _, err = run(
        capsys, "approvals", "approve", approval, "--by", "x", "--args-file", str(latin1)
    )
    assert code == 2 and f"--args-file {latin1}: not UTF-8 text" in err and "0xe9" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe{}"), "utf-8"))
    code, _, err = run(capsys, "approvals", "approve", approval, "--by", "x", "--args-file", "-")
    assert code == 2 and "--args-file -: not UTF-8 text" in err


def test_bytes_that_are_not_utf8_in_a_value_are_a_usage_error(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    approval = str(asked(conn))
    code, _, err = run(capsys, "approvals", "approve", approval, "--by", NOT_UTF8, "--dsn", dsn)
    assert code == 2 and "--by is not UTF-8 text (b'\\xff\\xfe')" in err
    code, _, err = run(
        capsys, "approvals", "reject", approval, "--by", "x", f"--reason=r{NOT_UTF8}", "--dsn", dsn
    )
    assert code == 2 and "--reason is not UTF-8 text" in err
    assert conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s", (approval,)
    ).fetchone() == ("pending",)
    code, _, err = run(capsys, "approvals", "list", "--dsn", f"host={NOT_UTF8}", "--json")
    assert code == 2 and "--dsn is not UTF-8 text" in err
    monkeypatch.setenv("UNDOLOG_DSN", f"host={NOT_UTF8}")
    code, _, err = run(capsys, "approvals", "list")
    assert code == 2 and "UNDOLOG_DSN is not UTF-8 text" in err


def test_a_missing_metrics_token_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    code, _, err = run(
        capsys, "dashboard", "--metrics-token-file", str(missing), "--metrics-dsn", "dbname=x"
    )
    assert code == 2
    assert err == f"undolog dashboard: --metrics-token-file {missing}: No such file or directory\n"
    code, _, err = run(capsys, "dashboard", "--metrics-dsn", "dbname=x")  # and no token
    assert code == 2 and "a metrics bearer token needs --metrics-dsn" in err


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_a_usage_error(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "dashboard", "--port", port)
    assert code == 2 and "--port" in err and "not a port number (0 to 65535)" in err
    from undolog.dashboard import server  # python -m undolog.dashboard: the same check

    with pytest.raises(SystemExit) as refused:
        server.main(["--port", port])
    assert refused.value.code == 2 and "not a port number" in capsys.readouterr().err


@pytest.mark.parametrize("minutes", ["nan", "inf", "-inf", "0", "-5", "1e308", "soon"])
def test_an_idle_timeout_that_is_not_a_positive_number_is_a_usage_error(
    minutes: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN would never log anyone out, 0 or less would log everyone out at once."""
    from undolog.dashboard import server  # python -m undolog.dashboard: the same check

    monkeypatch.setattr(server, "serve", lambda *args, **kwargs: 0)  # never serves here
    code, _, err = run(capsys, "dashboard", f"--idle-timeout={minutes}")
    assert code == 2 and "--idle-timeout" in err and "a positive number of minutes" in err
    with pytest.raises(SystemExit) as refused:
        server.main([f"--idle-timeout={minutes}"])
    assert refused.value.code == 2 and "a positive number of minutes" in capsys.readouterr().err


@pytest.mark.parametrize("digits", [33, 34, 36])
@pytest.mark.parametrize("command", ["sessions show", "approvals approve", "sessions resume"])
def test_an_id_of_more_than_32_hex_digits_is_a_usage_error(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str], digits: int, command: str
) -> None:
    given = ("0123456789abcdef" * 3)[:digits]
    extra = {"approvals approve": ["--by", "x"], "sessions resume": ["--by", "x", "--reason", "r"]}
    code, _, err = run(capsys, "--dsn", dsn, *command.split(), given, *extra.get(command, []))
    assert code == 2, err
    assert "Traceback" not in err and "not a" in err and "32" in err


def test_a_lone_surrogate_is_a_usage_error_not_a_crash_of_the_error_report() -> None:
    """Python keeps bytes that are not UTF-8 as U+DC80..U+DCFF (surrogateescape), but a
    value may hold any lone surrogate (JSON's escape \\ud800): the message still says it."""
    import argparse

    from undolog.cli import _not_utf8

    args = argparse.Namespace(dsn="x", by="a\ud800b")
    exc = UnicodeEncodeError("utf-8", "a\ud800b", 1, 2, "surrogates not allowed")
    refused = _not_utf8(exc, args, ["--by", "a\ud800b"])
    assert "--by is not UTF-8 text" in str(refused) and "\\ud800" in str(refused)
    escaped = UnicodeEncodeError("utf-8", NOT_UTF8, 0, 2, "surrogates not allowed")
    assert "(b'\\xff\\xfe')" in str(_not_utf8(escaped, args, []))


def test_an_agent_is_told_the_role_metrics_needs(
    agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "metrics", "--once", "--dsn", agent_dsn)
    assert code == 1
    assert "grant the login undolog_approver (or undolog_operator), which this command needs" in err


@pytest.mark.parametrize("command", ["status", "health"])
def test_an_agent_is_told_the_role_status_and_health_need(
    agent_dsn: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """They read the migration records, staff's: the hint named the three roles, the
    agent's own among them."""
    code, _, err = run(capsys, command, "--dsn", agent_dsn)
    assert code == 1
    assert "grant the login undolog_operator (or undolog_approver), which this command needs" in err


def test_an_agent_undoing_its_session_where_agents_may_not_is_told_the_engines_hint(
    agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's 42501 says what to do (an operator, or ALTER DATABASE); the hint was
    that of a missing role, the operator's."""
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        session = engine.begin_session(agent, agent="a")
        made = engine.intercept(
            agent, session, 0, "create_user", "compensable", {}, {"name": "undo"}
        )
        assert made.effect_id is not None
        engine.commit(agent, made.effect_id, {})
    code, _, err = run(
        capsys, "sessions", "undo-to", str(session), "0", "--reason", "r", "--dsn", agent_dsn
    )
    assert code == 1 and "an agent may not undo its own session" in err
    assert "undolog.agent_rollback_to = on" in err and "which this command needs" not in err


def test_an_agent_is_told_the_role_tools_retire_needs(
    agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(agent_dsn, autocommit=True) as agent:  # registers the agent's tool
        session = engine.begin_session(agent, agent="a")
        engine.intercept(agent, session, 0, "create_user", "compensable", {}, {"name": "undo"})
        login = agent.info.user
    code, _, err = run(
        capsys, "tools", "retire", "create_user", "--owner", login, "--by", "x", "--reason", "r",
        "--dsn", agent_dsn,
    )  # fmt: skip
    assert code == 1 and "grant the login undolog_operator, which this command needs" in err


def test_an_agent_rolling_back_anothers_session_is_told_either_staff_role(
    agent_dsn: str, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """rollback_session is granted to operators and approvers both: the hint names both,
    not the operator alone (an approver may stop a session too)."""
    with psycopg.connect(dsn, autocommit=True) as owner:
        session = engine.begin_session(owner, agent="victim")
    code, _, err = run(
        capsys, "sessions", "rollback", str(session), "--by", "x", "--reason", "r",
        "--dsn", agent_dsn,
    )  # fmt: skip
    assert code == 1
    assert "grant the login undolog_operator (or undolog_approver), which this command needs" in err


@pytest.mark.parametrize("command", ["verify", "export", "anchor export"])
def test_an_agent_is_told_either_staff_role_for_the_audit_reads(
    agent_dsn: str, dsn: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """verify_chain, chain_events and the anchors are granted to approvers and operators
    both (docs/operations/audit.md): the hint named the operator alone."""
    with psycopg.connect(dsn, autocommit=True) as owner:
        session = engine.begin_session(owner, agent="audited")
    argv = [*command.split(), *([str(session)] if command == "export" else [])]
    code, _, err = run(capsys, *argv, "--dsn", agent_dsn)
    assert code == 1, err
    assert "grant the login undolog_operator (or undolog_approver), which this command needs" in err


def test_an_approver_writing_an_anchor_is_told_the_operators_role(
    dsn: str, login: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`anchor export` reads (approvers may); with --write it writes one first, which is
    the operator's alone."""
    approver = login("undolog_approver")
    as_approver = psycopg.conninfo.make_conninfo(dsn, user=approver.info.user)
    code, _, err = run(capsys, "anchor", "export", "--write", "--dsn", as_approver)
    assert code == 1 and "grant the login undolog_operator, which this command needs" in err
