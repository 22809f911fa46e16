"""Partition maintenance catching up a missed month while agents run,
against a real PostgreSQL: it deadlocked their intercepts and commits (40P01)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from undolog import engine, errors

Conn = psycopg.Connection[Any]
RETRACT = {"name": "retract_email"}


def _missed_month(conn: Conn) -> None:
    """As after a missed month: the current month has no partitions (its rows land in
    the DEFAULT partitions) and a month past a 12-month retention still exists."""
    names = conn.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " JOIN pg_class AS p ON p.oid = i.inhparent"
        " WHERE p.relname IN ('undolog_effect_log', 'undolog_effect_history')"
        " AND c.relname LIKE '%%' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')"
    ).fetchall()
    assert len(names) == 2
    for (name,) in names:
        conn.execute(f'DROP TABLE undolog."{name}"')
    conn.execute(
        "SELECT undolog.create_month_partitions("
        "((now() AT TIME ZONE 'UTC') - interval '14 months')::date)"
    )


def _agent(dsn: str, stop: threading.Event, failures: list[str], calls: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            sid = engine.begin_session(conn, agent="busy")
            try:
                for step in range(3):
                    args = {"n": step}
                    got = engine.intercept(conn, sid, step, "send", "compensable", args, RETRACT)
                    assert got.effect_id is not None
                    engine.commit(conn, got.effect_id, {"sent": step})
                    calls.append(1)
                engine.complete_session(conn, sid)
            except (psycopg.Error, errors.UndoLogError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")


def test_catching_up_a_missed_month_never_fails_agents_calls(dsn: str, conn: Conn) -> None:
    _missed_month(conn)
    stop = threading.Event()
    failures: list[str] = []
    calls: list[int] = []
    agents = [threading.Thread(target=_agent, args=(dsn, stop, failures, calls)) for _ in range(6)]
    for a in agents:
        a.start()
    try:
        while len(calls) < 60:  # the default partition holds this month's rows now
            time.sleep(0.01)
        with psycopg.connect(dsn, autocommit=True) as maintainer:
            done = maintainer.execute(
                "SELECT action, partition FROM undolog.maintain_partitions(3, 12)"
            ).fetchall()
        time.sleep(0.3)  # agents carry on after it
    finally:
        stop.set()
        for a in agents:
            a.join()
    assert failures == []
    actions = {(action, name[-7:]) for action, name in done}
    assert ("dropped", "effect_log_"[-1:] + "") is not None  # see below
    assert any(a == "dropped" for a, _ in actions), done
    assert any(a == "created" for a, _ in actions), done
    left = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_effect_log_default)"
        " + (SELECT count(*) FROM undolog.undolog_effect_history_default)"
    ).fetchone()
    assert left == (0,)  # drained, and no later call landed there


# --- an open read of the effect log neither stops maintenance nor stalls agents ---------

MONTH_AHEAD = 5  # the fixture's install created months up to 3 ahead: this one is new


def _month_name(conn: Conn, parent: str, ahead: int) -> str:
    row = conn.execute(
        "SELECT %s || '_' || to_char(undolog.utc_month(now(), %s), 'YYYY_MM')", (parent, ahead)
    ).fetchone()
    assert row is not None
    return str(row[0])


def _attached(conn: Conn, name: str) -> bool:
    row = conn.execute(
        "SELECT c.relispartition FROM pg_class AS c"
        " WHERE c.relname = %s AND c.relnamespace = 'undolog'::regnamespace",
        (name,),
    ).fetchone()
    return bool(row and row[0])


def test_an_open_read_neither_blocks_maintenance_nor_stalls_agents(dsn: str, conn: Conn) -> None:
    conn.execute("SELECT * FROM undolog.maintain_partitions(3, 12)").fetchall()
    names = [
        _month_name(conn, p, MONTH_AHEAD) for p in ("undolog_effect_log", "undolog_effect_history")
    ]
    reader = psycopg.connect(dsn)  # an agent's read transaction, left open
    reader.execute("SELECT count(*) FROM undolog.undolog_effect_log").fetchone()
    worst: list[float] = []
    stop = threading.Event()

    def agent() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SET lock_timeout = '5s'")
            sid = engine.begin_session(c, agent="busy")
            step = 0
            while not stop.is_set():
                started = time.monotonic()
                got = engine.intercept(c, sid, step, "send", "compensable", {"n": step}, RETRACT)
                assert got.effect_id is not None
                engine.commit(c, got.effect_id, {"sent": step})
                worst.append(time.monotonic() - started)
                step += 1

    calls = threading.Thread(target=agent)
    calls.start()
    try:
        time.sleep(0.2)
        with psycopg.connect(dsn, autocommit=True) as maintainer:
            maintainer.execute("SET statement_timeout = '10s'")  # the old code waited forever
            started = time.monotonic()
            done = maintainer.execute(
                "SELECT * FROM undolog.maintain_partitions(%s, 12)", (MONTH_AHEAD,)
            ).fetchall()
            took = time.monotonic() - started
            time.sleep(0.2)
    finally:
        stop.set()
        calls.join()
    assert took < 2.0, f"maintain took {took:.2f} s behind an open read"
    # The effect log's month waits (the reader holds its default partition); its
    # history's, which nobody reads, is attached at once.
    assert ("pending", names[0]) in done and ("created", names[1]) in done, done
    assert worst and max(worst) < 1.0, f"an agent's call took {max(worst):.3f} s"
    print(f"maintain {took:.3f} s; agent calls {len(worst)}, worst {max(worst) * 1000:.0f} ms")
    assert not _attached(conn, names[0]) and _attached(conn, names[1])
    # The reader goes: the next run attaches the months created ahead.
    reader.close()
    done = conn.execute(
        "SELECT * FROM undolog.maintain_partitions(%s, 12)", (MONTH_AHEAD,)
    ).fetchall()
    assert ("created", names[0]) in done, done
    assert all(_attached(conn, n) for n in names)
    assert conn.execute("SELECT count(*) FROM undolog.pending_partitions()").fetchone() == (0,)
