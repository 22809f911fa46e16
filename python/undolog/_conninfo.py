"""Connection strings: the one place that adds a bound to a DSN it was not given.

A connection to a host that accepts and never answers waits for ever without libpq's
``connect_timeout``. Each face that connects on a person's behalf (the command, the
dashboard's logins, a metrics scrape) gives one, unless the DSN or ``PGCONNECT_TIMEOUT``
says otherwise: what the user set wins.
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def with_connect_timeout(dsn: str, seconds: int, **params: str) -> str:
    """``dsn`` with ``params`` added (replacing the DSN's own) and ``connect_timeout``
    ``seconds`` unless the DSN or ``PGCONNECT_TIMEOUT`` sets one. Raises
    psycopg.ProgrammingError when ``dsn`` does not parse."""
    merged: dict[str, object] = {**conninfo_to_dict(dsn), **params}
    if merged.get("connect_timeout") is None and not os.environ.get("PGCONNECT_TIMEOUT"):
        merged["connect_timeout"] = seconds
    return make_conninfo(**{k: str(v) for k, v in merged.items() if v is not None})
