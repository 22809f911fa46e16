"""An upstream's answer that comes after the undo walk took its call (the session was
rolled back and `undolog worker` claimed the call while its answer was awaited): the
engine keeps it as late (a late_commit event, the session flagged for an operator), and
the walk's next attempt at the call's compensation is handed that result, so that a
`result.` mapping is filled and the call is undone with the real id instead of the walk
halting for a human. Real processes, as in test_mcp_proxy_late."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from test_mcp_proxy import ledger, names, ops, run_worker, sessions, wait_for
from test_mcp_proxy_hostile import Line
from test_mcp_proxy_late import late_events, late_policy, walked_before_its_answer

__all__ = ["ledger"]  # a fixture, used by name


def test_a_late_answer_reaches_the_compensation_at_its_next_attempt(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    line = Line(late_policy(tmp_path), dsn, ledger)
    config = tmp_path / "late.toml"
    try:
        sid = walked_before_its_answer(line, conn, dsn, config, ledger)
        assert names(ledger) == ["slow_make"]  # the compensation was not run
        wait_for(lambda: late_events(conn), timeout=30)
    finally:
        assert line.leave() == 0
    ((event, _),) = late_events(conn)
    assert event == "late_commit"
    # the first failed attempt's backoff (undolog.retry_base, 1 s), passed (as time would)
    conn.execute("UPDATE undolog.undolog_undo_stack SET next_attempt_at = now()")
    run_worker(dsn, config, ledger)
    assert names(ledger) == ["slow_make", "unmake"]
    assert ops(ledger)[-1]["id"] == "s"  # built from the late result
    assert [state for _, state in sessions(conn)] == ["compensated"]
    attention = conn.execute(
        "SELECT needs_attention FROM undolog.sessions_overview WHERE session_id = %s", (sid,)
    ).fetchone()
    assert attention == (True,)  # an operator is still told the answer came late
