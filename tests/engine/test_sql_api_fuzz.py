"""The SQL API's stateful fuzz, its short run: five logins of every role (two agents, an
agent that approves, an approver, an operator) call every function their role may
EXECUTE, and now and then one it may not, in random order, with ids valid, another
login's, finished, of another kind or nonsense, and arguments of wrong shapes; after every
step bench/fuzz_sql_api.py checks the documented SQLSTATEs and hints, that an error
changed nothing, that no login changed or read another's beyond its role, the state
machines, and at the end the hash chains. Its long run, by hand, is in
docs/development.md ("The SQL API's fuzz")."""

from __future__ import annotations

from collections import Counter

import bench_module

# Fixed seeds (odd: an agent may roll back its own sessions; even: it may not), short.
SEEDS = (21, 26)
STEPS = 250


def test_the_sql_api_fuzz_finds_no_violation(dsn: str) -> None:
    fuzz = bench_module.load("fuzz_sql_api")
    made: Counter[str] = Counter()
    for seed in SEEDS:
        run = fuzz.fuzz(dsn, seed, STEPS)
        assert run.step_no >= STEPS
        assert not run.violations, "\n".join(run.violations[:10])
        made.update(run.counts)
    # the walk went somewhere: sessions begun, calls journaled, committed, decided, walked
    for fn in ("begin_session", "intercept", "commit", "claim_compensation"):
        assert made[fn] > 0, (fn, dict(made))
    assert made["approve"] + made["approve_edited"] + made["reject"] > 0, dict(made)
