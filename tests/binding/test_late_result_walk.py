"""A result that arrives after the undo walk took its call (its agent was paused past its
lease) reaches the call's compensation through the binding's walk (undolog.walk): the
next attempt's CompensationCall.result is that result, so a compensation built from it
(a created record's id) runs instead of failing until the session halts. A compensation
in flight is not changed under it, and a late error report hands nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog import LateResult, engine, walk
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]
DESCRIPTOR = {"name": "delete_user"}


def executing_call(conn: Conn) -> tuple[uuid.UUID, uuid.UUID]:
    """A session with one COMPENSABLE call whose body is still running (no result yet),
    failed as recovery fails it when its lease lapsed: (session, effect)."""
    sid = engine.begin_session(conn, agent="paused")
    hit = engine.intercept(conn, sid, 0, "create_user", "compensable", {"email": "a@x"}, DESCRIPTOR)
    assert hit.action == "execute" and hit.effect_id is not None
    engine.fail_session(conn, sid, "lease expired")
    return sid, hit.effect_id


def delete_user(seen: list[tuple[Any, int]], during: Callable[[], None] | None = None) -> Any:
    """A compensation whose argument comes from the result (a `result.user_id` mapping):
    it cannot run without one."""

    def compensation(call: CompensationCall) -> None:
        seen.append((call.result, call.attempt))
        if during is not None:
            during()
            return
        if call.result is None:
            raise LookupError("result.user_id: the call has no result")

    return compensation


def walker(dsn: str) -> Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET undolog.retry_base = '200 milliseconds'")
    return conn


def effect_row(conn: Conn, effect_id: uuid.UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state, result_snapshot, committed_at FROM undolog.undolog_effect_log"
        " WHERE effect_id = %s",
        (effect_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_late_result_reaches_the_next_attempt(conn: Conn, dsn: str) -> None:
    sid, effect_id = executing_call(conn)
    seen: list[tuple[Any, int]] = []
    compensations = {"delete_user": delete_user(seen)}
    notices: list[str] = []
    with walker(dsn) as w:
        w.add_notice_handler(lambda diag: notices.append(str(diag.message_primary)))
        # The walk takes the call: no result, so its compensation cannot be built.
        assert walk.run_walk(w, sid, compensations, wait=0.0) == "compensating"
        assert seen == [(None, 1)]
        assert notices == []
        # The paused agent wakes: its result is late (kept in the effect's history).
        with pytest.raises(LateResult):
            engine.commit(conn, effect_id, {"user_id": 7})
        # The next attempt is handed that result, and the walk ends.
        assert walk.run_walk(w, sid, compensations, wait=5.0) == "compensated"
    assert seen == [(None, 1), ({"user_id": 7}, 2)]
    # The claim said so, for the walker's log.
    assert len(notices) == 1 and f"arrived late for effect {effect_id}" in notices[0]
    # The effect records no commit (its row is the walk's), the session stays flagged for
    # an operator, and the session's history chain verifies.
    assert effect_row(conn, effect_id) == ("compensated", None, None)
    flagged = conn.execute(
        "SELECT needs_attention FROM undolog.sessions_overview WHERE session_id = %s", (sid,)
    ).fetchone()
    assert flagged == (True,)
    assert conn.execute("SELECT * FROM undolog.verify_chain(%s)", (sid,)).fetchall() == []


def test_a_late_result_does_not_change_the_compensation_in_flight(conn: Conn, dsn: str) -> None:
    sid, effect_id = executing_call(conn)
    seen: list[tuple[Any, int]] = []

    def result_arrives() -> None:  # while the compensation runs, from the agent
        with pytest.raises(LateResult):
            engine.commit(conn, effect_id, {"user_id": 8})

    with walker(dsn) as w:
        compensations = {"delete_user": delete_user(seen, during=result_arrives)}
        assert walk.run_walk(w, sid, compensations, wait=0.0) == "compensated"
    assert seen == [(None, 1)]  # it ran once, as it was claimed; nothing ran twice


def test_a_late_error_report_hands_nothing(conn: Conn, dsn: str) -> None:
    sid, effect_id = executing_call(conn)
    seen: list[tuple[Any, int]] = []
    failing = delete_user(seen)

    def second_attempt_gives_up_on_the_result(call: CompensationCall) -> None:
        if call.attempt == 1:
            failing(call)
        seen.append((call.result, call.attempt))

    compensations = {"delete_user": second_attempt_gives_up_on_the_result}
    with walker(dsn) as w:
        assert walk.run_walk(w, sid, compensations, wait=0.0) == "compensating"
        with pytest.raises(LateResult):
            engine.fail(conn, effect_id, "HTTP 500")
        assert walk.run_walk(w, sid, compensations, wait=5.0) == "compensated"
    assert seen == [(None, 1), (None, 2)]
