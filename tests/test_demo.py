"""`make demo` runs the scripted session end to end on a database it is given."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs_and_shows_replay_retry_and_approval(dsn: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "undolog.demo"],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "action=replay" in out.stdout and "cached result={'user_id': 42}" in out.stdout
    assert "executing -> pending   {'error': 'SMTP timeout'}" in out.stdout
    assert "action=await_approval" in out.stdout
    assert "session state: awaiting_approval" in out.stdout


def test_demo_without_a_database_says_so() -> None:
    env = {k: v for k, v in os.environ.items() if k != "UNDOLOG_DSN"}
    out = subprocess.run(
        [sys.executable, "-m", "undolog.demo"], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 2
    assert "UNDOLOG_DSN is not set" in out.stderr
