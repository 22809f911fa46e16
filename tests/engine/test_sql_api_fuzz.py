"""The SQL API's stateful fuzz, its short run: five logins of every role (two agents, an
agent that approves, an approver, an operator) call every function their role may
EXECUTE, and now and then one it may not, in random order, with ids valid, another
login's, finished, of another kind or nonsense, and arguments of wrong shapes; after every
step bench/fuzz_sql_api.py checks the documented SQLSTATEs and hints, that an error
changed nothing, that no login changed or read another's beyond its role, the state
machines, and at the end the hash chains. Its long run, by hand, is in
docs/development.md ("The SQL API's fuzz")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FUZZ = Path(__file__).resolve().parents[2] / "bench" / "fuzz_sql_api.py"
# Fixed seeds (odd: an agent may roll back its own sessions; even: it may not), short.
SEEDS = (12, 13)
STEPS = 250


def _fuzz_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_sql_api", FUZZ)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_sql_api_fuzz_finds_no_violation(dsn: str) -> None:
    fuzz = _fuzz_module()
    for seed in SEEDS:
        run = fuzz.fuzz(dsn, seed, STEPS)
        assert run.step_no == STEPS
        assert not run.violations, "\n".join(run.violations[:10])
        # the walk went somewhere: calls journaled, committed, decided and undone
        for fn in ("intercept", "commit", "begin_session"):
            assert run.counts[fn] > 0, (seed, fn, dict(run.counts))
