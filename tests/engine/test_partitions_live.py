"""Partition maintenance on a live journal: real agent threads journal calls
(register_tool, intercept_tool, commit) while ``maintain_partitions`` runs, and every
agent call's latency and error is recorded. The promise under test: maintenance never
makes an agent's call fail, never stalls one beyond a short bound, leaves a lock it
cannot get soon for the next run, and never drops a month an unfinished session holds."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from undolog import chain, engine, errors, partitions
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]
RETRACT = {"name": "retract_email"}


class Agents:
    """``n`` agent threads, each on its own autocommit connection, journaling calls of a
    registered tool in a loop (one session each): per-call latency, and every failure
    with its SQLSTATE."""

    def __init__(self, dsn: str, n: int = 4) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.latencies: list[tuple[float, float]] = []  # (started, seconds)
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            tool = engine.register_tool(c, "send_email", "compensable", RETRACT)
            sid = engine.begin_session(c, agent="live")
            step = 0
            while not self.stop.is_set():
                args = {"n": step}
                started = time.monotonic()
                try:
                    got = engine.intercept_tool(
                        c, sid, tool, step, args, call_signature(sid, step, "send_email", args)
                    )
                    assert got.effect_id is not None
                    engine.commit(c, got.effect_id, {"sent": step})
                except (psycopg.Error, errors.UndoLogError) as exc:
                    state = getattr(exc, "sqlstate", None) or getattr(exc, "code", None)
                    self.failures.append(f"{state} {type(exc).__name__}: {exc}")
                self.latencies.append((started, time.monotonic() - started))
                step += 1

    def __enter__(self) -> Agents:
        for t in self.threads:
            t.start()
        while len(self.latencies) < 10 * len(self.threads):
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def worst_ms(self, since: float = 0.0) -> float:
        return max((s for t, s in self.latencies if t + s >= since), default=0.0) * 1000


def _month_name(conn: Conn, parent: str, offset: int) -> str:
    row = conn.execute(
        "SELECT %s || '_' || to_char(undolog.utc_month(now(), %s), 'YYYY_MM')", (parent, offset)
    ).fetchone()
    assert row is not None
    return str(row[0])


def _old_month(conn: Conn, effects: int = 0, state: str = "completed") -> uuid.UUID:
    """A month 14 months back (past a 12-month retention), holding ``effects`` calls of
    one session in ``state``."""
    conn.execute(
        "SELECT undolog.create_month_partitions(((now() AT TIME ZONE 'UTC')"
        " - interval '14 months')::date)"
    )
    sid = uuid.uuid4()
    conn.execute(
        "INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at)"
        " VALUES (%s, '5 minutes', now())",
        (sid,),
    )
    if effects:
        conn.execute(
            "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,"
            " call_signature, step_index, tool_name, tier, args, state)"
            " SELECT gen_random_uuid(), %s, undolog.month_start(undolog.utc_month(now(), -14))"
            " + g * interval '1 second', md5(g::text), g, 'send_email', 'compensable',"
            " jsonb_build_object('n', g), 'executing' FROM generate_series(1, %s) AS g",
            (sid, effects),
        )
        conn.execute(
            "INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at,"
            " call_signature, compensation) SELECT session_id, effect_id, executed_at,"
            " call_signature, %s::jsonb FROM undolog.undolog_effect_log"
            " WHERE session_id = %s ORDER BY step_index",
            ('{"name": "retract_email", "args": {}}', sid),
        )
    path = {"halted": ["failed", "compensating", "halted"], "compensating": ["failed", state]}
    for step in path.get(state, [state]):
        conn.execute(
            "UPDATE undolog.undolog_sessions SET state = %s WHERE session_id = %s", (step, sid)
        )
    return sid


def _missed_month(conn: Conn, rows: int) -> None:
    """The current month lost its partitions: ``rows`` calls of it in the DEFAULT ones."""
    for parent in ("undolog_effect_log", "undolog_effect_history"):
        conn.execute(f'DROP TABLE undolog."{_month_name(conn, parent, 0)}"')
    sid = uuid.uuid4()
    conn.execute(
        "INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at,"
        " state) VALUES (%s, '5 minutes', now(), 'active')",
        (sid,),
    )
    conn.execute(
        "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at,"
        " call_signature, step_index, tool_name, tier, args, state)"
        " SELECT gen_random_uuid(), %s, now() - g * interval '1 millisecond', md5(g::text), g,"
        " 'send_email', 'compensable', jsonb_build_object('n', g), 'executing'"
        " FROM generate_series(1, %s) AS g",
        (sid, rows),
    )
    conn.execute(
        "UPDATE undolog.undolog_sessions SET state = 'completed' WHERE session_id = %s", (sid,)
    )


def _maintain(dsn: str, months_ahead: int = 3, timeout: str = "20s") -> tuple[list[Any], float]:
    with psycopg.connect(dsn, autocommit=True) as m:
        m.execute(f"SET statement_timeout = '{timeout}'")
        started = time.monotonic()
        done = m.execute(
            "SELECT action, partition FROM undolog.maintain_partitions(%s, 12)", (months_ahead,)
        ).fetchall()
        return done, time.monotonic() - started


def _undo_rows(conn: Conn, sid: uuid.UUID) -> int:
    row = conn.execute(
        "SELECT count(*) FROM undolog.undolog_undo_stack WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _maintain_behind_a_reader(dsn: str, months_ahead: int) -> list[tuple[str, str]]:
    """maintain_partitions while an analyst's read of the journal stays open and four
    agents journal calls: it must neither wait long nor stall or fail an agent's call.
    Answers what it did."""
    reader = psycopg.connect(dsn)
    reader.execute("SELECT count(*) FROM undolog.undolog_effect_log").fetchone()
    try:
        with Agents(dsn, 4) as agents:
            t0 = time.monotonic()
            done, took = _maintain(dsn, months_ahead, timeout="6s")
            time.sleep(0.2)
    finally:
        reader.close()
    worst = agents.worst_ms(t0)
    print(f"\nmaintain {took * 1000:.0f} ms, agents' worst call {worst:.0f} ms")
    assert agents.failures == []
    assert took < 3.0, f"maintain waited {took:.2f} s behind the reader"
    assert worst < 1000, f"an agent's call waited {worst:.0f} ms behind maintenance"
    return done


def test_maintain_under_agents_drains_drops_creates_and_anchors(dsn: str, conn: Conn) -> None:
    """Draining a missed month (its rows in the DEFAULT partitions), dropping a month past
    retention and creating months ahead, four agents calling meanwhile: no call fails;
    the drain holds both parents for the move (documented), so the worst call waits
    about as long as the move (~9 ms per thousand rows here)."""
    _old_month(conn, 500)
    _missed_month(conn, 20000)
    with Agents(dsn, 4) as agents:
        t0 = time.monotonic()
        done, took = _maintain(dsn, 5)
        time.sleep(0.3)
    worst = agents.worst_ms(t0)
    print(f"\nmaintain {took * 1000:.0f} ms, agents' worst call {worst:.0f} ms")
    assert agents.failures == []
    actions = {a for a, _ in done}
    assert {"created", "dropped"} <= actions, done
    assert worst < 3000
    left = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_effect_log_default)"
        " + (SELECT count(*) FROM undolog.undolog_effect_history_default)"
    ).fetchone()
    assert left == (0,)
    # The anchor maintenance wrote while agents wrote history holds: every chain verifies.
    assert conn.execute("SELECT count(*) FROM undolog.undolog_chain_anchors").fetchone() != (0,)
    assert chain.verify(conn).ok


def test_a_long_reader_keeps_the_old_month_instead_of_stalling_agents(dsn: str, conn: Conn) -> None:
    """An analyst's read of the journal left open holds ACCESS SHARE on the effect log.
    Retention's DROP needs ACCESS EXCLUSIVE: it queued behind the reader with every
    agent's call queued behind it, until a lock or statement timeout failed the whole
    run (no month ahead created either); with neither set, forever. Now it tries
    briefly, keeps the month for the next run (skipped, with a warning), and goes on."""
    sid = _old_month(conn, 500)
    old = [_month_name(conn, p, -14) for p in ("undolog_effect_log", "undolog_effect_history")]
    done = _maintain_behind_a_reader(dsn, 5)
    assert ("skipped", old[0]) in done and ("skipped", old[1]) in done, done
    # The months ahead: the history's attached, the effect log's pending (the reader
    # holds its DEFAULT partition too: documented, attached by the next run).
    assert ("created", _month_name(conn, "undolog_effect_history", 4)) in done, done
    assert ("pending", _month_name(conn, "undolog_effect_log", 4)) in done, done
    assert _undo_rows(conn, sid) == 500  # the kept month keeps its undo entries
    # The reader gone, the next run drops it.
    done, _ = _maintain(dsn, 5)
    assert ("dropped", old[0]) in done and ("dropped", old[1]) in done, done
    assert ("created", _month_name(conn, "undolog_effect_log", 4)) in done, done
    assert _undo_rows(conn, sid) == 0


def test_drop_partitions_still_waits_as_the_callers_lock_timeout_says(dsn: str, conn: Conn) -> None:
    _old_month(conn, 10)
    reader = psycopg.connect(dsn)
    reader.execute("SELECT count(*) FROM undolog.undolog_effect_log").fetchone()
    try:
        with psycopg.connect(dsn, autocommit=True) as m:
            m.execute("SET lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                m.execute(
                    "SELECT undolog.drop_partitions(undolog.month_start("
                    "undolog.utc_month(now(), -12)))"
                ).fetchall()
    finally:
        reader.close()


def test_two_maintainers_at_once_are_serialised(dsn: str, conn: Conn) -> None:
    """Cron overlapping the CLI: the second waits for the first, then finds nothing."""
    _old_month(conn, 500)
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(_maintain(dsn, 5)[0])
        except psycopg.Error as exc:
            out.append(f"{exc.sqlstate} {exc}")

    with Agents(dsn, 4) as agents:
        t0 = time.monotonic()
        ts = [threading.Thread(target=run) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.2)
    print(f"\nagents' worst call {agents.worst_ms(t0):.0f} ms")
    assert agents.failures == []
    assert all(isinstance(o, list) for o in out), out
    assert sorted(len(o) for o in out) == [0, 10], out


@pytest.mark.parametrize("state", ["halted", "compensating"])
def test_a_month_an_unfinished_session_needs_is_kept_and_the_warning_says_what_to_do(
    dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture, state: str
) -> None:
    sid = _old_month(conn, 50, state=state)
    with caplog.at_level(logging.WARNING, logger="undolog.partitions"):
        done = partitions.maintain(conn, 3, 12)
    old = _month_name(conn, "undolog_effect_log", -14)
    assert ("skipped", old) in done, done
    assert _undo_rows(conn, sid) == 50
    text = caplog.text
    assert f"{sid} ({state})" in text, text
    assert "next maintenance run drops the month" in text and "undolog sessions" in text, text


def _in_default(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM undolog.undolog_effect_log_default").fetchone()
    assert row is not None
    return int(row[0])


def test_a_long_reader_leaves_a_missed_month_in_the_default_instead_of_stalling_agents(
    dsn: str, conn: Conn
) -> None:
    """Catching up a missed month locks both parents ACCESS EXCLUSIVE. Behind an open
    read of the journal that request queued, and every agent's call behind it, until a
    timeout failed the run (or forever). Now it tries briefly and leaves the rows in the
    default partition (writes keep landing there) for the next run, with a warning."""
    _missed_month(conn, 2000)
    current = _month_name(conn, "undolog_effect_log", 0)
    done = _maintain_behind_a_reader(dsn, 3)
    assert ("pending", current) in done, done
    assert _in_default(conn) >= 2000
    done, _ = _maintain(dsn, 3)
    assert ("created", current) in done, done
    assert _in_default(conn) == 0
