"""The judgements of ``undolog health``'s security checks, from the rows of their named
queries (queries.sql): one definition that the command (sync) and the dashboard's
Maintenance page (async) both use, each running the query its own way. Pure functions
of a row: each answers the check as ``undolog health --json`` prints it (name, ok, the
detail that says what is wrong and what to do, and its fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def locks(row: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the engine's advisory locks are its own: a login that may call
    pg_advisory_lock can hold a session's lock and stall its agent and its recovery.
    ``row``: the row of public_advisory_functions."""
    still_open = [str(name) for name in row["open"]]
    return {
        "name": "locks",
        "ok": not still_open,
        "detail": f"PUBLIC may still call {len(still_open)} advisory-lock functions: a"
        " superuser must revoke them (docs/how-to/roles.md)"
        if still_open
        else "advisory-lock functions revoked from PUBLIC",
        "public_advisory_functions": still_open,
    }


def schemas(row: Mapping[str, Any]) -> dict[str, Any]:
    """Whether an agent login may create objects where another login's names resolve:
    a function it makes in public for a more specific type than pg_catalog's runs as
    every login whose search path has public (an agent's own binding, another's proxy).
    ``row``: the row of schemas_open_to_agents."""
    open_schemas = [str(name) for name in row["open"]]
    database = bool(row["database_open"])
    logins = [str(login) for login in row["logins"]]
    problems = [f"schema {name}" for name in open_schemas]
    if database:
        problems.append("this database (new schemas)")
    return {
        "name": "schemas",
        "ok": not problems,
        "detail": f"agent logins ({', '.join(logins)}) may create objects in"
        f" {', '.join(problems)}: the owner must revoke that privilege from them and from"
        " PUBLIC, and give their schemas to another owner (docs/how-to/roles.md)"
        if problems
        else "agent logins may create no schema nor objects in one",
        "agent_writable_schemas": open_schemas,
        "agent_may_create_schemas": database,
        "agent_logins_that_may_create": logins,
    }
