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

from undolog import approvals, engine, migrations
from undolog.cli._common import connect
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]


@pytest.fixture
def writable_public(conn: Conn) -> Iterator[None]:
    """public as a database made before PostgreSQL 15 has it: any login may create in it."""
    conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    yield
    conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")


def _plant_approving_count(agent: Conn, approval_id: Any) -> None:
    """public.count(uuid): an aggregate whose every step approves the agent's own call, as
    whoever runs it (the owner's views count calls by their uuid)."""
    agent.execute(
        f"""
        CREATE FUNCTION public.count_step(n bigint, x uuid) RETURNS bigint
        LANGUAGE plpgsql AS $$
        BEGIN
            BEGIN
                PERFORM undolog.approve('{approval_id}', 'anyone', 'looks fine');
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
            RETURN n + 1;
        END $$;
        GRANT EXECUTE ON FUNCTION public.count_step(bigint, uuid) TO PUBLIC;
        CREATE AGGREGATE public.count(uuid) (
            SFUNC = public.count_step, STYPE = bigint, INITCOND = '0');
        """
    )


def test_the_owner_migrating_binds_no_function_an_agent_put_on_its_search_path(
    conn: Conn, login: Callable[..., Conn], writable_public: None
) -> None:
    """The owner re-applies the views (an upgrade that changes them, a fresh install):
    sessions_overview's count(e.effect_id) was bound to the agent's public.count(uuid),
    and an approver reading it (the dashboard's sessions page) approved the agent's
    irreversible call, as the approver. With migrate's search path pinned to pg_catalog
    it is pg_catalog's count."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    session = engine.begin_session(agent, agent="shadow")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 100000})
    assert call.approval_id is not None
    _plant_approving_count(agent, call.approval_id)

    migrations.apply_repeatables(conn)  # as the owner's `undolog migrate` applies views

    approver.execute("SELECT * FROM undolog.sessions_overview").fetchall()
    assert approvals.approval_state(approver, call.approval_id) == "pending"
    bound = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_depend AS d"
        " JOIN pg_catalog.pg_proc AS p ON p.oid = d.refobjid"
        " WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass"
        " AND p.pronamespace = 'public'::regnamespace"
        " AND d.classid <> 'pg_catalog.pg_proc'::regclass"  # but the agent's aggregate
    ).fetchone()
    assert bound == (0,)  # no view, policy, default or constraint uses a function of public


def test_a_commands_connection_resolves_names_in_pg_catalog_alone(
    conn: Conn, dsn: str, login: Callable[..., Conn], writable_public: None
) -> None:
    """The commands' and the worker's connection (cli._common.connect): an approver's
    query that counts calls by their ids (here the approvals inbox's) runs pg_catalog's
    count, not the agent's public.count(uuid), which approved the agent's own call as the
    approver."""
    agent = login("undolog_agent")
    approver = login("undolog_approver")
    session = engine.begin_session(agent, agent="shadow")
    call = engine.intercept(agent, session, 0, "wire", "irreversible", {"cents": 100000})
    assert call.approval_id is not None
    _plant_approving_count(agent, call.approval_id)
    args = argparse.Namespace(dsn=make_conninfo(dsn, user=approver.info.user))
    with connect(args) as person:
        person.execute(
            QUERIES["dashboard_inbox_prior_counts"],
            {"approval_ids": [call.approval_id], "session_ids": [session], "step_indexes": [1]},
        ).fetchall()
        path = person.execute("SHOW search_path").fetchone()
    assert approvals.approval_state(approver, call.approval_id) == "pending"
    assert path == ("pg_catalog, pg_temp",)
