"""Partition maintenance against a real PostgreSQL: months of journal written directly
(as the owner, with a chosen executed_at), retention dropping the oldest while agents
keep intercepting and committing on the current month, default-partition draining,
refusals, and the Python wrappers' errors."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from undolog import engine, errors, partitions

Conn = psycopg.Connection[Any]

RETRACT = {"name": "retract_email"}
JOURNAL_TABLES = (
    "undolog_effect_log",
    "undolog_effect_history",
    "undolog_undo_stack",
    "undolog_approval_requests",
)


def month_start(conn: Conn, offset: int) -> datetime:
    """The start (UTC) of the month ``offset`` months from the current UTC month."""
    row = conn.execute(
        "SELECT undolog.month_start(undolog.utc_month(now(), %s))", (offset,)
    ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def month_name(conn: Conn, offset: int) -> str:
    return month_start(conn, offset).astimezone(UTC).strftime("%Y_%m")


def fill_month(
    conn: Conn, offset: int, effects: int, sessions: int = 20, state: str = "completed"
) -> list[uuid.UUID]:
    """Journal ``effects`` calls spread over month ``offset``, as intercept would have:
    registry row, effect (every tenth irreversible, with its approval request; the rest
    committed compensable calls), undo entry, history. Answers the session ids."""
    session_ids = [uuid.uuid4() for _ in range(sessions)]
    start, end = month_start(conn, offset), month_start(conn, offset + 1)
    with conn.transaction():
        conn.execute(
            "INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at) "
            "SELECT s, '5 minutes', now() FROM unnest(%s::uuid[]) AS s",
            (session_ids,),
        )
        if state == "completed":
            conn.execute(
                "UPDATE undolog.undolog_sessions SET state = 'completed' "
                "WHERE session_id = ANY(%s)",
                (session_ids,),
            )
        conn.execute(
            """
            CREATE TEMP TABLE fill ON COMMIT DROP AS
            SELECT gen_random_uuid() AS effect_id,
                   (%(s)s::uuid[])[1 + g %% cardinality(%(s)s::uuid[])] AS session_id,
                   %(start)s::timestamptz + (%(end)s::timestamptz - %(start)s::timestamptz)
                       * (g::float8 / %(n)s) AS executed_at,
                   CASE WHEN g %% 10 = 0 THEN 'irreversible' ELSE 'compensable' END AS tier,
                   g
            FROM generate_series(0, %(n)s - 1) AS g
            """,
            {"s": session_ids, "start": start, "end": end, "n": effects},
        )
        conn.execute(
            "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, "
            "call_signature, step_index, tool_name, tier, args, state) "
            "SELECT effect_id, session_id, executed_at, "
            "encode(sha256(convert_to(effect_id::text, 'UTF8')), 'hex'), g, 'create_user', tier, "
            "jsonb_build_object('n', g), "
            "CASE tier WHEN 'compensable' THEN 'executing' ELSE 'pending' END FROM fill"
        )
        conn.execute(
            "UPDATE undolog.undolog_effect_log AS e SET state = 'committed', "
            "result_snapshot = jsonb_build_object('id', f.g) FROM fill AS f "
            "WHERE e.effect_id = f.effect_id AND e.session_id = f.session_id "
            "AND e.executed_at = f.executed_at AND f.tier = 'compensable'"
        )
        conn.execute(
            "INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at, "
            "call_signature, compensation) SELECT session_id, effect_id, executed_at, "
            "encode(sha256(convert_to(effect_id::text, 'UTF8')), 'hex'), CASE tier "
            "WHEN 'compensable' THEN %s::jsonb END FROM fill ORDER BY g",
            ('{"name": "delete_user", "args": {}}',),
        )
        conn.execute(
            "INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at) "
            "SELECT session_id, effect_id, executed_at FROM fill WHERE tier = 'irreversible'"
        )
    return session_ids


def rows_per_month(conn: Conn) -> dict[tuple[str, str], int]:
    """(table, YYYY_MM) -> row count, for every journal table."""
    counts: dict[tuple[str, str], int] = {}
    for table in JOURNAL_TABLES:
        for month, n in conn.execute(
            f"SELECT to_char(executed_at AT TIME ZONE 'UTC', 'YYYY_MM'), count(*) "
            f"FROM undolog.{table} GROUP BY 1"
        ).fetchall():
            counts[(table, str(month))] = int(n)
    return counts


def both(conn: Conn, *offsets: int) -> list[str]:
    """The effect log's and the history's partition names of those months."""
    return [
        f"{table}_{month_name(conn, k)}"
        for table in ("undolog_effect_log", "undolog_effect_history")
        for k in offsets
    ]


def effect_months(conn: Conn) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'undolog.undolog_effect_log'::regclass"
    ).fetchall()
    return {str(name) for (name,) in rows}


def test_drop_the_oldest_month_while_agents_intercept(dsn: str, conn: Conn) -> None:
    # Four past months of finished sessions, written while they had no partition: they
    # land in the default partition, and ensure() moves them into their months.
    for offset, effects in ((-4, 6000), (-3, 3000), (-2, 3000), (-1, 3000)):
        fill_month(conn, offset, effects)
    created = partitions.ensure(conn, months_ahead=1)
    assert sorted(created) == sorted(both(conn, -4, -3, -2, -1))
    row = conn.execute("SELECT count(*) FROM undolog.undolog_effect_log_default").fetchone()
    assert row == (0,)
    before = rows_per_month(conn)
    oldest = month_name(conn, -4)
    assert before[("undolog_effect_log", oldest)] == 6000
    assert before[("undolog_approval_requests", oldest)] == 600

    # An agent intercepts and commits on the current month the whole time: before the
    # drop, during it, and 20 calls more after it.
    stop = threading.Event()
    more_after_drop = [1 << 30]
    done: list[tuple[int, str, float]] = []
    failures: list[BaseException] = []

    def agent() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                session = engine.begin_session(c, agent="during-drop")
                step = 0
                while not stop.is_set() or step < more_after_drop[0]:
                    t0 = time.perf_counter()
                    got = engine.intercept(
                        c, session, step, "send_email", "compensable", {"n": step}, RETRACT
                    )
                    assert got.action == "execute" and got.effect_id is not None
                    engine.commit(c, got.effect_id, {"sent": step})
                    done.append((step, got.action, time.perf_counter() - t0))
                    step += 1
                engine.complete_session(c, session)
        except BaseException as exc:  # asserted below
            failures.append(exc)

    thread = threading.Thread(target=agent)
    thread.start()
    deadline = time.monotonic() + 30
    while len(done) < 20 and not failures and time.monotonic() < deadline:
        time.sleep(0.01)
    dropped = partitions.drop(conn, month_start(conn, -3))
    during = len(done)
    more_after_drop[0] = during + 20
    stop.set()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert not failures, failures

    assert dropped == both(conn, -4)
    assert during >= 20 and len(done) >= during + 20
    # Every intercept executed and committed, each step once, all in the current month.
    assert Counter(action for _, action, _ in done) == {"execute": len(done)}
    assert sorted(step for step, _, _ in done) == list(range(len(done)))
    this_month = month_name(conn, 0)
    after = rows_per_month(conn)
    assert after[("undolog_effect_log", this_month)] == len(done)
    row = conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE state = 'committed' "
        "AND tool_name = 'send_email'"
    ).fetchone()
    assert row == (len(done),)
    # The kept months lost nothing; the oldest left nothing behind in any table.
    for table in JOURNAL_TABLES:
        assert (table, oldest) not in after, table
        for k in (-3, -2, -1):
            key = (table, month_name(conn, k))
            assert after.get(key) == before.get(key), key
    assert f"undolog_effect_log_{oldest}" not in effect_months(conn)


def test_drop_refuses_months_of_unfinished_sessions_until_forced(conn: Conn) -> None:
    (live,) = fill_month(conn, -6, 50, sessions=1, state="active")
    fill_month(conn, -7, 50)
    partitions.ensure(conn, months_ahead=1)
    cutoff = month_start(conn, -5)

    with pytest.raises(errors.PartitionInUse) as refused:
        partitions.drop(conn, cutoff)
    assert str(live) in str(refused.value)
    assert f"undolog_effect_log_{month_name(conn, -6)}" in str(refused.value)
    assert {f"undolog_effect_log_{month_name(conn, k)}" for k in (-7, -6)} <= effect_months(conn)

    dropped = partitions.drop(conn, cutoff, force=True)
    assert sorted(dropped) == sorted(both(conn, -7, -6))
    row = conn.execute(
        "SELECT count(*) FROM undolog.undolog_undo_stack WHERE session_id = %s",
        (live,),
    ).fetchone()
    assert row == (0,)


def test_detach_only_keeps_the_month_as_a_plain_table(conn: Conn) -> None:
    fill_month(conn, -3, 200)
    partitions.ensure(conn, months_ahead=1)
    name = f"undolog_effect_log_{month_name(conn, -3)}"
    detached = partitions.drop(conn, month_start(conn, -2), detach_only=True)
    assert detached == both(conn, -3)
    assert name not in effect_months(conn)
    row = conn.execute(f"SELECT count(*) FROM undolog.{name}").fetchone()
    assert row == (200,)
    assert ("undolog_undo_stack", month_name(conn, -3)) not in rows_per_month(conn)


def test_maintain_drains_drops_past_retention_skips_live_months_and_creates_ahead(
    conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    fill_month(conn, -15, 30)  # past retention, finished
    (live,) = fill_month(conn, -14, 30, sessions=1, state="active")  # past, but live
    fill_month(conn, -12, 30)  # the oldest month retention 12 keeps
    with caplog.at_level(logging.WARNING, logger="undolog.partitions"):
        actions = partitions.maintain(conn, months_ahead=2, retention_months=12)
    assert sorted(actions) == sorted(
        [("created", name) for name in both(conn, -15, -14, -12, 2)]
        + [("dropped", name) for name in both(conn, -15)]
        + [("skipped", f"undolog_effect_log_{month_name(conn, -14)}")]
    )
    assert any(str(live) in record.getMessage() for record in caplog.records)
    assert partitions.maintain(conn, months_ahead=2, retention_months=12) == [
        ("skipped", f"undolog_effect_log_{month_name(conn, -14)}")
    ]


def test_two_maintainers_racing_create_each_month_once(dsn: str, conn: Conn) -> None:
    results: list[list[str]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def maintainer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                start.wait()
                results.append(partitions.ensure(c, months_ahead=8))
        except BaseException as exc:  # asserted below
            failures.append(exc)

    threads = [threading.Thread(target=maintainer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures, failures
    created = [name for names in results for name in names]
    assert sorted(created) == sorted(both(conn, *range(2, 9)))


def test_wrappers_refuse_bad_input_and_roles(conn: Conn) -> None:
    with pytest.raises(errors.InvalidArgument, match="timezone-aware"):
        partitions.drop(conn, datetime(2020, 1, 1))  # naive: refused
    with pytest.raises(errors.InvalidArgument, match="start of the current UTC month"):
        partitions.drop(conn, datetime.now(UTC) + timedelta(days=40))
    with pytest.raises(errors.InvalidArgument, match="p_months_ahead"):
        partitions.ensure(conn, months_ahead=-1)
    with pytest.raises(errors.InvalidArgument, match="retention"):
        partitions.maintain(conn, retention_months=0)
    conn.execute("SET ROLE undolog_agent")
    try:
        with pytest.raises(errors.PermissionDenied):
            partitions.maintain(conn)
    finally:
        conn.execute("RESET ROLE")
    assert partitions.ensure(conn, months_ahead=1) == []


def test_many_unfinished_sessions_are_counted_and_the_first_50_named(conn: Conn) -> None:
    """Two months held by 60 unfinished sessions each, 30 of them in both (90 in all),
    and a completed session in both: 'skip' warns for each month with its count and the
    first 50 by id, then "and 10 more"; 'refuse' counts the 90 once each, names the
    first 50 of them and then "and 40 more". The names are counted, not gathered into
    one array (a flood of millions would pass the 1 GB a value may have)."""
    ids = sorted(uuid.uuid4() for _ in range(90))
    done = uuid.uuid4()
    older, newer = ids[:60], ids[30:]
    with conn.transaction():
        conn.execute(
            "INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at) "
            "SELECT s, '5 minutes', now() + interval '1 hour' FROM unnest(%s::uuid[]) AS s",
            ([*ids, done],),
        )
        conn.execute(
            "UPDATE undolog.undolog_sessions SET state = 'completed' WHERE session_id = %s",
            (done,),
        )
        for offset, holders in ((-8, [*older, done]), (-7, [*newer, done])):
            conn.execute(
                "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, "
                "call_signature, step_index, tool_name, tier, args, state) "
                "SELECT e, s, %s::timestamptz + interval '1 day', "
                "encode(sha256(convert_to(e::text, 'UTF8')), 'hex'), 0, 'create_user', "
                "'compensable', '{}', 'executing' "
                "FROM unnest(%s::uuid[]) AS s, LATERAL gen_random_uuid() AS e",
                (month_start(conn, offset), holders),
            )
    partitions.ensure(conn, months_ahead=1)
    cutoff = month_start(conn, -6)
    names = {k: f"undolog_effect_log_{month_name(conn, k)}" for k in (-8, -7)}

    def named(sessions: list[uuid.UUID], more: int) -> str:
        return (
            "sessions: "
            + ", ".join(f"{s} (active)" for s in sessions[:50])
            + (f" and {more} more" if more else "")
        )

    with pytest.raises(psycopg.Error) as refused:
        conn.execute("SELECT * FROM undolog.drop_old_partitions(%s, false, 'refuse')", (cutoff,))
    diag = refused.value.diag
    assert diag.sqlstate == "UL016"
    assert diag.message_primary == (
        f"cannot drop {names[-8]}, {names[-7]}: it holds effects of 90 unfinished session(s)"
    )
    assert diag.message_detail == named(ids, 40)

    warned: list[tuple[str | None, str | None]] = []
    conn.add_notice_handler(lambda d: warned.append((d.message_primary, d.message_detail)))
    kept = conn.execute(
        "SELECT * FROM undolog.drop_old_partitions(%s, false, 'skip')", (cutoff,)
    ).fetchall()
    assert ("skipped", names[-8]) in kept and ("skipped", names[-7]) in kept
    assert [w for w in warned if w[0] and " kept: it holds" in w[0]] == [
        (f"{names[-8]} kept: it holds effects of 60 unfinished session(s)", named(older, 10)),
        (f"{names[-7]} kept: it holds effects of 60 unfinished session(s)", named(newer, 10)),
    ]
