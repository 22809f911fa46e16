"""`make demo` tells its four stories end to end on a database it is given."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_tells_all_four_stories(dsn: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "undolog.demos"],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # 2: rolled back last action first, the failed send skipped
    assert text.index("compensation retract_email(to bob@example.com)") < text.index(
        "compensation delete_user(user"
    )
    assert "compensated (the failed send was skipped" in text
    # 3: the payout ran exactly once, after the CLI approved it
    assert "AwaitingApprovalError: approval" in text
    assert text.count("process_payout ran") == 1
    assert text.index(": approved") < text.index("process_payout ran")
    # 4: after the crash, create_user and send_email ran once each, then replayed
    after_crash = text[text.index("4. The agent crashes") :]
    assert after_crash.count("create_user ran") == 1
    assert after_crash.count("send_email ran") == 1
    assert "(replayed from cache)" in after_crash
    assert "compensated" in text[text.index("What the journal says") :]


def test_demo_without_a_database_says_so() -> None:
    env = {k: v for k, v in os.environ.items() if k != "UNDOLOG_DSN"}
    out = subprocess.run(
        [sys.executable, "-m", "undolog.demos"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "UNDOLOG_DSN is not set" in out.stderr
