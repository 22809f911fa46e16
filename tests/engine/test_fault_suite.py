"""The fault suite's short run: 6 randomized trials (every kind once, each drawn from
the run's own seed) of real processes killed, paused and crashed, with their server stopped
`-m immediate`, and a hostile second agent login beside the victims in every trial; every
promise checked against a ledger kept outside the engine (bench/faults.py, whose full run
of 500 trials is done by hand: docs/development.md, "Faults")."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "bench" / "faults.py"


def test_fault_suite_short_run_has_no_violation() -> None:
    seed = int(os.environ.get("UNDOLOG_FAULTS_SEED") or random.SystemRandom().randint(0, 2**31))
    trials = os.environ.get("UNDOLOG_FAULTS_TRIALS", "6")  # 8 took some 100 s of a worker
    done = subprocess.run(
        [
            sys.executable,
            str(SUITE),
            "--trials",
            trials,
            "--seed",
            str(seed),
            "--hostile",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = f"seed {seed}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, report
    total = [line for line in done.stdout.splitlines() if line.startswith("total")]
    assert total, report
    fields = total[0].split()
    assert int(fields[1]) == int(trials), report  # every trial ran
    assert int(fields[-1]) == 0, report  # no violation
    assert int(fields[5]) > 0 and int(fields[7]) > 0, report  # kills and restarts happened
    hostile, refused = int(fields[10]), int(fields[11])
    assert hostile > 0 and refused == hostile, report  # the hostile login tried, and failed
