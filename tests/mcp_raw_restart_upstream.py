"""tests/mcp_raw_upstream.py that can be restarted changed, as after a crash and an
upgrade: ``die`` writes its pid to UPSTREAM_LEDGER + ".pid", answers, then exits (the
proxy reconnects at the next call, starting it
again); started while the file UPSTREAM_LEDGER + ".renamed" exists, it lists ``make``
taking ``id`` instead of ``key``. Executions land in UPSTREAM_LEDGER."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcp_raw_upstream as raw

RENAMED = Path(os.environ["UPSTREAM_LEDGER"] + ".renamed")
if RENAMED.exists():
    raw.TOOLS["make"] = {**raw.TOOLS["make"], "inputSchema": raw._object("id")}
raw.TOOLS["die"] = {
    "name": "die",
    "description": "answers, then exits",
    "inputSchema": raw._object(),
}
_call = raw.call


def call(mid: Any, name: str, args: dict[str, Any]) -> None:
    if name != "die":
        _call(mid, name, args)
        return
    Path(os.environ["UPSTREAM_LEDGER"] + ".pid").write_text(str(os.getpid()))
    raw.answer(mid, raw.said("bye"))
    sys.stdout.flush()
    os._exit(0)


raw.call = call
if __name__ == "__main__":
    raw.main()
