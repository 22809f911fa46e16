"""The history's hash chains against a real PostgreSQL: every history row is linked into
its session's chain as it is written; a database used normally (calls, the undo walk,
approvals, operator actions, partition maintenance moving rows) verifies clean; rows
edited, deleted or reordered by a superuser with the triggers off are named, online and
in an export; the SQL hash and Python's agree; an agent reads no other session's chain."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from undolog import (
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    chain,
    engine,
    partitions,
    undolog_tool,
)
from undolog.errors import ChainMismatch
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("chain_undo"))
def chain_create(name: str) -> dict[str, Any]:
    return {"created": name}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def chain_pay(cents: int) -> dict[str, Any]:
    return {"paid": cents}


def _app(dsn: str) -> UndoLog:
    ul = UndoLog(dsn)

    @ul.compensation("chain_undo")
    def chain_undo(call: CompensationCall) -> None:
        return None

    return ul


def busy_database(dsn: str, conn: Conn, agent_dsn: str) -> dict[str, uuid.UUID]:
    """Sessions that wrote every kind of history row: calls committed, a failure walked
    back (undo history), an approval approved and the call made again (both links of a
    request), a rollback by an operator (an operator action)."""
    ul = _app(dsn)
    with ul.session() as done:
        chain_create("a")
        chain_create("b")
    with pytest.raises(RuntimeError), ul.session() as walked:
        chain_create("c")
        raise RuntimeError("agent gave up")
    agent = UndoLog(agent_dsn)
    approved = uuid.uuid4()
    with pytest.raises(AwaitingApprovalError) as waiting, agent.session(approved):
        chain_pay(5)
    ul.approve(waiting.value.approval_id, "alice", "fine")
    with agent.session(approved):
        chain_pay(5)
    rolled = engine.begin_session(conn, agent="rolled")
    conn.execute("SELECT undolog.rollback_session(%s, 'ops', 'stop it')", (rolled,))
    return {
        "done": done.session_id,
        "walked": walked.session_id,
        "approved": approved,
        "rolled": rolled,
    }


def tables_of(conn: Conn, session_id: uuid.UUID) -> set[str]:
    rows = conn.execute(
        "SELECT DISTINCT table_name FROM undolog.chain_events(%s)", (session_id,)
    ).fetchall()
    return {r[0] for r in rows}


def tamper(conn: Conn, sql: str, params: Any = ()) -> None:
    """Change history as a superuser can: with every trigger off for this transaction."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(sql, params)


def test_every_history_row_is_linked_and_a_busy_database_verifies_clean(
    dsn: str, conn: Conn, agent_dsn: str
) -> None:
    ids = busy_database(dsn, conn, agent_dsn)
    assert "undolog_undo_history" in tables_of(conn, ids["walked"])
    assert "undolog_approval_requests" in tables_of(conn, ids["approved"])
    assert "undolog_operator_actions" in tables_of(conn, ids["rolled"])
    unlinked = conn.execute(
        "SELECT count(*) FROM undolog.chain_events() WHERE seq IS NULL"
    ).fetchone()
    assert unlinked == (0,)
    report = chain.verify(conn)
    assert report.ok, report.findings
    assert report.sessions == 4
    # both links of the approved request: made, then decided
    keys = [
        r[0]
        for r in conn.execute(
            "SELECT row_key FROM undolog.chain_events(%s) WHERE table_name = "
            "'undolog_approval_requests' ORDER BY seq",
            (ids["approved"],),
        ).fetchall()
    ]
    assert [k.split()[-1] for k in keys] == ["request", "decision"]
    assert conn.execute("SELECT undolog.assert_chain()").fetchone() == (4,)


def test_python_and_sql_hash_the_same_bytes(dsn: str, conn: Conn, agent_dsn: str) -> None:
    busy_database(dsn, conn, agent_dsn)
    rows = conn.execute(
        "SELECT prev, hash, canonical, undolog.chain_hash(prev, canonical)"
        " FROM undolog.chain_events()"
    ).fetchall()
    assert len(rows) > 20
    for prev, stored, canonical, in_sql in rows:
        assert chain.chain_hash(bytes(prev), canonical) == bytes(stored) == bytes(in_sql)
    # non-ASCII text and nested detail survive the same way
    text = '{"x": "é ✓ \\u0000", "n": [1, {"a": null}]}'
    assert conn.execute(
        "SELECT undolog.chain_hash(undolog.chain_genesis(), %s)", (text,)
    ).fetchone() == (chain.chain_hash(chain.GENESIS, text),)


def test_the_canonical_record_ignores_the_session_time_zone(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="tz")
    first = conn.execute("SELECT canonical FROM undolog.chain_events(%s)", (session,)).fetchall()
    conn.execute("SET TimeZone = 'Asia/Kathmandu'")
    conn.execute("SET DateStyle = 'SQL, DMY'")
    assert (
        conn.execute("SELECT canonical FROM undolog.chain_events(%s)", (session,)).fetchall()
        == first
    )
    assert chain.verify(conn, session).ok
    assert json.loads(first[0][0])["at"].endswith("Z")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        # a call's creation and its commit are one link of its own row (migration 0013)
        (
            'UPDATE undolog.undolog_effect_log SET result_snapshot = \'{"created": "z"}\''
            " WHERE session_id = %(s)s AND committed_at IS NOT NULL",
            "altered",
        ),
        (
            'UPDATE undolog.undolog_effect_log SET args = \'{"name": "z"}\''
            " WHERE session_id = %(s)s",
            "altered",
        ),
        (
            "UPDATE undolog.undolog_session_history SET actor = 'nobody'"
            " WHERE session_id = %(s)s AND to_state = 'completed'",
            "altered",
        ),
        (
            "DELETE FROM undolog.undolog_effect_log WHERE session_id = %(s)s"
            " AND commit_seq = (SELECT min(commit_seq) FROM undolog.undolog_effect_log"
            " WHERE session_id = %(s)s)",
            "missing",
        ),
        (
            "DELETE FROM undolog.undolog_session_history WHERE session_id = %(s)s"
            " AND to_state = 'completed'",
            "head",
        ),
        # reordered: two rows swap places in the chain
        (
            # the two calls' commits (each call's one link) swap places
            "UPDATE undolog.undolog_effect_log AS e SET commit_seq = CASE e.commit_seq"
            " WHEN 2 THEN 3 ELSE 2 END WHERE session_id = %(s)s AND commit_seq IN (2, 3)",
            "link",
        ),
        (
            "INSERT INTO undolog.undolog_session_history (session_id, from_state, to_state)"
            " VALUES (%(s)s, 'completed', 'active')",
            "unchained",
        ),
    ],
    ids=[
        "edit-result",
        "edit-args",
        "edit-session",
        "delete-middle",
        "delete-last",
        "reorder",
        "insert",
    ],
)
def test_tampering_is_found_online_and_in_an_export(
    dsn: str, conn: Conn, agent_dsn: str, change: str, problem: str
) -> None:
    ids = busy_database(dsn, conn, agent_dsn)
    victim = ids["done"]
    before = list(chain.export_session(conn, victim))
    assert chain.verify_export(before).ok
    tamper(conn, change, {"s": victim})

    report = chain.verify(conn)
    assert not report.ok
    assert {f.session_id for f in report.findings} == {str(victim)}
    assert problem in [f.problem for f in report.findings]
    first = report.findings[0]
    assert first.table and first.key and first.expected != first.found
    # verify of one session says the same; the others stay clean
    assert chain.verify(conn, victim).findings == report.findings
    assert chain.verify(conn, ids["walked"]).ok
    with pytest.raises(ChainMismatch, match=first.problem), engine.translated():
        conn.execute("SELECT undolog.assert_chain()")

    offline = chain.verify_export(chain.export_session(conn, victim))
    assert problem in [f.problem for f in offline.findings]


def test_an_anchor_pins_the_heads_and_is_itself_chained(
    dsn: str, conn: Conn, agent_dsn: str
) -> None:
    ids = busy_database(dsn, conn, agent_dsn)
    first = chain.write_anchor(conn)
    record = json.loads(first["canonical"])
    assert set(record["heads"]) == {str(s) for s in ids.values()}
    engine.begin_session(conn, agent="later")
    second = chain.write_anchor(conn)
    assert second["prev"] == first["hash"]
    assert len(json.loads(second["canonical"])["heads"]) == 1  # only what moved
    assert chain.verify(conn).ok
    assert chain.check_anchor(conn, first) == []

    # the whole chain of a session rewritten, consistently, from a changed row on:
    # verify alone cannot tell; the anchor does
    victim = ids["done"]
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET actor = 'x'"
        " WHERE session_id = %s AND to_state = 'completed'",
        (victim,),
    )
    rows = conn.execute(
        "SELECT table_name, row_key, seq, canonical FROM undolog.chain_events(%s) ORDER BY seq",
        (victim,),
    ).fetchall()
    prev = chain.GENESIS
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for table, _key, seq, canonical in rows:
            new = chain.chain_hash(prev, canonical)
            conn.execute(
                f"UPDATE undolog.{table} SET chain_prev = %s, chain_hash = %s"
                " WHERE session_id = %s AND chain_seq = %s",
                (prev, new, victim, seq),
            )
            prev = new
        conn.execute(
            "UPDATE undolog.undolog_chain_heads SET prev = head, head = %s WHERE session_id = %s",
            (prev, victim),
        )
    findings = chain.verify(conn).findings
    assert [(f.table, f.problem) for f in findings] == [("undolog_chain_anchors", "anchored")]
    assert findings[0].session_id == str(victim)

    # an anchor rewritten in the database no longer matches the one kept outside
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_anchors SET anchor_hash = sha256(anchor_hash)"
        " WHERE anchor_id = 1",
    )
    assert [f.problem for f in chain.check_anchor(conn, first)] == ["anchored"]


def test_maintenance_moving_rows_keeps_the_chains(conn: Conn) -> None:
    """Rows written while their month had no partition land in the default; maintenance
    moves them into the month it creates: the same rows, the same links."""
    month = conn.execute("SELECT undolog.month_start(undolog.utc_month(now(), 5))").fetchone()
    assert month is not None
    when = month[0] + timedelta(days=3)
    session = engine.begin_session(conn, agent="future")
    conn.execute(
        "INSERT INTO undolog.undolog_effect_history"
        " (session_id, effect_id, executed_at, event, to_state)"
        " VALUES (%s, gen_random_uuid(), %s, 'transition', 'pending')",
        (session, when),
    )
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_history_default WHERE session_id = %s",
        (session,),
    ).fetchone() == (1,)
    assert chain.verify(conn).ok
    partitions.maintain(conn, months_ahead=5)
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_history_default WHERE session_id = %s",
        (session,),
    ).fetchone() == (0,)
    assert chain.verify(conn).ok
    assert conn.execute("SELECT count(*) FROM undolog.undolog_chain_anchors").fetchone() == (1,)


def test_verify_since_starts_from_the_first_row_after(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="since")
    engine.fail_session(conn, session, "x")
    cut = datetime.now(UTC)
    # the rows before the cut are gone (as retention drops months): verify from the cut
    tamper(
        conn,
        "DELETE FROM undolog.undolog_session_history WHERE session_id = %s AND to_state = 'active'",
        (session,),
    )
    assert not chain.verify(conn, session).ok
    later = conn.execute(
        "SELECT min(at) FROM undolog.undolog_session_history WHERE session_id = %s", (session,)
    ).fetchone()
    assert later is not None and later[0] < cut
    assert chain.verify(conn, session, since=later[0]).ok


def test_verify_since_finds_an_anchored_tail_deleted_in_the_window(conn: Conn) -> None:
    """--since excuses an anchored seq with no row only before the window's first row
    (retention's doing): the last links deleted and the head moved back are found with
    or without it, and by assert_chain."""
    cut = datetime.now(UTC)
    session = engine.begin_session(conn, agent="tail")
    calls = []

    def call(step: int) -> None:
        made = engine.intercept(
            conn, session, step, "chain_create", "compensable", {"s": step}, {"name": "chain_undo"}
        )
        assert made.effect_id is not None
        engine.commit(conn, made.effect_id, {"ok": step})
        calls.append(made.effect_id)

    for step in range(4):
        call(step)
    chain.write_anchor(conn)
    call(4)
    links = conn.execute(
        "SELECT seq, hash, prev, at FROM undolog.chain_events(%s) ORDER BY seq", (session,)
    ).fetchall()
    anchored, after = links[-2], links[-1]

    def found(**scope: Any) -> list[tuple[str, int | None, str]]:
        return [(f.problem, f.seq, f.found) for f in chain.verify(conn, **scope).findings]

    # the window starts after the anchored row: not read, as if retention dropped it
    assert found(session_id=session, since=after[3]) == []

    # the last two calls (their commits, the last two links, the anchored one first)
    # deleted and the head moved back onto the link before them
    tamper(conn, "DELETE FROM undolog.undolog_undo_stack WHERE effect_id = ANY(%s)", (calls[3:],))
    tamper(conn, "DELETE FROM undolog.undolog_effect_log WHERE effect_id = ANY(%s)", (calls[3:],))
    kept = links[-3]
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_heads SET seq = %s, head = %s, prev = %s"
        " WHERE session_id = %s",
        (kept[0], kept[1], kept[2], session),
    )
    expected = [("anchored", anchored[0], f"no row at seq {anchored[0]}")]
    assert found() == expected
    assert found(since=cut) == expected
    assert found(session_id=session, since=cut) == expected
    with pytest.raises(ChainMismatch, match="anchored"), engine.translated():
        conn.execute("SELECT undolog.assert_chain(NULL, %s)", (cut,))
    # no row of the session left in the window: the anchor lies past its head
    assert found(session_id=session, since=after[3]) == expected


def test_the_chain_columns_cannot_be_written_by_callers(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="forged")
    conn.execute(
        "INSERT INTO undolog.undolog_session_history"
        " (session_id, from_state, to_state, chain_seq, chain_hash)"
        " VALUES (%s, 'active', 'active', 99, '\\x00')",
        (session,),
    )
    assert conn.execute(
        "SELECT array_agg(chain_seq ORDER BY chain_seq) FROM undolog.undolog_session_history"
        " WHERE session_id = %s",
        (session,),
    ).fetchone() == ([1, 2],)
    assert chain.verify(conn, session).ok


def test_an_agent_reads_only_its_own_chains(
    dsn: str, conn: Conn, agent_dsn: str, login: Any
) -> None:
    ids = busy_database(dsn, conn, agent_dsn)
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        heads = {
            r[0]
            for r in agent.execute("SELECT session_id FROM undolog.undolog_chain_heads").fetchall()
        }
        assert heads == {ids["approved"]}
        links = {
            r[0]
            for r in agent.execute(
                "SELECT session_id FROM undolog.undolog_effect_history WHERE chain_hash IS NOT NULL"
            ).fetchall()
        }
        assert links == {ids["approved"]}
        for forbidden in (
            "SELECT * FROM undolog.verify_chain()",
            "SELECT * FROM undolog.undolog_chain_anchors",
            "SELECT * FROM undolog.write_anchor()",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent.execute(forbidden)
    operator = login("undolog_operator")
    assert chain.verify(operator).ok
    assert chain.write_anchor(operator)["anchor_id"] == 1
