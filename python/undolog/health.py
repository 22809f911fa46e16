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


def logins(row: Mapping[str, Any]) -> dict[str, Any]:
    """Whether one person may hold both sides of a call: an agent login and an approver's
    or operator's where one may become the other (SET ROLE, then set its password), or
    such a login holding CREATEROLE on PostgreSQL 15 (it may set any non-superuser's
    password). The engine refuses their approvals (42501); this says so before one is
    refused. ``row``: the row of logins_that_may_become_another."""
    pairs = [str(pair) for pair in row["pairs"]]
    creators = [str(login) for login in row["creators"]]
    problems = [f"{pair} may become one another" for pair in pairs]
    problems += [f"{login} holds CREATEROLE" for login in creators]
    return {
        "name": "logins",
        "ok": not problems,
        "detail": f"{'; '.join(problems)}: one person could make a call and approve it (the"
        " engine refuses such approvals); whoever manages the roles must REVOKE the"
        " membership and ALTER ROLE ... NOCREATEROLE (docs/how-to/roles.md)"
        if problems
        else "no agent login and person's login may become one another",
        "logins_that_may_become_another": pairs,
        "logins_with_createrole": creators,
    }
