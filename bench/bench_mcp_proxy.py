"""What the MCP proxy adds to a tool call, side by side with the same call made straight to
the upstream in the same run.

    python tools/pgcluster.py run -- .venv/bin/python bench/bench_mcp_proxy.py

The upstream is tests/mcp_upstream_server.py over stdio; its ``echo`` and ``lookup_user``
bodies do no I/O, so the difference is the proxy's. The client is the SDK's, over stdio,
in the 2026-07-28 (per-request) protocol era. One run measures, in interleaved rounds:

- straight: the upstream called directly (``echo`` and ``lookup_user``);
- SAFE via the proxy (``echo``): target, at most 1 ms added over straight;
- COMPENSABLE via the proxy (``lookup_user`` declared compensable, a new call each time):
  target, at most the engine's own round trips + 1 ms added over straight;
- the proxy process's CPU time per SAFE and COMPENSABLE call (from /proc: on a shared
  machine the wall times swing with the load, the CPU a call costs much less);
- the engine's round trips alone: the same SQL the proxy sends for that call (the
  binding's pipelined intercept, then commit, with the same descriptor), each on a
  connection taken from a pool configured as the proxy's.

Medians and p90 over every call of every round. ``--durable-results`` runs the proxy
with its COMPENSABLE answers waiting for their commit. ``--in-process`` adds the proxy's
COMPENSABLE path timed piece by piece in this process (no client hop). A benchmark, not
a test: it never fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from mcp import Client, StdioServerParameters

from undolog import aengine, engine
from undolog.migrations import migrate
from undolog.signature import signed_call

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ["python", "tests/mcp_upstream_server.py"]
POLICY = """
[proxy]
default_tier = "irreversible"
[upstreams.bench]
command = ["python", "tests/mcp_upstream_server.py"]
[upstreams.bench.tools.echo]
tier = "safe"
[upstreams.bench.tools.lookup_user]
tier = "compensable"
compensation.lookup_user = { email = "args.email" }
"""


def _env(ledger: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "UPSTREAM_LEDGER": ledger, "PATH": f"{bindir}:{os.environ['PATH']}"}


async def per_call(call: Callable[[int], Awaitable[object]], n: int, offset: int) -> list[float]:
    """Seconds of each of n sequential calls."""
    times = []
    for i in range(n):
        start = time.perf_counter()
        await call(offset + i)
        times.append(time.perf_counter() - start)
    return times


def proxy_pid() -> int | None:
    """The proxy's process: this process's child running `undolog.cli mcp-proxy`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"mcp-proxy" in cmdline:
            return int(entry.name)
    return None


def cpu_seconds(pid: int | None) -> float:
    """The process's CPU time so far (user + system; 0 where /proc cannot tell)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


async def main(calls: int, rounds: int, in_process_too: bool, durable: bool = False) -> None:
    from psycopg_pool import AsyncConnectionPool

    from undolog.mcp_proxy.proxy import APPLICATION_NAME, POOL_SIZE

    dsn = os.environ.get("UNDOLOG_DSN", "")
    with psycopg.connect(dsn, autocommit=True) as sync:
        migrate(sync)
    tmp = tempfile.mkdtemp(prefix="bench-mcp-")
    ledger = str(Path(tmp) / "ledger.jsonl")
    policy = Path(tmp) / "policy.toml"
    policy.write_text(POLICY)
    env = _env(ledger)
    direct = Client(
        StdioServerParameters(command=sys.executable, args=UPSTREAM[1:], env=env, cwd=str(ROOT))
    )
    proxied = Client(
        StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "undolog.cli",
                "mcp-proxy",
                "--config",
                str(policy),
                "--dsn",
                dsn,
                *(["--durable-results"] if durable else []),
            ],
            env=env,
            cwd=str(ROOT),
        )
    )
    # the proxy's own pool settings (McpProxy), so that the engine's round trips are
    # measured as the proxy pays them
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=POOL_SIZE,
        kwargs={"autocommit": True, "application_name": APPLICATION_NAME},
        open=False,
    )
    results: dict[str, list[float]] = {
        k: [] for k in ("safe_direct", "safe_proxy", "comp_direct", "comp_proxy", "engine")
    }
    session = uuid.uuid4()
    cpu: dict[str, float] = {"safe_proxy": 0.0, "comp_proxy": 0.0}
    async with direct, proxied:
        pid = proxy_pid()
        await pool.open(wait=True)
        tool = "bench/lookup_user"
        descriptor = {"name": "mcp:bench/lookup_user", "args": {"email": "args.email"}}
        async with pool.connection() as conn:
            await aengine.begin_session(conn, session, agent="bench")
            # the proxy's own registration (the same definition answers the same id)
            tool_id = await aengine.register_tool(conn, tool, "compensable", descriptor)

        async def engine_call(i: int) -> None:
            # as the proxy sends them: the pipelined path's prepared statements
            args = {"email": f"e{i}@x"}
            signature, args_json = signed_call(session, i, tool, args)
            call = engine.HotCall(session, tool_id, i, args_json, signature)
            async with pool.connection() as conn:
                icpt = await aengine.intercept_hot(conn, call)
            assert icpt.effect_id is not None
            result = json.dumps({"email": f"e{i}@x", "found": False})
            async with pool.connection() as conn:
                await aengine.send_result(
                    conn,
                    "commit",
                    session,
                    icpt.effect_id,
                    result,
                    asynchronous=False,
                    wait=True,
                )

        variants: dict[str, Callable[[int], Awaitable[object]]] = {
            "safe_direct": lambda i: direct.call_tool("echo", {"text": f"t{i}"}),
            "safe_proxy": lambda i: proxied.call_tool("echo", {"text": f"t{i}"}),
            "comp_direct": lambda i: direct.call_tool("lookup_user", {"email": f"d{i}@x"}),
            "comp_proxy": lambda i: proxied.call_tool("lookup_user", {"email": f"p{i}@x"}),
            "engine": engine_call,
        }
        try:
            for variant in variants.values():  # warm up
                await per_call(variant, 20, 10_000_000)
            for r in range(rounds):
                for name, variant in variants.items():
                    before = cpu_seconds(pid)
                    results[name].extend(await per_call(variant, calls, r * calls))
                    if name in cpu:
                        cpu[name] += cpu_seconds(pid) - before
        finally:
            await pool.close()
    med = {k: statistics.median(v) * 1000 for k, v in results.items()}
    top = {k: p90(v) * 1000 for k, v in results.items()}
    safe_added = med["safe_proxy"] - med["safe_direct"]
    comp_added = med["comp_proxy"] - med["comp_direct"]
    comp_target = med["engine"] + 1.0
    print(f"MCP proxy, {rounds} rounds x {calls} calls, ms per call (median, p90)")
    rows = [
        ("straight, echo", "safe_direct"),
        ("straight, lookup_user", "comp_direct"),
        ("SAFE via the proxy (echo)", "safe_proxy"),
        ("COMPENSABLE via the proxy (lookup_user)", "comp_proxy"),
        ("the engine's round trips alone", "engine"),
    ]
    for label, key in rows:
        print(f"  {label:<42} {med[key]:7.3f} {top[key]:7.3f}")
    print(
        f"  SAFE added {safe_added:.3f} ms; target <= 1.000: "
        f"{'met' if safe_added <= 1.0 else 'NOT met'}"
    )
    print(
        f"  COMPENSABLE added {comp_added:.3f} ms; target <= the engine's round trips "
        f"{med['engine']:.3f} + 1 = {comp_target:.3f}: "
        f"{'met' if comp_added <= comp_target else 'NOT met'} "
        f"(beyond the round trips: {comp_added - med['engine']:.3f} ms)"
    )
    if pid is not None:
        per = {k: v / (calls * rounds) * 1000 for k, v in cpu.items()}
        print(
            f"  the proxy process's CPU per call (less sensitive to load than the wall "
            f"time): SAFE {per['safe_proxy']:.3f} ms, COMPENSABLE {per['comp_proxy']:.3f} ms"
        )
    if in_process_too:
        os.environ.update(env)  # the upstream's command is `python` on this PATH
        await in_process(policy, dsn, calls * rounds)


async def in_process(policy: Path, dsn: str, calls: int) -> None:
    """Section 3: McpProxy's COMPENSABLE path in this process, each piece timed."""
    from undolog.mcp_proxy import proxy as proxy_module
    from undolog.mcp_proxy.server import running_proxy

    pieces: dict[str, list[float]] = {"intercept": [], "upstream": [], "commit": [], "all": []}

    def timed(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                pieces[name].append(time.perf_counter() - start)

        return wrapper

    async with running_proxy(str(policy), dsn) as proxy:
        session = proxy_module.ProxySession(uuid.uuid4())
        await proxy.begin(session)
        route, upstream = proxy.routes["lookup_user"], proxy.upstreams["bench"]
        # the proxy calls aengine's pipelined path through the module: patch it there
        attributes = {"intercept": "intercept_hot", "commit": "send_result"}
        original: dict[str, Callable[..., Awaitable[Any]]] = {
            attr: getattr(aengine, attr) for attr in attributes.values()
        }
        for piece, attr in attributes.items():
            setattr(aengine, attr, timed(piece, original[attr]))
        setattr(upstream, "call", timed("upstream", upstream.call))  # noqa: B010
        try:
            for i in range(calls):
                start = time.perf_counter()
                await proxy._compensable(session, "lookup_user", route, upstream, {"email": f"{i}"})
                pieces["all"].append(time.perf_counter() - start)
        finally:
            for attr, fn in original.items():
                setattr(aengine, attr, fn)
    med = {k: statistics.median(v[20:]) * 1000 for k, v in pieces.items()}
    own = med["all"] - med["intercept"] - med["upstream"] - med["commit"]
    print(f"In process, {calls} COMPENSABLE calls, median ms")
    print(
        f"  intercept {med['intercept']:.3f}  upstream {med['upstream']:.3f}  "
        f"commit {med['commit']:.3f}  whole call {med['all']:.3f}"
    )
    print(f"  the proxy's own code beyond those: {own:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--in-process", action="store_true", help="also time the path in process")
    parser.add_argument(
        "--durable-results",
        action="store_true",
        help="the proxy's COMPENSABLE answers wait for their commit (proxy.durable_results)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds, args.in_process, args.durable_results))
