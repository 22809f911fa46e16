"""What `undolog approvals` shows a person deciding, and `partitions drop --plan`: the login
that asked beside the name the agent gave itself, the arguments an edit approved, what an
approval by id prefix approved, tool and agent names that are not what they look like,
and the months a drop would take before it takes them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from undolog import approvals, engine
from undolog.cli import main
from undolog.cli._output import printable

Conn = psycopg.Connection[Any]
# "pay" written with Cyrillic er and a: it renders as "pay"
LOOKALIKE = "\u0440\u0430y"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ask(
    agent_dsn: str, tool: str, args: dict[str, Any], agent: str = "a", purpose: str = ""
) -> uuid.UUID:
    """An irreversible call of a new session of the agent's login: its request's id."""
    metadata = {"purpose": purpose} if purpose else {}
    with psycopg.connect(agent_dsn, autocommit=True) as agent_conn:
        session = engine.begin_session(agent_conn, agent=agent, metadata=metadata)
        hit = engine.intercept(agent_conn, session, 0, tool, "irreversible", args)
    assert hit.approval_id is not None
    return hit.approval_id


def line_of(out: str, approval: uuid.UUID) -> str:
    return next(line for line in out.splitlines() if str(approval) in line)


def test_approvals_list_names_the_login_that_asked(
    dsn: str, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent calling itself "payroll-team (trusted)" is told from that team by its
    login, which the table and --json show beside the agent's claim."""
    approval = ask(agent_dsn, "pay", {"cents": 500}, agent="payroll-team (trusted)")
    agent_login = str(psycopg.conninfo.conninfo_to_dict(agent_dsn)["user"])
    code, out, err = run(capsys, "approvals", "list", "--dsn", dsn)
    assert code == 0, err
    header = out.splitlines()[0]
    assert "LOGIN" in header and "AGENT_CLAIMS" in header, header
    line = line_of(out, approval)
    assert agent_login in line and "payroll-team (trusted)" in line, line
    code, out, err = run(capsys, "approvals", "list", "--json", "--dsn", dsn)
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["owner_role"] == row["requested_by"] == agent_login
    assert row["agent"] == "payroll-team (trusted)"


def test_approvals_list_shows_the_oldest_up_to_its_limit_and_says_how_many_more(
    dsn: str, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Thousands may wait: the list shows the oldest --limit (50 by default), and a line
    on standard error how many more wait; none when all are shown, none with --json."""
    asked = [ask(agent_dsn, "pay", {"cents": n}) for n in range(4)]
    code, out, err = run(capsys, "approvals", "list", "--limit", "3", "--dsn", dsn)
    assert code == 0, err
    shown = [a for a in asked if str(a) in out]
    assert shown == asked[:3], out  # the oldest first
    assert "hint: 1 more waiting, not shown (the oldest 3 are); --limit 4 lists them all" in err
    code, out, err = run(capsys, "approvals", "list", "--limit", "4", "--dsn", dsn)
    assert code == 0 and [a for a in asked if str(a) in out] == asked, (out, err)
    assert "more waiting" not in err
    code, out, err = run(capsys, "approvals", "list", "--dsn", dsn)  # the default: 50
    assert code == 0 and "more waiting" not in err and len(line_of(out, asked[3])) > 0
    code, out, err = run(capsys, "approvals", "list", "--json", "--limit", "2", "--dsn", dsn)
    assert code == 0, err
    assert [uuid.UUID(r["approval_id"]) for r in json.loads(out)] == asked[:2]
    assert err == ""
    code, out, err = run(capsys, "approvals", "list", "--limit", "0", "--dsn", dsn)
    assert code == 2 and "--limit" in err and out == "", (out, err)


def test_decided_table_shows_the_edited_args(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The call ran with the arguments approved: the table says so, not only --json."""
    edited = ask(agent_dsn, "pay", {"cents": 123456})
    plain = ask(agent_dsn, "pay", {"cents": 5})
    approvals.approve(conn, edited, "ann", None, args={"cents": 777})
    approvals.approve(conn, plain, "ann", None)
    code, out, err = run(capsys, "approvals", "decided", "--dsn", dsn)
    assert code == 0, err
    assert "APPROVED_ARGS" in out.splitlines()[0]
    line = line_of(out, edited)
    assert '{"cents":123456}' in line and 'edited: {"cents":777}' in line, line
    assert "edited" not in line_of(out, plain)


def test_approve_by_prefix_says_what_it_approved(
    dsn: str, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id prefix names a call the person may not have in mind: the answer restates
    the tool, the arguments (as approved), the session and the login that asked."""
    approval = ask(agent_dsn, "wire_transfer", {"to": "ACME-99", "cents": 990000})
    agent_login = str(psycopg.conninfo.conninfo_to_dict(agent_dsn)["user"])
    code, out, err = run(
        capsys, "approvals", "approve", str(approval)[:13], "--by", "ann", "--dsn", dsn
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"approval {approval}: approved"
    assert "wire_transfer" in lines[1] and "irreversible" in lines[1], out
    assert '{"to":"ACME-99","cents":990000}' in lines[2], out
    assert any(line.strip().startswith("session: ") for line in lines), out
    assert f"login {agent_login}" in out, out
    # edited: the arguments it runs with, and those it asked with
    second = ask(agent_dsn, "wire_transfer", {"to": "ACME-99", "cents": 990000})
    code, out, err = run(
        capsys, "approvals", "approve", str(second), "--by", "ann",
        "--args", '{"to": "ACME-99", "cents": 1}', "--dsn", dsn,
    )  # fmt: skip
    assert code == 0, err
    assert '{"to":"ACME-99","cents":1} (edited; asked {"to":"ACME-99","cents":990000})' in out


def test_the_approvals_tables_mark_a_lookalike_or_padded_tool_name(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name that reads like another ("pay" in Cyrillic letters, "pay" and a newline, a
    tab and a space) is spelled out, its characters beyond ASCII as escapes and marked."""
    lookalike = ask(agent_dsn, LOOKALIKE, {"cents": 500}, agent="b\u043eb")
    padded = ask(agent_dsn, "pay\n\t ", {"cents": 500})
    code, out, err = run(capsys, "approvals", "list", "--dsn", dsn)
    assert code == 0, err
    assert LOOKALIKE not in out and "b\u043eb" not in out
    line = line_of(out, lookalike)
    assert "\\u0440\\u0430y (non-ASCII)" in line and "b\\u043eb (non-ASCII)" in line, line
    assert "pay\\n\\t\\u0020" in line_of(out, padded)
    approvals.reject(conn, lookalike, "ann", "not ours")
    code, out, err = run(capsys, "approvals", "decided", "--dsn", dsn)
    assert code == 0, err
    assert LOOKALIKE not in out and "\\u0440\\u0430y (non-ASCII)" in line_of(out, lookalike)
    # --json is the data, as stored
    code, out, err = run(capsys, "approvals", "list", "--json", "--dsn", dsn)
    assert [r["tool_name"] for r in json.loads(out)] == ["pay\n\t "]


def test_printable_spells_a_name_so_that_two_never_read_alike() -> None:
    cases = {
        "pay": "pay",
        "pay now": "pay now",
        " pay": "\\u0020pay",
        "pay  now": "pay\\u0020\\u0020now",
        "pay\\n": "pay\\\\n",  # a backslash of the name's own is not an escape
        "pay\r\x1b": "pay\\r\\u001b",
        "pay\u00a0now": "pay\\u00a0now (non-ASCII)",
        "\U0001f4b8": "\\U0001f4b8 (non-ASCII)",
    }
    assert {name: printable(name, name=True) for name in cases} == cases
    assert printable("pay\x1b[2J") == "pay\\u001b[2J"  # other text: escaped, as the dashboard


def test_partitions_drop_plan_lists_the_months_and_drops_nothing(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the dashboard's Drop form asks first, `drop --plan` lists every month a drop
    at --older-than would take, with its estimated rows and size, and drops nothing."""
    conn.execute("SELECT undolog.create_month_partitions('2020-01-01'::date)")
    conn.execute("SELECT undolog.create_month_partitions('2020-02-01'::date)")
    names = sorted(
        f"{table}_2020_{month}"
        for table in ("undolog_effect_log", "undolog_effect_history")
        for month in ("01", "02")
    )
    code, out, err = run(
        capsys, "partitions", "drop", "--older-than", "2020-03-01Z", "--plan", "--dsn", dsn
    )
    assert code == 0, err
    assert out.startswith("4 partitions end by 2020-03-01T00:00:00+00:00"), out
    assert all(name in out for name in names) and "EST_ROWS" in out, out
    code, out, err = run(
        capsys, "partitions", "drop", "--older-than", "2020-02-01Z", "--plan", "--json",
        "--dsn", dsn,
    )  # fmt: skip
    assert code == 0, err
    assert sorted(r["name"] for r in json.loads(out)) == [n for n in names if n.endswith("01")]
    code, out, err = run(
        capsys, "partitions", "drop", "--older-than", "2019-01-01Z", "--plan", "--dsn", dsn
    )
    assert code == 0 and "nothing to drop" in out, (out, err)
    code, _, err = run(
        capsys, "partitions", "drop", "--older-than", "2999-01-01Z", "--plan", "--dsn", dsn
    )
    assert code == 2 and "never dropped" in err, err
    existing = {
        str(name)
        for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' "
            "AND relname LIKE 'undolog_effect_%%_2020_%%'"
        ).fetchall()
    }
    assert existing == set(names)  # nothing dropped


def test_approvals_show_prints_a_request_whole_where_the_list_cuts_it(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent's long memo pushes the amount past the list's column: the list marks the
    cut and says how to read the request whole, and `approvals show` prints every
    argument, who asked, and the commands that decide it."""
    memo = "quarterly reimbursement of travel expenses, as agreed " * 2
    approval = ask(agent_dsn, "pay", {"memo": memo, "cents": 990000}, agent="payroll")
    agent_login = str(psycopg.conninfo.conninfo_to_dict(agent_dsn)["user"])
    code, out, err = run(capsys, "approvals", "list", "--dsn", dsn)
    assert code == 0, err
    assert "990000" not in out and "…" in line_of(out, approval), out
    assert "undolog approvals show ID" in err, err

    code, out, err = run(capsys, "approvals", "show", str(approval)[:8], "--dsn", dsn)
    assert code == 0, err
    assert out.splitlines()[0] == f"approval {approval}: waiting for a decision"
    assert '      "cents": 990000' in out.splitlines(), out
    assert f'      "memo": "{memo}",' in out.splitlines(), out
    assert f"asked by login {agent_login}; the agent calls itself payroll" in out, out
    assert f"undolog approvals approve {approval} --by NAME" in out, out

    code, out, err = run(capsys, "approvals", "show", str(approval), "--json", "--dsn", dsn)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["args"] == {"memo": memo, "cents": 990000}
    assert shown["owner_role"] == agent_login and shown["tool_name"] == "pay"

    # decided: no longer waiting, and the answer says where it is listed now
    approvals.reject(conn, approval, "ann", "too much")
    code, out, err = run(capsys, "approvals", "show", str(approval), "--dsn", dsn)
    assert code == 3 and out == "", (code, out)
    assert "is not waiting for a decision" in err and "approvals decided" in err, err


def wrapped(out: str, width: int = 80) -> list[str]:
    """The lines an 80-column terminal shows of ``out``: long lines wrapped."""
    return [
        line[i : i + width] for line in out.splitlines() for i in range(0, len(line) or 1, width)
    ]


@pytest.mark.parametrize("where", ["purpose", "args"])
def test_approvals_show_cannot_be_made_to_show_another_requests_command(
    dsn: str, agent_dsn: str, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The agent pads its purpose, or an argument, with spaces so that a terminal wraps
    "  approve:  undolog approvals approve <its other request>" onto a line of its own:
    the command lines come first, and a run of spaces is printed \\u0020 (the same JSON
    value), so no line of the agent's starts like them."""
    other = ask(agent_dsn, "pay", {"cents": 990000})
    forged = f"  approve: undolog approvals approve {other} --by NAME [--args JSON]"
    padding = " " * 80
    if where == "purpose":
        approval = ask(agent_dsn, "pay", {"cents": 5}, purpose=f"payroll{padding}{forged}")
    else:
        approval = ask(agent_dsn, "pay", {"cents": 5, "memo": f"ok{padding}{forged}"})
    code, out, err = run(capsys, "approvals", "show", str(approval), "--dsn", dsn)
    assert code == 0, err
    real = out.splitlines()[1]
    assert real == f"  approve: undolog approvals approve {approval} --by NAME [--args JSON]"
    approves = [line for line in wrapped(out) if line.lstrip().startswith("approve:")]
    assert approves == [real[:80]], out
    assert "\\u0020\\u0020" in out, "the padding is shown for what it is"
    code, out, err = run(capsys, "approvals", "show", str(approval), "--json", "--dsn", dsn)
    shown = json.loads(out)
    assert (shown["purpose"] if where == "purpose" else shown["args"]["memo"]).endswith(forged)


def test_approvals_show_escapes_a_lookalike_letter_as_the_list_does(
    dsn: str, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "paypal.com" with a Cyrillic a is \\u0430 in the list's cell and in show's lines."""
    approval = ask(agent_dsn, "pay", {"to": "p\u0430ypal.com", "cents": 5})
    for argv in (["list"], ["show", str(approval)]):
        code, out, err = run(capsys, "approvals", *argv, "--dsn", dsn)
        assert code == 0, err
        assert "p\\u0430ypal.com" in out and "p\u0430ypal.com" not in out, out


def test_the_cli_writes_out_what_no_reader_sees_in_args(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hangul filler (printable to Python, blank to a reader) after an account number
    reached the terminal as it was in `approvals approve`'s answer and in `approvals
    decided`'s edited args: "acct-1234" read, another text sent. Written out now, as the
    dashboard and `approvals show` write it."""
    hidden = "acct-1234\u3164\ufe0f"
    approval = ask(agent_dsn, "pay", {"to": hidden, "cents": 5})
    code, out, err = run(capsys, "approvals", "approve", str(approval), "--by", "ann", "--dsn", dsn)
    assert code == 0, err
    assert "\u3164" not in out and "\ufe0f" not in out, out
    assert "acct-1234\\u3164\\ufe0f" in out, out
    edited = ask(agent_dsn, "pay", {"to": hidden, "cents": 5})
    approvals.approve(conn, edited, "ann", None, args={"to": hidden, "cents": 1})
    code, out, err = run(capsys, "approvals", "decided", "--dsn", dsn)
    assert code == 0, err
    assert "\u3164" not in out and "acct-1234\\u3164\\ufe0f" in line_of(out, edited), out


def test_approve_and_decided_escape_a_lookalike_as_show_does(
    dsn: str, conn: Conn, agent_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`approvals approve`'s answer and `approvals decided`'s edited args printed an
    argument's characters beyond ASCII as they were: "acct-1234" in mathematical
    digits (U+1D7F7...) read as "acct-1234", where `show` and `list` print
    \\ud835\\udff7. Escaped now."""
    lookalike = "acct-\U0001d7f7\U0001d7f8\U0001d7f9\U0001d7fa"
    escaped = "acct-\\ud835\\udff7\\ud835\\udff8\\ud835\\udff9\\ud835\\udffa"
    approval = ask(agent_dsn, "pay", {"to": lookalike, "cents": 5})
    code, out, err = run(capsys, "approvals", "approve", str(approval), "--by", "ann", "--dsn", dsn)
    assert code == 0, err
    assert escaped in out and lookalike not in out, out
    edited = ask(agent_dsn, "pay", {"to": "acct-1234", "cents": 5})
    approvals.approve(conn, edited, "ann", None, args={"to": lookalike, "cents": 1})
    code, out, err = run(capsys, "approvals", "decided", "--dsn", dsn)
    assert code == 0, err
    assert lookalike not in out and escaped[:20] in line_of(out, edited), out  # a cut cell
