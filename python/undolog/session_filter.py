"""The sessions list's filter, one rule for both faces: the dashboard's Sessions page
(undolog.dashboard.queries.sessions_page) and ``undolog sessions list`` read the
sessions through the same query, dashboard_sessions_page of queries.sql, with the
parameters built here."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from undolog.queries import QUERIES


@dataclass(frozen=True)
class SessionFilter:
    """Each filter is off when None. ``search`` is the dashboard's one field: a session
    id prefix (four hex digits or more) or else a tool name; ``id_prefix`` and ``tool``
    are the same two filters named apart (`sessions list --id-prefix`, `--tool`)."""

    state: str | None = None
    agent: str | None = None
    since: datetime.datetime | None = None  # created at or after
    until: datetime.datetime | None = None  # created before
    search: str | None = None
    after: tuple[datetime.datetime, uuid.UUID] | None = None
    id_prefix: str | None = None
    tool: str | None = None


def id_prefix_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """A hex prefix of a session id (as people copy them: 'a1b2c3d4', four digits or
    more, dashes allowed) as an id range; None when the text is not one."""
    hexpart = text.replace("-", "").lower()
    if not (4 <= len(hexpart) <= 32) or any(c not in "0123456789abcdef" for c in hexpart):
        return None
    low = uuid.UUID(hexpart.ljust(32, "0"))
    high = uuid.UUID(hexpart.ljust(32, "f"))
    return low, high


def filter_params(f: SessionFilter) -> dict[str, Any]:
    """dashboard_sessions_page's filter parameters (its keyset ``after_*`` and ``limit``
    are the caller's). A search that is a hex prefix finds sessions by id, on the primary
    key; any other search is a tool name that one of the calls used."""
    span = id_prefix_range(f.search) if f.search else None
    tool = f.search if f.search and span is None else None
    if f.id_prefix:
        span = id_prefix_range(f.id_prefix)
        if span is None:
            raise ValueError(f"not a session id prefix of 4 to 32 hex digits: {f.id_prefix!r}")
    if f.tool:
        tool = f.tool
    return {
        "state": f.state or None,
        "agent": f.agent or None,
        "since": f.since,
        "until": f.until,
        "id_low": span[0] if span else None,
        "id_high": span[1] if span else None,
        "tool": tool,
    }


def _sessions_query(by_tool: bool) -> sql.Composed:
    """The sessions list's query, with the tool filter or without: composed rather than
    one query with ``%(tool)s IS NULL OR EXISTS (...)``, because the planner makes a
    semi-join of an EXISTS (stopping at the page's last row) only when it stands alone in
    the WHERE; inside an OR it stays a subplan, run for every session or hashed over
    every call of the tool (a rare tool over a million sessions: 570 ms, against 256 ms
    as a semi-join)."""
    tool = sql.SQL(QUERIES["dashboard_sessions_by_tool"]) if by_tool else sql.SQL("")
    return sql.SQL(QUERIES["dashboard_sessions_page"]).format(tool_filter=tool)


_SESSIONS_PAGE = _sessions_query(False)
_SESSIONS_BY_TOOL = _sessions_query(True)


def sessions_query(params: dict[str, Any]) -> sql.Composed:
    """dashboard_sessions_page for ``params`` (filter_params'): with the tool's piece
    when they name a tool."""
    return _SESSIONS_BY_TOOL if params["tool"] is not None else _SESSIONS_PAGE


__all__ = ["SessionFilter", "filter_params", "id_prefix_range", "sessions_query"]
