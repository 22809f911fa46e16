"""Input that can be signed but not stored, and PostgreSQL's own refusals (blank names,
U+0000, nesting, sizes): each reaches Python as a documented UndoLogError and writes nothing."""

from __future__ import annotations

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
