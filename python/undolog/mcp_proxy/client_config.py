"""``undolog mcp-proxy --config FILE --print-client-config``: the JSON a desktop client
(Claude Desktop's ``claude_desktop_config.json``, and most others' ``mcpServers``) needs
to start this proxy, with absolute paths.

A desktop app does not start its servers from a shell: its PATH is the system's, not
the one where UndoLog was installed (a virtualenv, ``pipx``, ``~/.local/bin``), and its
working directory is not the operator's. So the command is this very installation's
``undolog`` (or its Python with ``-m undolog.cli``) and the policy's absolute path.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from undolog.mcp_proxy.policy import Policy, load_policy


def proxy_command() -> list[str]:
    """This installation's ``undolog``, by absolute path: the console script beside the
    running interpreter, else that interpreter running the CLI module."""
    # not resolved: a virtualenv's python is a symlink, and only through it is the venv
    # the one that runs
    python = os.path.abspath(sys.executable)
    script = Path(python).parent / ("undolog.exe" if os.name == "nt" else "undolog")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [python, "-m", "undolog.cli"]


def client_config(config: str, dsn: str | None, name: str) -> dict[str, Any]:
    policy_path = Path(config).resolve()
    command, *prefix = proxy_command()
    server: dict[str, Any] = {
        "command": command,
        "args": [*prefix, "mcp-proxy", "--config", str(policy_path)],
    }
    if dsn:
        server["env"] = {"UNDOLOG_DSN": dsn}
    return {"mcpServers": {name: server}}


def warnings(policy: Policy, dsn: str | None) -> list[str]:
    """What the printed configuration still leaves to the app's environment."""
    out = []
    if not dsn:
        out.append(
            "no DSN given (--dsn or UNDOLOG_DSN): add env.UNDOLOG_DSN, or the proxy uses "
            "libpq's PG* variables, which a desktop app does not set"
        )
    for up in policy.upstreams.values():
        if up.command is None:
            continue
        if not os.path.isabs(up.command[0]):
            found = shutil.which(up.command[0])
            where = f" (here it is {found})" if found else " (not found on this PATH either)"
            out.append(
                f"upstreams.{up.name}.command runs {up.command[0]!r} from the PATH the "
                f"client gives the proxy{where}: give its absolute path in the policy"
            )
        if up.cwd is not None and not os.path.isabs(up.cwd):
            out.append(
                f"upstreams.{up.name}.cwd {up.cwd!r} is relative: it is taken from the "
                "working directory the client starts the proxy in, not this one "
                f"({os.getcwd()}): give its absolute path in the policy"
            )
        if up.cwd is not None and os.path.isabs(up.cwd):
            continue  # relative arguments are the upstream's, read in that directory
        relative = [a for a in up.command[1:] if _relative_path(a, up.cwd)]
        if relative:
            out.append(
                f"upstreams.{up.name}.command names {' '.join(repr(a) for a in relative)} "
                "by a relative path, which the upstream reads in the working directory "
                "the client starts the proxy in, not this one: give "
                f"{'its' if len(relative) == 1 else 'their'} absolute path in the policy "
                f"(or an absolute upstreams.{up.name}.cwd)"
            )
    return out


def _relative_path(arg: str, cwd: str | None) -> bool:
    """Whether an upstream's argument looks like a relative path: ./ or ../ first, or a
    file or directory of that name here, "." included (a package name such as
    @scope/server is not)."""
    if not arg or arg.startswith("-") or os.path.isabs(arg) or "://" in arg:
        return False
    if arg.startswith(("./", "../", ".\\", "..\\")):
        return True
    return os.path.exists(os.path.join(cwd or ".", arg))


def print_client_config(config: str, dsn: str | None, name: str) -> int:
    policy = load_policy(config)  # a policy the proxy would refuse is not printed
    print(json.dumps(client_config(config, dsn, name), indent=2))
    for warning in warnings(policy, dsn):
        print(f"undolog mcp-proxy: note: {warning}", file=sys.stderr)
    return 0
