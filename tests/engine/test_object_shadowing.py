"""Object shadowing (docs/design/roles.md): a login that may create objects in a schema
on another login's search path (``public``, where CREATE was granted to PUBLIC: every
database made before PostgreSQL 15 keeps that grant through pg_upgrade) defines a
function of a pg_catalog name for a more specific type, which PostgreSQL prefers to
pg_catalog's polymorphic or "any" one. Whatever the engine's owner binds while it
migrates must not pick it: a view is bound once, when it is made, and then runs the
agent's code as every login that reads it (red team, round 7)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from shadowing import plant_approving_count, writable_public
from undolog import approvals, engine, migrations
from undolog.cli._common import connect
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]


@pytest.fixture
def planted(conn: Conn, login: Callable[..., Conn]) -> Iterator[tuple[Conn, Any, Any]]:
    """An agent's irreversible call waiting for approval, and its public.count(uuid) that
    approves it as whoever counts calls by their ids: (an approver, the session, the
    approval id)."""
    with writable_public(conn):
        agent = login("undolog_agent")
        session = engine.begin_session(agent, agent="shadow")
        call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 100000})
        assert call.approval_id is not None
        plant_approving_count(agent, call.approval_id)
        yield login("undolog_approver"), session, call.approval_id


def test_the_owner_migrating_binds_no_function_an_agent_put_on_its_search_path(
    conn: Conn, planted: tuple[Conn, Any, Any]
) -> None:
    """The owner re-applies the views (an upgrade that changes them, a fresh install):
    sessions_overview's count(e.effect_id) was bound to the agent's public.count(uuid),
    and an approver reading it (the dashboard's sessions page) approved the agent's
    irreversible call, as the approver. With migrate's search path pinned to pg_catalog
    it is pg_catalog's count."""
    approver, _, approval_id = planted

    migrations.apply_repeatables(conn)  # as the owner's `undolog migrate` applies views

    approver.execute("SELECT * FROM undolog.sessions_overview").fetchall()
    assert approvals.approval_state(approver, approval_id) == "pending"
    bound = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_depend AS d"
        " JOIN pg_catalog.pg_proc AS p ON p.oid = d.refobjid"
        " WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass"
        " AND p.pronamespace = 'public'::regnamespace"
        " AND d.classid <> 'pg_catalog.pg_proc'::regclass"  # but the agent's aggregate
    ).fetchone()
    assert bound == (0,)  # no view, policy, default or constraint uses a function of public


def test_a_commands_connection_resolves_names_in_pg_catalog_alone(
    dsn: str, planted: tuple[Conn, Any, Any]
) -> None:
    """The commands' and the worker's connection (cli._common.connect): an approver's
    query that counts calls by their ids (here the approvals inbox's) runs pg_catalog's
    count, not the agent's public.count(uuid), which approved the agent's own call as the
    approver."""
    approver, session, approval_id = planted
    args = argparse.Namespace(dsn=make_conninfo(dsn, user=approver.info.user))
    with connect(args) as person:
        person.execute(
            QUERIES["dashboard_inbox_prior_counts"],
            {"approval_ids": [approval_id], "session_ids": [session], "step_indexes": [1]},
        ).fetchall()
        path = person.execute("SHOW search_path").fetchone()
    assert approvals.approval_state(approver, approval_id) == "pending"
    assert path == ("pg_catalog, pg_temp",)
