"""Exactly-once under contention: 16 connections intercept the same 200 calls at once.
Each call's body must be executed exactly once; every other answer is a replay of the
committed result or in_progress (the first is still running)."""

from __future__ import annotations

import collections
import threading
from typing import Any

import psycopg

from undolog import engine
from undolog.signature import call_signature

THREADS = 16
CALLS = 200


def test_sixteen_racers_execute_each_call_exactly_once(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    session = engine.begin_session(conn, agent="race")
    calls = [
        (
            i,
            {"n": i, "to": f"user{i}@example.com"},
            call_signature(session, i, "send_email", {"n": i, "to": f"user{i}@example.com"}),
        )
        for i in range(CALLS)
    ]
    actions: collections.Counter[tuple[int, str]] = collections.Counter()
    replayed_results: dict[int, set[str]] = collections.defaultdict(set)
    lock = threading.Lock()
    start = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def racer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                start.wait()
                for step, args, signature in calls:
                    got = engine.intercept(
                        c,
                        session,
                        step,
                        "send_email",
                        "compensable",
                        args,
                        {"name": "retract_email"},
                        call_signature=signature,
                    )
                    if got.action == "execute":
                        assert got.effect_id is not None
                        engine.commit(c, got.effect_id, {"sent": step})
                    with lock:
                        actions[(step, got.action)] += 1
                        if got.action == "replay":
                            replayed_results[step].add(repr(got.result_snapshot))
        except BaseException as exc:  # collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert failures == []
    for step in range(CALLS):
        assert actions[(step, "execute")] == 1, f"step {step}"
        assert (
            actions[(step, "execute")] + actions[(step, "replay")] + actions[(step, "in_progress")]
        ) == THREADS
        assert replayed_results[step] <= {repr({"sent": step})}
    assert set(a for _, a in actions) <= {"execute", "replay", "in_progress"}

    counts = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_effect_log),"
        " (SELECT count(DISTINCT (session_id, call_signature)) FROM undolog.undolog_undo_stack),"
        " (SELECT count(*) FROM undolog.undolog_undo_stack),"
        " (SELECT count(*) FROM undolog.undolog_effect_log WHERE state = 'committed'),"
        " (SELECT sum(replay_count) FROM undolog.undolog_effect_log)"
    ).fetchone()
    replays = sum(n for (_, a), n in actions.items() if a == "replay")
    assert counts == (CALLS, CALLS, CALLS, CALLS, replays)


def test_a_call_made_again_while_its_commit_is_in_flight_replays_its_result(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The replay's one statement finds the call still executing; the call's commit holds
    its row. The replay then waits on that row, finds it committed, and answers with the
    result, counted once: neither in_progress nor a second execution."""
    session = engine.begin_session(conn, agent="race")
    args = {"to": "ada@example.com"}
    first = engine.intercept(
        conn, session, 0, "send_email", "compensable", args, {"name": "retract_email"}
    )
    assert first.action == "execute" and first.effect_id is not None
    answers: list[engine.Interception] = []
    failures: list[BaseException] = []
    replayer_pid: list[int] = []

    def replay() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                replayer_pid.append(c.info.backend_pid)
                answers.append(
                    engine.intercept(
                        c, session, 0, "send_email", "compensable", args, {"name": "retract_email"}
                    )
                )
        except BaseException as exc:  # asserted below
            failures.append(exc)

    with psycopg.connect(dsn) as committer:  # one transaction, held open
        engine.commit(committer, first.effect_id, {"sent": True})
        replayer = threading.Thread(target=replay)
        replayer.start()
        waiting = False
        for _ in range(200):  # the replay waits for the committing transaction to end
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pid = %s AND wait_event = 'transactionid'",
                (replayer_pid[0] if replayer_pid else 0,),
            ).fetchone()
            waiting = bool(row and row[0])
            if waiting:
                break
            replayer.join(0.05)
        assert waiting
        committer.commit()
    replayer.join(30)

    assert failures == []
    assert [(a.action, a.effect_id, a.result_snapshot) for a in answers] == [
        ("replay", first.effect_id, {"sent": True})
    ]
    counted = conn.execute(
        "SELECT replay_count, (SELECT count(*) FROM undolog.undolog_effect_history AS h"
        " WHERE h.effect_id = e.effect_id AND h.event = 'replayed')"
        " FROM undolog.undolog_effect_log AS e WHERE e.effect_id = %s",
        (first.effect_id,),
    ).fetchone()
    assert counted == (1, 1)
