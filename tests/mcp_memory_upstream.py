"""An upstream MCP server for the proxy's tests shaped like the reference `server-memory`
(a knowledge graph of entities and their observations) and `server-filesystem`'s
`edit_file`: the tools whose compensations need lists built from lists.

The graph lives in the JSON file named by MEMORY_FILE, so its state outlives the process
and a test reads it directly; `edit_file` edits files under FILES_ROOT. Each tool's
arguments and results are typed, so the proxy sees their JSON schemas.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over, mcp's above all)
import zygote

zygote.hand_over()  # in a child of the tests' zygote (tests/zygote.py), if they started one

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("test-memory")


class Entity(BaseModel):
    name: str
    entityType: str  # the reference server's spelling
    observations: list[str]


class Entities(BaseModel):
    entities: list[Entity]


class ObservationInput(BaseModel):
    entityName: str
    contents: list[str]


class AddedObservations(BaseModel):
    entityName: str
    addedObservations: list[str]


class AddResults(BaseModel):
    results: list[AddedObservations]


class ObservationDeletion(BaseModel):
    entityName: str
    observations: list[str]


class Done(BaseModel):
    success: bool
    message: str


class Edited(BaseModel):
    content: str  # the real server's is a diff


class Edit(BaseModel):
    oldText: str
    newText: str


def _load() -> dict[str, Entity]:
    path = Path(os.environ["MEMORY_FILE"])
    if not path.exists():
        return {}
    return {e["name"]: Entity(**e) for e in json.loads(path.read_text(encoding="utf-8"))}


def _save(graph: dict[str, Entity]) -> None:
    path = Path(os.environ["MEMORY_FILE"])
    path.write_text(json.dumps([e.model_dump() for e in graph.values()]), encoding="utf-8")


@server.tool()
def read_graph() -> Entities:
    """The whole knowledge graph (reads only)."""
    return Entities(entities=list(_load().values()))


@server.tool()
def create_entities(entities: list[Entity]) -> Entities:
    """Create entities; answers the ones it created (an existing name is left alone)."""
    graph = _load()
    created = [e for e in entities if e.name not in graph]
    graph.update({e.name: e for e in created})
    _save(graph)
    return Entities(entities=created)


@server.tool()
def delete_entities(entityNames: list[str]) -> Done:
    """Delete entities by name (a missing one is no error)."""
    graph = _load()
    for name in entityNames:
        graph.pop(name, None)
    _save(graph)
    return Done(success=True, message="Entities deleted successfully")


@server.tool()
def add_observations(observations: list[ObservationInput]) -> AddResults:
    """Add observations to existing entities; answers the ones that were new."""
    graph = _load()
    results = []
    for item in observations:
        if item.entityName not in graph:
            raise ValueError(f"Entity with name {item.entityName} not found")
        entity = graph[item.entityName]
        new = [c for c in item.contents if c not in entity.observations]
        entity.observations.extend(new)
        results.append(AddedObservations(entityName=item.entityName, addedObservations=new))
    _save(graph)
    return AddResults(results=results)


@server.tool()
def delete_observations(deletions: list[ObservationDeletion]) -> Done:
    """Remove observations from entities."""
    graph = _load()
    for item in deletions:
        entity = graph.get(item.entityName)
        if entity is not None:
            entity.observations = [o for o in entity.observations if o not in item.observations]
    _save(graph)
    return Done(success=True, message="Observations deleted successfully")


def _file(path: str) -> Path:
    root = Path(os.environ["FILES_ROOT"]).resolve()
    target = (root / path).resolve()
    if root not in target.parents:
        raise ValueError(f"{path} is outside the allowed directory")
    return target


@server.tool()
def read_text_file(path: str) -> str:
    """A file's text (reads only)."""
    return _file(path).read_text(encoding="utf-8")


@server.tool()
def edit_file(path: str, edits: list[Edit], dryRun: bool = False) -> Edited:
    """Replace the first occurrence of each edit's oldText with its newText, in order."""
    target = _file(path)
    text = target.read_text(encoding="utf-8")
    for edit in edits:
        if edit.oldText not in text:
            raise ValueError(f"Could not find exact match for edit: {edit.oldText!r}")
        text = text.replace(edit.oldText, edit.newText, 1)
    if not dryRun:
        target.write_text(text, encoding="utf-8")
    return Edited(content=f"edited {path}: {len(edits)} edit(s)")


if __name__ == "__main__":
    server.run()
