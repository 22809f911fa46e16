"""Durability of the journal's records and agents paused past their lease
(docs/design/durability.md).

- intercept's transaction commits durably whatever the client's synchronous_commit: the
  setting in force at its commit is read back in the same transaction, and the WAL
  flushes of a run of intercepts are counted (pg_stat_wal);
- a transaction that journals a new intent stays durable when a replay with asynchronous
  results, or commit(p_async => true), follows it in the same transaction: the setting
  read back, and no intent lost when the server is stopped -m immediate right after;
- the binding commits results asynchronously by default and durably with
  ``UndoLog(durable_results=True)`` (WAL flushes counted);
- an agent SIGSTOPped between intercept and its body, past its lease, while recovery
  fails the session and compensates the call: on waking, the body does not run;
- an agent SIGSTOPped inside its body: its late commit is recorded and the session is
  flagged for an operator, and the agent gets LateResult.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import crash_and_restart, throwaway_cluster
from undolog import (
    CompensationDescriptor,
    LateResult,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.migrations import migrate
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]
COMPENSATION = {"name": "delete_user"}


def wal_syncs(conn: Conn) -> int:
    row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0])


def flush_stats(conn: Conn) -> None:
    """This backend's WAL statistics, visible to others now rather than within a second."""
    conn.execute("SELECT pg_stat_force_next_flush()")


def new_call(conn: Conn, sid: uuid.UUID, step: int) -> engine.Interception:
    got = engine.intercept(conn, sid, step, "create_user", "compensable", {"i": step}, COMPENSATION)
    assert got.action == "execute" and got.effect_id is not None
    return got


def test_the_server_under_test_flushes_its_wal(conn: Conn) -> None:
    """The WAL-flush counts below mean something only on a server with fsync on (the
    throwaway cluster of tests/conftest.py, for root and for everyone else)."""
    assert conn.execute("SHOW fsync").fetchone() == ("on",)


def test_intercept_commits_durably_on_a_connection_with_synchronous_commit_off(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        sid = engine.begin_session(conn, agent="t")
        conn.execute("SET synchronous_commit = off")
        with conn.transaction():
            new_call(conn, sid, 0)
            row = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert row == ("on",), "the setting in force when intercept's transaction commits"
        setting = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert setting == ("off",), "the client's own setting is back after that transaction"


def test_every_intercept_flushes_wal_although_the_client_said_off(dsn: str) -> None:
    calls = 30
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as monitor,
    ):
        sid = engine.begin_session(conn, agent="t", lease=timedelta(hours=1))
        conn.execute("SET synchronous_commit = off")
        flush_stats(conn)
        before = wal_syncs(monitor)
        for step in range(calls):
            new_call(conn, sid, step)
        flush_stats(conn)
        intercepts = wal_syncs(monitor) - before
        # The control: asynchronous commits of the same connection wait for no flush (the
        # WAL writer flushes them in the background, a few times a second at most).
        got = [new_call(conn, sid, calls + step) for step in range(calls)]
        flush_stats(conn)
        before = wal_syncs(monitor)
        for interception in got:
            assert interception.effect_id is not None
            engine.commit(conn, interception.effect_id, {}, asynchronous=True)
        flush_stats(conn)
        commits = wal_syncs(monitor) - before
    assert intercepts >= calls, f"{intercepts} WAL flushes for {calls} intercepts"
    assert commits < calls / 2, f"{commits} WAL flushes for {calls} asynchronous commits"


def test_replay_bookkeeping_is_asynchronous_only_when_asked(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        sid = engine.begin_session(conn, agent="t")
        got = new_call(conn, sid, 0)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"ok": True})
        settings = []
        for async_results in (False, True):
            engine.set_async_results(conn, async_results)
            with conn.transaction():
                again = new_call_replayed(conn, sid)
                assert again.action == "replay"
                row = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
                assert row is not None
                settings.append(row[0])
    assert settings == ["on", "off"]


def new_call_replayed(conn: Conn, sid: uuid.UUID) -> engine.Interception:
    return engine.intercept(conn, sid, 0, "create_user", "compensable", {"i": 0}, COMPENSATION)


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
def create_user(i: int) -> dict[str, int]:
    return {"user_id": i}


@pytest.mark.parametrize(("durable", "low", "high"), [(False, 20, 27), (True, 40, 48)])
def test_binding_results_are_asynchronous_unless_durable_results(
    dsn: str, durable: bool, low: int, high: int
) -> None:
    """20 calls: 20 durable intercepts, plus 20 durable commits with durable_results."""
    ul = UndoLog(dsn, durable_results=durable)
    with psycopg.connect(dsn, autocommit=True) as monitor, ul.session(agent="t") as session:
        conn = session.connection
        assert isinstance(conn, psycopg.Connection)
        flush_stats(conn)
        before = wal_syncs(monitor)
        for i in range(20):
            assert create_user(i) == {"user_id": i}
        engine.settle(conn)  # the last result's answer, sent without waiting
        flush_stats(conn)
        flushes = wal_syncs(monitor) - before
    assert low <= flushes <= high, f"{flushes} WAL flushes for 20 calls (durable={durable})"


def test_a_late_commit_raises_late_result_and_flags_the_session(conn: Conn) -> None:
    sid = engine.begin_session(conn, agent="t")
    got = new_call(conn, sid, 0)
    assert got.effect_id is not None
    engine.fail_session(conn, sid, "lease expired")
    conn.execute("SELECT * FROM undolog.claim_compensation(%s)", (sid,))
    with pytest.raises(LateResult, match="flags the session for an operator"):
        engine.commit(conn, got.effect_id, {"user_id": 1}, asynchronous=True)
    row = conn.execute(
        "SELECT needs_attention, state FROM undolog.sessions_overview WHERE session_id = %s",
        (sid,),
    ).fetchone()
    assert row == (True, "compensating")


# --- agents paused past their lease ----------------------------------------------------------

# The agent process: one COMPENSABLE call under a 1 s lease. It stops itself (SIGSTOP)
# either right after intercept answered (mode "before-body") or inside the body before
# the body acts ("in-body"); the body's effect is a line in the ledger file.
AGENT = r"""
import os, signal, sys
from datetime import timedelta
from undolog import CompensationDescriptor, ToolTier, UndoLog, engine, undolog_tool

dsn, ledger, mode = sys.argv[1:4]
real_intercept = engine.intercept_hot


def pause():
    print("PAUSING", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def intercept_then_pause(*args, **kwargs):
    got = real_intercept(*args, **kwargs)
    if mode == "before-body":
        pause()
    return got


engine.intercept_hot = intercept_then_pause


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
def create_user(email: str) -> dict:
    if mode == "in-body":
        pause()
    with open(ledger, "a") as f:
        f.write("body " + email + "\n")
    return {"email": email}


ul = UndoLog(dsn, lease=timedelta(seconds=1))
try:
    with ul.session(agent="paused") as session:
        print("SESSION", session.session_id, flush=True)
        create_user("ada@example.com")
except Exception as exc:
    print("ERROR", type(exc).__name__, exc, flush=True)
"""


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "T"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.touch()
    return path


def run_paused_agent(dsn: str, ledger: Path, mode: str) -> Iterator[tuple[uuid.UUID, str]]:
    """Start the agent, wait until it stopped itself, yield (session id, "") while it is
    stopped, then SIGCONT it and yield its remaining output."""
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT, dsn, str(ledger), mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python")},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[0] == "SESSION", first
        sid = uuid.UUID(first[1])
        assert proc.stdout.readline().strip() == "PAUSING"
        deadline = time.monotonic() + 10
        while not stopped(proc.pid):
            assert time.monotonic() < deadline, "the agent did not stop"
            time.sleep(0.01)
        yield sid, ""
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=60)
        yield sid, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def recover_and_compensate(dsn: str, ledger: Path, sid: uuid.UUID) -> None:
    """What `undolog worker` does once the lease has run out: fail, then walk."""
    ul = UndoLog(dsn)

    @ul.compensation("delete_user")
    def delete_user(call: CompensationCall) -> None:
        with ledger.open("a") as f:
            f.write(f"compensated {call.undo_id}\n")

    time.sleep(1.5)  # the 1 s lease runs out while the agent is stopped
    walked = ul.work()
    assert walked.get(sid) == "compensated", walked


def test_a_paused_agent_does_not_start_its_body_after_its_lease_lapsed(
    dsn: str, ledger: Path
) -> None:
    runs = run_paused_agent(dsn, ledger, "before-body")
    sid, _ = next(runs)
    recover_and_compensate(dsn, ledger, sid)
    _, out = next(runs)
    lines = ledger.read_text().splitlines()
    assert not any(line.startswith("body") for line in lines), lines
    assert [line.split()[0] for line in lines] == ["compensated"]
    assert "ERROR LeaseLapsed" in out and "was not run" in out, out
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state, needs_attention FROM undolog.sessions_overview WHERE session_id = %s",
            (sid,),
        ).fetchone()
    assert row == ("compensated", False), "nothing late arrived: no operator needed"


def test_a_body_paused_past_its_lease_reports_late_and_the_session_is_flagged(
    dsn: str, ledger: Path
) -> None:
    runs = run_paused_agent(dsn, ledger, "in-body")
    sid, _ = next(runs)
    recover_and_compensate(dsn, ledger, sid)
    _, out = next(runs)
    lines = ledger.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["compensated", "body"], lines
    assert "ERROR LateResult" in out, out
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state, needs_attention FROM undolog.sessions_overview WHERE session_id = %s",
            (sid,),
        ).fetchone()
        events = conn.execute(
            "SELECT h.event, h.detail->>'arrived' FROM undolog.undolog_effect_history AS h"
            " WHERE h.session_id = %s AND h.event LIKE 'late%%'",
            (sid,),
        ).fetchall()
    assert row == ("compensated", True), "the journal says undone, so a person must look"
    assert events == [("late_commit", "committed")]
    # ... and the command line shows it to that person.
    cli = [sys.executable, "-m", "undolog.cli", "--dsn", dsn, "sessions"]
    show = subprocess.run([*cli, "show", str(sid)], capture_output=True, text=True, check=True)
    assert "NEEDS ATTENTION: a commit arrived at" in show.stdout, show.stdout
    listed = subprocess.run(
        [*cli, "list", "--json"], capture_output=True, text=True, check=True
    ).stdout
    assert '"needs_attention": true' in listed, listed


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_user"))
async def create_user_async(i: int) -> dict[str, int]:
    return {"user_id": i}


def test_async_binding_renews_a_short_lease_and_refuses_a_lapsed_one(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from undolog import AsyncUndoLog, LeaseLapsed, aengine

    real_intercept = aengine.intercept_hot

    async def intercept_then_recovery(
        conn: aengine.AsyncConnection, call: engine.HotCall, **options: Any
    ) -> engine.Interception:
        """The call is journaled, then (the agent paused) recovery fails its session."""
        got = await real_intercept(conn, call, **options)
        with psycopg.connect(dsn, autocommit=True) as other:
            engine.fail_session(other, call.session_id, "lease expired")
        return got

    async def scenario() -> None:
        ul = AsyncUndoLog(dsn, lease=timedelta(minutes=5))
        async with ul.session(agent="t") as session:
            # Less than half the lease left (as after a pause): renewed, then the body runs.
            session.lease_deadline = time.monotonic()
            assert await create_user_async(1) == {"user_id": 1}
            assert session.lease_deadline > time.monotonic() + 200
            # Lapsed, and recovery failed the session meanwhile: the body does not run.
            monkeypatch.setattr(aengine, "intercept_hot", intercept_then_recovery)
            session.lease_deadline = time.monotonic()
            await create_user_async(2)

    with pytest.raises(LeaseLapsed, match="was not run"):
        asyncio.run(scenario())


# A transaction that journals an intent commits durably whatever else ran in it: a replay
# with asynchronous results, or commit(p_async => true), after a new intercept in the
# same transaction does not turn synchronous_commit off for it.


def two_intents_in_one_transaction(conn: Conn, sid: uuid.UUID, first: int) -> list[uuid.UUID]:
    """(a) a new call, then a replay of step 0 with asynchronous results; (b) a new call,
    then commit(..., p_async => true) of it. Answers the two new effects' ids."""
    engine.set_async_results(conn, True)
    with conn.transaction():
        a = new_call(conn, sid, first)
        assert new_call_replayed(conn, sid).action == "replay"
    with conn.transaction():
        b = new_call(conn, sid, first + 1)
        assert b.effect_id is not None
        engine.commit(conn, b.effect_id, {"ok": True}, asynchronous=True)
    assert a.effect_id is not None and b.effect_id is not None
    return [a.effect_id, b.effect_id]


def test_an_intent_keeps_its_transaction_durable_after_a_replay_or_an_async_commit(
    conn: Conn,
) -> None:
    sid = engine.begin_session(conn, agent="t")
    got = new_call(conn, sid, 0)
    assert got.effect_id is not None
    engine.commit(conn, got.effect_id, {"ok": True})
    engine.set_async_results(conn, True)
    settings = []
    with conn.transaction():
        new_call(conn, sid, 1)
        assert new_call_replayed(conn, sid).action == "replay"
        settings.append(conn.execute("SELECT current_setting('synchronous_commit')").fetchone())
    with conn.transaction():
        b = new_call(conn, sid, 2)
        assert b.effect_id is not None
        engine.commit(conn, b.effect_id, {"ok": True}, asynchronous=True)
        settings.append(conn.execute("SELECT current_setting('synchronous_commit')").fetchone())
    # Alone in its transaction, each still goes asynchronous.
    with conn.transaction():
        assert new_call_replayed(conn, sid).action == "replay"
        settings.append(conn.execute("SELECT current_setting('synchronous_commit')").fetchone())
    c = new_call(conn, sid, 3)
    assert c.effect_id is not None
    with conn.transaction():
        engine.commit(conn, c.effect_id, {"ok": True}, asynchronous=True)
        settings.append(conn.execute("SELECT current_setting('synchronous_commit')").fetchone())
    assert settings == [("on",), ("on",), ("off",), ("off",)]


@pytest.fixture
def crashable() -> Iterator[tuple[Any, str]]:
    """A private cluster (fsync on) whose WAL writer waits 10 s: an asynchronous commit
    is still only in WAL buffers when the server is stopped -m immediate right after."""
    with throwaway_cluster("wal_writer_delay=10000ms", "wal_writer_flush_after=0") as cluster:
        options = " ".join(
            [
                f"-p {cluster.port}",
                f"-k {cluster.datadir}",
                "-c listen_addresses=127.0.0.1",
                "-c wal_writer_delay=10000ms",
                "-c wal_writer_flush_after=0",
            ]
        )
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            migrate(c)
        yield cluster, options


def test_no_intent_is_lost_in_a_crash_after_a_replay_or_an_async_commit(
    crashable: tuple[Any, str],
) -> None:
    cluster, options = crashable
    dsn = cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        sid = engine.begin_session(conn, agent="t")
        got = new_call(conn, sid, 0)
        assert got.effect_id is not None
        engine.commit(conn, got.effect_id, {"ok": True})
        conn.execute("CHECKPOINT")
        intents = two_intents_in_one_transaction(conn, sid, 1)
    crash_and_restart(cluster, options)
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT effect_id FROM undolog.undolog_effect_log WHERE effect_id = ANY(%s)",
            (intents,),
        ).fetchall()
    assert sorted(r[0] for r in found) == sorted(intents), "an intent was lost in the crash"
