"""One login must not take every connection the others need (docs/how-to/roles.md):
PostgreSQL's max_connections is the cluster's, and a login made as examples/roles.sql
makes it opens as many as it likes unless it has a CONNECTION LIMIT."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcluster import throwaway_cluster
from undolog.migrations import migrate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_an_agent_login_as_the_docs_make_it_leaves_the_worker_and_approvers_a_connection() -> None:
    """examples/roles.sql made billing_agent with no CONNECTION LIMIT: an agent that
    opened connections in a loop (a retry storm, a pool sized past the server's) took all
    of max_connections but the superuser's reserved few, and the worker's login and the
    approver's were refused ("sorry, too many clients already"): no undo walk, nobody
    to decide, until the agent let go."""
    with ExitStack() as stack:
        cluster = stack.enter_context(throwaway_cluster("max_connections=30"))
        with psycopg.connect(cluster.dsn, autocommit=True) as owner:
            migrate(owner)
            owner.execute((EXAMPLES / "roles.sql").read_text())
        agent: list[psycopg.Connection[Any]] = []
        for _ in range(40):  # more than the server has
            try:
                agent.append(
                    stack.enter_context(
                        psycopg.connect(cluster.dsn, user="billing_agent", password="change-me")
                    )
                )
            except psycopg.OperationalError:
                break
        for other in ("undolog_cron", "alice"):  # the worker's login, an approver's
            with psycopg.connect(cluster.dsn, user=other, password="change-me") as c:
                assert c.execute("SELECT undolog.version()").fetchone() is not None
        assert 0 < len(agent) < 27


def test_what_holds_against_an_agent_login_is_what_it_cannot_set_back(
    conn: psycopg.Connection[Any], login: Any
) -> None:
    """docs/how-to/roles.md: a role's statement_timeout (or work_mem) is only its
    default, which the login SETs back in its own session; temp_file_limit is a
    superuser's setting, which an ALTER ROLE makes hold."""
    agent = login("undolog_agent")
    name = agent.info.user
    conn.execute(f"ALTER ROLE {name} SET statement_timeout = '1s'")
    conn.execute(f"ALTER ROLE {name} SET temp_file_limit = '1MB'")
    with psycopg.connect(conn.info.dsn, user=name, autocommit=True) as c:
        c.execute("SET statement_timeout = 0")  # its own to lift
        assert c.execute("SHOW statement_timeout").fetchone() == ("0",)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SET temp_file_limit = -1")
        with pytest.raises(psycopg.errors.ConfigurationLimitExceeded):
            c.execute(
                "SELECT count(*) FROM (SELECT g FROM generate_series(1, 400000) AS g"
                " ORDER BY g DESC) AS sorted"
            )
