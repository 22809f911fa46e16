"""Crash recovery of the undo walk: a walker process is SIGKILLed mid-compensation, and
recover() + a new walker finish the walk with nothing lost and nothing applied twice.

The fake compensation's "effect" is a row in the test table ``applied``, keyed by the
undo_id it receives as idempotency key (a second run is a no-op, as a real idempotent
compensation endpoint would be); ``runs`` logs every execution, including the no-ops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from undolog import engine, saga

Conn = psycopg.Connection[Any]

CLAIM_TIMEOUT = timedelta(seconds=3)

# The walker process: walks the session, compensating `done` entries fully; on the next
# one it claims, optionally applies the compensation, says READY and waits to be killed.
WALKER = r"""
import os, sys, time, uuid
from datetime import timedelta
import psycopg
from undolog import saga

dsn, sid, done, apply_first, timeout = sys.argv[1:6]
sid = uuid.UUID(sid)

def compensate(conn, claim):
    # Idempotent on the undo_id: a second run for the same entry changes nothing.
    conn.execute("INSERT INTO runs (undo_id, pid) VALUES (%s, %s)",
                 (claim.undo_id, os.getpid()))
    conn.execute("INSERT INTO applied (undo_id) VALUES (%s) ON CONFLICT DO NOTHING",
                 (claim.undo_id,))

with psycopg.connect(dsn, autocommit=True) as conn:
    for i in range(int(done) + 1):
        claim = saga.claim_compensation(conn, sid, timedelta(seconds=float(timeout)))
        assert claim is not None, "nothing to claim"
        if i < int(done):
            compensate(conn, claim)
            saga.complete_compensation(conn, claim.undo_id, claim.attempt)
            continue
        if apply_first == "1":
            compensate(conn, claim)
        print("READY", claim.undo_id, flush=True)
        time.sleep(120)  # "running" the compensation when the SIGKILL comes
"""


def fake_compensation_tables(conn: Conn) -> None:
    conn.execute(
        "CREATE TABLE applied (undo_id uuid PRIMARY KEY, seq bigint GENERATED ALWAYS AS IDENTITY)"
    )
    conn.execute(
        "CREATE TABLE runs (undo_id uuid NOT NULL, pid int NOT NULL,"
        " seq bigint GENERATED ALWAYS AS IDENTITY)"
    )


def compensate(conn: Conn, claim: saga.Claim) -> None:
    """The same fake compensation as the walker process's, run in this process."""
    conn.execute("INSERT INTO runs (undo_id, pid) VALUES (%s, %s)", (claim.undo_id, os.getpid()))
    conn.execute(
        "INSERT INTO applied (undo_id) VALUES (%s) ON CONFLICT DO NOTHING", (claim.undo_id,)
    )


def finish_walk(conn: Conn, sid: uuid.UUID) -> None:
    """A fresh walker: claim, compensate, complete until the session leaves compensating."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        claim = saga.claim_compensation(conn, sid, CLAIM_TIMEOUT)
        if claim is None:
            state = conn.execute(
                "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
            ).fetchone()
            if state != ("compensating",):
                return
            time.sleep(0.05)
            continue
        compensate(conn, claim)
        saga.complete_compensation(conn, claim.undo_id, claim.attempt)
    raise TimeoutError("the walk did not finish")


def wait_until_recover_offers(conn: Conn, sid: uuid.UUID, within: float) -> float:
    """Poll recover() until it names the session; answers how long that took."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if sid in saga.recover(conn):
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"recover() never offered {sid}")


def stack(conn: Conn, sid: uuid.UUID) -> list[uuid.UUID]:
    rows = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s"
        " ORDER BY stack_position DESC",
        (sid,),
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("apply_first", [True, False], ids=["killed-after-apply", "killed-before"])
def test_walker_killed_mid_compensation(conn: Conn, dsn: str, apply_first: bool) -> None:
    fake_compensation_tables(conn)
    sid = engine.begin_session(conn, agent="crash-test")
    for step in range(10):
        hit = engine.intercept(
            conn, sid, step, "reserve", "compensable", {"seat": step}, {"name": "release"}
        )
        assert hit.effect_id is not None
        engine.commit(conn, hit.effect_id, {"reservation": step})
    engine.fail_session(conn, sid, "the agent crashed")
    expected = stack(conn, sid)
    done_before_kill = 3

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WALKER,
            dsn,
            str(sid),
            str(done_before_kill),
            "1" if apply_first else "0",
            str(CLAIM_TIMEOUT.total_seconds()),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until READY (or the child dies)
        assert line.startswith("READY "), f"walker process said {line!r}"
        killed_undo = uuid.UUID(line.split()[1])
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert killed_undo == expected[done_before_kill], "it was working LIFO"

    # The dead walker's claim is still live: nobody else may run that compensation yet,
    # and nothing below it is handed out.
    assert sid not in saga.recover(conn)
    assert saga.claim_compensation(conn, sid, CLAIM_TIMEOUT) is None
    # After the claim timeout, recover() offers the session again ...
    wait_until_recover_offers(conn, sid, within=CLAIM_TIMEOUT.total_seconds() + 10)
    expired = conn.execute(
        "SELECT claimed_until <= now() FROM undolog.undolog_undo_stack WHERE undo_id = %s",
        (killed_undo,),
    ).fetchone()
    assert expired == (True,), "offered because the dead walker's claim expired"
    # ... and a new walker finishes the walk, starting with the killed entry.
    first = saga.claim_compensation(conn, sid, CLAIM_TIMEOUT)
    assert first is not None
    assert (first.undo_id, first.attempt) == (killed_undo, 2)
    compensate(conn, first)
    saga.complete_compensation(conn, first.undo_id, first.attempt)
    finish_walk(conn, sid)

    # Nothing lost, nothing doubled.
    applied = [r[0] for r in conn.execute("SELECT undo_id FROM applied ORDER BY seq").fetchall()]
    assert applied == expected, "every compensation applied exactly once, in LIFO order"
    runs = Counter(r[0] for r in conn.execute("SELECT undo_id FROM runs").fetchall())
    assert runs[killed_undo] == (2 if apply_first else 1), "the re-run was a no-op"
    assert all(runs[u] == 1 for u in expected if u != killed_undo)

    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row == ("compensated",)
    states = conn.execute(
        "SELECT e.state, u.state, count(*) FROM undolog.undolog_effect_log AS e"
        " JOIN undolog.undolog_undo_stack AS u USING (session_id, effect_id)"
        " WHERE e.session_id = %s GROUP BY 1, 2",
        (sid,),
    ).fetchall()
    assert states == [("compensated", "compensated", 10)]
    history = conn.execute(
        "SELECT event, attempt FROM undolog.undolog_undo_history WHERE undo_id = %s"
        " ORDER BY history_id",
        (killed_undo,),
    ).fetchall()
    assert history == [("transition", 1), ("reclaimed", 2), ("transition", 2)]


def test_agent_killed_mid_call_lease_expires_and_the_walk_undoes_it(conn: Conn, dsn: str) -> None:
    """The agent process itself dies with a call in flight: no fail_session ever comes.
    Its lease runs out, recover() fails the session, the walk compensates the call whose
    outcome is unknown (no result snapshot) and everything before it."""
    agent = r"""
import sys, time
from datetime import timedelta
import psycopg
from undolog import engine
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    sid = engine.begin_session(conn, agent="doomed", lease=timedelta(seconds=1))
    engine.register_tool(conn, "charge", "compensable", {"name": "refund"})
    for step in range(3):
        hit = engine.intercept(conn, sid, step, "charge", "compensable", {"n": step},
                               {"name": "refund"})
        if step < 2:
            engine.commit(conn, hit.effect_id, {"charged": step})
    print("READY", sid, flush=True)
    time.sleep(120)  # inside the third call's body when the SIGKILL comes
"""
    child = subprocess.Popen([sys.executable, "-c", agent, dsn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("READY "), f"agent process said {line!r}"
        sid = uuid.UUID(line.split()[1])
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)

    wait_until_recover_offers(conn, sid, within=15)
    row = conn.execute(
        "SELECT state, error FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row == ("failed", "lease expired")

    undone: list[tuple[int, Any]] = []
    while (claim := saga.claim_compensation(conn, sid)) is not None:
        undone.append((claim.args["n"], claim.result_snapshot))
        saga.complete_compensation(conn, claim.undo_id)
    assert undone == [(2, None), (1, {"charged": 1}), (0, {"charged": 0})]
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert state == ("compensated",)
