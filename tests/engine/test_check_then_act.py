"""Check-then-act and lock-order races of the engine's functions, each as a test that
failed before its fix: a function that read a fact and acted on it in another statement,
or took the engine's locks in another order than the paths it races (docs/design/
state-machines.md: the session's row, then its advisory lock, then its entries and
effects; intercept holds the advisory lock shared while it journals)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from undolog import engine, errors, saga
from undolog.signature import call_signature

Conn = psycopg.Connection[Any]
INTERCEPT = "SELECT action FROM undolog.intercept(%s, %s, %s, 'compensable', %s, %s, %s)"


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error, raw or translated (UndoLogError)."""
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _replay(c: Conn, session: uuid.UUID, step: int, tool: str, undo: dict[str, Any]) -> str:
    """One journaled call made again, as its agent run after a crash makes it."""
    args = {"step": step}
    row = c.execute(
        INTERCEPT,
        (session, step, tool, Jsonb(args), call_signature(session, step, tool, args), Jsonb(undo)),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _gate(conn: Conn) -> None:
    """A row the test holds FOR UPDATE, and a trigger function that waits on it: the
    test's own, to hold open the gap it is put in (the engine's functions never wait on
    it when nobody holds the row)."""
    conn.execute("CREATE TABLE public.gate (open boolean)")
    conn.execute("INSERT INTO public.gate VALUES (true)")
    conn.execute(
        "CREATE FUNCTION public.wait_at_gate() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN PERFORM FROM public.gate FOR SHARE; RETURN NEW; END $$"
    )


def _waits_or_ends(conn: Conn, pid: int, thread: threading.Thread) -> bool:
    """Whether backend ``pid`` is waiting for a lock (True) before ``thread`` ends."""
    for _ in range(400):
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            (pid,),
        ).fetchone()
        if row and row[0]:
            return True
        if not thread.is_alive():
            return False
        thread.join(0.025)
    raise AssertionError(f"backend {pid} neither waited nor ended")


def _walk_at_its_last_attempt(agent: Conn, operator: Conn) -> tuple[uuid.UUID, saga.Claim]:
    """A failed session of two committed calls whose top one's compensation has one
    attempt (max_attempts 1), claimed: its failure gives up and halts the session."""
    session = engine.begin_session(agent, agent="walked")
    for step, tool, undo in (
        (0, "book", {"name": "unbook"}),
        (1, "charge", {"name": "refund", "max_attempts": 1}),
    ):
        call = engine.intercept(agent, session, step, tool, "compensable", {"step": step}, undo)
        assert call.action == "execute" and call.effect_id is not None
        engine.commit(agent, call.effect_id, {"done": step})
    engine.fail_session(agent, session, "the agent failed")
    claim = saga.claim_compensation(operator, session)
    assert claim is not None and claim.tool_name == "charge" and claim.attempt == 1
    return session, claim


def _last_failures_beside(
    login: Callable[..., Conn], race: Callable[[Conn, uuid.UUID, saga.Claim], None]
) -> list[str]:
    """60 sessions walked to their top entry's last attempt, whose failure the walker
    reports while another connection of the agent runs ``race`` on that session and claim
    without pause (at least twice before each report): what either side was refused."""
    agent = login("undolog_agent")
    operator = login("undolog_operator")
    failures: list[str] = []
    walked: list[tuple[uuid.UUID, saga.Claim]] = []  # the session being walked now
    raced = threading.Semaphore(0)
    done = threading.Event()

    def racer() -> None:
        with psycopg.connect(agent.info.dsn, autocommit=True) as c:
            while not done.is_set():
                if not walked:
                    done.wait(0.001)
                    continue
                try:
                    race(c, *walked[-1])
                    raced.release()
                except psycopg.Error as exc:
                    failures.append(f"{race.__name__}: {exc.sqlstate}")

    thread = threading.Thread(target=racer)
    thread.start()
    try:
        for _ in range(60):
            walked.append(_walk_at_its_last_attempt(agent, operator))
            for _ in range(2):  # the race is under way
                assert raced.acquire(timeout=30)
            claim = walked[-1][1]
            try:
                answer = saga.fail_compensation(
                    operator, claim.undo_id, "refund refused", claim.attempt
                )
                assert answer == "compensation_failed"
            except (psycopg.Error, errors.UndoLogError) as exc:
                failures.append(f"fail_compensation: {_sqlstate(exc)}")
            while raced.acquire(blocking=False):
                pass
    finally:
        done.set()
        thread.join()
    return failures


# --- fail_compensation: the session's advisory lock before the effect and the chain ----


def test_a_last_failed_compensation_does_not_deadlock_a_replay_of_the_session(
    login: Callable[..., Conn],
) -> None:
    """fail_compensation of an entry's last attempt halts the session. It locked the
    session's row and the entry, wrote the entry, the effect and their history (the
    session's chain head, row locked), and only then, halting the walk, took the
    session's advisory lock (lock_session). A call of the session made again meanwhile
    (an agent run again after a crash replays its committed calls) holds that lock shared
    from its start, then writes its replay to the same chain head: each waited for the
    other, and PostgreSQL ended one of them (40P01). Here another connection of the agent
    replays the session's first call without pause while the walker reports, 60 times."""

    def replay(c: Conn, session: uuid.UUID, _: saga.Claim) -> None:
        assert _replay(c, session, 0, "book", {"name": "unbook"}) == "replay"

    failures = _last_failures_beside(login, replay)
    assert failures == [], f"{len(failures)} deadlocks in 60 reports: {failures}"


def test_a_replay_held_open_does_not_deadlock_a_last_failed_compensation(
    login: Callable[..., Conn], conn: Conn
) -> None:
    """The same wait, made certain: an agent's transaction left open (a call answered
    in_progress holds the session's advisory lock shared) while the walker reports the
    last failure of the top entry's compensation, then, in the same transaction, makes
    the call being undone again. fail_compensation now waits for the session's lock
    before it writes anything, and the agent's call is answered (UL001: it was undone),
    its transaction ends, and the report goes through."""
    agent = login("undolog_agent")
    operator = login("undolog_operator")
    session = engine.begin_session(agent, agent="walked")
    # step 0 executing (its outcome unknown), step 1 committed: the walk takes 1 first.
    running = engine.intercept(
        agent, session, 0, "book", "compensable", {"step": 0}, {"name": "unbook"}
    )
    assert running.action == "execute"
    top = engine.intercept(
        agent,
        session,
        1,
        "charge",
        "compensable",
        {"step": 1},
        {"name": "refund", "max_attempts": 1},
    )
    assert top.action == "execute" and top.effect_id is not None
    engine.commit(agent, top.effect_id, {"done": 1})
    engine.fail_session(agent, session, "the agent failed")
    claim = saga.claim_compensation(operator, session)
    assert claim is not None and claim.effect_id == top.effect_id

    answers: list[str] = []

    def report() -> None:
        try:
            answers.append(
                saga.fail_compensation(operator, claim.undo_id, "refund refused", claim.attempt)
            )
        except (psycopg.Error, errors.UndoLogError) as exc:
            answers.append(f"fail_compensation: {_sqlstate(exc)}")

    with psycopg.connect(agent.info.dsn) as held:  # one transaction, left open
        assert _replay(held, session, 0, "book", {"name": "unbook"}) == "in_progress"
        walker = threading.Thread(target=report)
        walker.start()
        # the report waits for the agent's transaction (for the session's lock)
        assert _waits_or_ends(conn, operator.info.backend_pid, walker)
        with pytest.raises(psycopg.Error) as raised:  # the call being undone, made again
            _replay(held, session, 1, "charge", {"name": "refund", "max_attempts": 1})
        assert raised.value.sqlstate == "UL001"
        held.rollback()
    walker.join(30)
    assert answers == ["compensation_failed"]
    assert engine.session_state(agent, session) == "halted"


def test_a_last_failed_compensation_does_not_deadlock_a_late_result_of_its_call(
    login: Callable[..., Conn],
) -> None:
    """fail_compensation of an entry's last attempt wrote the entry (its history took
    the session's chain head) before it locked the effect to mark it compensation_failed.
    A late result of the same call (its agent, paused past its lease, commits it after
    the walk took it: finish_execution) locks the effect FOR SHARE, then records the
    late result, on the same chain head: each waited for the other, and PostgreSQL ended
    one of them (40P01). Here the agent's other connection sends the call's late result
    without pause while the walker reports, 60 times."""

    def commit_late(c: Conn, _: uuid.UUID, claim: saga.Claim) -> None:
        row = c.execute("SELECT undolog.commit(%s, %s)", (claim.effect_id, Jsonb({"done": 1})))
        assert row.fetchone() == ("late",)

    failures = _last_failures_beside(login, commit_late)
    assert failures == [], f"{len(failures)} deadlocks in 60 reports: {failures}"


# --- register_tool: the registration it found is the one it answers -------------------


def test_a_registration_retired_while_its_agent_registers_it_again_is_registered_again(
    login: Callable[..., Conn], conn: Conn, dsn: str
) -> None:
    """register_tool inserted a registration, found the name's live one in its way (ON
    CONFLICT DO NOTHING), and read that one in a second statement, which sees what
    committed since: an operator's retirement in between left nothing live to read, and
    the agent got "query returned no rows" (P0002), no registration. The gap between the
    two statements is held open here, by a statement trigger of the test's own that
    waits on a row the test holds, while the operator retires the registration."""
    agent = login("undolog_agent")
    operator = login("undolog_operator")
    first = engine.register_tool(agent, "ship", "compensable", {"name": "unship"})
    _gate(conn)
    conn.execute(  # after the insert's conflict check, before register_tool's next read
        "CREATE TRIGGER wait_at_gate AFTER INSERT ON undolog.undolog_tools"
        " FOR EACH STATEMENT EXECUTE FUNCTION public.wait_at_gate()"
    )
    answers: list[Any] = []

    def register() -> None:
        try:
            answers.append(engine.register_tool(agent, "ship", "compensable", {"name": "unship"}))
        except (psycopg.Error, errors.UndoLogError) as exc:
            answers.append(f"register_tool: {_sqlstate(exc)}")

    with psycopg.connect(dsn) as gate:  # one transaction, holding the gate shut
        gate.execute("SELECT FROM public.gate FOR UPDATE")
        registering = threading.Thread(target=register)
        registering.start()
        assert _waits_or_ends(conn, agent.info.backend_pid, registering)
        retired = operator.execute(
            "SELECT undolog.retire_tool(%s, 'ops', 'replaced')", (first,)
        ).fetchone()
        assert retired is not None
    registering.join(30)
    conn.execute("DROP TRIGGER wait_at_gate ON undolog.undolog_tools")
    assert len(answers) == 1 and isinstance(answers[0], uuid.UUID), answers
    assert answers[0] != first
    live = agent.execute(
        "SELECT tool_id FROM undolog.registered_tools WHERE tool_name = 'ship' AND live"
    ).fetchall()
    assert live == [(answers[0],)]


# --- claim_compensation: a late result in flight is not waited for -------------------


def test_the_walks_first_claim_does_not_deadlock_a_late_commit_of_the_call_it_takes(
    login: Callable[..., Conn], conn: Conn, dsn: str
) -> None:
    """The first claim of a failed session's walk moves it to compensating (its history
    takes the session's chain head), then locks the top entry's effect. The agent of a
    session failed by recovery (its lease ran out while it was paused) commits that very
    call at the same time: the commit locks the effect, then links the commit into the
    same chain. Each waited for the other, and PostgreSQL ended one of them (40P01): the
    commit's answer is committed or late, never an error. The commit is held here after
    it locked the effect (a BEFORE UPDATE trigger of the test's own, which fires before
    the engine's guard), while the walker claims."""
    agent = login("undolog_agent")
    operator = login("undolog_operator")
    session = engine.begin_session(agent, agent="paused", lease=timedelta(seconds=1))
    call = engine.intercept(
        agent, session, 0, "charge", "compensable", {"step": 0}, {"name": "refund"}
    )
    assert call.action == "execute" and call.effect_id is not None
    time.sleep(1.2)
    assert session in saga.recover(operator)
    assert engine.session_state(operator, session) == "failed"
    _gate(conn)
    conn.execute(  # "a_" fires before the engine's guard: the effect is locked, no more
        "CREATE TRIGGER a_wait_at_gate BEFORE UPDATE ON undolog.undolog_effect_log"
        " FOR EACH ROW EXECUTE FUNCTION public.wait_at_gate()"
    )
    answers: dict[str, Any] = {}

    def run(name: str, act: Callable[[], Any]) -> threading.Thread:
        def body() -> None:
            try:
                answers[name] = act()
            except (psycopg.Error, errors.UndoLogError) as exc:
                answers[name] = f"{_sqlstate(exc)}"

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    with psycopg.connect(dsn) as gate:  # one transaction, holding the gate shut
        gate.execute("SELECT FROM public.gate FOR UPDATE")
        committing = run(
            "commit",
            lambda: agent.execute(
                "SELECT undolog.commit(%s, %s)", (call.effect_id, Jsonb({"charged": 1}))
            ).fetchone(),
        )
        assert _waits_or_ends(conn, agent.info.backend_pid, committing)
        claiming = run("claim", lambda: saga.claim_compensation(operator, session))
        _waits_or_ends(conn, operator.info.backend_pid, claiming)
    committing.join(30)
    claiming.join(30)
    conn.execute("DROP TRIGGER a_wait_at_gate ON undolog.undolog_effect_log")
    assert answers["commit"] in {("committed",), ("late",)}, answers
    assert not isinstance(answers["claim"], str), answers
    # The walk goes on: the committed call is undone.
    claim = answers["claim"] or saga.claim_compensation(operator, session)
    assert claim is not None and claim.effect_id == call.effect_id
    saga.complete_compensation(operator, claim.undo_id, claim.attempt)
    assert saga.claim_compensation(operator, session) is None
    assert engine.session_state(operator, session) == "compensated"
