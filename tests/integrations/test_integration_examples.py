"""The framework examples of docs/integrations.md run as written, offline, as two real
logins (the agent's, a person's), and the page includes each of them whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from integration_support import logins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "openai_agents_approval.py": "openai-agents",
    "openai_agents_rejection.py": "openai-agents",
    "pydantic_ai_approval.py": "pydantic-ai",
    "langgraph_approval.py": "langgraph",
}
APPROVED = (
    ["waiting for a human: payout", "Ada is onboarded and paid."],
    [("create_user", "committed"), ("payout", "committed")],
    [("alice", "undolog_it_approver", "approved")],
)
# What each example prints, what its journal holds, who decided what.
EXPECTED: dict[str, tuple[list[str], list[tuple[str, str]], list[tuple[str, str, str]]]] = {
    "openai_agents_approval.py": APPROVED,
    "pydantic_ai_approval.py": APPROVED,
    "langgraph_approval.py": APPROVED,
    "openai_agents_rejection.py": (
        [
            "waiting for a human: send_gift",
            "the model was told: alice rejected the send_gift call: over budget. It did not run.",
            "Ada is onboarded, without a gift.",
        ],
        [("create_user", "committed"), ("send_gift", "rejected")],
        [("alice", "undolog_it_approver", "rejected")],
    ),
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_runs_as_written(dsn: str, example: str) -> None:
    agent_dsn, approver_dsn = logins(dsn)
    env = {
        **os.environ,
        "UNDOLOG_DSN": agent_dsn,
        "UNDOLOG_APPROVER_DSN": approver_dsn,
        "OPENAI_API_KEY": "sk-test-not-a-key",  # never used: no request leaves the machine
    }
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    printed, journaled, decided_as = EXPECTED[example]
    assert out.stdout.splitlines() == printed
    with psycopg.connect(dsn) as conn:
        sessions = conn.execute("SELECT state FROM undolog.undolog_sessions").fetchall()
        journal = conn.execute(
            "SELECT tool_name, state FROM undolog.undolog_effect_log ORDER BY executed_at"
        ).fetchall()
        decided = conn.execute(
            "SELECT decided_by, decided_role, decision FROM undolog.decided_approvals"
        ).fetchall()
    assert sessions == [("completed",)]
    assert journal == journaled
    assert decided == decided_as


def test_page_includes_every_example_and_names_its_extra() -> None:
    page = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    included = re.findall(r'--8<-- "examples/([a-z_]+\.py)"', page)
    assert sorted(included) == sorted(EXAMPLES)
    for extra in EXAMPLES.values():
        assert f"pip install -e '.[{extra}]'" in page  # from the clone, until published
