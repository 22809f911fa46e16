"""``make demo``: one scripted agent session through the engine's SQL API.

It installs the engine (undolog migrate) into the database named by UNDOLOG_DSN (make
demo starts a throwaway PostgreSQL when none is given), then walks a session through
intercept -> commit -> replay -> fail -> retry, and an irreversible call that must wait
for a human, printing each answer and finally what the journal holds.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import psycopg

from undolog import engine
from undolog.migrations import migrate


def _say(text: str) -> None:
    print(text, flush=True)


def _show(label: str, answer: engine.Interception) -> None:
    extra = ""
    if answer.result_snapshot is not None:
        extra = f"  cached result={answer.result_snapshot}"
    if answer.approval_id is not None:
        extra = f"  approval_id={answer.approval_id}"
    _say(f"  {label:<44} -> action={answer.action:<15} state={answer.state}{extra}")


def run(conn: psycopg.Connection[Any]) -> None:
    applied = migrate(conn)
    _say(f"engine installed: {', '.join(applied) or 'already up to date'}\n")

    session = engine.begin_session(conn, agent="demo-agent", metadata={"task": "onboard Ada"})
    _say(f"session {session} begun (lease 5 minutes)\n")

    _say("1. create_user (COMPENSABLE): journaled with its undo entry before it runs")
    args = {"email": "ada@example.com", "name": "Ada"}
    undo = {"name": "delete_user", "args": {"soft": True}}
    first = engine.intercept(conn, session, 0, "create_user", "compensable", args, undo)
    _show("intercept(step 0, create_user)", first)
    assert first.effect_id is not None
    _say("  ... the tool body runs here and returns {'user_id': 42}")
    engine.commit(conn, first.effect_id, {"user_id": 42})
    _say("  commit -> committed, result cached\n")

    _say("2. the agent crashes and replays step 0: the body must not run twice")
    _show(
        "intercept(step 0, create_user) again",
        engine.intercept(conn, session, 0, "create_user", "compensable", args, undo),
    )
    _say("")

    _say("3. send_email (COMPENSABLE) fails, then is retried")
    mail = {"to": "ada@example.com", "subject": "Welcome"}
    retract = {"name": "retract_email"}
    sent = engine.intercept(conn, session, 1, "send_email", "compensable", mail, retract)
    _show("intercept(step 1, send_email)", sent)
    assert sent.effect_id is not None
    engine.fail(conn, sent.effect_id, "SMTP timeout")
    _say("  fail('SMTP timeout') -> pending: it never took effect, so it may run again")
    retry = engine.intercept(conn, session, 1, "send_email", "compensable", mail, retract)
    _show("intercept(step 1, send_email) retry", retry)
    engine.commit(conn, sent.effect_id, {"message_id": "<m1@example.com>"})
    _say("  commit -> committed\n")

    _say("4. process_payout (IRREVERSIBLE): never runs before a human approves")
    payout = engine.intercept(
        conn, session, 2, "process_payout", "irreversible", {"user_id": 42, "amount_cents": 5000}
    )
    _show("intercept(step 2, process_payout)", payout)
    _say("  the session now waits for a human (awaiting_approval); new calls are refused\n")

    _say("What the journal holds:")
    rows = conn.execute(
        """
        SELECT e.step_index, e.tool_name, e.tier, e.state, e.attempts, e.replay_count,
               e.result_snapshot, s.state
        FROM undolog.undolog_effect_log AS e
        JOIN undolog.undolog_sessions AS s USING (session_id)
        WHERE e.session_id = %s ORDER BY e.step_index
        """,
        (session,),
    ).fetchall()
    _say(f"  {'step':<5}{'tool':<16}{'tier':<14}{'state':<11}{'tries':<7}{'replays':<9}result")
    for step, tool, tier, state, attempts, replays, result, _ in rows:
        _say(f"  {step:<5}{tool:<16}{tier:<14}{state:<11}{attempts:<7}{replays:<9}{result}")
    _say(f"  session state: {rows[0][7]}")
    history = conn.execute(
        """
        SELECT e.tool_name, h.event, coalesce(h.from_state, '-'), h.to_state, h.detail
        FROM undolog.undolog_effect_history AS h
        JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
        WHERE h.session_id = %s ORDER BY h.history_id
        """,
        (session,),
    ).fetchall()
    _say("\nIts immutable history:")
    for tool, event, frm, to, detail in history:
        _say(f"  {tool:<16}{event:<11}{frm:>10} -> {to:<10}{detail or ''}")
    stack = conn.execute(
        "SELECT stack_position, compensation FROM undolog.undolog_undo_stack "
        "WHERE session_id = %s ORDER BY stack_position DESC",
        (session,),
    ).fetchall()
    _say("\nIts undo stack, top first (a NULL compensation is the irreversible call's barrier):")
    for position, compensation in stack:
        _say(f"  {position:>4}  {compensation}")


def main() -> int:
    dsn = os.environ.get("UNDOLOG_DSN")
    if not dsn:
        print("UNDOLOG_DSN is not set (make demo starts a throwaway PostgreSQL)", file=sys.stderr)
        return 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        run(conn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
