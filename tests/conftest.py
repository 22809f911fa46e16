"""Every test runs against a real PostgreSQL, on a fresh database cloned from a template
into which ``undolog migrate`` has installed the engine.

pytest_configure starts one throwaway cluster (tools/pgcluster.py) for every user, as the
``postgres`` system user when we are root (initdb refuses root), and the
``postgresql_noproc`` factory uses it. pytest-postgresql's own ``postgresql_proc`` is not
used: it starts the server with fsync off, and tests/test_durability.py counts WAL flushes,
which need a server that really flushes. ``--postgresql-port`` points at a server of yours.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pytest_postgresql import factories

from pgcluster import throwaway_cluster
from undolog.migrations import migrate

_cluster_stack = contextlib.ExitStack()


def load_engine(
    host: str, port: int, user: str, dbname: str, password: str | None, **_: Any
) -> None:
    """pytest-postgresql loader: install the engine into the template database."""
    with psycopg.connect(
        host=host, port=port, user=user, dbname=dbname, password=password, autocommit=True
    ) as conn:
        migrate(conn)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("postgresql_port"):
        cluster = _cluster_stack.enter_context(throwaway_cluster())
        config.option.postgresql_host = cluster.host
        config.option.postgresql_port = str(cluster.port)
        config.option.postgresql_user = cluster.user


def pytest_unconfigure(config: pytest.Config) -> None:
    _cluster_stack.close()


undolog_server = factories.postgresql_noproc(load=[load_engine])

postgresql = factories.postgresql("undolog_server")


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """Connection string of this test's fresh database (for extra connections)."""
    info = postgresql.info
    return f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to this test's database, as an agent client uses it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c
