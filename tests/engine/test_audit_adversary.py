"""The history's hash chain attacked as its documentation says it holds
(docs/operations/audit.md): the table's owner or a superuser, triggers off, changes,
deletes, reorders or forges history rows, and rewrites what it can of the anchors. An
auditor who kept an exported anchor must find every change to what that anchor covers,
whether she verifies every session or one (`--session`). What the chain does not promise
(the rows after the latest anchor, the rows before a `--since` window, two values that
the canonical record writes alike, in an export checked offline) is pinned here too, so
that a change to it is seen."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from undolog import chain, engine
from undolog.errors import EXIT_MISMATCH, LateResult

Conn = psycopg.Connection[Any]


def tamper(conn: Conn, sql: str, params: Any = ()) -> None:
    """Change history as the owner or a superuser can: every trigger off."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(sql, params)


def calls(conn: Conn, session: uuid.UUID, count: int, first: int = 0) -> list[uuid.UUID]:
    made = []
    for step in range(first, first + count):
        found = engine.intercept(
            conn, session, step, "adv_create", "compensable", {"n": step}, {"name": "adv_undo"}
        )
        assert found.effect_id is not None
        engine.commit(conn, found.effect_id, {"ok": step})
        made.append(found.effect_id)
    return made


def links(conn: Conn, session: uuid.UUID) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT seq, table_name, row_key, prev, hash, canonical"
        " FROM undolog.chain_events(%s) ORDER BY seq",
        (session,),
    ).fetchall()


def rewrite_consistently(conn: Conn, session: uuid.UUID) -> bytes:
    """Recompute every link of the session from its columns as they are now, and the
    head: what a superuser does after changing a row, so that the chain matches again.
    Answers the new head."""
    prev = chain.GENESIS
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for seq, table, key, _prev, _hash, canonical in links(conn, session):
            new = chain.chain_hash(prev, canonical)
            if table == "undolog_effect_log":
                cols = "commit" if key.endswith("committed") else "chain"
                conn.execute(
                    f"UPDATE undolog.undolog_effect_log SET {cols}_prev = %s, {cols}_hash = %s"
                    f" WHERE session_id = %s AND {cols}_seq = %s",
                    (prev, new, session, seq),
                )
            else:
                conn.execute(
                    f"UPDATE undolog.{table} SET chain_prev = %s, chain_hash = %s"
                    " WHERE session_id = %s AND chain_seq = %s",
                    (prev, new, session, seq),
                )
            prev = new
        conn.execute(
            "UPDATE undolog.undolog_chain_heads SET head = %s WHERE session_id = %s",
            (prev, session),
        )
    return prev


def problems(report: chain.Report) -> list[tuple[str, str]]:
    return [(f.table, f.problem) for f in report.findings]


def undolog_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        check=False,
    )


# --- what the chain finds ----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            "UPDATE undolog.undolog_session_history SET at = at + interval '1 microsecond'"
            " WHERE session_id = %(s)s AND chain_seq = 1",
            "altered",
        ),
        (
            "UPDATE undolog.undolog_session_history SET actor = actor || ' '"
            " WHERE session_id = %(s)s AND chain_seq = 1",
            "altered",
        ),
        (
            "UPDATE undolog.undolog_effect_log SET intercepted_by = 'mallory'"
            " WHERE session_id = %(s)s AND commit_seq = 2",
            "altered",
        ),
        (
            "UPDATE undolog.undolog_effect_log SET args = '{\"n\": 0.0}'"
            " WHERE session_id = %(s)s AND commit_seq = 2",
            "altered",
        ),
        (
            'UPDATE undolog.undolog_effect_log SET result_snapshot = \'{"ok": "0"}\''
            " WHERE session_id = %(s)s AND commit_seq = 2",
            "altered",
        ),
        (
            "UPDATE undolog.undolog_effect_log SET committed_at = committed_at"
            " AT TIME ZONE 'UTC' AT TIME ZONE 'Asia/Kathmandu'"
            " WHERE session_id = %(s)s AND commit_seq = 2",
            "altered",
        ),
        # moved into another session: its own record names its session
        (
            "UPDATE undolog.undolog_effect_log SET session_id = %(o)s"
            " WHERE session_id = %(s)s AND commit_seq = 3",
            "altered",
        ),
        # the middle row deleted
        (
            "DELETE FROM undolog.undolog_effect_log WHERE session_id = %(s)s AND commit_seq = 3",
            "missing",
        ),
        # the tail deleted, the head left alone
        (
            "DELETE FROM undolog.undolog_effect_log WHERE session_id = %(s)s AND commit_seq >= 3",
            "head",
        ),
        # two rows swap their links (reordered)
        (
            "UPDATE undolog.undolog_effect_log SET commit_seq = 5 - commit_seq"
            " WHERE session_id = %(s)s AND commit_seq IN (2, 3)",
            "link",
        ),
    ],
)
def test_one_change_behind_the_triggers_back_is_found(
    conn: Conn, change: str, problem: str
) -> None:
    session = engine.begin_session(conn, agent="victim")
    calls(conn, session, 3)
    other = engine.begin_session(conn, agent="other")
    assert chain.verify(conn).ok
    tamper(conn, change, {"s": session, "o": other})
    report = chain.verify(conn)
    assert problem in [f.problem for f in report.findings], report.findings


def test_a_tail_deleted_after_an_anchor_is_found_even_with_the_head_moved_back(
    conn: Conn,
) -> None:
    session = engine.begin_session(conn, agent="tail")
    made = calls(conn, session, 3)
    chain.write_anchor(conn)
    kept = links(conn, session)[1]  # seq 2: the first call's commit
    tamper(conn, "DELETE FROM undolog.undolog_undo_stack WHERE effect_id = ANY(%s)", (made[1:],))
    tamper(conn, "DELETE FROM undolog.undolog_effect_log WHERE effect_id = ANY(%s)", (made[1:],))
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_heads SET seq = %s, prev = %s, head = %s"
        " WHERE session_id = %s",
        (kept[0], kept[3], kept[4], session),
    )
    assert problems(chain.verify(conn)) == [("undolog_chain_anchors", "anchored")]
    assert problems(chain.verify(conn, session)) == [("undolog_chain_anchors", "anchored")]


def test_rows_after_the_latest_anchor_are_only_as_safe_as_the_next_anchor(conn: Conn) -> None:
    """Documented (Limits): only what was anchored is safe from a consistent rewrite. A
    row forged at the end of a chain, its hash and the head recomputed, verifies clean
    until an anchor records it; then it stays, and anchors cannot tell it from a real
    one. What was anchored before it stays pinned."""
    session = engine.begin_session(conn, agent="forged")
    calls(conn, session, 1)
    chain.write_anchor(conn)
    seq, _t, _k, _p, head, _c = links(conn, session)[-1]
    tamper(
        conn,
        "INSERT INTO undolog.undolog_session_history (session_id, from_state, to_state, at,"
        " actor, history_id) OVERRIDING SYSTEM VALUE"
        " VALUES (%s, 'active', 'completed', now(), 'mallory', 999999)",
        (session,),
    )
    (canonical,) = conn.execute(
        "SELECT canonical FROM undolog.chain_events(%s) WHERE seq IS NULL", (session,)
    ).fetchone() or (None,)
    assert canonical is not None
    forged = chain.chain_hash(bytes(head), canonical)
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET chain_seq = %s, chain_prev = %s,"
        " chain_hash = %s WHERE history_id = 999999",
        (seq + 1, head, forged),
    )
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_heads SET seq = %s, prev = %s, head = %s"
        " WHERE session_id = %s",
        (seq + 1, head, forged, session),
    )
    assert chain.verify(conn).ok  # a consistent append past the anchor: not visible
    # ... but changing what the anchor covers is, however consistent
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET actor = 'mallory'"
        " WHERE session_id = %s AND chain_seq = 1",
        (session,),
    )
    rewrite_consistently(conn, session)
    assert problems(chain.verify(conn)) == [("undolog_chain_anchors", "anchored")]


# --- the anchor kept outside, with one session verified ---------------------------


def rewrite_session_and_its_old_anchor(conn: Conn, session: uuid.UUID, how: str) -> None:
    """The superuser's full attack on one session: a row changed, the session's chain
    and head recomputed, and the older anchor that recorded its head made to record the
    new head instead: its heads only ('heads'), its canonical record and hash recomputed
    too ('rehashed'), and the next anchor's prev made to follow ('relinked'). Whichever,
    the anchors' chain no longer reaches the kept anchor as it was."""
    tamper(
        conn,
        'UPDATE undolog.undolog_effect_log SET result_snapshot = \'{"ok": "stolen"}\''
        " WHERE session_id = %s AND commit_seq = 2",
        (session,),
    )
    head = rewrite_consistently(conn, session)
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_anchors SET heads = jsonb_set(heads, ARRAY[%s::text],"
        " jsonb_build_array((heads -> %s::text ->> 0)::bigint, %s::text))"
        " WHERE heads ? %s::text",
        (str(session), str(session), head.hex(), str(session)),
    )
    if how in ("rehashed", "relinked"):
        tamper(
            conn,
            "UPDATE undolog.undolog_chain_anchors SET canonical ="
            " undolog.anchor_record(anchor_id, written_at, heads) WHERE anchor_id = 1",
        )
        tamper(
            conn,
            "UPDATE undolog.undolog_chain_anchors SET anchor_hash ="
            " undolog.chain_hash(prev, canonical) WHERE anchor_id = 1",
        )
    if how == "relinked":
        tamper(
            conn,
            "UPDATE undolog.undolog_chain_anchors SET prev ="
            " (SELECT anchor_hash FROM undolog.undolog_chain_anchors WHERE anchor_id = 1)"
            " WHERE anchor_id = 2",
        )


@pytest.mark.parametrize(
    ("how", "problem"),
    [
        ("heads", ("anchor_id=1", "altered")),
        ("rehashed", ("anchor_id=2", "link")),
        ("relinked", ("anchor_id=2", "link")),
    ],
)
def test_one_session_verified_against_a_kept_anchor_finds_a_rewritten_older_anchor(
    dsn: str, conn: Conn, tmp_path: Path, how: str, problem: tuple[str, str]
) -> None:
    """`undolog verify --session S --anchor FILE`: the anchor kept outside is the
    latest; the one that recorded S's head is an older one, pinned only by the anchors'
    own chain up to the kept one. Verifying one session must check that chain too, or a
    rewritten session and its older anchor verify clean."""
    victim = engine.begin_session(conn, agent="victim")
    calls(conn, victim, 2)
    chain.write_anchor(conn)  # records the victim's head
    later = engine.begin_session(conn, agent="later")
    calls(conn, later, 1)
    kept = chain.write_anchor(conn)  # the one exported: records `later` only
    assert str(victim) not in json.loads(kept["canonical"])["heads"]
    assert chain.verify(conn, victim).ok and chain.check_anchor(conn, kept) == []

    rewrite_session_and_its_old_anchor(conn, victim, how)

    everything = chain.verify(conn)
    assert not everything.ok
    # one session: its rows match the rewritten anchor; the kept anchor's chain does not
    assert chain.verify(conn, victim).ok
    held = chain.check_anchor(conn, kept)
    assert [(f.key, f.problem) for f in held] == [problem], held

    path = tmp_path / "anchor.json"
    path.write_text(json.dumps(kept))
    got = undolog_cli(dsn, "verify", "--session", str(victim), "--anchor", str(path))
    assert got.returncode == EXIT_MISMATCH, got.stdout + got.stderr
    assert f"{problem[1]}: undolog_chain_anchors {problem[0]}" in got.stdout


def test_a_kept_anchors_chain_tells_a_seq_of_true_from_1(conn: Conn) -> None:
    """The heads an older anchor records are compared with those its hashed record
    names as JSON values of one type: Python's True == 1 let a seq rewritten to true
    pass as the 1 that was hashed."""
    first = engine.begin_session(conn, agent="first")  # its head: seq 1
    chain.write_anchor(conn)
    engine.begin_session(conn, agent="later")
    kept = chain.write_anchor(conn)
    assert chain.check_anchor(conn, kept) == []
    tamper(
        conn,
        "UPDATE undolog.undolog_chain_anchors"
        " SET heads = jsonb_set(heads, ARRAY[%s::text, '0'], 'true') WHERE anchor_id = 1",
        (str(first),),
    )
    held = chain.check_anchor(conn, kept)
    assert [(f.key, f.problem, f.found) for f in held] == [
        ("anchor_id=1", "altered", "other heads")
    ], held


# --- the canonical record: two values written alike -------------------------------
# Each of these was a real collision: the owner changed a column behind the triggers'
# back and the row still hashed to its stored link, so no verification could see it.
# The times are spelled apart now (chain_time: a year BC, ±infinity), without changing
# the record of any row the engine writes (it never writes those times). SQL NULL and
# the JSON null are still written alike (json_build_object): telling them apart in the
# record would change the record of every row already written that holds one of them.
# The engine's own invariants tell them apart instead (undolog.chain_impossible_rows,
# problem 'impossible'): where the engine writes only one of the two, or neither, the
# other is a change. Every column whose record conflates them is covered below; the
# canonical record itself stays as it was (an export checked offline cannot tell them).


def test_a_time_moved_to_its_year_bc_is_found(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="era")
    calls(conn, session, 1)
    before = conn.execute(
        "SELECT at FROM undolog.undolog_session_history WHERE session_id = %s", (session,)
    ).fetchone()
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET at ="
        " (to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || ' BC')::timestamp"
        " AT TIME ZONE 'UTC' WHERE session_id = %s",
        (session,),
    )
    after = conn.execute(
        "SELECT at::text FROM undolog.undolog_session_history WHERE session_id = %s", (session,)
    ).fetchone()
    assert before is not None and after is not None and after[0].endswith(" BC")
    assert not chain.verify(conn, session).ok


def test_an_approval_that_never_expires_made_to_have_expired_is_found(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="expiry")
    payout = engine.intercept(conn, session, 0, "adv_pay", "irreversible", {"cents": 5})
    assert payout.approval_id is not None
    expires = conn.execute(
        "SELECT expires_at FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (payout.approval_id,),
    ).fetchone()
    assert expires == (None,)  # no expiry
    tamper(
        conn,
        "UPDATE undolog.undolog_approval_requests SET expires_at = '-infinity'"
        " WHERE approval_id = %s",
        (payout.approval_id,),
    )
    assert not chain.verify(conn, session).ok


def walked_session(conn: Conn) -> uuid.UUID:
    """A session whose one call was committed, then undone by the walk: history rows
    with no detail (SQL NULL) in each of the three history tables."""
    session = engine.begin_session(conn, agent="walked")
    calls(conn, session, 1)
    engine.fail_session(conn, session, "the agent gave up")
    claim = conn.execute(
        "SELECT undo_id, attempt FROM undolog.claim_compensation(%s)", (session,)
    ).fetchone()
    assert claim is not None
    conn.execute("SELECT undolog.complete_compensation(%s, %s)", claim)
    return session


def test_a_result_of_json_null_made_sql_null_is_found(dsn: str, conn: Conn) -> None:
    """commit records a call that returned nothing as the JSON null; SQL NULL is "no
    result recorded". The record writes both as null; a committed call never holds SQL
    NULL (commit writes coalesce(result, 'null')), so verify names the row."""
    session = engine.begin_session(conn, agent="nothing")
    found = engine.intercept(
        conn, session, 0, "adv_create", "compensable", {"n": 0}, {"name": "adv_undo"}
    )
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, None)
    other = engine.begin_session(conn, agent="bystander")
    calls(conn, other, 1)
    held = conn.execute(
        "SELECT result_snapshot IS NULL, result_snapshot = 'null'::jsonb"
        " FROM undolog.undolog_effect_log WHERE effect_id = %s",
        (found.effect_id,),
    ).fetchone()
    assert held == (False, True)
    assert chain.verify(conn).ok
    tamper(
        conn,
        "UPDATE undolog.undolog_effect_log SET result_snapshot = NULL WHERE effect_id = %s",
        (found.effect_id,),
    )
    key = f"effect_id={found.effect_id} committed"
    expected = [("undolog_effect_log", key, "impossible", "result: SQL NULL")]
    for report in (chain.verify(conn), chain.verify(conn, session)):
        got = [(f.table, f.key, f.problem, f.found) for f in report.findings]
        assert got == expected, report.findings
    assert chain.verify(conn, other).ok  # one session verified: only its own rows
    cli = undolog_cli(dsn, "verify", "--session", str(session))
    assert cli.returncode == EXIT_MISMATCH, cli.stdout + cli.stderr
    assert f"impossible: undolog_effect_log {key}" in cli.stdout


@pytest.mark.parametrize("value", ["null", '{"ok": "forged"}'])
def test_a_result_given_to_a_call_that_never_committed_is_found(conn: Conn, value: str) -> None:
    """A call that failed (or that the walk took while it ran) never committed: it holds
    no result, and its created record writes 'result' null whatever the column holds. A
    result written there behind the triggers' back (one the compensation would be
    handed) is named."""
    session = engine.begin_session(conn, agent="uncommitted")
    found = engine.intercept(
        conn, session, 0, "adv_create", "compensable", {"n": 0}, {"name": "adv_undo"}
    )
    assert found.effect_id is not None
    engine.fail(conn, found.effect_id, "the body raised")
    assert chain.verify(conn, session).ok
    tamper(
        conn,
        "UPDATE undolog.undolog_effect_log SET result_snapshot = %s::jsonb WHERE effect_id = %s",
        (value, found.effect_id),
    )
    assert [(f.key, f.problem) for f in chain.verify(conn, session).findings] == [
        (f"effect_id={found.effect_id} created", "impossible")
    ]


@pytest.mark.parametrize(
    "table", ["undolog_session_history", "undolog_effect_history", "undolog_undo_history"]
)
def test_a_detail_of_sql_null_made_json_null_is_found(conn: Conn, table: str) -> None:
    """A history row with nothing to add has no detail (SQL NULL); the engine never
    writes the JSON null there (a detail is an object, or none). The record writes both
    as null; verify names the row."""
    session = walked_session(conn)
    assert chain.verify(conn, session).ok
    (seq,) = conn.execute(
        f"SELECT min(chain_seq) FROM undolog.{table} WHERE session_id = %s AND detail IS NULL",
        (session,),
    ).fetchone() or (None,)
    assert seq is not None
    tamper(
        conn,
        f"UPDATE undolog.{table} SET detail = 'null'::jsonb"
        " WHERE session_id = %s AND chain_seq = %s",
        (session, seq),
    )
    report = chain.verify(conn, session)
    assert [(f.table, f.seq, f.problem, f.found) for f in report.findings] == [
        (table, seq, "impossible", "detail: JSON null")
    ]


def test_what_the_engine_writes_is_never_impossible(conn: Conn) -> None:
    """The rules hold for every row the engine writes: results of None, a replay, a
    failed call retried, the walk taking a running call and that call's late result of
    None (recorded in a detail stripped of its nulls), each history with no detail."""
    session = engine.begin_session(conn, agent="honest")
    calls(conn, session, 1)
    nothing = engine.intercept(
        conn, session, 1, "adv_create", "compensable", {"n": 1}, {"name": "adv_undo"}
    )
    assert nothing.effect_id is not None
    engine.commit(conn, nothing.effect_id, None)
    again = engine.intercept(
        conn, session, 1, "adv_create", "compensable", {"n": 1}, {"name": "adv_undo"}
    )
    assert again.action == "replay"
    running = engine.intercept(
        conn, session, 2, "adv_create", "compensable", {"n": 2}, {"name": "adv_undo"}
    )
    assert running.effect_id is not None
    engine.fail(conn, running.effect_id, "the body raised")
    retried = engine.intercept(
        conn, session, 2, "adv_create", "compensable", {"n": 2}, {"name": "adv_undo"}
    )
    assert retried.effect_id == running.effect_id
    engine.fail_session(conn, session, "the agent gave up")
    late = False
    while (
        claim := conn.execute(
            "SELECT undo_id, attempt FROM undolog.claim_compensation(%s)", (session,)
        ).fetchone()
    ) is not None:
        if not late:
            with pytest.raises(LateResult):
                engine.commit(conn, running.effect_id, None)
            late = True
        conn.execute("SELECT undolog.complete_compensation(%s, %s)", claim)
    events = conn.execute(
        "SELECT array_agg(DISTINCT event) FROM undolog.undolog_effect_history"
        " WHERE session_id = %s",
        (session,),
    ).fetchone()
    assert events is not None and {"replayed", "late_commit"} <= set(events[0])
    assert chain.verify(conn, session).ok, chain.verify(conn, session).findings
    assert conn.execute(
        "SELECT count(*) FROM undolog.chain_impossible_rows(%s)", (session,)
    ).fetchone() == (0,)


def test_an_export_cannot_tell_sql_null_from_json_null(conn: Conn) -> None:
    """Documented (Limits): the export holds the canonical record, which writes both
    alike, so the offline check of an export made after the change finds nothing; the
    online verify does."""
    session = walked_session(conn)
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET detail = 'null'::jsonb"
        " WHERE session_id = %s AND detail IS NULL",
        (session,),
    )
    assert not chain.verify(conn, session).ok
    assert chain.verify_export(chain.export_session(conn, session)).ok


@pytest.mark.parametrize(
    ("column", "value"),
    [
        # the separator, quotes and escapes inside a text: JSON-escaped
        ("actor", 'x", "actor" : "y'),
        ("actor", "x\\ny"),
        # the same letter, composed and decomposed: different bytes, different hashes
        ("actor", "e\u0301"),
        # empty text vs NULL vs the word null
        ("actor", ""),
        ("actor", "null"),
        ("detail", '"null"'),
        ("detail", "{}"),
        # numbers of another scale stay apart in jsonb
        ("detail", '{"n": 1.0}'),
    ],
)
def test_look_alike_values_are_written_apart(conn: Conn, column: str, value: str) -> None:
    """What the canonical record keeps apart (json_build_object over typed values)."""
    session = engine.begin_session(conn, agent="lookalike")
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET detail = '{\"n\": 1}' WHERE session_id = %s",
        (session,),
    )
    rewrite_consistently(conn, session)
    assert chain.verify(conn, session).ok
    tamper(
        conn,
        f"UPDATE undolog.undolog_session_history SET {column} = %s WHERE session_id = %s",
        (value, session),
    )
    assert [f.problem for f in chain.verify(conn, session).findings] == ["altered"]


# --- months: dropped behind retention's back; the --since window -------------------


def test_a_month_detached_behind_retentions_back_is_found_from_the_cut_off(
    conn: Conn,
) -> None:
    """Retention drops months before its cut-off, and the auditor verifies --since the
    cut-off. A month after it detached by the owner (the calls and their history gone
    from the journal) is found in that window, and without it."""
    session = engine.begin_session(conn, agent="month")
    (start,) = conn.execute(
        "SELECT min(at) FROM undolog.undolog_session_history WHERE session_id = %s", (session,)
    ).fetchone() or (None,)
    calls(conn, session, 2)
    chain.write_anchor(conn)
    engine.complete_session(conn, session)
    assert chain.verify(conn, since=start).ok
    parts = conn.execute(
        "SELECT DISTINCT tableoid::regclass::text FROM undolog.undolog_effect_log"
        " WHERE session_id = %s",
        (session,),
    ).fetchall()
    assert parts
    for (part,) in parts:
        conn.execute(f"ALTER TABLE undolog.undolog_effect_log DETACH PARTITION {part}")
    for scope in ({}, {"since": start}, {"session_id": session, "since": start}):
        found = {f.problem for f in chain.verify(conn, **scope).findings}
        assert {"missing", "anchored"} <= found, (scope, found)


def test_since_trusts_the_rows_own_times(conn: Conn) -> None:
    """Documented: --since checks the rows whose own time is from T on, the first one
    from its own prev. A time is a column the owner can change: the rows of a session
    re-dated before T (the chain and the anchor left as they are) leave the window, and
    --since says nothing; verifying without --since finds them. Pinned so that a change
    is seen; what the auditor should know is in the report."""
    session = engine.begin_session(conn, agent="redated")
    (start,) = conn.execute(
        "SELECT min(at) FROM undolog.undolog_session_history WHERE session_id = %s", (session,)
    ).fetchone() or (None,)
    calls(conn, session, 2)
    chain.write_anchor(conn)
    tamper(
        conn,
        "UPDATE undolog.undolog_session_history SET at = at - interval '400 days'"
        " WHERE session_id = %s",
        (session,),
    )
    tamper(
        conn,
        "UPDATE undolog.undolog_effect_log SET committed_at = committed_at - interval '400 days'"
        " WHERE session_id = %s",
        (session,),
    )
    assert chain.verify(conn, since=start).ok
    assert chain.verify(conn, session, since=start).ok
    assert {f.problem for f in chain.verify(conn).findings} == {"altered"}
