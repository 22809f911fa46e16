"""Every test that touches the engine runs against a real PostgreSQL, on a fresh database
cloned from a template into which ``undolog migrate`` has installed the engine.

pytest_collection_modifyitems starts one throwaway cluster (tools/pgcluster.py) when a
chosen test needs one, for every user, as the ``postgres`` system user when we are root
(initdb refuses root), and the ``postgresql_noproc`` factory uses it. pytest-postgresql's
own ``postgresql_proc`` is not used: it starts the server with fsync off, and
tests/engine/test_durability.py counts WAL flushes, which need a server that really
flushes. Its data files are kept in memory (tools/pgcluster.py: ``data_in_memory``, a
tmpfs when there is one with room) and its WAL on disk, flushed as always: a database is
made and dropped for every test, and on disk that churn of files made each CREATE
DATABASE cost up to ten times more CPU as the run went on.
``--postgresql-port`` points at a server of yours.

Under pytest-xdist (``make test`` runs two workers) each worker collects the suite and
starts a cluster of its own, so that nothing of one worker's is seen by the other. On a
server of yours (``--postgresql-port``) run one process (``-n 0``): pytest-postgresql
names each worker's databases after it, but logins belong to the whole server, and some
tests create logins of fixed names.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql import factories

from pgcluster import throwaway_cluster
from undolog import migrations
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The throwaway cluster starts once collection shows a chosen test needs it, so the
    pure tests (signature, policy parsing, argument types) run where no PostgreSQL is."""
    needs_server = any("postgresql" in getattr(item, "fixturenames", ()) for item in items)
    if needs_server and not config.getoption("postgresql_port"):
        cluster = _cluster_stack.enter_context(throwaway_cluster(data_in_memory=True))
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
def fresh_db(conn: psycopg.Connection[Any]) -> Iterator[Callable[..., str]]:
    """fresh_db(name=None) -> the DSN of a new empty database of the same cluster (no
    engine in it), dropped when the test ends. Every test that needs a database other
    than its own uses this one factory."""
    made: list[str] = []

    def make(name: str | None = None) -> str:
        name = name or f"fresh_{uuid.uuid4().hex[:12]}"
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        info = conn.info
        return f"host={info.host} port={info.port} user={info.user} dbname={name}"

    yield make
    for name in made:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to this test's database, as an agent client uses it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


# The engine admits a call only for a tool registered for the session's owner, with the
# registered tier and compensation. The decorator registers its tools itself; the tests
# that journal calls through engine.intercept / aengine.intercept directly (choosing the
# tool name, tier and descriptor call by call) get the same registration here, once, for
# the calling connection's login. A tool reused in a test with another definition has its
# registration retired first, as an operator would (only a superuser connection can, here:
# the tests' own). A registration the registry refuses (a malformed tier or descriptor, a
# login without the privilege) registers nothing, and the call then raises what intercept
# raises. A tool its decorator registered on_reject="continue" is left as it is.
# @pytest.mark.unregistered_tools turns this off, for the registry's own tests.
_RETIRE_FOR_TEST = """
UPDATE undolog.undolog_tools SET retired_at = clock_timestamp(), retired_by = 'pytest'
WHERE owner_role = session_user AND tool_name = %s AND retired_at IS NULL
"""


def _register_for_test(
    c: Any, tool_name: Any, tier: Any, compensation: Any, superuser: str | None = None
) -> None:
    from undolog import engine
    from undolog.errors import ToolRegistrationMismatch, UndoLogError

    try:
        with c.transaction():
            engine.register_tool(c, tool_name, tier, compensation)
    except ToolRegistrationMismatch:
        try:  # the same tool, registered (by its decorator) on_reject="continue": leave it
            with c.transaction():
                engine.register_tool(c, tool_name, tier, compensation, "continue")
            return
        except (UndoLogError, psycopg.Error):
            pass
        try:
            if superuser is not None:  # an agent login cannot retire: the test's superuser
                owner = c.execute("SELECT session_user").fetchone()[0]
                with psycopg.connect(superuser, autocommit=True) as su:
                    su.execute(_RETIRE_FOR_TEST.replace("session_user", "%s"), (owner, tool_name))
            else:
                with c.transaction():
                    c.execute(_RETIRE_FOR_TEST, (tool_name,))
            with c.transaction():
                engine.register_tool(c, tool_name, tier, compensation)
        except (UndoLogError, psycopg.Error):
            pass
    except (UndoLogError, psycopg.Error):
        pass


async def _aregister_for_test(c: Any, tool_name: Any, tier: Any, compensation: Any) -> None:
    from undolog import aengine
    from undolog.errors import ToolRegistrationMismatch, UndoLogError

    try:
        async with c.transaction():
            await aengine.register_tool(c, tool_name, tier, compensation)
    except ToolRegistrationMismatch:
        try:  # as _register_for_test: a tool registered on_reject="continue" stays so
            async with c.transaction():
                await aengine.register_tool(c, tool_name, tier, compensation, "continue")
            return
        except (UndoLogError, psycopg.Error):
            pass
        try:
            async with c.transaction():
                await c.execute(_RETIRE_FOR_TEST, (tool_name,))
                await aengine.register_tool(c, tool_name, tier, compensation)
        except (UndoLogError, psycopg.Error):
            pass
    except (UndoLogError, psycopg.Error):
        pass


@pytest.fixture(autouse=True)
def _tools_registered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("unregistered_tools"):
        return
    import inspect

    from undolog import aengine, engine

    real, areal = engine.intercept, aengine.intercept
    shape = inspect.signature(real)

    def tool_of(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
        bound = shape.bind(*a, **k)
        bound.apply_defaults()
        got = bound.arguments
        return (got["conn"], got["tool_name"], got["tier"], got["compensation"])

    def superuser() -> str | None:
        return str(request.getfixturevalue("dsn")) if "dsn" in request.fixturenames else None

    def intercept(*a: Any, **k: Any) -> Any:
        _register_for_test(*tool_of(a, k), superuser())
        return real(*a, **k)

    async def aintercept(*a: Any, **k: Any) -> Any:
        await _aregister_for_test(*tool_of(a, k))
        return await areal(*a, **k)

    monkeypatch.setattr(engine, "intercept", intercept)
    monkeypatch.setattr(aengine, "intercept", aintercept)


# The engine before the tool registry: its sources (migrations 0001-0002 and the
# repeatables of that time) from the repository's history. The repeatables are always
# the current ones, so a database "at" an older migration needs that release's sources:
# today's intercept, policies and grants name the registry, which 0001 and 0002 do not
# create. Used as migrations.sql_root (monkeypatched) by the upgrade tests.
BEFORE_REGISTRY = "f0d5453"


# The engine before migration 0005 (on_reject of a registration): migrations 0001-0004
# with the repeatables of that time, which read no on_reject column.
BEFORE_REJECT_OPTION = "d65778e"


# The last engine before the migrations of the current release (0007 on): 0001-0006 with
# the repeatables of that time, which name none of the tables those migrations add.
LAST_RELEASE = "02c5242"


# The engine before migration 0019 (verify_chain, chain_events and chain_impossible_rows
# of a range of sessions): 0001-0018 with their two-argument signatures.
BEFORE_VERIFY_RANGES = "34a2dec"


def _engine_at(commit: str, dest: Path) -> Path:
    """The engine's sql/ tree as of ``commit`` (from git), unpacked under ``dest``."""
    repo = Path(__file__).resolve().parents[1]
    try:
        tar = subprocess.run(
            ["git", "-C", str(repo), "archive", commit, "sql"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the engine's history (git) is not available")
    dest.mkdir()
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest / "sql"


@pytest.fixture
def old_engine(tmp_path: Path) -> Path:
    return _engine_at(BEFORE_REGISTRY, tmp_path / "engine-before-registry")


@pytest.fixture
def engine_before_reject_option(tmp_path: Path) -> Path:
    return _engine_at(BEFORE_REJECT_OPTION, tmp_path / "engine-before-reject-option")


@pytest.fixture
def engine_last_release(tmp_path: Path) -> Path:
    return _engine_at(LAST_RELEASE, tmp_path / "engine-last-release")


@pytest.fixture
def engine_before_verify_ranges(tmp_path: Path) -> Path:
    return _engine_at(BEFORE_VERIFY_RANGES, tmp_path / "engine-before-verify-ranges")


@pytest.fixture
def migrate_as() -> Callable[..., list[str]]:
    """migrate_as(conn, root, target=None): ``undolog migrate`` as the release whose sql/
    tree is ``root`` (one of the engine_* fixtures above) would run it: that release's
    migrations and its own repeatables, not today's. Answers what migrate applied."""

    def run(conn: psycopg.Connection[Any], root: Path, target: str | None = None) -> list[str]:
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(migrations, "sql_root", lambda: root)
            return migrate(conn, target=target)

    return run


@pytest.fixture
def login(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[Callable[..., Any]]:
    """login("undolog_agent", "undolog_approver") -> an autocommit connection of a new
    LOGIN role that holds those group roles (roles are the cluster's: dropped after)."""
    made: list[tuple[str, psycopg.Connection[Any]]] = []

    def make(*groups: str) -> psycopg.Connection[Any]:
        name = f"login_{secrets.token_hex(4)}"
        conn.execute(f"CREATE ROLE {name} LOGIN")
        for group in groups:
            conn.execute(f"GRANT {group} TO {name}")
        c = psycopg.connect(dsn, user=name, autocommit=True)
        made.append((name, c))
        return c

    yield make
    for name, c in made:
        c.close()
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def agent_dsn(conn: psycopg.Connection[Any], dsn: str) -> Iterator[str]:
    """A login of its own for the agent: the person deciding (this test's login) is
    another, as the engine requires."""
    name = f"agent_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE undolog_agent")
    yield psycopg.conninfo.make_conninfo(dsn, user=name)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


AskingExample = Callable[[str, str, Callable[[uuid.UUID], None]], tuple[list[str], list[str]]]


@pytest.fixture
def run_asking_example() -> AskingExample:
    """run_asking_example(name, dsn, decide) -> (first line's words, the lines after)."""
    return _run_asking_example


def _run_asking_example(
    name: str, dsn: str, decide: Callable[[uuid.UUID], None]
) -> tuple[list[str], list[str]]:
    """Runs examples/<name> as a reader runs it, as the login of `dsn`: its first line
    must say `approval <id> requested for ...`; `decide(id)` answers it as a person does,
    and the example must then exit 0. Answers the first line's words and the lines after."""
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLES / name)],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None
    try:
        first = agent.stdout.readline().split()
        assert first[:1] == ["approval"] and first[2:4] == ["requested", "for"], first
        decide(uuid.UUID(first[1]))
        rest = agent.stdout.read().splitlines()  # to the end: the example has exited
        assert agent.wait(timeout=30) == 0, agent.stderr.read() if agent.stderr else ""
    finally:
        agent.kill()  # if it is still waiting (a failed assertion above)
        agent.wait()
    return first, rest


# --- the dashboard's tests ---------------------------------------------------------------


@pytest.fixture(scope="session")
def passwords_checked(undolog_server: Any) -> Iterator[bool]:
    """The dashboard's test logins (tests/dashboard_helpers.py), which log in with real
    passwords: True when they really authenticate by password (a pg_hba.conf line)."""
    from dashboard_helpers import create_logins, password_auth

    dsn = f"host={undolog_server.host} port={undolog_server.port} user={undolog_server.user}"
    with psycopg.connect(dsn + " dbname=postgres", autocommit=True) as conn:
        if conn.execute("SELECT to_regrole('undolog_agent')").fetchone() == (None,):
            # the group roles come with the engine's template; make sure they exist now
            for role in ("undolog_agent", "undolog_approver", "undolog_operator"):
                conn.execute(f"CREATE ROLE {role} NOLOGIN")
        create_logins(conn)
        with password_auth(conn) as enforced:
            yield enforced


@pytest.fixture
def web(dsn: str, passwords_checked: bool) -> Iterator[Any]:
    """The dashboard (Starlette's TestClient) on this test's database, no one logged in."""
    from starlette.testclient import TestClient

    from dashboard_helpers import without_user
    from undolog.dashboard import create_app

    with TestClient(create_app(without_user(dsn)), follow_redirects=False) as client:
        yield client


# --- the MCP proxy's tests ----------------------------------------------------------------


@pytest.fixture(scope="session")
def upstream_zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """One zygote per pytest (xdist) worker for the upstream MCP servers the proxy's tests
    start (tests/zygote.py): each is forked from a process that imported mcp once, not
    started afresh (about a second of CPU each, some 170 times a run). Its socket is in
    UNDOLOG_TEST_ZYGOTE, in this process's environment: the tests pass theirs on to the
    proxy, and the proxy its own to a stdio upstream (as UPSTREAM_LEDGER). Should the
    zygote not start, the upstreams run plainly."""
    import zygote

    path = tmp_path_factory.mktemp("zygote") / "socket"
    process = zygote.start(path)
    deadline = time.monotonic() + 30
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.environ[zygote.ENV] = str(path)
    try:
        yield process
    finally:
        del os.environ[zygote.ENV]
        process.kill()  # its upstreams are each ended by their own launcher
        process.wait()


@pytest.fixture(autouse=True)
def _zygote_for_mcp_proxy(request: pytest.FixtureRequest) -> None:
    """Started by the first test under tests/mcp_proxy/ of a worker, none before."""
    if request.node.path.parent.name == "mcp_proxy":
        request.getfixturevalue("upstream_zygote")
