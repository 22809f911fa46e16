"""Input that can be signed but not stored, and PostgreSQL's own refusals (blank names,
U+0000, nesting, sizes): each reaches Python as a documented UndoLogError and writes nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import ToolTier, UndoLog, engine, errors, undolog_tool
from undolog.queries import QUERIES
from undolog.signature import call_signature
from undolog.tiers import CompensationDescriptor

Conn = psycopg.Connection[Any]
DELETE_USER = {"name": "delete_user"}


def _journal_rows(conn: Conn) -> int:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_effect_log)"
        " + (SELECT count(*) FROM undolog.undolog_undo_stack)"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_u0000_is_signed_but_refused_at_intercept_before_writing(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="test")
    args = {"path": "notes.txt", "content": "tab\tnul\x00"}
    signature = call_signature(session, 0, "write_file", args)  # signs: valid JSON
    with pytest.raises(errors.SignatureError, match="U\\+0000"):
        engine.intercept(conn, session, 0, "write_file", "compensable", args, DELETE_USER)
    with pytest.raises(errors.SignatureError, match="U\\+0000"):
        engine.intercept(
            conn, session, 0, "write_file", "compensable", args, DELETE_USER, signature
        )
    assert _journal_rows(conn) == 0


ran: list[str] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
def write_file(path: str, content: str) -> dict[str, str]:
    ran.append(path)
    return {"path": path}


def test_the_decorator_refuses_u0000_before_the_body_runs(dsn: str, conn: Conn) -> None:
    ran.clear()
    ul = UndoLog(dsn)
    with pytest.raises(errors.SignatureError, match="U\\+0000"), ul.session(agent="t"):
        write_file("notes.txt", "a\x00b")
    assert ran == []
    assert _journal_rows(conn) == 0


@pytest.mark.parametrize(
    ("query", "params", "sqlstate", "exc"),
    [
        # a lease PostgreSQL cannot parse
        ("SELECT undolog.begin_session(NULL, 'a', '{}', 'soon')", (), "22007", "InvalidArgument"),
        # a step of 2**31 is a bigint: no intercept takes it
        (QUERIES["intercept"], "step", "42883", "InvalidArgument"),
        # JSON nested 100,000 deep overflows PostgreSQL's parser
        ("SELECT %s::jsonb", ("[" * 100_000,), "54001", "PayloadTooLarge"),
        # an interval out of range
        ("SELECT undolog.heartbeat(%s) + '178000000 years'", "sid", "22008", "InvalidArgument"),
    ],
)
def test_postgresql_refusals_map_to_documented_errors(
    conn: Conn, query: str, params: Any, sqlstate: str, exc: str
) -> None:
    session = engine.begin_session(conn, agent="test")
    if params == "step":
        params = {
            "session_id": session,
            "step_index": 2**31,
            "tool_name": "t",
            "tier": "compensable",
            "args": psycopg.types.json.Jsonb({}),
            "call_signature": "a" * 64,
            "compensation": None,
        }
    elif params == "sid":
        params = (session,)
    with pytest.raises(getattr(errors, exc)) as raised:
        engine.fetch_one(conn, query, params)
    cause = raised.value.__cause__
    assert isinstance(cause, psycopg.Error)
    assert cause.sqlstate == sqlstate
    assert sqlstate in errors.BY_SQLSTATE


def test_a_step_past_the_engine_integer_is_refused_before_sending(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="test")
    with pytest.raises(errors.InvalidArgument, match="step_index"):
        engine.intercept(conn, session, 2**31, "t", "compensable", {}, DELETE_USER)
    assert _journal_rows(conn) == 0


def test_every_mapped_sqlstate_is_documented() -> None:
    root = Path(__file__).resolve().parents[2]
    docs = [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]
    text = "\n".join(d.read_text(encoding="utf-8") for d in docs if d.is_file())
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    for code, cls in errors.BY_SQLSTATE.items():
        assert any(code in row and f"`{cls.__name__}`" in row for row in rows), code


# --- numbers no finite double holds ---------------------------------------------------
# 1e131071 is a few bytes as jsonb and 131,072 digits as text: a payload of them kept a
# backend printing hundreds of MB before its size was refused (54000 "out of memory" at
# 148 KB), and one that got in broke every reader (Python refuses an integer of more than
# 4,300 digits). The engine refuses such a number (UL008) before printing anything.

SIG = "a" * 64
INTERCEPT = "SELECT * FROM undolog.intercept(%s, %s, 't', 'compensable', %s::jsonb, %s, %s)"
BEYOND_A_DOUBLE = [
    "1e131071",
    "-1e309",
    "1.7976931348623159e308",  # rounds to infinity
    "1e-400",
    "-4e-324",  # rounds to 0
]
WITHIN_A_DOUBLE = [
    "1e300",
    "-1e308",
    "1.7976931348623157e308",
    "0.1",
    "5e-324",
    "9007199254740991",
    "-0.0",
    "0",
    "18446744073709551615",  # a 64-bit id: as big as a double holds, not exactly
    "1.5",
]


UNDO_MAX = {"name": "undo", "args": {"max": 1e300}}


def _refused_as_no_double(raised: pytest.ExceptionInfo[errors.InvalidArgument]) -> None:
    cause = raised.value.__cause__
    assert isinstance(cause, psycopg.Error) and cause.sqlstate == "UL008", cause
    assert "double" in str(raised.value)
    assert raised.value.hint and "string" in raised.value.hint


def _nested(number: str) -> str:
    return '{"a": 1, "b": [true, {"n": ' + number + "}]}"


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
def test_a_number_no_double_holds_is_refused_in_args(conn: Conn, number: str) -> None:
    session = engine.begin_session(conn, agent="test")
    tool_id = engine.register_tool(conn, "t", "compensable", DELETE_USER)
    with pytest.raises(errors.InvalidArgument) as raised:
        engine.fetch_one(
            conn,
            INTERCEPT,
            (session, 0, _nested(number), SIG, psycopg.types.json.Jsonb(DELETE_USER)),
        )
    _refused_as_no_double(raised)
    with pytest.raises(errors.InvalidArgument) as raised:
        engine.fetch_one(
            conn,
            "SELECT * FROM undolog.intercept_tool(%s, %s, 0, %s::jsonb, %s)",
            (session, tool_id, _nested(number), SIG),
        )
    _refused_as_no_double(raised)
    assert _journal_rows(conn) == 0


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
def test_a_number_no_double_holds_is_refused_in_a_result(conn: Conn, number: str) -> None:
    session = engine.begin_session(conn, agent="test")
    call = engine.intercept(conn, session, 0, "t", "compensable", {"u": 1}, DELETE_USER)
    for query, params in (
        ("SELECT undolog.commit(%s, %s::jsonb)", (call.effect_id, _nested(number))),
        (
            "SELECT undolog.commit_effect(%s, %s, %s::jsonb)",
            (session, call.effect_id, _nested(number)),
        ),
    ):
        with pytest.raises(errors.InvalidArgument) as raised:
            engine.fetch_one(conn, query, params)
        _refused_as_no_double(raised)
    state = conn.execute(
        "SELECT state FROM undolog.undolog_effect_log WHERE effect_id = %s", (call.effect_id,)
    ).fetchone()
    assert state == ("executing",)


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
def test_a_number_no_double_holds_is_refused_in_metadata_and_descriptors(
    conn: Conn, number: str
) -> None:
    with pytest.raises(errors.InvalidArgument) as raised:
        engine.fetch_one(
            conn, "SELECT undolog.begin_session(NULL, 'a', %s::jsonb)", (_nested(number),)
        )
    _refused_as_no_double(raised)
    descriptor = '{"name": "undo", "args": ' + _nested(number) + "}"
    with pytest.raises(errors.InvalidArgument) as raised:
        engine.fetch_one(
            conn,
            "SELECT undolog.register_tool('t2', 'compensable', %s::jsonb)",
            (descriptor,),
        )
    _refused_as_no_double(raised)
    session = engine.begin_session(conn, agent="test")
    with pytest.raises(errors.InvalidArgument) as raised:  # a new tool's own descriptor
        engine.fetch_one(conn, INTERCEPT, (session, 0, "{}", SIG, descriptor))
    _refused_as_no_double(raised)
    count = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_tools WHERE tool_name = 't2'),"
        " (SELECT count(*) FROM undolog.undolog_sessions)"
    ).fetchone()
    assert count == (0, 1)


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
def test_a_number_no_double_holds_is_refused_in_edited_args(conn: Conn, number: str) -> None:
    session = engine.begin_session(conn, agent="test")
    engine.register_tool(conn, "wire", "irreversible", None)
    call = engine.intercept(conn, session, 0, "wire", "irreversible", {"cents": 5})
    assert call.action == "await_approval" and call.approval_id is not None
    with pytest.raises(errors.InvalidArgument) as raised:
        engine.fetch_one(
            conn,
            "SELECT undolog.approve_edited(%s, 'alice', %s::jsonb)",
            (call.approval_id, '{"cents": ' + number + "}"),
        )
    _refused_as_no_double(raised)
    state = conn.execute(
        "SELECT state, approved_args FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (call.approval_id,),
    ).fetchone()
    assert state == ("pending", None)


@pytest.mark.parametrize(
    ("number", "sqlstate"),
    [
        ("1e131071", "UL008"),  # 131,072 digits each: refused before any is printed
        ("0e-16383", "UL009"),  # a zero of 16,385 characters: over 1 MiB, not printed
        ("1e308", "UL009"),  # 309 digits each: printed once, 8 MB, over 1 MiB
    ],
)
def test_a_small_request_of_long_numbers_is_refused_at_once(
    conn: Conn, number: str, sqlstate: str
) -> None:
    session = engine.begin_session(conn, agent="test")
    count = 148_000 // len(f'"k00000": {number},')
    args = "{" + ",".join(f'"k{i:05}": {number}' for i in range(count)) + "}"
    assert 140_000 < len(args) <= 148_001
    started = time.monotonic()
    with pytest.raises(errors.UndoLogError) as raised:
        engine.fetch_one(
            conn, INTERCEPT, (session, 0, args, SIG, psycopg.types.json.Jsonb(DELETE_USER))
        )
    took = time.monotonic() - started
    cause = raised.value.__cause__
    assert isinstance(cause, psycopg.Error) and cause.sqlstate == sqlstate, cause
    assert type(raised.value) is errors.BY_SQLSTATE[sqlstate]
    # before: 5.6 s for half as many, and 54000 out of memory for these; now ~0.03 s (a
    # bound far from both, for a loaded machine)
    assert took < 3, took
    assert _journal_rows(conn) == 0


def test_numbers_a_double_holds_are_journaled_and_read_back(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="test")
    payload = "{" + ", ".join(f'"n{i}": {n}' for i, n in enumerate(WITHIN_A_DOUBLE)) + "}"
    engine.fetch_one(conn, "SELECT undolog.begin_session(%s, 'a', %s::jsonb)", (session, payload))
    engine.register_tool(conn, "t", "compensable", UNDO_MAX)
    row = engine.fetch_one(
        conn, INTERCEPT, (session, 0, payload, SIG, psycopg.types.json.Jsonb(UNDO_MAX))
    )
    effect_id = row[0]
    assert engine.fetch_one(conn, "SELECT undolog.commit(%s, %s::jsonb)", (effect_id, payload)) == (
        "committed",
    )
    stored = conn.execute(
        "SELECT args, result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = %s",
        (effect_id,),
    ).fetchone()
    assert stored is not None
    assert stored[0] == stored[1]
    assert stored[1]["n0"] == 10**300  # jsonb prints 1e300 in full: 301 digits, read as an int
    assert stored[1]["n8"] == 2**64 - 1  # an id of 64 bits reads back exactly
    big = {"s": "x" * 600, "n": [1e300, 5e-324, -0.0, 2**53 - 1]}  # past the fast path
    call = engine.intercept(conn, session, 1, "t", "compensable", big, UNDO_MAX)
    assert call.effect_id is not None
    engine.commit(conn, call.effect_id, {**big, "id": 2**63})


def test_the_size_limits_hint_promises_no_setting(conn: Conn) -> None:
    # undolog.max_payload_bytes() is a constant: the hint named a setting that did nothing
    session = engine.begin_session(conn, agent="test")
    call = engine.intercept(conn, session, 0, "t", "compensable", {"u": 1}, DELETE_USER)
    assert call.effect_id is not None
    with pytest.raises(errors.PayloadTooLarge) as raised:
        engine.commit(conn, call.effect_id, {"x": "a" * (1024 * 1024 + 1)})
    hint = raised.value.hint or ""
    assert "reference" in hint and "max_payload_bytes" not in hint and "ALTER" not in hint


def test_a_compressed_value_of_long_zeros_is_refused_without_printing(conn: Conn) -> None:
    # 100,000 zeros written 0e-16383: 1.2 MB of jsonb, compressed to little in a table,
    # 1.6 GB of text (PostgreSQL cannot build over 1 GB: 54000 "out of memory"). Refused
    # in time linear in the jsonb (each number's printed length is summed, not printed).
    conn.execute(
        "CREATE TEMP TABLE zeros AS SELECT jsonb_agg('0e-16383'::jsonb) AS v"
        " FROM generate_series(1, 100000)"
    )
    session = engine.begin_session(conn, agent="test")
    call = engine.intercept(conn, session, 0, "t", "compensable", {"u": 1}, DELETE_USER)
    started = time.monotonic()
    with pytest.raises(errors.PayloadTooLarge, match="over the limit"):
        engine.fetch_one(
            conn, "SELECT undolog.commit(%s, (SELECT v FROM zeros))", (call.effect_id,)
        )
    assert time.monotonic() - started < 5  # before: 54000 after 1.7 s; now well under 1 s


# --- nesting that jsonb takes but a walk of every level does not --------------------------


def test_a_value_nested_twelve_thousand_deep_is_refused_as_too_deep(conn: Conn) -> None:
    """jsonb takes 12,000 levels (its parser gives out near 14,000 at the default
    max_stack_depth); a jsonpath walk of every level ($.**) recurses into all of them and
    fails with 54001 "stack depth limit exceeded". The depth is checked first, by a walk
    that stops at level 64: refused as too deep (UL009), in args as in a result."""
    deep = "[" * 12_000 + "]" * 12_000
    assert conn.execute("SELECT undolog.payload_fits(%s::jsonb)", (deep,)).fetchone() == (False,)
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT undolog.check_payload('args', %s::jsonb)", (deep,))
    assert raised.value.sqlstate == "UL009" and "nests deeper" in str(raised.value)
    session = engine.begin_session(conn, agent="test")
    with pytest.raises(errors.PayloadTooLarge, match="nests deeper"):
        engine.fetch_one(
            conn,
            INTERCEPT,
            (session, 0, '{"a": ' + deep + "}", SIG, psycopg.types.json.Jsonb(DELETE_USER)),
        )
    call = engine.intercept(conn, session, 0, "t", "compensable", {"u": 1}, DELETE_USER)
    with pytest.raises(errors.PayloadTooLarge, match="nests deeper"):
        engine.fetch_one(conn, "SELECT undolog.commit(%s, %s::jsonb)", (call.effect_id, deep))
    # deep and holding a number no double holds: the depth is found first
    deep_number = "[" * 12_000 + "1e400" + "]" * 12_000
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT undolog.check_payload('args', %s::jsonb)", (deep_number,))
    assert raised.value.sqlstate == "UL009", raised.value
