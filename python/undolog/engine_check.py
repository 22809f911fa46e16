"""Is the engine in the database one this package works with?

One rule, two users: ``undolog migrate`` refuses to put an older package's engine over a
newer one (undolog.migrations), and the session clients (UndoLog, AsyncUndoLog) check, the
first time they use a connection, that the engine answering on it is one this package can
drive (undolog.aclient). Both compare ``undolog.version()`` (sql/functions/version.sql,
written by migrate from python/undolog/_version.py) with the package's version, ordered
by ``version_key``.

What the clients accept, for a package of version P and an engine of version E:

* E == P: the engine this package installs.
* E older than P (a patch release too): refused, EngineVersionMismatch; run ``undolog
  migrate`` with this package. The package's statements could otherwise meet a function
  the engine does not have yet (42883), or worse, one whose meaning changed.
* E newer than P with the same major.minor (0.1.3 for a 0.1.0 package; another host ran a
  newer patch release's migrate): accepted. A patch release keeps every function an
  earlier package of its series calls, with the same arguments and meaning.
* E newer than P in its major or minor version (0.2.0 for a 0.1.x package): refused,
  EngineVersionMismatch; upgrade this package.
* E or P not a release's version (``version_key`` is None: a developer's build): not
  compared, as migrate does not compare them.
* no ``undolog.version()`` at all: no schema undolog, EngineNotInstalled (the database's
  error, translated as any other statement's); the schema without that function, an
  engine older than every release that has it, EngineVersionMismatch.

Between releases the version says nothing: a tree that added a migration keeps the
version of the tree before it. So, when E == P, the check also compares the migrations
the engine has applied (the names ``undolog migrate`` records in ``undolog_migrations``,
sql/bootstrap.sql) with those this package ships (``sql/migrations``,
``shipped_migrations``, read then only, once a process; a package installed without
those files, a frozen build, skips the comparison and judges the version alone):

* a migration the package ships that the database has not applied: refused,
  EngineVersionMismatch naming the first one missing; run ``undolog migrate`` with this
  package. (A database migrated by an older tree of this version: before, the check
  passed and the package's statements met the older engine, 42883 or worse.)
* every one of them applied, and maybe more (a newer tree of this version migrated the
  database): accepted, as a newer patch release is.
* E newer than P (a newer patch release): the migrations are not compared; the version
  rule's promise holds whatever this tree ships that the release does not.

``missing_migrations`` is that set difference, and ``migrate`` plans its pending
migrations with it (undolog.migrations): one definition for both.

What the rule does not see: a tree that changed a function, view, trigger, policy or
grant without a migration. ``undolog migrate`` records a checksum per source
(``undolog_repeatables``), but no digest of the whole set: computing one in the check's
statement (over some 200 rows) took the server some 170 µs more a connection, ten times
the statement, and recording one needs a place to keep it (a new table or column: a
migration). Nor could an equal version tell which of two trees is the newer, as the
migrations can (more of them is fine). Between releases, run ``undolog migrate`` after
changing a source (``undolog status`` lists what differs).

The clients run the check once per connection (``checked``/``accept``): on a connection
they open for a session it is the same statement as the session's setting of
``undolog.async_results`` (no round trip of its own); otherwise one round trip, the first
time the connection is used. The statement reads the engine's version and the names of
its applied migrations (``undolog_agent`` may read that one column: sql/grants.sql); an
agent of an engine whose grants predate that is refused (42501 on
``undolog_migrations``: this package's grants were never applied; run ``undolog
migrate``).
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from undolog import _version, engine
from undolog._sql import sql_root
from undolog.errors import EngineVersionMismatch, InvalidArgument, PermissionDenied, UndoLogError
from undolog.queries import QUERIES

_PEP440 = re.compile(
    r"^v?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc)[-_.]?(?P<pre_n>[0-9]*))?"
    r"(?:[-_.]?post[-_.]?(?P<post>[0-9]*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>[0-9]*))?(?:\+.*)?$"
)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


def version_key(version: str) -> tuple[Any, ...] | None:
    """A sort key for a release's version (PEP 440's public forms: 1.2, 1.2.0rc1,
    1.2.post1, 1.2.dev3); None when the text is none of them."""
    m = _PEP440.match(version.strip().lower())
    if m is None:
        return None
    release = [int(part) for part in m["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()  # 1.2 == 1.2.0
    dev = m["dev"] is not None
    if m["pre"] is not None:
        pre = (_PRE_RANK[m["pre"]], int(m["pre_n"] or 0))
    elif dev and m["post"] is None:
        pre = (-1, 0)  # 1.2.dev3 comes before 1.2a1
    else:
        pre = (3, 0)  # the final release
    post = int(m["post"] or 0) if m["post"] is not None else -1
    return (tuple(release), pre, post, 0 if dev else 1, int(m["dev"] or 0))


def _series(key: tuple[Any, ...]) -> tuple[int, int]:
    """major.minor of a version_key (1 is 1.0)."""
    release = (*key[0], 0, 0)
    return (release[0], release[1])


def is_newer(installed: str, package: str) -> bool:
    """The engine's version is a later release than the package's (migrate's refusal)."""
    theirs, ours = version_key(installed), version_key(package)
    return theirs is not None and ours is not None and theirs > ours


def mismatch(installed: str, package: str) -> str | None:
    """Why an engine of version ``installed`` may not serve a package of version
    ``package`` ("older" or "newer"), None when it may (the rule in this module's
    docstring)."""
    theirs, ours = version_key(installed), version_key(package)
    if theirs is None or ours is None:
        return None
    if theirs < ours:
        return "older"
    if theirs > ours and _series(theirs) != _series(ours):
        return "newer"
    return None


def migration_files(root: Path) -> list[Path]:
    """What ``root``/migrations holds, in name order: the migrations a package ships
    (undolog.migrations.available_migrations checks their names)."""
    return sorted((root / "migrations").iterdir())


@functools.cache
def shipped_migrations() -> tuple[str, ...]:
    """The names of the migrations this package ships (sql/migrations), in apply order;
    read once per process."""
    return tuple(p.stem for p in migration_files(sql_root()) if p.suffix == ".sql")


def missing_migrations(applied: Iterable[str], shipped: Iterable[str] | None = None) -> list[str]:
    """The migrations of ``shipped`` (this package's by default) that ``applied`` lacks,
    in apply order: what the check refuses an engine of this version for, and what
    ``migrate`` applies. A package whose sql/migrations cannot be read (a frozen install
    that ships no SQL files: FileNotFoundError) lacks nothing by default: its check judges
    the version alone, as before the comparison, rather than failing every connection
    (``migrate`` passes ``shipped`` itself, and fails there on its own)."""
    if shipped is None:
        try:
            shipped = shipped_migrations()
        except FileNotFoundError:
            return []
    done = set(applied)
    return [name for name in shipped if name not in done]


def _same_version(installed: str, package: str) -> bool:
    theirs, ours = version_key(installed), version_key(package)
    return installed == package or (theirs is not None and theirs == ours)


def refusal(
    installed: str | None,
    package: str | None = None,
    applied: Sequence[str] | None = None,
) -> EngineVersionMismatch | None:
    """The error for an engine that answers ``installed`` (None: it has no version()),
    None when this package works with it. ``applied``: the names of the engine's applied
    migrations, compared with this package's when the versions are the same (None: not
    compared)."""
    package = package or _version.__version__
    if installed is None:
        return EngineVersionMismatch(
            "the engine in this database has no undolog.version(): it is older than this"
            f" package (undolog {package}), or incomplete; run `undolog migrate` with this"
            " package (`undolog status` says what it would apply). Nothing was sent but"
            " this check",
            installed=None,
            package=package,
        )
    why = mismatch(installed, package)
    if why == "older":
        return EngineVersionMismatch(
            f"the engine in this database is undolog {installed}, older than this package"
            f" (undolog {package}): run `undolog migrate` with this package before using it"
            " (`undolog status` says what it would apply). Nothing was sent but this check",
            installed=installed,
            package=package,
        )
    if why == "newer":
        return EngineVersionMismatch(
            f"the engine in this database is undolog {installed}, a newer release than this"
            f" package (undolog {package}; only a newer patch release of the same major.minor"
            " is accepted): upgrade the package (pip install --upgrade undolog). Nothing was"
            " sent but this check",
            installed=installed,
            package=package,
        )
    # between releases only: the package's migrations are read when the versions are equal
    compared = applied is not None and _same_version(installed, package)
    missing = missing_migrations(applied) if compared and applied is not None else []
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return EngineVersionMismatch(
            f"the engine in this database is undolog {installed}, this package's version,"
            f" but it lacks this package's migration {missing[0]}{more} (another tree of"
            " this version migrated it): run `undolog migrate` with this package before"
            " using it (`undolog status` says what it would apply). Nothing was sent but"
            " this check",
            installed=installed,
            package=package,
        )
    return None


def judgement(
    installed: str | None, applied: Iterable[str] | None, package: str | None = None
) -> tuple[str | None, str | None]:
    """What a page that shows the engine says of it, by the clients' one rule (``refusal``):
    (None, None) when this package's clients work with it; else why not, "missing" (no
    ``undolog.version()``), "older", "newer" (``mismatch``), or "migrations" (the
    package's version, without a migration it ships: ``applied`` are the engine's applied
    migrations' names, None when they could not be read, not compared), and for
    "migrations" the first missing one."""
    package = package or _version.__version__
    if installed is None:
        return "missing", None
    why = mismatch(installed, package)
    if why is not None:
        return why, None
    if applied is not None and _same_version(installed, package):
        missing = missing_migrations(applied)
        if missing:
            return "migrations", missing[0]
    return None, None


# The connections whose engine was checked (psycopg.Connection and AsyncConnection alike).
_checked: weakref.WeakSet[Any] = weakref.WeakSet()

# The check's statement (queries.sql): the version and the applied migrations' names,
# alone or with the session's setting of undolog.async_results in the same round trip.
# Where the schema is missing it fails as a whole (3F000), the setting with it; where
# version() is missing, 42883 (both found before the runner's table is read).
VERSION = QUERIES["engine_check"]
VERSION_AND_ASYNC_RESULTS = QUERIES["engine_check_and_async_results"]


def checked(conn: Any) -> bool:
    """The engine on ``conn`` was checked already (by this process)."""
    return conn in _checked


def statement(async_results: bool) -> str:
    """The check's statement; with ``async_results``, it also sets undolog.async_results
    on for the connection."""
    return VERSION_AND_ASYNC_RESULTS if async_results else VERSION


def failed(exc: UndoLogError) -> UndoLogError:
    """What the check raises when its statement failed with ``exc`` (translated): no
    schema undolog is EngineNotInstalled already; a schema without undolog.version()
    (42883, translated to InvalidArgument) is an engine older than that function; a login
    that may not read the migrations' names (42501 on undolog_migrations) is on an engine
    whose grants predate this package's."""
    cause = exc.__cause__
    if (
        isinstance(exc, InvalidArgument)
        and isinstance(cause, psycopg.Error)
        and cause.sqlstate == "42883"
    ):
        missing = refusal(None)
        assert missing is not None
        missing.__cause__ = cause
        return missing
    if (
        isinstance(exc, PermissionDenied)
        and isinstance(cause, psycopg.Error)
        and "undolog_migrations" in (cause.diag.message_primary or "")
    ):
        package = _version.__version__
        refused = EngineVersionMismatch(
            "this login may not read the engine's record of its migrations (undolog_migrations),"
            f" which the grants of this package (undolog {package}) let every agent read:"
            " the engine in this database was migrated by an older package or tree; run"
            " `undolog migrate` with this package before using it (`undolog status` says"
            " what it would apply). Nothing was sent but this check",
            installed=None,
            package=package,
        )
        refused.__cause__ = cause
        return refused
    return exc


def accept(conn: Any, row: Sequence[Any]) -> None:
    """Judge what ``conn``'s engine answered to the check's statement (its version, its
    applied migrations' names separated by spaces, NULL for none): raise
    EngineVersionMismatch, or remember the connection as checked."""
    installed = None if row[0] is None else str(row[0])
    refused = refusal(installed, applied=str(row[1] or "").split())
    if refused is not None:
        raise refused
    _checked.add(conn)


def check(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The check on a sync connection (one round trip the first time; nothing after):
    for the connections the async client opens for its undo walks. Answers ``conn``."""
    if checked(conn):
        return conn
    try:
        row = engine.fetch_one(conn, VERSION)
    except UndoLogError as exc:
        raise failed(exc) from exc.__cause__
    accept(conn, row)
    return conn
