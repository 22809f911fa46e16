"""The command's own summary (the ``undolog.cli`` docstring, which docs/reference/cli.md
shows first) names every command and action the parser has: an operator who reads it
finds each thing the CLI does, undo-to and approvals expire included."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import undolog.cli
from undolog import approvals, engine
from undolog.cli import build_parser, main

Conn = psycopg.Connection[Any]


def parser_commands() -> set[str]:
    """'sessions undo-to', 'recover', ...: every leaf command of the parser."""

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> set[str]:
        children = [
            (name, child)
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            for name, child in action.choices.items()
        ]
        if not children:
            return {" ".join(words)}
        found: set[str] = set()
        for name, child in children:
            found |= walk(child, (*words, name))
        return found

    return walk(build_parser(), ())


def summarised_commands(doc: str) -> set[str]:
    """The commands the docstring's summary lines name: ``undolog GROUP a|b`` and
    ``undolog GROUP a | b ARG`` name both actions."""
    found: set[str] = set()
    for line in doc.splitlines():
        match = re.match(
            r"\s+undolog ([a-z-]+)((?: ?\| ?[a-z-]+| [a-z][a-z-]*(?:\|[a-z-]+)*)*)", line
        )
        if match is None:
            continue
        group, rest = match[1], match[2]
        actions = [a for a in re.split(r"[\s|]+", rest) if a]
        found.add(group)
        found.update(f"{group} {a}" for a in actions)
    return found


def test_the_summary_names_every_command() -> None:
    assert undolog.cli.__doc__ is not None
    missing = parser_commands() - summarised_commands(undolog.cli.__doc__)
    assert not missing, f"commands the summary in undolog/cli/__init__.py leaves out: {missing}"


# --- `undolog approvals decided`: the dashboard's Past decisions, on the command line -----


def waiting(conn: Conn, cents: int) -> uuid.UUID:
    """An irreversible call of a new session, waiting for a human: its request's id."""
    session = engine.begin_session(conn, agent="decided-test")
    payout = engine.intercept(conn, session, 0, "process_payout", "irreversible", {"cents": cents})
    assert payout.approval_id is not None
    return payout.approval_id


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_decided_lists_past_decisions_newest_first(
    dsn: str, conn: Conn, login: Callable[..., Conn], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, pending = waiting(conn, 5), waiting(conn, 7), waiting(conn, 9)
    approvals.approve(conn, first, "alice", "checked")
    approver = login("undolog_approver")
    approvals.reject(approver, second, "bob", "too much")
    code, out, err = run(capsys, "approvals", "decided", "--json", "--dsn", dsn)
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["approval_id"], r["decision"]) for r in rows] == [
        (str(second), "rejected"),
        (str(first), "approved"),
    ]
    assert rows[0]["decided_by"] == "bob" and rows[0]["reason"] == "too much"
    assert rows[0]["decided_role"] == approver.info.user
    assert rows[1]["args"] == {"cents": 5} and rows[1]["tool_name"] == "process_payout"
    assert str(pending) not in out  # still waiting: `approvals list` shows it
    # the ones this login recorded; from an instant on; at most N
    code, out, _ = run(
        capsys,
        "approvals",
        "decided",
        "--mine",
        "--json",
        "--dsn",
        dsn.replace(f"user={conn.info.user}", f"user={approver.info.user}"),
    )
    assert code == 0 and [r["approval_id"] for r in json.loads(out)] == [str(second)]
    code, out, _ = run(
        capsys, "approvals", "decided", "--since", "2999-01-01Z", "--json", "--dsn", dsn
    )
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(capsys, "approvals", "decided", "--limit", "1", "--dsn", dsn)
    assert code == 0 and str(second) in out and str(first) not in out
    assert "too much" in out and "DECIDED_BY" in out


def test_decided_refuses_an_agent_and_bad_flags_with_what_to_do(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "approvals", "decided", "--dsn", agent_dsn)
    assert code == 1
    assert "undolog_approver (or undolog_operator)" in err
    code, _, err = run(capsys, "approvals", "decided", "--since", "yesterday", "--dsn", dsn)
    assert code == 2 and "ISO 8601" in err
    code, _, err = run(capsys, "approvals", "decided", "--limit", "0", "--dsn", dsn)
    assert code == 2 and "1 or more" in err
