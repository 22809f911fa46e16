"""The example memory policy against the real reference MCP servers, not a stand-in: the
SDK's MCP client drives `undolog mcp-proxy` over stdio, which runs
`@modelcontextprotocol/server-memory` and `@modelcontextprotocol/server-filesystem` with
node (installed by `make deps` at the versions pinned in tools/mcp-reference-servers.json).
The policy's tool tables are the example's, as written; only the upstream commands differ.
A failed session's undo walk must leave the graph and the edited file as they were."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_mcp_proxy import ROOT, run, text
from test_mcp_proxy_policy import MEMORY_POLICY, client, create_observe_edit_then_roll_back

PINS = ROOT / "tools" / "mcp-reference-servers.json"
PREFIX = ROOT / ".cache" / "mcp-servers"
# which reference server serves each tool the example policy names
SERVES = {
    "create_entities": "memory",
    "add_observations": "memory",
    "read_graph": "memory",
    "edit_file": "files",
    "read_text_file": "files",
}


def entry_point(package: str) -> Path:
    """The installed package's bin script, after checking node and the pinned version."""
    wanted = json.loads(PINS.read_text())[package]
    manifest = PREFIX / "node_modules" / package / "package.json"
    if shutil.which("node") is None or not manifest.exists():
        pytest.fail(
            f"{package}@{wanted} is not installed under {PREFIX} (or node is missing):"
            " run `make deps`"
        )
    meta = json.loads(manifest.read_text())
    if meta["version"] != wanted:
        pytest.fail(
            f"{package} under {PREFIX} is {meta['version']}, the pin is {wanted}: run `make deps`"
        )
    ((_, script),) = meta["bin"].items()
    return manifest.parent / str(script)


def toml_value(value: Any) -> str:
    """TOML for the policy's values: strings, numbers, booleans, lists, inline tables."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a JSON string, number or boolean is also TOML's


def reference_policy(tmp_path: Path, memory_file: Path, files: Path) -> Path:
    example = tomllib.loads(MEMORY_POLICY.read_text())
    lines = ["[proxy]", *(f"{k} = {toml_value(v)}" for k, v in example["proxy"].items())]
    memory = entry_point("@modelcontextprotocol/server-memory")
    filesystem = entry_point("@modelcontextprotocol/server-filesystem")
    lines += [
        "[upstreams.memory]",
        f"command = {toml_value(['node', str(memory)])}",
        f"env = {toml_value({'MEMORY_FILE_PATH': str(memory_file)})}",
        f"hide = {toml_value(example['upstreams']['mem']['hide'])}",
        "[upstreams.files]",
        f"command = {toml_value(['node', str(filesystem), str(files)])}",
    ]
    for tool, table in example["upstreams"]["mem"]["tools"].items():
        lines.append(f"[upstreams.{SERVES[tool]}.tools.{tool}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    path = tmp_path / "reference-policy.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def graph(memory_file: Path) -> dict[str, list[str]]:
    """server-memory's file: one JSON object a line, entities and relations."""
    if not memory_file.exists():
        return {}
    items = [json.loads(line) for line in memory_file.read_text().splitlines() if line.strip()]
    return {i["name"]: i["observations"] for i in items if i["type"] == "entity"}


def test_the_example_policy_undoes_the_reference_servers(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """create_entities, add_observations and edit_file through the real servers, then a
    rollback: the names created, the observations added and both edits are undone, and
    what existed before the session is left alone."""
    memory_file = tmp_path / "memory.jsonl"
    memory_file.write_text(
        json.dumps(
            {
                "type": "entity",
                "name": "Ada",
                "entityType": "person",
                "observations": ["writes code"],
            }
        )
    )
    files = tmp_path / "files"
    files.mkdir()
    notes = files / "notes.txt"
    original = "status: draft\nowner: ada\n"
    notes.write_text(original)
    policy = reference_policy(tmp_path, memory_file, files)

    async def body() -> None:
        async with client(policy, dsn, dict(os.environ)) as c:
            await create_observe_edit_then_roll_back(
                c,
                conn,
                tool=lambda name: f"{SERVES[name]}__{name}",
                notes=str(notes),
                notes_file=notes,
                graph=lambda: graph(memory_file),
            )
            after = await c.call_tool("memory__read_graph", {})
            assert not after.is_error, text(after)
            assert after.structured_content is not None
            assert [e["name"] for e in after.structured_content["entities"]] == ["Ada"]

    run(body)
    assert graph(memory_file) == {"Ada": ["writes code"]}
    assert notes.read_text() == original
