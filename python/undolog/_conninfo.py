"""Connection strings: the one place that adds a bound to a DSN it was not given.

A connection to a host that accepts and never answers waits for ever without libpq's
``connect_timeout``. Each face that connects on a person's behalf (the command, the
dashboard's logins, a metrics scrape) gives one, unless the DSN or ``PGCONNECT_TIMEOUT``
says otherwise: what the user set wins.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# What to check when a DSN names no server that answers (the binding's note on the error,
# the command's hint).
UNREACHABLE_HINT = (
    "is the server running, and are the DSN's host, port, user and password right? "
    'A local database of the clone starts with: eval "$(make -s db)"'
)


def dsn_error(exc: psycopg.ProgrammingError) -> psycopg.ProgrammingError:
    """The error of a DSN that does not parse, without the text of the DSN that libpq's
    message quotes ("p%ss" in 'invalid percent-encoded token: "p%ss"', a whole URI in
    another): often a password, or a piece of one, when its special characters were not
    quoted or percent-encoded. Everything from the first double quote to the last is
    left out (a quoted piece may hold quotes itself), so that the error can be logged."""
    text = " ".join(str(exc).split())
    first, last = text.find('"'), text.rfind('"')
    if first != -1 and last > first:
        if text.startswith('missing "=" after "'):  # say which '=' is missing
            first = text.index('"', len('missing "=" after '))
        text = f'{text[:first]}"…"{text[last + 1 :]}'
    return psycopg.ProgrammingError(
        f"the DSN does not parse: {text} (what it quotes of the DSN is not shown: it may "
        "be a password; quote a value with spaces in single quotes, percent-encode "
        "% @ : / and spaces in a URI)"
    )


def _parsed(dsn: str) -> dict[str, str | int | None]:
    """``dsn``'s parameters; psycopg.ProgrammingError when it does not parse
    (:func:`dsn_error`), or when its host holds an "@": libpq takes a URI's password
    to its first unencoded "@", and the rest of it for the host, which a connection
    error then quotes."""
    try:
        parsed = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise dsn_error(exc) from None
    if "@" in str(parsed.get("host") or ""):
        raise psycopg.ProgrammingError(
            'the DSN does not parse: its host holds an "@" (the host is not shown: it may '
            "be the end of a password); percent-encode @ in a URI's user or password as %40"
        )
    return parsed


def check_dsn(dsn: str) -> None:
    """Raise psycopg.ProgrammingError, saying nothing of the DSN's text, when ``dsn`` would
    make libpq say a piece of its password (:func:`_parsed`)."""
    _parsed(dsn)


def with_connect_timeout(dsn: str, seconds: int, **params: str) -> str:
    """``dsn`` with ``params`` added (replacing the DSN's own) and ``connect_timeout``
    ``seconds`` unless the DSN or ``PGCONNECT_TIMEOUT`` sets one. Raises
    psycopg.ProgrammingError when ``dsn`` does not parse (:func:`dsn_error`)."""
    merged: dict[str, object] = {**_parsed(dsn), **params}
    if merged.get("connect_timeout") is None and not os.environ.get("PGCONNECT_TIMEOUT"):
        merged["connect_timeout"] = seconds
    return make_conninfo(**{k: str(v) for k, v in merged.items() if v is not None})


# A connection that stays open for days (the worker's, the notifier's) learns of a silent
# network partition in about a minute rather than the operating system's two hours: TCP
# keepalives after 30 s idle, and a send left unacknowledged for 60 s ends it (the worker
# then reconnects). libpq ignores both over a Unix-domain socket.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}


def with_keepalives(dsn: str) -> str:
    """``dsn`` with :data:`KEEPALIVES`, each unless the DSN sets it."""
    parsed = _parsed(dsn)
    return make_conninfo(dsn, **{k: v for k, v in KEEPALIVES.items() if k not in parsed})


# The search path of a connection a face makes for a person, an operator or its own login
# (the commands, the worker, the dashboard's logins and its metrics, the MCP proxy's journal
# connections): pg_catalog alone, then the login's own temporary schema. Every name of the
# engine's is written undolog.name; a bare function or operator name is meant to be
# pg_catalog's. With the login's own path ("$user", public), a function another login made
# in public (where a database made before PostgreSQL 15 lets any login create) for a more
# specific type than pg_catalog's polymorphic or "any" one was preferred, and ran as the
# person: an agent's public.count(uuid) approved its own call when an approver opened the
# dashboard's inbox (docs/how-to/roles.md). An agent's own binding keeps the path of the
# connection its user gives it; `undolog health`'s schemas check is the defence there.
FACE_SEARCH_PATH = "pg_catalog, pg_temp"
_PIN_SEARCH_PATH = "SELECT pg_catalog.set_config('search_path', %s, %s)"


def pin_search_path(conn: psycopg.Connection[Any], *, transaction_only: bool = False) -> None:
    """Resolve ``conn``'s names in pg_catalog alone (FACE_SEARCH_PATH), for the rest of
    its session, or of its transaction (migrate's)."""
    conn.execute(_PIN_SEARCH_PATH, (FACE_SEARCH_PATH, transaction_only))


async def apin_search_path(conn: psycopg.AsyncConnection[Any]) -> None:
    """pin_search_path for an async connection (the dashboard's, the MCP proxy's pool's
    ``configure``)."""
    await conn.execute(_PIN_SEARCH_PATH, (FACE_SEARCH_PATH, False))
