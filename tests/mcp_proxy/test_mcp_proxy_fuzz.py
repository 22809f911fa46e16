"""The MCP proxy's stateful fuzz, its short run: three hostile clients speak raw JSON-RPC
over streamable HTTP to one `undolog mcp-proxy --http` in front of
tests/mcp_session_upstream.py (valid calls of each tier, replays, stolen handles,
cancellations, duplicate ids, batches, wrong shapes, silent connections, undo and
rollback out of order), and after every step bench/fuzz_mcp_proxy.py checks that the
proxy answers, each request at most once with its own id and result, no connection sees
another's session, and the ledger against the journal; at the end, after a worker pass,
that every compensation ran once and the chains verify. Its long run, by hand, is in
docs/development.md ("The MCP proxy's fuzz")."""

from __future__ import annotations

import bench_module

SEED, STEPS = 3, 50


def test_the_mcp_proxy_fuzz_finds_no_violation(dsn: str) -> None:
    run = bench_module.load("fuzz_mcp_proxy").fuzz(dsn, SEED, STEPS)
    assert run.step_no >= STEPS
    assert not run.violations, "\n".join(run.violations[:10])
    # the walk went somewhere: calls of each tier, hostile moves, decisions
    for move in ("put", "pay", "steal", "shape", "approve"):
        assert run.counts[move] > 0, (move, dict(run.counts))
