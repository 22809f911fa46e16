"""The test suite's own layout: tests by subject, and pure tests that need no server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUBJECTS = {"engine", "binding", "cli", "dashboard", "mcp_proxy", "integrations", "layout", "docs"}


def test_every_test_file_sits_in_its_subject_folder_under_a_name_of_its_own() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert files
    assert {f.parent.name for f in files} <= SUBJECTS, "a test outside tests/<subject>/"
    names = [f.name for f in files]
    assert len(names) == len(set(names)), "two test files of one name (pytest imports by name)"


def test_the_pure_tests_run_where_no_postgresql_is(tmp_path: Path) -> None:
    """No cluster is started for tests that use no database: with PostgreSQL's binaries
    pointed at an empty folder, the signature's tests still pass. One file of them is
    enough to show it (its property-based twin, test_signature_fast_path.py, took 20 s
    more here, run a second time for nothing)."""
    env = {**os.environ, "PG_BINDIR": str(tmp_path), "PATH": os.path.dirname(sys.executable)}
    env.pop("UNDOLOG_DSN", None)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/binding/test_signature.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
