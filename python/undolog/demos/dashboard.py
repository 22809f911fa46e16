"""``undolog dashboard --demo``: fill a throwaway database with the demo's sessions, plus
what a person acts on in the dashboard: a payout waiting for approval (with hostile
text in its arguments), a session halted by a compensation that failed for good, and a
live session to roll back. Creates the logins demo_approver, demo_operator and
demo_agent (password ``demo``), members of PASSWORD_LOGINS, whom the throwaway cluster of
``make dashboard-demo`` (tools/pgcluster.py) asks for that password: the dashboard lets
in no login the server did not ask for its password."""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from undolog import (
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    engine,
    undolog_tool,
)
from undolog.demos import stories
from undolog.queries import QUERIES
from undolog.walk import CompensationCall

DEMO_PASSWORD = "demo"
# The group role whose members tools/pgcluster.py's clusters ask for a password (its
# PASSWORD_LOGINS), where they trust every other local login.
PASSWORD_LOGINS = "undolog_password_logins"
DEMO_LOGINS = {
    "demo_approver": "undolog_approver",
    "demo_operator": "undolog_operator",
    "demo_agent": "undolog_agent",
}


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("cancel_booking", max_attempts=1),
)
def book_flight(flight: str, passenger: str) -> dict[str, Any]:
    return {"booking": f"BK-{abs(hash((flight, passenger))) % 100000:05d}"}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def wire_transfer(iban: str, cents: int, note: str) -> dict[str, Any]:
    return {"wired": cents}


def create_logins(conn: psycopg.Connection[Any]) -> None:
    if conn.execute(QUERIES["role_exists"], {"role": PASSWORD_LOGINS}).fetchone() is None:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(PASSWORD_LOGINS)))
    for login, group in DEMO_LOGINS.items():
        exists = conn.execute(QUERIES["role_exists"], {"role": login}).fetchone()
        # Role statements take no bind parameters: they are composed here, with the
        # names quoted as identifiers and the password as a literal.
        verb = sql.SQL("ALTER") if exists else sql.SQL("CREATE")
        conn.execute(
            sql.SQL("{} ROLE {} LOGIN PASSWORD {}").format(
                verb, sql.Identifier(login), sql.Literal(DEMO_PASSWORD)
            )
        )
        for role in (group, PASSWORD_LOGINS):
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(login))
            )


def asks_for_the_password(dsn: str) -> bool:
    """Whether the server asks the demo's logins for their password (PQconnectionUsedPassword):
    a dashboard login must authenticate by password (pg_hba.conf's scram-sha-256, md5 or
    password), where trust, peer or ident would let anyone in as them."""
    with psycopg.connect(as_login(dsn, "demo_approver"), autocommit=True) as conn:
        return bool(conn.pgconn.used_password)


def as_login(dsn: str, login: str) -> str:
    params = conninfo_to_dict(dsn)
    params.update(user=login, password=DEMO_PASSWORD)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def fill(dsn: str) -> None:
    stories.run(dsn)  # migrates, then the four stories of `make demo`
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_logins(conn)
    agent = UndoLog(as_login(dsn, "demo_agent"), lease=timedelta(hours=8))

    # A payout waiting for a human; its note is hostile text, shown escaped.
    with contextlib.suppress(AwaitingApprovalError), agent.session(agent="treasury"):
        book_flight("LH 454", "Ada")
        wire_transfer("DE89 3704 0044 0532 0130 00", 125000, "<script>alert('pwned')</script>")

    # A session halted by a compensation that fails for good (walked by the installer's
    # login, which holds the operator's rights the agent lacks).
    owner = UndoLog(dsn, walk_wait=0.0)

    @owner.compensation("cancel_booking")
    def cancel_booking(call: CompensationCall) -> None:
        raise ConnectionError("airline API: 503 Service Unavailable")

    client_log = logging.getLogger("undolog")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # the walk logs the halt it is expected to reach
    try:
        with contextlib.suppress(RuntimeError), owner.session(agent="travel"):
            book_flight("AF 1234", "Bob")
            raise RuntimeError("the hotel is full: give up the trip")
    finally:
        client_log.setLevel(level)

    # A live session an operator may roll back: begun with a lease of 8 hours, one call
    # journaled and committed, as an agent between two calls leaves it.
    with psycopg.connect(as_login(dsn, "demo_agent"), autocommit=True) as conn:
        sid = engine.begin_session(conn, None, "travel", {}, timedelta(hours=8))
        args = {"flight": "BA 117", "passenger": "Cy"}
        # the tool as the decorator above registers it (tier and compensation)
        booking = {"name": "cancel_booking", "args": {}, "max_attempts": 1}
        engine.register_tool(conn, "book_flight", "compensable", booking)
        call = engine.intercept(conn, sid, 0, "book_flight", "compensable", args, booking)
        if call.effect_id is not None:
            engine.commit(conn, call.effect_id, {"booking": "BK-00117"})
    print(
        "\nDashboard logins (password 'demo'): demo_approver, demo_operator, demo_agent\n",
        flush=True,
    )
    if not asks_for_the_password(dsn):
        print(
            "The database lets these logins in without asking for their password "
            "(pg_hba.conf: trust?), and the dashboard refuses such a login: give the "
            f"members of {PASSWORD_LOGINS} a scram-sha-256 line in pg_hba.conf, ahead of "
            "the trust lines, and reload.\n",
            flush=True,
        )
