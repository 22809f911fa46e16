"""The dashboard's stateful fuzz, its short run: a visitor, two approvers, an operator and
an agent login, each with its own cookies, speak raw HTTP to one `undolog dashboard`
while agents journal calls with hostile text in them (every page and form, sent right
and wrong: missing, foreign and replayed tokens and confirmations, stale forms, double
submits, stolen cookies, wrong methods and shapes, huge and compressed bodies, tampered
links, half requests), and after every step bench/fuzz_dashboard.py checks the headers,
that no page shows the agents' markup, that each login sees what its role may, and that
nothing was decided or done but by a valid form, once; at the end, that no session is
left that nobody can end and the chains verify. Its long run, by hand, is in
docs/development.md ("The dashboard's fuzz")."""

from __future__ import annotations

import pytest

import bench_module

SEED, STEPS = 5, 45


@pytest.mark.unregistered_tools  # the fuzz's agents register their own tools
def test_the_dashboard_fuzz_finds_no_violation(dsn: str) -> None:
    run = bench_module.load("fuzz_dashboard").fuzz(dsn, SEED, STEPS)
    assert run.step_no >= STEPS
    assert not run.violations, "\n".join(run.violations[:10])
    # the walk went somewhere: agents' calls, pages, decisions, hostile forms
    for move in ("agent_begin", "read", "approve", "foreign", "shape"):
        assert run.counts[move] > 0, (move, dict(run.counts))
