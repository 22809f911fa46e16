"""The SQL that Python sends, by name: one catalogue, ``queries.sql`` beside this module.

Each query starts with a header line ``-- name: <query_name>``; the comment lines right
after it say what the query is for, and the statement runs to the next header. Queries
take named parameters (``%(session_id)s``) and call the engine's functions in SQL's
named notation (``undolog.intercept(p_session_id => %(session_id)s, ...)``), so the
order of a function's arguments, in SQL or in Python, never matters to a caller. The
faces and the CLI read the engine's views only: no query names a base table (a test
over the catalogue and the modules checks it).

    from undolog.queries import QUERIES
    conn.execute(QUERIES["complete_session"], {"session_id": sid})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$")


class CatalogueError(ValueError):
    """The catalogue file is malformed: a duplicate name, an empty query, text before
    the first header."""


def parse(text: str) -> dict[str, str]:
    """Queries by name, each with its header and description comments stripped."""
    queries: dict[str, str] = {}
    name: str | None = None
    body: list[str] = []

    def close() -> None:
        if name is None:
            return
        statement = "\n".join(body).strip().rstrip(";").strip()
        if not statement:
            raise CatalogueError(f"query {name} has no statement")
        queries[name] = statement

    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            close()
            name, body = header.group(1), []
            if name in queries:
                raise CatalogueError(f"query {name} is defined twice")
            continue
        if name is None:
            if line.strip() and not line.startswith("--"):
                raise CatalogueError(f"text before the first query header: {line!r}")
            continue
        if not body and line.startswith("--"):
            continue  # the description
        body.append(line)
    close()
    return queries


def _load() -> Mapping[str, str]:
    text = resources.files("undolog").joinpath("queries.sql").read_text(encoding="utf-8")
    return MappingProxyType(parse(text))


QUERIES: Mapping[str, str] = _load()
