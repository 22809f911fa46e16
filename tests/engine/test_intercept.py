"""intercept / commit / fail through the Python wrappers, against a real PostgreSQL:
the exactly-once paths and the errors a careless or hostile client meets."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from undolog import engine, errors
from undolog.signature import call_signature

DELETE_USER = {"name": "delete_user", "args": {"soft": True}}
Conn = psycopg.Connection[Any]


def _counts(conn: Conn) -> dict[str, int]:
    tables = [
        "undolog_sessions",
        "undolog_effect_log",
        "undolog_effect_history",
        "undolog_undo_stack",
        "undolog_approval_requests",
        "undolog_session_history",
    ]
    counts = {}
    for t in tables:
        row = conn.execute(f"SELECT count(*) FROM undolog.{t}").fetchone()
        assert row is not None
        counts[t] = int(row[0])
    return counts


def _effect(conn: Conn, effect_id: uuid.UUID | None) -> dict[str, Any]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    row = cur.execute(
        "SELECT * FROM undolog.undolog_effect_log WHERE effect_id = %s", (effect_id,)
    ).fetchone()
    assert row is not None
    return row


def test_execute_commit_then_replay_returns_the_cached_result(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="test")
    args = {"email": "ada@example.com", "name": "Ada"}
    first = engine.intercept(conn, session, 0, "create_user", "compensable", args, DELETE_USER)
    assert (first.action, first.state) == ("execute", "executing")
    engine.commit(conn, first.effect_id, {"user_id": 42})  # type: ignore[arg-type]

    again = engine.intercept(conn, session, 0, "create_user", "compensable", args, DELETE_USER)
    assert (again.action, again.effect_id, again.result_snapshot) == (
        "replay",
        first.effect_id,
        {"user_id": 42},
    )
    row = _effect(conn, first.effect_id)
    assert (row["state"], row["replay_count"], row["attempts"]) == ("committed", 1, 1)
    stack = conn.execute("SELECT compensation FROM undolog.undolog_undo_stack").fetchall()
    assert stack == [(DELETE_USER,)]


def test_fail_then_retry_executes_again(conn: Conn) -> None:
    session = engine.begin_session(conn)
    args = {"to": "ada@example.com"}
    first = engine.intercept(
        conn, session, 0, "send_email", "compensable", args, {"name": "retract"}
    )
    assert first.effect_id is not None
    engine.fail(conn, first.effect_id, "smtp timeout")
    assert _effect(conn, first.effect_id)["state"] == "pending"
    retry = engine.intercept(
        conn, session, 0, "send_email", "compensable", args, {"name": "retract"}
    )
    assert (retry.action, retry.effect_id) == ("execute", first.effect_id)
    engine.commit(conn, first.effect_id, None)
    row = _effect(conn, first.effect_id)
    assert (row["state"], row["attempts"], row["result_snapshot"]) == ("committed", 2, None)
    history = conn.execute(
        "SELECT from_state, to_state, detail FROM undolog.effect_timeline "
        "WHERE effect_id = %s ORDER BY seq, at",
        (first.effect_id,),
    ).fetchall()
    assert history == [
        (None, "executing", None),  # created executing, in its own row (one event, not two)
        ("executing", "pending", {"error": "smtp timeout"}),
        ("pending", "executing", None),
        ("executing", "committed", None),  # in its own row too
    ]
    # only the two events between them are history rows
    assert conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_history WHERE effect_id = %s",
        (first.effect_id,),
    ).fetchone() == (2,)


def test_duplicate_of_an_executing_call_is_in_progress(conn: Conn) -> None:
    session = engine.begin_session(conn)
    first = engine.intercept(conn, session, 0, "t", "compensable", {}, {"name": "u"})
    second = engine.intercept(conn, session, 0, "t", "compensable", {}, {"name": "u"})
    assert (second.action, second.effect_id) == ("in_progress", first.effect_id)


def test_irreversible_call_waits_for_approval(conn: Conn) -> None:
    session = engine.begin_session(conn)
    found = engine.intercept(conn, session, 0, "payout", "irreversible", {"amount": 10})
    assert (found.action, found.state) == ("await_approval", "pending")
    assert found.approval_id is not None
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (session,)
    ).fetchone()
    assert state == ("awaiting_approval",)
    # asking again answers the same request; new calls are refused meanwhile
    again = engine.intercept(conn, session, 0, "payout", "irreversible", {"amount": 10})
    assert (again.action, again.approval_id) == ("await_approval", found.approval_id)
    with pytest.raises(errors.SessionNotActive):
        engine.intercept(conn, session, 1, "t", "compensable", {}, {"name": "u"})


@pytest.mark.parametrize(
    "change",
    [
        {"step_index": 1},
        {"tool_name": "other_tool"},
        {"args": {"email": "mallory@example.com"}},
        {"tier": "irreversible", "compensation": None},
    ],
    ids=["step", "tool", "args", "tier"],
)
def test_replay_with_altered_call_is_a_signature_mismatch(
    conn: Conn, change: dict[str, Any]
) -> None:
    session = engine.begin_session(conn)
    call: dict[str, Any] = {
        "step_index": 0,
        "tool_name": "create_user",
        "tier": "compensable",
        "args": {"email": "ada@example.com"},
        "compensation": DELETE_USER,
    }
    signature = call_signature(session, 0, "create_user", call["args"])
    first = engine.intercept(conn, session, **call, call_signature=signature)
    assert first.effect_id is not None
    engine.commit(conn, first.effect_id, {"user_id": 1})
    before = _counts(conn)
    with pytest.raises(errors.SignatureMismatch):
        engine.intercept(conn, session, **{**call, **change}, call_signature=signature)
    assert _counts(conn) == before


def test_signature_of_another_session_gets_nothing_of_it(conn: Conn) -> None:
    """Signatures are unique per session (the registry's key, as Citus can enforce it): a
    signature copied from another session is a new call of the copier's own session, with
    its own effect, and never the victim's effect or result."""
    victim = engine.begin_session(conn)
    args = {"email": "ada@example.com"}
    signature = call_signature(victim, 0, "create_user", args)
    found = engine.intercept(conn, victim, 0, "create_user", "compensable", args, DELETE_USER)
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"secret": "victim's result"})
    attacker = engine.begin_session(conn)
    forged = engine.intercept(
        conn,
        attacker,
        0,
        "create_user",
        "compensable",
        args,
        DELETE_USER,
        call_signature=signature,
    )
    assert forged.action == "execute"
    assert forged.effect_id not in (None, found.effect_id)
    assert forged.result_snapshot is None
    rows = conn.execute(
        "SELECT session_id, state, result_snapshot, replay_count FROM undolog.undolog_effect_log"
        " WHERE call_signature = %s ORDER BY state",
        (signature,),
    ).fetchall()
    assert rows == [
        (victim, "committed", {"secret": "victim's result"}, 0),
        (attacker, "executing", None, 0),
    ]


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"call_signature": "abc"}, errors.MalformedSignature),
        ({"call_signature": "A" * 64}, errors.MalformedSignature),
        ({"tier": "safe"}, errors.InvalidTier),
        ({"tier": "sometimes"}, errors.InvalidTier),
        ({"compensation": None}, errors.InvalidCompensation),
        ({"compensation": {"args": {}}}, errors.InvalidCompensation),
        ({"compensation": {"name": "u", "max_attempts": 0}}, errors.InvalidCompensation),
        ({"compensation": {"name": "u", "extra": 1}}, errors.InvalidCompensation),
        ({"step_index": -1}, errors.InvalidArgument),
        ({"tool_name": " "}, errors.InvalidArgument),
        ({"args": {"blob": "x" * (1024 * 1024 + 1)}}, errors.PayloadTooLarge),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else next(iter(v)),
)
def test_bad_calls_are_refused_and_write_nothing(
    conn: Conn, overrides: dict[str, Any], error: type[Exception]
) -> None:
    session = engine.begin_session(conn)
    call: dict[str, Any] = {
        "step_index": 0,
        "tool_name": "create_user",
        "tier": "compensable",
        "args": {"email": "ada@example.com"},
        "compensation": DELETE_USER,
        "call_signature": "a" * 64,
    }
    call.update(overrides)
    before = _counts(conn)
    with pytest.raises(error):
        engine.intercept(conn, session, **call)
    assert _counts(conn) == before


def test_irreversible_with_compensation_is_refused(conn: Conn) -> None:
    session = engine.begin_session(conn)
    with pytest.raises(errors.InvalidCompensation):
        engine.intercept(conn, session, 0, "payout", "irreversible", {}, DELETE_USER)


def test_args_that_are_not_an_object_are_refused(conn: Conn) -> None:
    session = engine.begin_session(conn)
    with pytest.raises(errors.InvalidArgument), engine.translated():
        conn.execute(
            "SELECT undolog.intercept(%s, 0, 't', 'compensable', '[1, 2]', %s, "
            '\'{"name": "u"}\')',
            (session, "b" * 64),
        )


def test_unknown_session_and_effect(conn: Conn) -> None:
    with pytest.raises(errors.UnknownSession):
        engine.intercept(conn, uuid.uuid4(), 0, "t", "compensable", {}, {"name": "u"})
    with pytest.raises(errors.UnknownEffect):
        engine.commit(conn, uuid.uuid4(), {})
    with pytest.raises(errors.UnknownEffect):
        engine.fail(conn, uuid.uuid4(), "boom")


def test_commit_of_an_effect_that_is_not_executing(conn: Conn) -> None:
    session = engine.begin_session(conn)
    found = engine.intercept(conn, session, 0, "t", "compensable", {}, {"name": "u"})
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, 1)
    before = _counts(conn)
    with pytest.raises(errors.InvalidStateTransition):
        engine.commit(conn, found.effect_id, 2)
    with pytest.raises(errors.InvalidStateTransition):
        engine.fail(conn, found.effect_id, "late")
    assert _counts(conn) == before
    assert _effect(conn, found.effect_id)["result_snapshot"] == 1


def test_result_over_the_limit_is_refused(conn: Conn) -> None:
    session = engine.begin_session(conn)
    found = engine.intercept(conn, session, 0, "t", "compensable", {}, {"name": "u"})
    assert found.effect_id is not None
    with pytest.raises(errors.PayloadTooLarge):
        engine.commit(conn, found.effect_id, "y" * (1024 * 1024 + 1))
    assert _effect(conn, found.effect_id)["state"] == "executing"


def test_session_lifecycle_and_lease(conn: Conn) -> None:
    session = engine.begin_session(conn, agent="a", metadata={"k": "v"})
    assert engine.begin_session(conn, session) == session  # resumed, not duplicated
    expires = engine.heartbeat(conn, session)
    assert expires is not None
    assert engine.complete_session(conn, session) == "completed"
    with pytest.raises(errors.SessionNotActive):
        engine.heartbeat(conn, session)
    with pytest.raises(errors.InvalidStateTransition):
        engine.fail_session(conn, session, "too late")
    other = engine.begin_session(conn)
    assert engine.fail_session(conn, other, "boom") == "failed"
    with pytest.raises(errors.InvalidStateTransition):
        engine.fail_session(conn, other, "twice")
    with pytest.raises(errors.UnknownSession):
        engine.heartbeat(conn, uuid.uuid4())


def test_committed_calls_replay_after_the_session_ended(conn: Conn) -> None:
    session = engine.begin_session(conn)
    found = engine.intercept(conn, session, 0, "t", "compensable", {"a": 1}, {"name": "u"})
    assert found.effect_id is not None
    engine.commit(conn, found.effect_id, {"ok": True})
    engine.complete_session(conn, session)
    replay = engine.intercept(conn, session, 0, "t", "compensable", {"a": 1}, {"name": "u"})
    assert (replay.action, replay.result_snapshot) == ("replay", {"ok": True})
    with pytest.raises(errors.SessionNotActive):
        engine.intercept(conn, session, 1, "t", "compensable", {"a": 2}, {"name": "u"})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"metadata": {"x": "y" * (1024 * 1024 + 1)}}, errors.PayloadTooLarge)],
)
def test_begin_session_bad_input(
    conn: Conn, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    before = _counts(conn)
    with pytest.raises(error):
        engine.begin_session(conn, **kwargs)
    with pytest.raises(errors.InvalidArgument), engine.translated():
        conn.execute("SELECT undolog.begin_session(NULL, NULL, '[]')")
    with pytest.raises(errors.InvalidArgument), engine.translated():
        conn.execute("SELECT undolog.begin_session(NULL, NULL, '{}', '0 seconds')")
    assert _counts(conn) == before
