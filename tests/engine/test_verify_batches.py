"""`undolog verify` of every session checks a range of session ids at a time
(undolog.verify_chain's p_after_session, p_through_session; chain.verify's batches), and
answers exactly what one call over every session answers: the same findings in the same
order, the same counts, whichever batch each tampered session falls in, on a batch's edge
or inside it, and the anchors' own chain checked once."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from undolog import chain, engine

Conn = psycopg.Connection[Any]


def tamper(conn: Conn, *statements: str, params: Any = ()) -> None:
    """Change history as the owner or a superuser can: every trigger off."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for sql in statements:
            conn.execute(sql, params)


def session_with_calls(conn: Conn, count: int) -> uuid.UUID:
    session = engine.begin_session(conn, agent="batches")
    for step in range(count):
        found = engine.intercept(
            conn, session, step, "adv_create", "compensable", {"n": step}, {"name": "adv_undo"}
        )
        assert found.effect_id is not None
        engine.commit(conn, found.effect_id, {"ok": step})
    return session


def whole_run(conn: Conn) -> list[chain.Finding]:
    """One call of undolog.verify_chain over every session, as before the batches."""
    rows = conn.execute("SELECT * FROM undolog.verify_chain()").fetchall()
    return [
        chain.Finding(None if r[0] is None else str(r[0]), r[1], r[2], r[3], r[4], r[5], r[6])
        for r in rows
    ]


# Each tampered session's change, by its place in id order; the last session stays clean.
CHANGES: list[tuple[str, ...]] = [
    # altered: a column changed
    (
        "UPDATE undolog.undolog_session_history SET actor = actor || ' '"
        " WHERE session_id = %(s)s AND chain_seq = 1",
    ),
    # missing (and link): the middle row deleted
    ("DELETE FROM undolog.undolog_effect_log WHERE session_id = %(s)s AND commit_seq = 3",),
    # link: two rows swap their links
    (
        "UPDATE undolog.undolog_effect_log SET commit_seq = 5 - commit_seq"
        " WHERE session_id = %(s)s AND commit_seq IN (2, 3)",
    ),
    # head: the head moved
    ("UPDATE undolog.undolog_chain_heads SET seq = seq + 1 WHERE session_id = %(s)s",),
    # anchored (and altered, head): the last row's hash, which the anchor recorded, changed
    (
        "UPDATE undolog.undolog_effect_log SET commit_hash = sha256(commit_hash)"
        " WHERE session_id = %(s)s AND commit_seq = 4",
    ),
    # impossible (and altered): a committed result made SQL NULL
    (
        "UPDATE undolog.undolog_effect_log SET result_snapshot = NULL"
        " WHERE session_id = %(s)s AND commit_seq = 2",
    ),
    # unchained: a row slipped in behind the trigger
    (
        "INSERT INTO undolog.undolog_operator_actions (session_id, action, performed_by)"
        " VALUES (%(s)s, 'abandon', 'mallory')",
    ),
    # anchored, with no row and no head left: a session the batches' plan does not know
    (
        "DELETE FROM undolog.undolog_effect_log WHERE session_id = %(s)s",
        "DELETE FROM undolog.undolog_session_history WHERE session_id = %(s)s",
        "DELETE FROM undolog.undolog_chain_heads WHERE session_id = %(s)s",
    ),
]


@pytest.fixture
def tampered(conn: Conn) -> list[uuid.UUID]:
    """Sessions of 4 rows each (a start, three committed calls), anchored, then each but
    the last changed by one of CHANGES; and the first anchor's link changed (the anchors'
    own chain). Answers the sessions in id order."""
    sessions = sorted(session_with_calls(conn, 3) for _ in range(len(CHANGES) + 1))
    chain.write_anchor(conn)
    chain.write_anchor(conn)
    for session, change in zip(sessions, CHANGES, strict=False):
        tamper(conn, *change, params={"s": session})
    tamper(conn, "UPDATE undolog.undolog_chain_anchors SET prev = '\\x00' WHERE anchor_id = 2")
    return sessions


def test_every_batch_size_answers_the_whole_runs_findings_in_its_order(
    conn: Conn, tampered: list[uuid.UUID]
) -> None:
    whole = whole_run(conn)
    problems = {f.problem for f in whole}
    assert problems == {
        "altered",
        "missing",
        "link",
        "head",
        "anchored",
        "impossible",
        "unchained",
    }, whole
    # every tampered session is named, and the anchors' own chain (no session), last
    assert {f.session_id for f in whole} == {str(s) for s in tampered[:-1]} | {None}
    assert [f.problem for f in whole if f.session_id is None] == ["link", "altered"]
    assert all(f.session_id is None for f in whole[-2:])
    one = chain.verify(conn, batch_rows=10**9)
    assert one.findings == whole
    # the counts are the rows verify_chain recomputes, every canonical record built
    counted = "SELECT count(DISTINCT session_id), count(*) FROM undolog.chain_events()"
    assert (one.sessions, one.rows) == conn.execute(counted).fetchone()
    rows = one.rows
    # from one session a batch to one batch for all: every edge falls between two
    # sessions somewhere, on each tampered one
    for batch_rows in range(1, rows + 2):
        seen: list[chain.Progress] = []
        report = chain.verify(conn, batch_rows=batch_rows, on_progress=seen.append)
        assert report == one, batch_rows
        assert seen[-1].rows == seen[-1].rows_total and seen[-1].percent == 100
        assert seen[-1].sessions == seen[-1].sessions_total


def test_one_session_a_batch_reports_progress_after_each(
    conn: Conn, tampered: list[uuid.UUID]
) -> None:
    seen: list[chain.Progress] = []
    chain.verify(conn, batch_rows=1, on_progress=seen.append)
    heads = conn.execute("SELECT count(*), sum(seq) FROM undolog.chain_heads").fetchone()
    assert heads is not None
    assert len(seen) == heads[0]  # a batch per session with a head
    assert [p.sessions for p in seen] == list(range(1, heads[0] + 1))
    assert all(p.sessions_total == heads[0] and p.rows_total == heads[1] for p in seen)
    assert [p.rows for p in seen] == sorted(p.rows for p in seen)
    assert seen[-1].rows == heads[1]


def test_one_session_is_one_call_without_progress(conn: Conn, tampered: list[uuid.UUID]) -> None:
    seen: list[chain.Progress] = []
    report = chain.verify(conn, tampered[3], on_progress=seen.append)
    assert seen == []
    assert [f.problem for f in report.findings] == ["head"]
    assert report.sessions == 1


def test_an_empty_journal_is_one_batch(conn: Conn) -> None:
    seen: list[chain.Progress] = []
    report = chain.verify(conn, batch_rows=1, on_progress=seen.append)
    assert report == chain.Report(0, 0, [])
    assert seen == [chain.Progress(0, 0, 0, 0)] and seen[0].percent == 100


def test_the_batches_read_one_snapshot(dsn: str, conn: Conn) -> None:
    """A session started, or a call journaled, between two batches is not seen half: the
    batches read the snapshot of the first (a head moved after it would be a finding)."""
    sessions = sorted(session_with_calls(conn, 1) for _ in range(3))
    with psycopg.connect(dsn, autocommit=True) as other:

        def meanwhile(done: chain.Progress) -> None:
            if done.sessions == 1:  # after the first batch: the last session moves on
                found = engine.intercept(
                    other, sessions[-1], 9, "adv_create", "compensable", {}, {"name": "adv_undo"}
                )
                assert found.effect_id is not None
                engine.commit(other, found.effect_id, {})

        report = chain.verify(conn, batch_rows=1, on_progress=meanwhile)
    assert report.ok, report.findings
    assert report.rows == 3 * 2  # the rows as they were when the verification started


def test_a_batch_size_below_one_is_refused(conn: Conn) -> None:
    with pytest.raises(ValueError, match="batch_rows"):
        chain.verify(conn, batch_rows=0)


def test_many_anchored_heads_make_the_default_batches_longer(
    conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch reads every head the anchors record: by default a batch has at least a
    row for every ANCHORED_HEADS_PER_ROW of them, so that they never cost more than the
    rows; a batch size given is kept."""
    monkeypatch.setattr(chain, "BATCH_ROWS", 1)
    monkeypatch.setattr(chain, "ANCHORED_HEADS_PER_ROW", 1)
    for _ in range(3):
        engine.begin_session(conn, agent="batches")  # a row each

    def batches(batch_rows: int | None = None) -> int:
        seen: list[chain.Progress] = []
        assert chain.verify(conn, batch_rows=batch_rows, on_progress=seen.append).ok
        return len(seen)

    assert batches() == 3
    chain.write_anchor(conn)  # three heads: batches of three rows at least
    assert batches() == 1
    assert batches(batch_rows=1) == 3
