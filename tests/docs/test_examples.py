"""The quickstart example runs as written (docs/quickstart.md includes it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_runs_as_written(dsn: str) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "top result for 'undolog'"
    assert lines[1] == "{'user_id': 1, 'email': 'ada@example.com'}"
    assert lines[2] == "rolled back; users now: {1: 'ada@example.com'}"
    assert lines[3].startswith("waiting for a human to approve ")
