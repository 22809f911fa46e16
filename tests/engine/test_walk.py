"""The undo walk through the Python binding, with concurrent walkers on separate connections.

Every compensation here is a fake that records its undo_id; the assertions are about what
the engine handed out, how often and in which order.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from undolog import engine, saga
from undolog.errors import (
    InvalidArgument,
    InvalidStateTransition,
    SessionNotActive,
    UnknownSession,
    UnknownUndoEntry,
)

Conn = psycopg.Connection[Any]


def make_session(conn: Conn, calls: int, max_attempts: int | None = None) -> uuid.UUID:
    """A session with ``calls`` committed COMPENSABLE calls, then failed."""
    sid = engine.begin_session(conn, agent="test")
    compensation: dict[str, Any] = {"name": "cancel", "args": {"soft": True}}
    if max_attempts is not None:
        compensation["max_attempts"] = max_attempts
    for step in range(calls):
        hit = engine.intercept(conn, sid, step, "book", "compensable", {"n": step}, compensation)
        assert hit.action == "execute" and hit.effect_id is not None
        engine.commit(conn, hit.effect_id, {"booking": step})
    engine.fail_session(conn, sid, "the agent gave up")
    return sid


def stack(conn: Conn, sid: uuid.UUID) -> list[uuid.UUID]:
    """The session's undo ids, top of the stack first (the order LIFO must follow)."""
    rows = conn.execute(
        "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = %s"
        " ORDER BY stack_position DESC",
        (sid,),
    ).fetchall()
    return [r[0] for r in rows]


def session_state(conn: Conn, sid: uuid.UUID) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    return str(row[0])


class Recorder:
    """What the fake compensations did, shared by the walker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.applied: list[uuid.UUID] = []  # successful compensations, in order
        self.runs: list[tuple[uuid.UUID, int]] = []  # every execution: (undo_id, attempt)
        self.in_flight: set[uuid.UUID] = set()
        self.max_concurrent = 0
        self.by_walker: Counter[str] = Counter()
        self.start = threading.Barrier(2, timeout=30)  # both connected before either claims


def walker(
    dsn: str,
    sid: uuid.UUID,
    name: str,
    rec: Recorder,
    errors: list[BaseException],
    should_fail: Callable[[saga.Claim], bool] = lambda _: False,
) -> None:
    """Claim, run, report, until the session leaves compensating."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET undolog.retry_base = '1 millisecond'")
            conn.execute("SET undolog.retry_cap = '10 milliseconds'")
            rec.start.wait()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                claim = saga.claim_compensation(conn, sid)
                if claim is None:
                    if session_state(conn, sid) != "compensating":
                        return
                    time.sleep(0.001)
                    continue
                with rec.lock:
                    assert claim.undo_id not in rec.in_flight, "handed out twice at once"
                    rec.in_flight.add(claim.undo_id)
                    rec.max_concurrent = max(rec.max_concurrent, len(rec.in_flight))
                    rec.runs.append((claim.undo_id, claim.attempt))
                    rec.by_walker[name] += 1
                time.sleep(random.uniform(0, 0.003))  # the compensation "runs"
                failed = should_fail(claim)
                with rec.lock:
                    rec.in_flight.discard(claim.undo_id)
                    if not failed:
                        rec.applied.append(claim.undo_id)
                if failed:
                    saga.fail_compensation(conn, claim.undo_id, "flaky", claim.attempt)
                else:
                    saga.complete_compensation(conn, claim.undo_id, claim.attempt)
            raise TimeoutError(f"{name}: the walk did not finish")
    except BaseException as exc:
        errors.append(exc)


def run_walkers(
    dsn: str, sid: uuid.UUID, rec: Recorder, should_fail: Callable[[saga.Claim], bool]
) -> None:
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=walker, args=(dsn, sid, f"w{i}", rec, errors, should_fail))
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a walker hung"
    assert not errors, errors


def test_two_walkers_run_each_compensation_once_in_lifo_order(conn: Conn, dsn: str) -> None:
    sid = make_session(conn, 50)
    expected = stack(conn, sid)
    rec = Recorder()

    run_walkers(dsn, sid, rec, should_fail=lambda _: False)

    assert Counter(rec.applied) == Counter(expected), "each compensation ran exactly once"
    assert rec.applied == expected, "strictly LIFO"
    assert rec.max_concurrent == 1, "never two compensations of one session in flight"
    assert set(rec.by_walker) == {"w0", "w1"}, "both walkers took part"
    assert all(attempt == 1 for _, attempt in rec.runs)
    assert session_state(conn, sid) == "compensated"
    states = conn.execute(
        "SELECT e.state, u.state, count(*) FROM undolog.undolog_effect_log AS e"
        " JOIN undolog.undolog_undo_stack AS u USING (session_id, effect_id)"
        " WHERE e.session_id = %s GROUP BY 1, 2",
        (sid,),
    ).fetchall()
    assert states == [("compensated", "compensated", 50)]


def test_two_walkers_with_retries_still_lifo_and_exactly_once(conn: Conn, dsn: str) -> None:
    sid = make_session(conn, 30)
    expected = stack(conn, sid)
    flaky = set(expected[::4])  # these fail on their first two attempts

    rec = Recorder()
    run_walkers(dsn, sid, rec, should_fail=lambda c: c.undo_id in flaky and c.attempt <= 2)

    assert rec.applied == expected, "each succeeded once, strictly LIFO despite the retries"
    attempts = Counter(undo_id for undo_id, _ in rec.runs)
    assert {u: attempts[u] for u in flaky} == dict.fromkeys(flaky, 3)
    assert all(attempts[u] == 1 for u in expected if u not in flaky)
    assert session_state(conn, sid) == "compensated"
    errors = conn.execute(
        "SELECT count(*) FROM undolog.undolog_undo_history"
        " WHERE session_id = %s AND detail ->> 'error' = 'flaky'",
        (sid,),
    ).fetchone()
    assert errors == (2 * len(flaky),), "every failed attempt is in the undo history"


def test_a_locked_top_entry_answers_no_row_never_the_next_one(conn: Conn, dsn: str) -> None:
    sid = make_session(conn, 3)
    top, second, _ = stack(conn, sid)
    with psycopg.connect(dsn) as other:  # a transaction holding the top entry
        other.execute(
            "SELECT 1 FROM undolog.undolog_undo_stack WHERE undo_id = %s FOR UPDATE", (top,)
        )
        assert saga.claim_compensation(conn, sid) is None
        row = conn.execute(
            "SELECT state FROM undolog.undolog_undo_stack WHERE undo_id = %s", (second,)
        ).fetchone()
        assert row == ("pending",)
        other.rollback()
    claim = saga.claim_compensation(conn, sid)
    assert claim is not None and claim.undo_id == top


def test_claim_carries_what_a_compensation_needs(conn: Conn) -> None:
    sid = make_session(conn, 2)
    claim = saga.claim_compensation(conn, sid, claim_timeout=timedelta(seconds=30))
    assert claim is not None
    assert (claim.tool_name, claim.name) == ("book", "cancel")
    assert claim.compensation_args == {"soft": True}
    assert (claim.args, claim.result_snapshot, claim.attempt) == ({"n": 1}, {"booking": 1}, 1)
    until = conn.execute(
        "SELECT claimed_until - claimed_at FROM undolog.undolog_undo_stack WHERE undo_id = %s",
        (claim.undo_id,),
    ).fetchone()
    assert until == (timedelta(seconds=30),)


def test_errors_come_out_as_undolog_exceptions(conn: Conn) -> None:
    sid = make_session(conn, 1)
    with pytest.raises(UnknownUndoEntry):
        saga.complete_compensation(conn, uuid.uuid4())
    with pytest.raises(UnknownSession):
        saga.claim_compensation(conn, uuid.uuid4())
    claim = saga.claim_compensation(conn, sid)
    assert claim is not None
    saga.complete_compensation(conn, claim.undo_id)
    with pytest.raises(InvalidStateTransition):
        saga.complete_compensation(conn, claim.undo_id)
    with pytest.raises(InvalidStateTransition):
        saga.fail_compensation(conn, claim.undo_id, "late")
    active = engine.begin_session(conn)
    with pytest.raises(SessionNotActive):
        saga.claim_compensation(conn, active)
    with pytest.raises(InvalidArgument):
        saga.claim_compensation(conn, sid, claim_timeout=timedelta(0))


def test_operator_functions_through_the_binding(conn: Conn) -> None:
    sid = make_session(conn, 2, max_attempts=1)
    top, bottom = stack(conn, sid)
    claim = saga.claim_compensation(conn, sid)
    assert claim is not None and claim.undo_id == top
    assert saga.fail_compensation(conn, top, "refused by the API") == "compensation_failed"
    assert session_state(conn, sid) == "halted"
    with pytest.raises(SessionNotActive):
        saga.claim_compensation(conn, sid)
    with pytest.raises(InvalidArgument):
        saga.retry_compensation(conn, top, by="")

    assert saga.retry_compensation(conn, top, by="alice", reason="API fixed") == "compensating"
    claim = saga.claim_compensation(conn, sid)
    assert claim is not None and (claim.undo_id, claim.attempt) == (top, 2)
    assert saga.fail_compensation(conn, top, "still refused") == "compensation_failed"

    assert saga.resume_session(conn, sid, by="alice") == "compensating"
    claim = saga.claim_compensation(conn, sid)
    assert claim is not None and claim.undo_id == bottom
    assert saga.fail_compensation(conn, bottom, "refused too") == "compensation_failed"

    assert saga.abandon_session(conn, sid, by="alice", reason="both refunded by hand") == "halted"
    with pytest.raises(InvalidStateTransition):
        saga.resume_session(conn, sid, by="bob")
    assert sid not in saga.recover(conn)
    actions = conn.execute(
        "SELECT action, performed_by FROM undolog.undolog_operator_actions"
        " WHERE session_id = %s ORDER BY action_id",
        (sid,),
    ).fetchall()
    assert actions == [("retry", "alice"), ("resume", "alice"), ("abandon", "alice")]


def test_recover_names_sessions_whose_walk_must_run(conn: Conn) -> None:
    failed = make_session(conn, 1)
    alive = engine.begin_session(conn)
    assert saga.recover(conn) == [failed]
    assert session_state(conn, alive) == "active"
    claim = saga.claim_compensation(conn, failed)
    assert claim is not None
    assert saga.recover(conn) == [], "in flight under a live claim"
    saga.complete_compensation(conn, claim.undo_id)
    assert saga.recover(conn) == [failed], "the final claim is still to be made"
    assert saga.claim_compensation(conn, failed) is None
    assert saga.recover(conn) == []


def test_sys_exit_in_a_compensation_is_recorded_then_ends_the_walk(conn: Conn) -> None:
    """sys.exit() while a compensation runs (a SIGTERM handler's, Celery's WorkerShutdown)
    is the program asking to stop: the attempt is recorded as failed (the entry is not
    left claimed until claim_timeout), and the SystemExit goes on up rather than being
    taken for one failure more of the walk."""
    from undolog.walk import run_walk

    sid = make_session(conn, 2)
    ran: list[int] = []

    def cancel(call: Any) -> None:
        ran.append(call.call_args["n"])
        raise SystemExit(0)

    with pytest.raises(SystemExit):
        run_walk(conn, sid, {"cancel": cancel}, wait=5.0)
    assert ran == [1]  # the top entry, once: the walk stopped there
    rows = conn.execute(
        "SELECT state, attempts, last_error FROM undolog.undolog_undo_stack"
        " WHERE session_id = %s ORDER BY stack_position DESC",
        (sid,),
    ).fetchall()
    assert rows[0][:2] == ("pending", 1) and rows[0][2] == "SystemExit: 0", rows
    assert rows[1][:2] == ("pending", 0)


def test_a_compensation_that_does_not_return_is_said_while_it_runs(
    conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A compensation holds its walker until it returns (a walker cannot stop it). A
    worker stuck in one showed nothing: the operator saw it walk nothing else. Now the
    walk says, every STILL_RUNNING_EVERY seconds, which compensation of which call has
    not returned and what to do; once it returns, nothing more is said."""
    from undolog import walk

    monkeypatch.setattr(walk, "STILL_RUNNING_EVERY", 0.1)
    sid = make_session(conn, 1)

    def cancel(call: Any) -> None:
        time.sleep(0.35)

    with caplog.at_level("WARNING", logger="undolog.walk"):
        assert walk.run_walk(conn, sid, {"cancel": cancel}, wait=5.0) == "compensated"
        said = [r.getMessage() for r in caplog.records if "has not returned" in r.getMessage()]
        time.sleep(0.3)  # returned: the watch has ended
        assert len([r for r in caplog.records if "has not returned" in r.getMessage()]) == len(said)
    assert 2 <= len(said) <= 4, said
    assert "compensation cancel of book" in said[0] and "claim_timeout" in said[0]


def test_one_sessions_walk_raising_does_not_stop_the_others_in_work(
    conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """walk.work() (ul.work(): one worker pass) walks each session on its own, as the
    worker does: one whose walk raises (a row of it psycopg cannot load, say) is logged,
    the others are walked, and then the first error is raised, naming every session
    whose walk raised."""
    from undolog import walk

    hostile = [make_session(conn, 1), make_session(conn, 1)]
    victim = make_session(conn, 2)
    later = make_session(conn, 1)
    real = saga.claim_compensation

    def claim(c: Any, sid: uuid.UUID) -> saga.Claim | None:
        if sid in hostile:
            raise ValueError(f"cannot load a row of {sid}")
        return real(c, sid)

    monkeypatch.setattr(saga, "claim_compensation", claim)
    undone: list[int] = []
    with pytest.raises(ValueError, match="cannot load a row of") as raised:
        walk.work(conn, {"cancel": lambda call: undone.append(call.call_args["n"])})
    assert session_state(conn, victim) == "compensated"
    assert session_state(conn, later) == "compensated"
    assert sorted(undone) == [0, 0, 1]
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert all(str(sid) in notes for sid in hostile), notes
    assert "2 other session(s) walked" in notes, notes
    logged = [r for r in caplog.records if r.name == "undolog.walk" and r.levelname == "ERROR"]
    assert {str(sid) for sid in hostile} <= {str(a) for r in logged for a in r.args or ()}
