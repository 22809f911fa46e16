"""The command's own summary (the ``undolog.cli`` docstring, which docs/reference/cli.md
shows first) names every command and action the parser has: an operator who reads it
finds each thing the CLI does, undo-to and approvals expire included."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import undolog.cli
from undolog import approvals, engine, partitions
from undolog.cli import build_parser, main
from undolog.dashboard import labels

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


def test_the_dashboard_names_its_page_for_each_command_an_engine_hint_names() -> None:
    """The engine's hints name CLI commands; the dashboard adds where each is in the
    browser. Every command of that table is one the parser has, every page one of its
    navigation's, and every command a hint of the engine names has its page."""
    commands = {f"undolog {c}" for c in parser_commands()}
    for command in labels.PAGE_OF_COMMAND:
        assert any(c == command or c.startswith(f"{command} ") for c in commands), command
    root = Path(undolog.cli.__file__).resolve().parents[3]
    nav = (root / "python/undolog/dashboard/templates/base.html").read_text()
    for page in labels.PAGE_OF_COMMAND.values():
        assert page in nav or "the session's page" in page, page
    sql = "".join(p.read_text() for p in sorted((root / "sql/functions").glob("*.sql")))
    hinted = set(
        re.findall(
            r"undolog (?:sessions|approvals|tools|notifications|partitions)"
            r" [a-z-]+",
            sql,
        )
    )
    unplaced = {h for h in hinted if not labels.pages_of_commands(h)}
    assert not unplaced, f"engine hints name commands the dashboard has no page for: {unplaced}"
    # in the hint's order, a list of a session's actions its one page, once
    assert (
        labels.pages_of_commands(
            "Check the id: undolog approvals list shows the pending requests, undolog sessions "
            "show ID every request of a session; undolog sessions resume, retry or abandon."
        )
        == "In the dashboard: Approvals; the session's page."
    )
    assert labels.pages_of_commands("undolog sessions list, or undolog approvals decided") == (
        "In the dashboard: Sessions; Decisions."
    )
    assert labels.pages_of_commands("undolog approvals list, or the dashboard's inbox") == ""
    assert labels.pages_of_commands("Pass a lease from 1 second to 1 day.") == ""


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


# --- `undolog sessions list`: the dashboard's Sessions page filters, on the command line --


def listed(capsys: pytest.CaptureFixture[str], dsn: str, *flags: str) -> list[str]:
    code, out, err = run(capsys, "sessions", "list", "--json", "--dsn", dsn, *flags)
    assert code == 0, err
    return [r["session_id"] for r in json.loads(out)]


def test_sessions_list_filters_as_the_sessions_page_does(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """--agent, --since, --until, --id-prefix and --tool: the Sessions page's filters,
    with the same query (undolog.session_filter), newest first, with the other flags."""
    first = engine.begin_session(conn, agent="filter-a")
    engine.intercept(conn, first, 0, "book_room", "irreversible", {"n": 1})
    second = engine.begin_session(conn, agent="filter-b")
    engine.intercept(conn, second, 0, "send_mail", "irreversible", {"n": 2})
    third = engine.begin_session(conn, agent="filter-a")
    created = dict(
        conn.execute(
            "SELECT session_id, created_at FROM undolog.sessions_list WHERE session_id = ANY(%s)",
            ([first, second, third],),
        ).fetchall()
    )
    assert created[first] < created[second] < created[third]
    everyone = listed(capsys, dsn)
    assert everyone[:3] == [str(third), str(second), str(first)]
    assert listed(capsys, dsn, "--agent", "filter-a") == [str(third), str(first)]
    assert listed(capsys, dsn, "--tool", "send_mail") == [str(second)]
    assert listed(capsys, dsn, "--tool", "book_room", "--agent", "filter-b") == []
    since, until = created[second].isoformat(), created[third].isoformat()
    assert listed(capsys, dsn, "--since", since) == [str(third), str(second)]
    assert listed(capsys, dsn, "--since", since, "--until", until) == [str(second)]
    assert listed(capsys, dsn, "--until", since) == [str(first)]
    prefix = str(second)[:8]
    assert str(second) in listed(capsys, dsn, "--id-prefix", prefix)
    assert listed(capsys, dsn, "--id-prefix", str(second)) == [str(second)]
    assert listed(capsys, dsn, "--id-prefix", str(second), "--state", "failed") == []
    assert listed(capsys, dsn, "--agent", "filter-a", "--limit", "1") == [str(third)]
    # the table, not only --json
    code, out, _ = run(capsys, "sessions", "list", "--agent", "filter-b", "--dsn", dsn)
    assert code == 0 and str(second) in out and str(first) not in out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--id-prefix", "abc"), "not a session id prefix"),
        (("--id-prefix", "xyz12345"), "not a session id prefix"),
        (("--since", "yesterday"), "ISO 8601"),
        (("--until", "2025-01-01T00:00:00"), "no time zone"),
    ],
)
def test_sessions_list_refuses_a_bad_filter(
    dsn: str, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str
) -> None:
    code, _, err = run(capsys, "sessions", "list", *flags, "--dsn", dsn)
    assert code == 2 and said in err


# --- `undolog partitions list|plan`: the Maintenance page's partitions and its plan --------

OLD_MONTHS = ["undolog_effect_history_2024_01", "undolog_effect_log_2024_01"]


def test_partitions_list_names_the_months_as_the_maintenance_page_does(
    dsn: str, conn: Conn, login: Callable[..., Conn], capsys: pytest.CaptureFixture[str]
) -> None:
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")
    approver = login("undolog_approver")  # staff read it, as the page
    approver_dsn = psycopg.conninfo.make_conninfo(dsn, user=approver.info.user)
    code, out, err = run(capsys, "partitions", "list", "--json", "--dsn", approver_dsn)
    assert code == 0, err
    rows = json.loads(out)
    by_name = {r["name"]: r for r in rows}
    assert set(OLD_MONTHS) <= set(by_name)
    assert by_name["undolog_effect_log_2024_01"]["lower_bound"].startswith("2024-01-01")
    assert by_name["undolog_effect_log_2024_01"]["parent"] == "undolog_effect_log"
    assert [r["is_default"] for r in rows][-2:] == [True, True]  # the DEFAULTs last
    months = [r["lower_bound"] for r in rows if not r["is_default"]]
    assert months == sorted(months, reverse=True)  # newest first
    code, out, _ = run(capsys, "partitions", "list", "--dsn", dsn)
    assert code == 0 and "undolog_effect_log_2024_01" in out and "EST_ROWS" in out


def test_partitions_plan_says_what_maintain_would_do_and_does_nothing(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")
    code, out, err = run(capsys, "partitions", "plan", "--json", "--dsn", dsn)
    assert code == 0, err
    plan = json.loads(out)
    assert sorted(plan["to_drop"]) == OLD_MONTHS
    assert plan["retention"] == 12 and plan["months_ahead"] == 3 and plan["setting"] is None
    code, out, _ = run(
        capsys, "partitions", "plan", "--retention-months", "1200", "--json", "--dsn", dsn
    )
    longer = json.loads(out)
    assert code == 0 and longer["to_drop"] == [] and longer["retention"] == 1200
    # more months ahead than exist: the plan names them; nothing is created
    code, out, _ = run(
        capsys, "partitions", "plan", "--months-ahead", "120", "--json", "--dsn", dsn
    )
    ahead = json.loads(out)["to_create"]
    assert code == 0 and len(ahead) >= 2 * 100
    attached = conn.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'undolog.undolog_effect_log'::regclass"
    ).fetchone()
    assert attached is not None and attached[0] < 100
    code, out, _ = run(capsys, "partitions", "plan", "--dsn", dsn)
    assert code == 0
    assert "retention: keep 12 months (the default: undolog.retention_months is not set)" in out
    assert "to drop (a month an unfinished session holds is kept): " + ", ".join(OLD_MONTHS) in out
    # what maintain then does is what the plan said
    code, out, _ = run(capsys, "partitions", "maintain", "--json", "--dsn", dsn)
    dropped = sorted(r["partition"] for r in json.loads(out) if r["action"] == "dropped")
    assert code == 0 and dropped == OLD_MONTHS


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--months-ahead", "121"), "must be from 0 to 120, not 121"),
        (("--months-ahead", "-1"), "not a whole number in digits 0-9: '-1'"),
        (("--retention-months", "0"), "must be from 1 to 1200, not 0"),
        (("--retention-months", "two"), "not a whole number"),
        # what int() takes and a number of months is not: one rule, digits 0-9 alone
        (("--months-ahead", "\u0663"), "not a whole number in digits 0-9"),  # Arabic-Indic 3
        (("--months-ahead", "1_2"), "not a whole number in digits 0-9: '1_2'"),
        (("--months-ahead", "+3"), "not a whole number in digits 0-9: '+3'"),
        (("--months-ahead", "-0"), "not a whole number in digits 0-9: '-0'"),
        (("--retention-months", "1_2"), "not a whole number in digits 0-9: '1_2'"),
        (("--retention-months", "\uff11\uff12"), "not a whole number"),  # fullwidth 12
        (("--retention-months", "0000000012"), "not a whole number"),  # 10 digits
        (("--retention-months", ""), "not a whole number"),
    ],
)
def test_partitions_plan_refuses_what_maintain_refuses(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str
) -> None:
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")
    before = conn.execute("SELECT count(*) FROM pg_inherits").fetchone()
    code, _, err = run(capsys, "partitions", "plan", *flags, "--dsn", dsn)
    assert code == 2 and said in err
    # maintain (and ensure, for --months-ahead) refuse the same values, before any change
    for action in ("maintain", "ensure") if flags[0] == "--months-ahead" else ("maintain",):
        code, _, err = run(capsys, "partitions", action, *flags, "--dsn", dsn)
        assert code == 2 and said in err, (action, err)
    assert conn.execute("SELECT count(*) FROM pg_inherits").fetchone() == before


def test_leading_zeros_are_read_as_the_engine_reads_them(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """'00012' months: the engine's reading of the setting undolog.retention_months
    (undolog.integer_setting_value) is 12, so the plan's is; a flag of '00012' is 12."""
    dbname = conn.info.dbname
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET undolog.retention_months = '00012'")
    with psycopg.connect(dsn, autocommit=True) as fresh:
        got = fresh.execute("SELECT undolog.retention_months()").fetchone()
    assert got == (12,)  # the engine's own reading
    code, out, err = run(capsys, "partitions", "plan", "--json", "--dsn", dsn)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["setting"] == "00012" and plan["retention"] == 12
    code, out, _ = run(capsys, "partitions", "plan", "--dsn", dsn)
    assert "retention: keep 12 months (undolog.retention_months = 00012)" in out
    code, out, _ = run(
        capsys, "partitions", "plan", "--retention-months", "00012", "--json", "--dsn", dsn
    )
    assert code == 0 and json.loads(out)["retention"] == 12
    assert partitions.retention_of(" 12 ") == 12 and partitions.retention_of("  ") == 12
    assert partitions.retention_of("1_2") is None and partitions.retention_of("+12") is None
