"""Sessions an agent login holds cost a worker's pass little. An agent holds its own
failed sessions as long as it keeps open a transaction that made one of their calls again
(a replay, answered from the journal, takes the session's key, shared), any number of
them in one transaction: each worker pass waited lock_session's 5 s for each (then
SessionBusy) before it walked another login's session. The worker's claim now waits
walk.CLAIM_WAIT, and leaves a held session for its next pass.

A real worker (walk.Worker in this process, a pass at a time) against a real database."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from undolog import engine
from undolog.walk import Worker
from worker_support import Conn, failed_session, state_of


def test_sessions_an_agent_holds_do_not_stall_a_pass_for_another_login(
    conn: Conn, dsn: str, login: Callable[..., Conn]
) -> None:
    agent = login("undolog_agent")
    held = [failed_session(agent, "delete_user", n) for n in range(4)]
    holder = psycopg.connect(dsn, user=str(agent.info.user))  # one transaction, left open
    for n, sid in enumerate(held):
        again = engine.intercept(
            holder, sid, 0, "create_user", "compensable", {"user": n}, {"name": "delete_user"}
        )
        assert again.action == "replay"
    victim = failed_session(conn, "delete_user", 7)
    undone: list[int] = []
    worker = Worker(
        lambda: psycopg.connect(dsn, autocommit=True),
        {"delete_user": lambda call: undone.append(call.result["user_id"])},
        notify=False,
    )
    try:
        started = time.monotonic()
        worker.run(once=True)
        took = time.monotonic() - started
        assert state_of(conn, victim) == "compensated" and undone == [7]
        assert took < 5, took  # 4 x 5 s before
        assert [state_of(conn, sid) for sid in held] == ["failed"] * 4
        holder.rollback()  # let go: walked by the next pass
        worker.run(once=True)
        assert [state_of(conn, sid) for sid in held] == ["compensated"] * 4
        assert sorted(undone) == [0, 1, 2, 3, 7]
    finally:
        holder.close()
        worker.stop()
