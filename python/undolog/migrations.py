"""Install or upgrade the engine: ``undolog migrate``.

The engine's SQL (``sql/``, shipped inside the wheel) has two kinds of files:

* numbered migrations, ``sql/migrations/NNNN_name.sql``: tables, columns, constraints,
  indexes, data changes. Each runs once per database and is recorded with the checksum of
  its file in ``undolog.undolog_migrations``; a recorded migration whose file has since
  changed is an error, never silently skipped. A migration may hold a line
  ``-- undolog:after-repeatables``: what follows it (data work that needs the engine's
  functions, e.g. creating the first partitions) runs after the repeatable sources.
* repeatable sources, one object a file: ``sql/functions/*.sql``, ``sql/views/*.sql``,
  ``sql/triggers/*.sql``, ``sql/policies/*.sql`` and ``sql/grants.sql``. They hold the
  one current definition of each object (CREATE OR REPLACE, or DROP IF EXISTS + CREATE
  for policies). ``undolog.undolog_repeatables`` records the checksum of each one's
  applied text, and a source is applied again only when its text differs from that, or
  its object is gone from the database (a migration of this run dropped it);
  ``grants.sql`` also after any migration. Triggers and policies take table locks that
  queue agents' statements, so an unchanged one is never re-created; a database already
  current is left alone: no DDL, no table lock.

Apply order, in ONE transaction under one advisory lock (two installers racing: the
second waits, then finds everything recorded and does nothing), every later lock wait
bounded by ``lock_timeout`` (MigrationLockTimeout names the holder):

1. ``sql/bootstrap.sql`` (the runner's own tables);
2. the pending migrations in number order, each up to its after-repeatables line;
3. the ``functions/`` to apply, in file-name order with ``check_function_bodies = off``,
   as pg_dump does: a LANGUAGE sql body is otherwise validated at creation and would
   need every function it calls to exist already, so file names would have to encode
   dependencies. Then, when a function was applied or a migration ran, every function of
   the schema is validated (its language's validator, with bodies checked), so a broken
   body still fails the migrate;
4. the ``views/`` to apply (name order: a view that reads another view must sort after
   it), ``triggers/``, ``policies/``, then ``grants.sql``;
5. the after-repeatables parts of the migrations applied in step 2;
6. the records: migrations (name, checksum) and the repeatables applied (source_file,
   checksum); the records of files no longer in the package are dropped.

``undolog.version()`` is ``sql/functions/version.sql`` with the package's version
(python/undolog/_version.py, the one place it is written) filled in at apply time.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from undolog._conninfo import FACE_SEARCH_PATH, pin_search_path
from undolog._sql import sql_root
from undolog._version import __version__
from undolog.engine_check import is_newer, migration_files, missing_migrations

# pg_advisory_xact_lock key held by every migrate transaction (arbitrary, fixed).
MIGRATE_LOCK_KEY = 7557806069434771456

# The line of a migration after which its remaining text runs after the repeatables.
AFTER_REPEATABLES = "-- undolog:after-repeatables"

# Repeatable folders under sql/, in apply order; grants.sql comes last.
REPEATABLE_DIRS = ("functions", "views", "triggers", "policies")
GRANTS_FILE = "grants.sql"
VERSION_PLACEHOLDER = "@UNDOLOG_VERSION@"

# How long migrate waits for a table lock (CREATE TRIGGER, CREATE POLICY, ALTER TABLE)
# before it gives up: agents' statements on that table queue behind the waiting DDL, so
# this is also the longest an upgrade may stall them. Agents' transactions last
# milliseconds; a holder for longer is a transaction a person must look at.
DEFAULT_LOCK_TIMEOUT = "5s"
LockTimeout = str | int | float | timedelta

# How often migrate's backend checks, while it runs a statement, that migrate's process is
# still there (PostgreSQL 14+): a killed migrate's transaction ends within this.
CLIENT_CHECK_INTERVAL = "1s"

_MIGRATION_NAME = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")


def engine_version() -> str:
    """The package's version: python/undolog/_version.py, the one place it is written
    (pyproject.toml reads it from there into the wheel's metadata). Read from the module,
    not from the installed metadata, which an editable install leaves stale after a bump."""
    return __version__


@dataclass(frozen=True)
class Migration:
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def parts(self) -> tuple[str, str]:
        """(the part before the repeatables, the part after them; often empty)."""
        before, mark, after = self.text.partition("\n" + AFTER_REPEATABLES + "\n")
        return before, after if mark else ""


@dataclass(frozen=True)
class Repeatable:
    path: str  # relative to sql/, e.g. "functions/intercept.sql"
    sql: str  # the text as applied (placeholders filled in)

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


class MigrationError(RuntimeError):
    """The database's recorded migrations disagree with this package's."""


def available_migrations(root: Path | None = None) -> list[Migration]:
    found = []
    for path in migration_files(root or sql_root()):
        if path.suffix != ".sql" or not path.is_file():
            raise MigrationError(f"{path}: a migration is one file NNNN_name.sql")
        if not _MIGRATION_NAME.match(path.stem):
            raise MigrationError(f"{path.name}: a migration is named NNNN_name.sql")
        found.append(Migration(path.stem, path))
    return found


def repeatables(root: Path | None = None) -> list[Repeatable]:
    """Every repeatable source, in apply order, with its text as it is applied."""
    base = root or sql_root()
    paths = [p for d in REPEATABLE_DIRS for p in sorted((base / d).glob("*.sql"))]
    paths.append(base / GRANTS_FILE)
    version = engine_version()
    return [
        Repeatable(
            p.relative_to(base).as_posix(),
            p.read_text(encoding="utf-8").replace(VERSION_PLACEHOLDER, version),
        )
        for p in paths
    ]


@dataclass(frozen=True)
class Status:
    """What ``migrate`` would do; ``up_to_date`` when nothing."""

    pending: list[str] = field(default_factory=list)  # migrations not yet applied
    changed: list[str] = field(default_factory=list)  # repeatables new or different
    removed: list[str] = field(default_factory=list)  # recorded, no longer a file
    missing: list[str] = field(default_factory=list)  # unchanged, but the object is gone

    @property
    def up_to_date(self) -> bool:
        return not (self.pending or self.changed or self.removed or self.missing)

    def describe(self) -> list[str]:
        return (
            [f"pending migration {name}" for name in self.pending]
            + [f"changed {path}" for path in self.changed]
            + [f"removed {path} (a migration must drop its object)" for path in self.removed]
            + [
                f"missing {path} (its object is gone: migrate re-creates it)"
                for path in self.missing
            ]
        )


class MigrationLockTimeout(MigrationError):
    """migrate waited ``lock_timeout`` for a table lock another transaction holds, and
    gave up; nothing was applied. ``holders`` describes who held it when migrate looked."""

    def __init__(self, message: str, where: str, holders: list[str]) -> None:
        super().__init__(message)
        self.where = where
        self.holders = holders


def describe_applied(applied: list[str]) -> list[str]:
    """migrate()'s answer for a person: each migration, then the repeatable sources by
    path when a few changed (a developer's edit), or their count (a fresh install)."""
    names = {m.name for m in available_migrations()}
    done = [a for a in applied if a in names]
    sources = [a for a in applied if a not in names]
    if len(sources) > 5:
        return [*done, f"{len(sources)} repeatable sources"]
    return done + sources


_SCHEMA_OWNER = """
SELECT n.nspowner::regrole::text, current_user,
       pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')
FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'undolog'
"""


# The migrate transaction's search path: pg_catalog alone (and this login's own temporary
# schema, last). Every name of the engine's is written undolog.name; a bare function or
# operator name must be pg_catalog's. With the login's own path ("$user", public), a
# function another login made in a schema on it (public, where a database made before
# PostgreSQL 15 lets any login create) for a more specific type than pg_catalog's
# polymorphic or "any" one was preferred, and bound for good into the views made here:
# an agent's public.count(uuid) ran, as every login reading sessions_overview, whatever
# the agent wrote (tests/engine/test_object_shadowing.py).
MIGRATE_SEARCH_PATH = FACE_SEARCH_PATH


def _pin_search_path(conn: psycopg.Connection[Any]) -> None:
    """Resolve the rest of the transaction's names in pg_catalog only (MIGRATE_SEARCH_PATH)."""
    pin_search_path(conn, transaction_only=True)


def _check_owner(conn: psycopg.Connection[Any]) -> None:
    """Only the engine's owner (or a member of that role, or a superuser) can replace its
    objects; anyone else would fail on the first one, or earlier on the advisory lock
    (0004_locks revokes it from PUBLIC), with PostgreSQL's bare permission error. Say so
    first, naming the owner. A database without schema undolog is a fresh install."""
    row = conn.execute(_SCHEMA_OWNER).fetchone()
    if row is None or row[2]:
        return
    owner, login = row[0], row[1]
    raise MigrationError(
        f"migrate must run as the owner of the engine (login {owner}, which owns schema"
        f" undolog, or a member of it); this login is {login}: nothing was applied. Run it"
        f" again with the owner's login (--dsn '... user={owner}'); granting {login}"
        " undolog_operator or another group role does not let it upgrade the engine"
    )


def _lock(conn: psycopg.Connection[Any], lock_timeout: LockTimeout) -> str:
    """Take the migrate lock, then bound every later lock wait of the transaction.

    The advisory lock is taken first and without a limit: a second installer waits for
    the first, which is making progress, then finds its work done. Every table lock after
    it waits at most ``lock_timeout``: a DDL statement waiting for a lock makes every
    agent statement on that table queue behind it, so the wait must be short, and a
    transaction that holds a lock for long must make migrate fail, not hang.

    ``client_connection_check_interval``: a migrate whose process is killed (SIGKILL, a
    lost deploy host) would otherwise leave its backend running the statement to its end
    (a lock wait, a migration that rewrites a table), holding the locks agents queue
    behind and the advisory lock the next migrate waits for; with it the backend notices
    within a second that its client is gone and rolls everything back."""
    conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (MIGRATE_LOCK_KEY,))
    conn.execute(
        "SELECT pg_catalog.set_config('client_connection_check_interval', %s, true)",
        (CLIENT_CHECK_INTERVAL,),
    )
    setting = _lock_timeout_setting(lock_timeout)
    try:
        with conn.transaction():  # a savepoint: a refused value leaves the transaction usable
            conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (setting,))
    except psycopg.Error as exc:
        raise MigrationError(
            f"lock_timeout {setting!r} is not a duration PostgreSQL accepts: give one like"
            " '5s', '500ms' or '1min' (0 waits without a limit)"
        ) from exc
    return setting


def _lock_timeout_setting(lock_timeout: LockTimeout) -> str:
    if isinstance(lock_timeout, timedelta):
        return f"{round(lock_timeout.total_seconds() * 1000)}ms"
    if isinstance(lock_timeout, bool):
        raise MigrationError(f"lock_timeout {lock_timeout!r} is not a duration: give e.g. '5s'")
    if isinstance(lock_timeout, int | float):
        return f"{round(lock_timeout * 1000)}ms"
    return str(lock_timeout).strip()


def _recorded(conn: psycopg.Connection[Any], table: str, key: str) -> dict[str, str]:
    if conn.execute("SELECT pg_catalog.to_regclass(%s)", (f"undolog.{table}",)).fetchone() == (
        None,
    ):
        return {}
    rows = conn.execute(f"SELECT {key}, checksum FROM undolog.{table}").fetchall()
    return {str(k): str(checksum) for k, checksum in rows}


def applied_migrations(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """name -> checksum of what the database has recorded (empty before install)."""
    return _recorded(conn, "undolog_migrations", "name")


def applied_repeatables(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """path -> checksum of the repeatable sources as last applied (empty before install)."""
    return _recorded(conn, "undolog_repeatables", "source_file")


def _plan(
    conn: psycopg.Connection[Any], target: str | None
) -> tuple[list[Migration], list[Repeatable], Status]:
    migrations = available_migrations()
    names = [m.name for m in migrations]
    if target is not None:
        if target not in names:
            raise MigrationError(f"unknown migration {target!r}; known: {', '.join(names)}")
        migrations = migrations[: names.index(target) + 1]
    applied = applied_migrations(conn)
    if applied:
        _refuse_a_newer_engine(conn)
    unknown = sorted(set(applied) - set(names))
    if unknown:
        # A newer release installed this database (downgrades are not supported), or a
        # pre-release layout that was folded into the baseline.
        raise MigrationError(
            f"the database has migrations this package does not know: {', '.join(unknown)}"
            f" (undolog {engine_version()} knows {', '.join(names)})"
        )
    for m in migrations:
        if m.name in applied and applied[m.name] != m.checksum:
            raise MigrationError(
                f"migration {m.name} was changed after it was applied "
                "(checksum differs); write a new migration instead"
            )
    # the same set difference the clients' engine check refuses an engine of this
    # version for (undolog.engine_check)
    missing = set(missing_migrations(applied, [m.name for m in migrations]))
    pending = [m for m in migrations if m.name in missing]
    sources = repeatables()
    recorded = applied_repeatables(conn)
    changed = [r.path for r in sources if recorded.get(r.path) != r.checksum]
    status = Status(
        pending=[m.name for m in pending],
        changed=changed,
        removed=sorted(set(recorded) - {r.path for r in sources}),
        missing=_missing(conn, [r for r in sources if r.path not in changed]) if recorded else [],
    )
    return pending, sources, status


def installed_engine_version(conn: psycopg.Connection[Any]) -> str | None:
    """``undolog.version()`` of the engine in the database; None when there is none, or
    this login may not call it."""
    row = conn.execute(
        "SELECT coalesce(pg_catalog.has_function_privilege("
        "pg_catalog.to_regprocedure('undolog.version()'), 'EXECUTE'), false)"
    ).fetchone()
    if not (row and row[0]):
        return None
    row = conn.execute("SELECT undolog.version()").fetchone()
    return str(row[0]) if row and row[0] is not None else None


def _refuse_a_newer_engine(conn: psycopg.Connection[Any]) -> None:
    """A package older than the engine in the database would put back its own, older
    functions, views, triggers and policies (their files differ from the ones recorded,
    so they look changed) under the newer release's tables: a downgrade, which is not
    supported. A release that changed only functions has no migration this package could
    miss, so the version is what tells (undolog.engine_check orders versions, for the
    clients' check too)."""
    installed = installed_engine_version(conn)
    if installed is None:
        return
    if is_newer(installed, engine_version()):
        raise MigrationError(
            f"the database runs the engine of undolog {installed}, newer than this package"
            f" (undolog {engine_version()}): upgrade the package (pip install --upgrade"
            " undolog) and run it again; an older package would put its older functions"
            " back, and downgrades are not supported"
        )


# What each repeatable file defines, to find the objects a migration (a DROP ... CASCADE,
# a table re-created) or a person removed while the file stayed the same.
_CATALOG_OBJECTS = """
SELECT 'functions/' || p.proname || '.sql', NULL
FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'undolog'::regnamespace
UNION ALL
SELECT 'views/' || c.relname || '.sql', NULL
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'triggers/' || t.tgname || '.sql', c.relname
FROM pg_catalog.pg_trigger AS t JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'undolog'::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'policies/' || p.tablename || '.sql', p.policyname
FROM pg_catalog.pg_policies AS p WHERE p.schemaname = 'undolog'
"""
_TRIGGER_TABLE = re.compile(r"\sON\s+undolog\.(\w+)\s")
_POLICY_NAME = re.compile(r"CREATE\s+POLICY\s+(\w+)\s+ON\s+undolog\.(\w+)")


def _missing(conn: psycopg.Connection[Any], sources: list[Repeatable]) -> list[str]:
    """The sources among ``sources`` whose object is not in the database: a function or
    view of that name, a trigger of that name on its table, every policy of the file.
    grants.sql is never missing here: migrate re-applies it after any migration."""
    found: dict[str, set[str | None]] = {}
    for path, detail in conn.execute(_CATALOG_OBJECTS).fetchall():
        found.setdefault(str(path), set()).add(detail)
    gone = []
    for r in sources:
        kind = r.path.partition("/")[0]
        if kind in ("functions", "views"):
            present = r.path in found
        elif kind == "triggers":
            tables = _TRIGGER_TABLE.findall(r.sql)
            present = r.path in found and (not tables or tables[0] in found[r.path])
        elif kind == "policies":
            names = {name for name, _table in _POLICY_NAME.findall(r.sql)}
            present = names <= found.get(r.path, set())
        else:
            present = True
        if not present:
            gone.append(r.path)
    return gone


def status(conn: psycopg.Connection[Any], target: str | None = None) -> Status:
    """What ``migrate`` would apply to this database; reads only."""
    return _plan(conn, target)[2]


# After the functions went in with check_function_bodies = off: every function of the
# schema passes its language's validator with bodies checked, so a broken body (a missing
# function or column in a LANGUAGE sql body, a PL/pgSQL syntax error) fails the install.
VALIDATE_FUNCTIONS = """
SET LOCAL check_function_bodies = on;
DO $validate$
DECLARE
    v_fn record;
BEGIN
    FOR v_fn IN
        SELECT p.oid, l.lanvalidator::regproc AS validator
        FROM pg_catalog.pg_proc AS p
        JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
        WHERE p.pronamespace = 'undolog'::regnamespace AND l.lanvalidator <> 0
        ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('SELECT %s(%s)', v_fn.validator, v_fn.oid);
    END LOOP;
END
$validate$;
"""


def _apply_repeatables(
    conn: psycopg.Connection[Any], sources: list[Repeatable], validate: bool = True
) -> None:
    """Apply ``sources`` (a subset of repeatables(), in its order); then, or when
    ``validate`` (a migration ran: a dropped column breaks a body that did not change),
    every function of the schema is validated with bodies checked."""
    conn.execute("SET LOCAL check_function_bodies = off")
    functions = [r for r in sources if r.path.startswith("functions/")]
    for r in functions:
        _execute(conn, r.path, r.sql)
    if functions or validate:
        _execute(conn, "validating the functions", VALIDATE_FUNCTIONS)
    for r in sources:
        if not r.path.startswith("functions/"):
            _execute(conn, r.path, r.sql)


class _LockWaitExpired(Exception):
    """A statement of the migrate transaction gave up waiting for a lock (55P03)."""

    def __init__(self, where: str, sql: str, asked: datetime | None) -> None:
        super().__init__(where)
        self.where = where
        self.sql = sql
        self.asked = asked  # the server's clock just before the statement was sent


def _execute(conn: psycopg.Connection[Any], where: str, sql: str) -> None:
    asked = None
    if not where.startswith("functions/"):
        # what may wait for a table lock: when it gives up, the holders to name are the
        # transactions that began before this moment (_LOCK_HOLDERS). CREATE FUNCTION
        # with check_function_bodies off locks no table.
        row = conn.execute("SELECT pg_catalog.clock_timestamp()").fetchone()
        asked = row[0] if row else None
    try:
        conn.execute(sql.encode("utf-8"))
    except psycopg.errors.LockNotAvailable as exc:
        raise _LockWaitExpired(where, sql, asked) from exc
    except psycopg.errors.DeadlockDetected as exc:
        # Re-creating triggers and policies locks table after table while agents lock
        # them in their own order; migrate's transaction is the one PostgreSQL ended.
        raise MigrationError(
            f"{where}: deadlocked with another transaction on the engine's tables (an"
            " agent's call) and PostgreSQL ended migrate's: nothing was applied. Run"
            " migrate again; a release that re-creates triggers or policies is best"
            " applied when few agents are calling"
        ) from exc
    except psycopg.Error as exc:
        raise MigrationError(f"{where}: {exc}") from exc


# The relations a statement that timed out may have waited for: a trigger's or policy's
# table (ON undolog.x), a view, or any relation a migration names.
_NAMED_RELATION = re.compile(r"\bundolog\.(\w+)")

# Asked once migrate's transaction has rolled back: the agents that queued behind its lock
# request hold the lock by then, and are not what blocked it. A transaction that held a
# conflicting lock when migrate asked had begun before the statement that waited; one that
# began since queued behind migrate. So only those are named, the oldest first.
_LOCK_HOLDERS = """
SELECT pid, usename, application_name, state, seconds, query, relname, mode
FROM (
    SELECT DISTINCT ON (a.pid) a.pid, a.usename, a.application_name, a.state,
           coalesce(a.xact_start, a.query_start) AS since,
           extract(epoch FROM now() - coalesce(a.xact_start, a.query_start))::int AS seconds,
           left(regexp_replace(coalesce(a.query, ''), '\\s+', ' ', 'g'), 80) AS query,
           c.relname, l.mode
    FROM pg_catalog.pg_locks AS l
    JOIN pg_catalog.pg_class AS c ON c.oid = l.relation
    JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
      AND c.relnamespace = 'undolog'::regnamespace
      AND (cardinality(%(names)s::text[]) = 0 OR c.relname = ANY (%(names)s::text[]))
      AND (%(modes)s::text[] IS NULL OR l.mode = ANY (%(modes)s::text[]))
      AND (%(asked)s::timestamptz IS NULL
           OR coalesce(a.xact_start, a.query_start) <= %(asked)s::timestamptz)
    ORDER BY a.pid, c.relname
) AS holder
ORDER BY since, pid
LIMIT 5
"""

# The granted modes that block what each kind of statement asks for: CREATE TRIGGER takes
# SHARE ROW EXCLUSIVE (blocked by writers, not readers); a function, or the validation
# of the bodies, reads tables at most (blocked by ACCESS EXCLUSIVE only); a policy, a
# view and most ALTER TABLEs take ACCESS EXCLUSIVE (blocked by any holder).
_BLOCKING_MODES: dict[str, list[str] | None] = {
    "triggers": [
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    ],
    "functions": ["AccessExclusiveLock"],
    "validating the functions": ["AccessExclusiveLock"],
}


def _terminate_advice(pids: list[int]) -> str:
    """The SQL that ends these backends (pg_terminate_backend takes one pid)."""
    if not pids:
        return "SELECT pg_terminate_backend(PID)"
    if len(pids) == 1:
        return f"SELECT pg_terminate_backend({pids[0]})"
    listed = ", ".join(str(p) for p in pids)
    return f"SELECT pg_terminate_backend(pid) FROM unnest(ARRAY[{listed}]) AS pid"


def _lock_timeout_error(
    conn: psycopg.Connection[Any], wait: _LockWaitExpired, setting: str
) -> MigrationLockTimeout:
    """Say who holds the lock migrate waited for, and what to do: asked after the
    rollback, on the same connection, so the answer may miss a holder that just ended."""
    kind = wait.where.partition("/")[0]
    if kind in ("triggers", "policies"):
        names = (
            _TRIGGER_TABLE.findall(wait.sql)[:1]
            or [table for _name, table in _POLICY_NAME.findall(wait.sql)][:1]
        )
    else:
        names = sorted(set(_NAMED_RELATION.findall(wait.sql)))
    modes = _BLOCKING_MODES.get(kind, _BLOCKING_MODES.get(wait.where))
    if kind == "functions" or wait.where == "validating the functions":
        names = []  # what a body reads: any of the engine's tables
    try:
        rows = conn.execute(
            _LOCK_HOLDERS,
            {"names": names, "modes": modes, "asked": wait.asked},
        ).fetchall()
    except psycopg.Error:
        rows = []
    holders = [
        f"pid {pid} (login {user}, application {app or '-'!r}, {state} for {secs} s,"
        f" holding {mode} on undolog.{rel}; its statement: {query!r})"
        for pid, user, app, state, secs, query, rel, mode in rows
    ]
    tables = ", ".join(f"undolog.{n}" for n in names) or "the engine's tables"
    held = (
        "Held by " + "; ".join(holders) + "."
        if holders
        else "Its holder had ended by the time migrate looked (pg_locks shows no holder now)."
    )
    message = (
        f"{wait.where}: gave up after lock_timeout {setting} waiting for a lock on"
        f" {tables} that another transaction holds; nothing was applied (one transaction)."
        f" {held} Next: let that transaction finish (or end it:"
        f" {_terminate_advice([int(r[0]) for r in rows])}) and run migrate again, or allow"
        " a longer wait with --lock-timeout (agents' statements on that table queue behind"
        " migrate while it waits)."
    )
    return MigrationLockTimeout(message, wait.where, holders)


def migrate(
    conn: psycopg.Connection[Any],
    target: str | None = None,
    *,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
) -> list[str]:
    """Bring the database up to date (migrations up to ``target`` included).

    Re-creates only what changed: the pending migrations; the repeatable sources whose
    applied text differs from the checksum recorded for them (all of them on a fresh
    install), or whose object is gone from the database; ``grants.sql`` again whenever a
    migration ran. An unchanged function, view, trigger or policy is not touched, so an
    upgrade that changes one function takes no table lock.

    Answers what was applied: the migrations' names, then the paths of the repeatable
    sources applied, in apply order; ``[]`` when the database was already current. One
    transaction: on any error nothing is applied. Every lock wait after the migrate lock
    is bounded by ``lock_timeout`` (a PostgreSQL duration such as ``'5s'``, seconds as a
    number, or a timedelta; ``0`` waits without a limit): a transaction holding a table
    lock longer makes it raise MigrationLockTimeout, which names the holder.
    Refused before anything is touched (MigrationError): a login that is not the engine's
    owner (nor a member of it, nor a superuser), and an engine a newer release installed
    (its ``undolog.version()`` is newer than this package's: a downgrade).
    ``conn`` must not be inside a transaction.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise MigrationError("migrate needs a connection outside any transaction")
    setting = ""
    try:
        with conn.transaction():
            _pin_search_path(conn)
            _check_owner(conn)
            setting = _lock(conn, lock_timeout)
            _execute(conn, "bootstrap.sql", (sql_root() / "bootstrap.sql").read_text("utf-8"))
            pending, sources, plan = _plan(conn, target)
            if plan.up_to_date:
                return []
            for m in pending:
                _execute(conn, m.path.name, m.parts()[0])
            redo = set(plan.changed) | set(plan.missing)
            if pending:
                # what the migrations just dropped, and the grants of what they created
                unchanged = [r for r in sources if r.path not in redo]
                redo |= set(_missing(conn, unchanged)) | {GRANTS_FILE}
            todo = [r for r in sources if r.path in redo]
            _apply_repeatables(conn, todo, validate=bool(pending))
            for m in pending:
                after = m.parts()[1]
                if after.strip():
                    _execute(conn, f"{m.path.name} (after the repeatables)", after)
            for m in pending:
                conn.execute(
                    "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES (%s, %s)",
                    (m.name, m.checksum),
                )
            _record_repeatables(conn, todo, plan.removed)
    except _LockWaitExpired as wait:
        raise _lock_timeout_error(conn, wait, setting) from wait.__cause__
    return plan.pending + [r.path for r in todo]


def apply_repeatables(
    conn: psycopg.Connection[Any], *, lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT
) -> list[str]:
    """Re-apply every repeatable source of an installed engine, whatever the records say.

    For a developer who wants every object re-created, and for the test that applying
    them twice changes nothing (``migrate`` re-applies only what changed). Refuses a
    database with pending migrations: the sources may need their tables. Lock waits are
    bounded as in ``migrate``.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise MigrationError("apply_repeatables needs a connection outside any transaction")
    setting = ""
    try:
        with conn.transaction():
            _pin_search_path(conn)
            _check_owner(conn)
            setting = _lock(conn, lock_timeout)
            pending, sources, plan = _plan(conn, None)
            if pending:
                raise MigrationError(
                    f"pending migrations {', '.join(m.name for m in pending)}: run migrate"
                )
            _apply_repeatables(conn, sources)
            _record_repeatables(conn, sources, plan.removed)
    except _LockWaitExpired as wait:
        raise _lock_timeout_error(conn, wait, setting) from wait.__cause__
    return [r.path for r in sources]


def _record_repeatables(
    conn: psycopg.Connection[Any], applied: list[Repeatable], removed: list[str]
) -> None:
    """Record the checksum of each source applied; forget the files that are gone."""
    with conn.cursor() as cur:
        cur.execute(
            "DELETE FROM undolog.undolog_repeatables WHERE source_file = ANY (%s)", (removed,)
        )
        cur.executemany(
            "INSERT INTO undolog.undolog_repeatables (source_file, checksum) VALUES (%s, %s)"
            " ON CONFLICT (source_file) DO UPDATE SET checksum = excluded.checksum,"
            " applied_at = excluded.applied_at, applied_by = excluded.applied_by",
            [(r.path, r.checksum) for r in applied],
        )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def install_script() -> str:
    """The whole install as one plain SQL script, for ``psql -f`` without Python.

    The same steps as ``migrate`` on an empty database, in one transaction. It is for a
    fresh install: against a database that has the engine already it fails (the records'
    primary keys) and changes nothing; use ``undolog migrate`` to upgrade.
    """
    migrations = available_migrations()
    sources = repeatables()
    parts = [
        "BEGIN;",
        f"SET LOCAL search_path = {MIGRATE_SEARCH_PATH};",
        f"SELECT pg_catalog.pg_advisory_xact_lock({MIGRATE_LOCK_KEY});",
        (sql_root() / "bootstrap.sql").read_text(encoding="utf-8"),
    ]
    parts += [f"-- migration {m.name}\n{m.parts()[0]}" for m in migrations]
    parts.append("SET LOCAL check_function_bodies = off;")
    parts += [f"-- {r.path}\n{r.sql}" for r in sources if r.path.startswith("functions/")]
    parts.append(VALIDATE_FUNCTIONS)
    parts += [f"-- {r.path}\n{r.sql}" for r in sources if not r.path.startswith("functions/")]
    parts += [
        f"-- migration {m.name}, after the repeatables\n{m.parts()[1]}"
        for m in migrations
        if m.parts()[1].strip()
    ]
    parts += [
        "INSERT INTO undolog.undolog_migrations (name, checksum) "
        f"VALUES ({_literal(m.name)}, {_literal(m.checksum)});"
        for m in migrations
    ]
    parts += [
        "INSERT INTO undolog.undolog_repeatables (source_file, checksum) "
        f"VALUES ({_literal(r.path)}, {_literal(r.checksum)});"
        for r in sources
    ]
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"
