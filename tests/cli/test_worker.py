"""`undolog worker` keeps serving through the faults a running system meets
(docs/operations/worker.md): a halted session, a server restart, a compensation error
carrying U+0000, a stale claim, one session's error; it stops only on SIGTERM/SIGINT
(exit 0, the entry in hand finished, nothing left claimed) or a configuration error
(exit 2).

Real processes where it matters: the worker is a subprocess of `undolog worker`; the
server is restarted with pg_ctl on a throwaway cluster of its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import _as_cluster_owner, bindir, throwaway_cluster
from undolog import saga
from undolog.migrations import migrate
from undolog.walk import CompensationCall, Worker
from worker_support import (
    Conn,
    WorkerProcess,
    app_dir,
    failed_session,
    start_worker,
    state_of,
    wait_until,
)

__all__ = ["app_dir", "start_worker"]  # fixtures of worker_support, used here


def test_a_halted_session_is_logged_and_the_sessions_behind_it_are_walked(
    dsn: str, conn: Conn, app_dir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    halting = failed_session(conn, "always_fails", 1, max_attempts=1)
    behind = failed_session(conn, "delete_user", 2)
    worker = start_worker(dsn)
    wait_until(lambda: state_of(conn, behind) == "compensated", what="the session behind")
    assert state_of(conn, halting) == "halted"
    # and it goes on serving: a session that fails later is walked too
    later = failed_session(conn, "delete_user", 3)
    wait_until(lambda: state_of(conn, later) == "compensated", what="a later session")
    assert worker.alive()
    assert (app_dir / "undone.txt").read_text().split() == ["2", "3"]
    assert f"session {halting} is halted" in worker.stderr()
    assert worker.stop() == 0
    assert "Traceback" not in worker.stderr()


def test_u0000_in_a_compensation_error_is_stored_as_ufffd_and_said(
    dsn: str, conn: Conn, start_worker: Callable[..., WorkerProcess]
) -> None:
    sid = failed_session(conn, "always_fails", 1, max_attempts=1)
    after = failed_session(conn, "delete_user", 2)
    worker = start_worker(dsn)
    wait_until(lambda: state_of(conn, after) == "compensated", what="the next session")
    row = conn.execute(
        "SELECT state, last_error FROM undolog.undolog_undo_stack WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row == ("compensation_failed", "RuntimeError: refund refused: bad\ufffdbyte")
    assert state_of(conn, sid) == "halted"
    assert "U+0000" in worker.stderr()
    assert worker.stop() == 0


def test_a_stale_claim_is_an_ordinary_event(
    dsn: str, conn: Conn, app_dir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The worker is paused (SIGSTOP) while its compensation runs, past its claim, and
    another walker takes the entry over and completes it: resumed, the worker's report is
    refused as stale, logged, and it goes on serving. (A worker that is not paused gives
    an attempt up before its claim expires, --compensation-timeout or not.)"""
    dbname = conn.info.dbname
    conn.execute(f"ALTER DATABASE {dbname} SET undolog.claim_timeout = '1 s'")
    (app_dir / "slow_seconds").write_text("2.5")
    sid = failed_session(conn, "slow", 7)
    worker = start_worker(dsn)
    wait_until(lambda: (app_dir / "started-1").exists(), what="the slow compensation")
    worker.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.2)  # its claim expires while it is paused: another walker takes it over
        conn.execute("SET undolog.claim_timeout = '1 min'")
        claim = saga.claim_compensation(conn, sid)
        assert claim is not None and claim.attempt == 2
        saga.complete_compensation(conn, claim.undo_id, claim.attempt)
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: "stale claim" in worker.stderr(), what="the stale report")
    assert worker.alive()
    (app_dir / "slow_seconds").write_text("0")
    later = failed_session(conn, "delete_user", 8)
    wait_until(lambda: state_of(conn, later) == "compensated", what="a later session")
    assert state_of(conn, sid) == "compensated"
    assert worker.stop() == 0


def test_sigterm_finishes_the_entry_in_hand_exits_0_and_leaves_nothing_claimed(
    dsn: str, conn: Conn, app_dir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    (app_dir / "slow_seconds").write_text("1.5")
    first = failed_session(conn, "slow", 1)
    second = failed_session(conn, "slow", 2)
    worker = start_worker(dsn)
    wait_until(lambda: (app_dir / "started-1").exists(), what="the first compensation")
    assert worker.stop(signal.SIGTERM) == 0
    assert (app_dir / "undone.txt").read_text() == "slow 1\n"  # finished, not abandoned
    entry = conn.execute(
        "SELECT state FROM undolog.undolog_undo_stack WHERE session_id = %s", (first,)
    ).fetchone()
    assert entry == ("compensated",)
    # its session closes with the next claim (which finds nothing left), made by the next
    # worker, like the second session, which this one never started
    assert state_of(conn, first) == "compensating"
    assert state_of(conn, second) == "failed"
    claimed = conn.execute(
        "SELECT count(*) FROM undolog.undolog_undo_stack WHERE state = 'compensating'"
    ).fetchone()
    assert claimed == (0,)
    assert "SIGTERM" in worker.stderr() and "Traceback" not in worker.stderr()


def test_sigint_while_idle_exits_0(
    dsn: str, conn: Conn, start_worker: Callable[..., WorkerProcess]
) -> None:
    sid = failed_session(conn, "delete_user", 1)
    worker = start_worker(dsn)
    wait_until(lambda: state_of(conn, sid) == "compensated", what="the walk")
    assert worker.stop(signal.SIGINT) == 0


def test_the_worker_reconnects_after_a_server_restart(
    app_dir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    with throwaway_cluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as setup:
            migrate(setup)
        worker = start_worker(cluster.dsn, "--max-backoff", "1")
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            before = failed_session(conn, "delete_user", 1)
            wait_until(lambda: state_of(conn, before) == "compensated", what="the first walk")
        pg_ctl = [str(bindir() / "pg_ctl"), "-D", str(cluster.datadir), "-w"]
        subprocess.run(_as_cluster_owner([*pg_ctl, "-m", "fast", "stop"]), check=True)
        wait_until(lambda: "cannot reach the database" in worker.stderr(), what="the outage")
        time.sleep(1.5)  # a few reconnection attempts fail
        # restart while stopped starts the server again with its recorded options
        subprocess.run(
            _as_cluster_owner([*pg_ctl, "restart"]),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            after = failed_session(conn, "delete_user", 2)
            wait_until(lambda: state_of(conn, after) == "compensated", what="a walk after")
        assert worker.alive()
        log = worker.stderr()
        assert "reconnected to the database" in log
        assert log.count("cannot reach the database") >= 2  # retried, with backoff
        assert worker.stop() == 0
    assert (app_dir / "undone.txt").read_text().split() == ["1", "2"]


def test_a_login_that_is_no_operator_is_a_configuration_error_exit_2(
    dsn: str, conn: Conn, start_worker: Callable[..., WorkerProcess]
) -> None:
    conn.execute("CREATE ROLE worker_agent_only LOGIN IN ROLE undolog_agent")
    worker = start_worker(psycopg.conninfo.make_conninfo(dsn, user="worker_agent_only"))
    assert worker.proc.wait(timeout=15) == 2
    assert "undolog_operator" in worker.stderr()


def test_a_database_that_does_not_exist_is_a_configuration_error_exit_2(
    dsn: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker(psycopg.conninfo.make_conninfo(dsn, dbname="no_such_database"))
    assert worker.proc.wait(timeout=15) == 2
    assert 'database "no_such_database" does not exist' in worker.stderr()


def test_one_sessions_error_is_logged_and_the_others_are_walked(
    dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """A session another transaction holds: the claim leaves that one session (after
    walk.CLAIM_WAIT, not lock_session's 5 s), said once for the pass; the next pass
    walks it."""
    locked = failed_session(conn, "delete_user", 1)
    free = failed_session(conn, "delete_user", 2)
    undone: list[int] = []
    compensations = {"delete_user": lambda call: undone.append(call.result["user_id"])}
    worker = Worker(
        lambda: psycopg.connect(dsn, autocommit=True, options="-c lock_timeout=200ms"),
        compensations,
    )
    with psycopg.connect(dsn) as holder:
        holder.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE", (locked,)
        )
        with caplog.at_level(logging.WARNING, logger="undolog.walk"):
            assert worker.run_pass() is True
        assert undone == [2] and state_of(conn, free) == "compensated"
        assert "1 due session(s) held by another transaction" in caplog.text
        assert str(locked) in caplog.text and "left for the next pass" in caplog.text
    assert worker.run_pass() is True  # the lock is gone: walked now
    assert undone == [2, 1] and state_of(conn, locked) == "compensated"
    worker.stop()
    assert worker.run() is False  # a stopped worker makes no pass


def test_a_compensation_that_exits_or_is_cancelled_is_a_failed_attempt(
    dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """sys.exit() in a compensation (a library's CLI helper), or an async one whose awaited
    task was cancelled (asyncio.CancelledError, a BaseException): the attempt is recorded
    as failed like any error, the session halts after its last attempt, and the worker
    goes on with the sessions behind it instead of dying with the entry claimed."""
    exits = failed_session(conn, "exits", 1, max_attempts=1)
    cancelled = failed_session(conn, "cancelled", 2, max_attempts=1)
    behind = failed_session(conn, "delete_user", 3)
    undone: list[int] = []

    def exit_now(call: CompensationCall) -> None:
        raise SystemExit(3)

    async def cancelled_inside(call: CompensationCall) -> None:
        task = asyncio.create_task(asyncio.sleep(10))
        task.cancel()
        await task

    compensations = {
        "exits": exit_now,
        "cancelled": cancelled_inside,
        "delete_user": lambda call: undone.append(call.result["user_id"]),
    }
    worker = Worker(lambda: psycopg.connect(dsn, autocommit=True), compensations)
    with caplog.at_level(logging.WARNING, logger="undolog.walk"):
        assert worker.run(once=True) is True
    assert undone == [3] and state_of(conn, behind) == "compensated"
    assert state_of(conn, exits) == "halted" and state_of(conn, cancelled) == "halted"
    errors = dict(
        conn.execute(
            "SELECT session_id, last_error FROM undolog.undolog_undo_stack"
            " WHERE session_id IN (%s, %s)",
            (exits, cancelled),
        ).fetchall()
    )
    assert errors[exits].startswith("SystemExit: 3"), errors
    assert errors[cancelled].startswith("CancelledError"), errors
    assert "SystemExit" in caplog.text and "CancelledError" in caplog.text


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://agent:p%ss@localhost/undolog", "p%ss"),  # a % not percent-encoded
        ("postgresql://agent:pa ss@localhost/undolog", "pa ss"),  # a space in a URI
        ("host=localhost password=hunter2 s3cretpart more", "s3cretpart"),  # a space, not quoted
        ('host=localhost password=ab cd"secretend', "secretend"),  # a quote in the piece
        ("postgresql://alice:s3cr@tail1234@localhost/db", "tail1234"),  # an "@" in it
    ],
)
def test_a_dsn_that_does_not_parse_is_said_without_its_password(
    dsn: str, secret: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """libpq's message quotes the piece of the DSN it could not parse, which is the
    password when its special characters were not encoded: the worker's log (journald,
    a container's) must not carry it."""
    worker = start_worker(dsn)
    assert worker.proc.wait(timeout=15) == 2
    log = worker.stderr()
    assert "does not parse" in log and secret not in log, log


def test_the_workers_connection_learns_of_a_silent_partition_in_a_minute(dsn: str) -> None:
    """TCP keepalives and a timeout for unacknowledged sends on the connection the worker
    (and the notifier) keeps for days, each unless the DSN sets its own."""
    import argparse

    from undolog.cli.worker import connect_for_worker

    tcp = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1")
    with connect_for_worker(argparse.Namespace(dsn=tcp)) as conn:
        params = conn.info.get_parameters()
    assert (params["keepalives_idle"], params["tcp_user_timeout"]) == ("30", "60000"), params
    own = psycopg.conninfo.make_conninfo(tcp, keepalives_idle="5")
    with connect_for_worker(argparse.Namespace(dsn=own)) as conn:
        assert conn.info.get_parameters()["keepalives_idle"] == "5"


def test_the_worker_closes_requests_past_their_deadline_and_undoes_their_sessions(
    dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """A deadline (undolog.approval_timeout) nobody enforces is none: each pass closes the
    requests past it as expired first, and walks the sessions that sends to their undo."""
    from undolog import engine

    conn.execute(
        f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '300 milliseconds'"
    )
    sid = engine.begin_session(conn)
    booked = engine.intercept(conn, sid, 0, "book", "compensable", {"n": 1}, {"name": "unbook"})
    assert booked.effect_id is not None
    engine.commit(conn, booked.effect_id, {"booking": 1})
    asked = engine.intercept(conn, sid, 1, "pay", "irreversible", {"cents": 1})
    assert asked.approval_id is not None
    time.sleep(0.4)
    undone: list[Any] = []
    worker = Worker(
        lambda: psycopg.connect(dsn, autocommit=True),
        {"unbook": lambda call: undone.append(call.call_args)},
    )
    with caplog.at_level(logging.INFO, logger="undolog.walk"):
        assert worker.run(once=True) is True
    state = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (asked.approval_id,),
    ).fetchone()
    assert state == ("expired",)
    assert state_of(conn, sid) == "compensated" and undone == [{"n": 1}]
    assert "closed 1 approval request(s) past their deadline" in caplog.text


def test_a_worker_given_a_connection_without_autocommit_still_commits_its_passes(
    dsn: str, conn: Conn
) -> None:
    """Worker(connect) may be handed psycopg.connect(dsn) as is, without autocommit: the
    worker's passes commit all the same (before, its first statement's transaction stayed
    open and nothing a pass did was ever committed: the expired lease stayed active, the
    request past its deadline pending, the walk undone)."""
    from undolog import engine

    conn.execute(
        f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '300 milliseconds'"
    )
    dead = engine.begin_session(conn)
    booked = engine.intercept(conn, dead, 0, "book", "compensable", {"n": 1}, {"name": "unbook"})
    assert booked.effect_id is not None
    conn.execute(
        "UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'"
        " WHERE session_id = %s",
        (dead,),
    )
    waiting = engine.begin_session(conn)
    asked = engine.intercept(conn, waiting, 0, "pay", "irreversible", {"cents": 1})
    assert asked.approval_id is not None
    time.sleep(0.4)
    undone: list[Any] = []
    worker = Worker(lambda: psycopg.connect(dsn), {"unbook": lambda c: undone.append(c.call_args)})
    assert worker.run(once=True) is True
    assert state_of(conn, dead) == "compensated" and undone == [{"n": 1}]
    state = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (asked.approval_id,),
    ).fetchone()
    assert state == ("expired",)
    assert state_of(conn, waiting) == "compensated"


def test_ul_work_is_the_workers_pass_deadlines_included(dsn: str, conn: Conn) -> None:
    """ul.work() (a deployment's own loop of passes) closes the requests past their
    deadline as the worker's pass does."""
    from undolog import UndoLog, engine

    conn.execute(
        f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '300 milliseconds'"
    )
    sid = engine.begin_session(conn)
    asked = engine.intercept(conn, sid, 0, "pay", "irreversible", {"cents": 1})
    assert asked.approval_id is not None
    time.sleep(0.4)
    UndoLog(dsn).work()
    state = conn.execute(
        "SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = %s",
        (asked.approval_id,),
    ).fetchone()
    assert state == ("expired",)


def test_an_agents_tool_and_compensation_names_reach_the_log_escaped(
    dsn: str, conn: Conn, app_dir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    """An agent login names its tools and their compensations (register_tool), and the
    worker that walks its sessions logs both: a line break forged a log line of the
    worker's own, an escape sequence reached the operator's terminal (here one that
    clears it, hiding the lines above). Every control character of a log line is now
    written as its escape, as on the CLI's output."""
    from undolog import engine

    forged = "x\nundolog worker: INFO compensated everything"
    clear = "missing\x1b[2J\x1b]0;title\x07"
    engine.register_tool(conn, forged, "compensable", {"name": clear})
    sid = engine.begin_session(conn, agent="worker-test")
    hit = engine.intercept(conn, sid, 0, forged, "compensable", {"user": 1}, {"name": clear})
    assert hit.effect_id is not None
    engine.commit(conn, hit.effect_id, {"user_id": 1})
    engine.fail_session(conn, sid, "the agent gave up")
    worker = start_worker(dsn, "--all-owners")
    wait_until(lambda: "no compensation registered" in worker.stderr(), what="the attempt")
    assert worker.stop() == 0
    log = worker.stderr()
    assert "\x1b" not in log and "\x07" not in log
    assert "\nundolog worker: INFO compensated everything" not in log
    assert "x\\nundolog worker: INFO compensated everything" in log
    assert "missing\\x1b[2J" in log
