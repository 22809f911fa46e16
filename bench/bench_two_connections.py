"""What a second connection for the commit would buy one agent: a measured answer to "the
commit's server time is on the next call's path" (docs/performance.md).

With one agent, the binding sends a call's commit unwaited and the next call's intercept
behind it on the same connection, so the server runs the commit before the intercept:
the commit's CPU is on the path even though nobody waits for its answer. Sent on a
second connection instead, the commit could run on the other core while the intercept
runs. This sends the binding's two statements (intercept_tool, commit_effect with an
asynchronous result; prepared, each with its own Sync, libpq's pipeline mode) both ways,
in alternating rounds beside the floor (INSERT, then UPDATE), one agent, and prints
calls/s. The commit's answer is read before the next call's body would run in both, as
the result contract asks.

    python bench/bench_two_connections.py                 # 5 rounds x 2000 calls
    python bench/bench_two_connections.py --rounds 9 --calls 3000

A benchmark, not a test: it prints its figures and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.types.json import Jsonb

import bench_agents as ba
from undolog import engine
from undolog.migrations import migrate
from undolog.signature import call_signature

INTERCEPT = (
    b"SELECT effect_id, action FROM undolog.intercept_tool("
    b"$1::uuid, $2::uuid, $3::integer, $4::jsonb, $5::text)"
)
COMMIT = b"SELECT undolog.commit_effect($1::uuid, $2::uuid, $3::jsonb, true)"


def send(pg: pq.abc.PGconn, name: bytes, params: list[bytes | None]) -> None:
    """One prepared statement and its own Sync: the server commits it on its own."""
    pg.send_query_prepared(name, params)
    pg.pipeline_sync()


def answers(pg: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """The results up to the next Sync."""
    out: list[pq.abc.PGresult] = []
    while True:
        result = pg.get_result()
        if result is None:
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return out
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise RuntimeError(result.error_message.decode())
        out.append(result)


def journaled(dsn: str, tool_id: uuid.UUID, calls: int, two: bool) -> float:
    """Calls/s of new COMPENSABLE calls, the commit on the intercept's connection or on a
    second one."""
    first: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=True)
    second = psycopg.connect(dsn, autocommit=True) if two else first
    session = engine.begin_session(first, agent="two-connections")
    engine.set_async_results(first, True)
    for conn in {id(first): first, id(second): second}.values():
        conn.pgconn.prepare(b"intercept", INTERCEPT)
        conn.pgconn.prepare(b"commit", COMMIT)
        conn.pgconn.enter_pipeline_mode()
    on_a, on_b = first.pgconn, second.pgconn
    sid = str(session).encode()
    unread = False  # a commit's answer not read yet
    started = time.perf_counter()
    for step in range(calls):
        args = ba.make_args(step)
        signature = call_signature(session, step, ba.TOOL, args)
        send(
            on_a,
            b"intercept",
            [sid, str(tool_id).encode(), str(step).encode(),
             json.dumps(args).encode(), signature.encode()],
        )  # fmt: skip
        if unread and not two:
            answers(on_a)  # the commit's answer comes first on the one connection
        rows = answers(on_a)
        if unread and two:
            answers(on_b)  # read before the body runs, as on one connection
        effect_id = rows[0].get_value(0, 0)
        assert effect_id is not None and rows[0].get_value(0, 1) == b"execute"
        send(on_b, b"commit", [sid, effect_id, json.dumps(ba.result_for(step)).encode()])
        unread = True
    answers(on_b)
    elapsed = time.perf_counter() - started
    first.close()
    second.close()
    return calls / elapsed


def floor(dsn: str, calls: int) -> float:
    """Calls/s of the floor: INSERT, then UPDATE, each waited for."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ba.FLOOR_DDL)
        session = uuid.uuid4()
        sigs = [uuid.uuid4().hex + uuid.uuid4().hex for _ in range(calls)]
        started = time.perf_counter()
        for k in range(calls):
            row = conn.execute(
                ba.FLOOR_INSERT, (sigs[k], session, k, ba.TOOL, Jsonb(ba.make_args(k)))
            ).fetchone()
            assert row is not None
            conn.execute(ba.FLOOR_UPDATE, (Jsonb(ba.result_for(k)), row[0]))
        return calls / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls per variant and round")
    parser.add_argument("--dsn", default="", help="a server (superuser) instead of a new one")
    opts = parser.parse_args(argv)
    with ba.server(opts.dsn) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            tool_id = engine.register_tool(conn, ba.TOOL, "compensable", ba.COMPENSATION.to_json())
        rates: dict[str, list[float]] = {"floor": [], "one connection": [], "two connections": []}
        for r in range(opts.rounds):
            rates["floor"].append(floor(dsn, opts.calls))
            rates["one connection"].append(journaled(dsn, tool_id, opts.calls, False))
            rates["two connections"].append(journaled(dsn, tool_id, opts.calls, True))
            ba.log(f"round {r + 1}/{opts.rounds} done")
    base = statistics.median(rates["floor"])
    print(f"\n1 agent, {opts.rounds} rounds x {opts.calls} calls, medians")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"  {name:16} {rate:>8,.0f} calls/s  {rate / base:.2f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
