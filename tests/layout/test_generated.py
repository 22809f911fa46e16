"""The sync modules generated from their async sources (tools/async_to_sync.py): the
rewrite itself, and every generated module as the generator writes it now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import async_to_sync

ROOT = Path(__file__).resolve().parents[2]


def test_the_rewrite_drops_async_and_renames_only_code() -> None:
    source = (
        "from undolog.aengine import AsyncConnection, fetch_one\n"
        "async def f(conn: AsyncConnection) -> None:\n"
        '    """Awaits aengine on an AsyncConnection."""  # async stays in text\n'
        "    async with conn.transaction():\n"
        "        await fetch_one(conn, 'SELECT 1 -- await')\n"
        "    async for _ in conn.notifies(stop_after=1):\n"
        "        pass\n"
    )
    assert async_to_sync.to_sync(source) == (
        "from undolog.engine import Connection, fetch_one\n"
        "def f(conn: Connection) -> None:\n"
        '    """Awaits aengine on an AsyncConnection."""  # async stays in text\n'
        "    with conn.transaction():\n"
        "        fetch_one(conn, 'SELECT 1 -- await')\n"
        "    for _ in conn.notifies(stop_after=1):\n"
        "        pass\n"
    )


def test_every_generated_module_is_current() -> None:
    """As `make lint` checks: a hand edit of a generated module, or a source changed
    without `make generate`, fails with the diff."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "async_to_sync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for source, target in async_to_sync.MODULES.items():
        text = (async_to_sync.PACKAGE / target).read_text(encoding="utf-8")
        assert text.startswith(async_to_sync.header(source)), target
