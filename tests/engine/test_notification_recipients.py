"""An e-mail channel of several recipients whose SMTP server takes some and refuses
others, with a real PostgreSQL and a real local SMTP server (aiosmtpd) that refuses one
address at RCPT: the mail reached the others, so a retry would send it to them again.
A person must never get the same notification twice from the worker's retries; the
refused addresses must be visible to the operator (the delivery's last_error, `undolog
notifications deliveries`, the worker's log)."""

from __future__ import annotations

import email
import email.policy
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

import psycopg
import pytest
import test_notifications
from aiosmtpd.controller import Controller
from test_notifications import _delivery, _free_port, ask, cli, deliveries

from undolog import notifications

Conn = psycopg.Connection[Any]
BY = "ops@example.test"
TOLD = ["oncall@example.test", "lead@example.test"]
REFUSED = "gone@example.test"

# test_notifications' logins, as fixtures of this module too
logins = test_notifications.logins
operator_dsn = test_notifications.operator_dsn


@dataclass
class Relay:
    """An SMTP server that refuses the addresses of ``refuse`` at RCPT (their reply) and
    records, per mail taken, the envelope's recipients and the message."""

    port: int
    refuse: dict[str, str] = field(default_factory=dict)
    mails: list[tuple[list[str], EmailMessage]] = field(default_factory=list)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.mails.append((list(envelope.rcpt_tos), parsed))
        return "250 OK"

    def received(self, address: str) -> int:
        """How many mails reached ``address``."""
        return sum(address in rcpts for rcpts, _ in self.mails)


@pytest.fixture
def relay() -> Iterator[Relay]:
    box = Relay(port=_free_port(), refuse={REFUSED: "550 5.1.1 <gone@example.test>: no such user"})
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


def _channel(op: Conn, relay: Relay, recipients: list[str]) -> None:
    notifications.add_email(
        op,
        "ops-mail",
        recipients,
        smtp_host="127.0.0.1",
        smtp_port=relay.port,
        smtp_from="undolog@example.test",
        by=BY,
    )


def _due_now(conn: Conn) -> None:
    """Every pending delivery due at once: its backoff over, as later passes would find."""
    conn.execute(
        "UPDATE undolog.undolog_notification_deliveries SET next_attempt_at = now()"
        " WHERE state = 'pending'"
    )


def test_recipients_the_server_took_get_the_mail_once_the_refused_one_is_named(
    conn: Conn,
    operator_dsn: str,
    agent_dsn: str,
    relay: Relay,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server takes two of three recipients and refuses one for good (550). The mail
    reached the two: sending it again at each retry (until max_attempts) would give them
    one copy per attempt. It is sent, once; the refused address, the server's answer and
    what to do next are on the delivery and in the worker's log."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, [TOLD[0], REFUSED, TOLD[1]])
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        with caplog.at_level(logging.WARNING, logger="undolog.notifications"):
            outcomes = notifications.deliver_due(op)
            for _ in range(3):  # the passes of the next hours, each finding its retry due
                _due_now(conn)
                outcomes += notifications.deliver_due(op)
    assert [relay.received(a) for a in TOLD] == [1, 1], [o.error for o in outcomes]
    assert relay.received(REFUSED) == 0
    [(rcpts, mail)] = relay.mails
    assert rcpts == TOLD and mail["To"] == f"{TOLD[0]}, {REFUSED}, {TOLD[1]}"

    [outcome] = outcomes
    assert (outcome.state, outcome.error) == ("sent", None)
    assert outcome.warning is not None and REFUSED in outcome.warning
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"]) == ("sent", 1)
    note = row["last_error"]
    assert REFUSED in note and "550 5.1.1" in note and "no such user" in note
    assert all(a in note for a in TOLD)  # who has it
    assert "Not sent again" in note  # and why the refused one is not retried
    assert any(REFUSED in r.getMessage() for r in caplog.records)

    # what the operator reads
    out = cli(operator_dsn, "--json", "notifications", "deliveries", "--approval", str(approval_id))
    assert out.returncode == 0, out.stderr
    [listed] = json.loads(out.stdout)
    assert listed["state"] == "sent" and REFUSED in listed["last_error"]


def test_the_agent_reads_its_deliverys_warning_without_the_channels_addresses(
    conn: Conn,
    operator_dsn: str,
    agent_dsn: str,
    relay: Relay,
    logins: Callable[[str], str],
) -> None:
    """A channel's recipients are staff's to read (undolog.notification_channels, which no
    agent reads), but the agent whose request was announced reads the delivery's
    last_error, and the warning of a mail some recipients refused named every recipient
    (who has it, who not, the server's answer quoting the address): a prompt-injected
    agent learnt who its approvers are and where to write to them. It reads the warning
    with each address as '…', and not the stored column; staff read it whole."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, [TOLD[0], REFUSED, TOLD[1]])
        session_id, approval_id = ask(agent_dsn, {"to": "acme"})
        [outcome] = notifications.deliver_due(op)
    assert outcome.warning is not None and REFUSED in outcome.warning
    shown = "SELECT last_error FROM undolog.notification_deliveries WHERE approval_id = %s"
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        [(seen,)] = agent.execute(shown, (approval_id,)).fetchall()
        assert agent.execute(
            "SELECT state FROM undolog.undolog_notification_deliveries WHERE approval_id = %s",
            (approval_id,),
        ).fetchall() == [("sent",)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            agent.execute("SELECT last_error FROM undolog.undolog_notification_deliveries")
    assert seen.startswith(
        "sent to 2 of 3 recipients (…, …); refused: … (550 5.1.1 <…>: no such user). Not sent again"
    ), seen
    assert "@" not in seen, seen
    for staff in (operator_dsn, logins("undolog_approver")):
        with psycopg.connect(staff, autocommit=True) as reader:
            assert reader.execute(shown, (approval_id,)).fetchall() == [(outcome.warning,)]
    # nor may it read another login's: the function the view reads it through is its own
    with psycopg.connect(logins("undolog_agent"), autocommit=True) as other:
        assert other.execute(
            "SELECT undolog.delivery_last_error(%s, %s)", (session_id, outcome.delivery_id)
        ).fetchone() == (None,)


def test_the_agent_reads_no_address_a_channel_accepts_whatever_its_characters(
    conn: Conn, operator_dsn: str, agent_dsn: str, relay: Relay
) -> None:
    """A channel takes any recipient of no space, comma, angle bracket or quote around
    one "@": an apostrophe, a comment's parentheses, an address literal's brackets. The
    mask of an address by its characters stopped at those, so the agent read such a
    recipient whole or in part; and a warning cut at 2000 characters right after an
    "@" left the local part. The agent reads none of the channel's own addresses, nor
    their echo in the server's answer in another case."""
    odd = ["o'brien@example.test", "alice(ops)@example.test", "ops@[192.0.2.1]"]
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, [TOLD[0], *odd])
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        notifications.enqueue(op)
    refused = {a: (550, f"5.1.1 <{a.upper()}>: no such user".encode()) for a in odd}
    warning = notifications.partial_warning([TOLD[0], *odd], refused)
    cut = "sent to 1 of 2 recipients (x@y.test, lastone@"
    # another address that holds a channel's: masked whole, not its prefix or suffix left
    holding = f"refused: jim{odd[0]} and <dev.{odd[1]}.relay.corp>"
    shown = "SELECT last_error FROM undolog.notification_deliveries WHERE approval_id = %s"
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        # the channel's SMTP server is masked too: named as the addresses' domain, it was
        # masked before them and left "alice(ops)@…"
        for smtp_host in ("127.0.0.1", "example.test"):
            conn.execute(
                "UPDATE undolog.undolog_notification_channels"
                " SET config = config || jsonb_build_object('smtp_host', %s::text)",
                (smtp_host,),
            )
            for stored in (warning, cut, holding):
                conn.execute(
                    "UPDATE undolog.undolog_notification_deliveries SET last_error = %s"
                    " WHERE approval_id = %s",
                    (stored, approval_id),
                )
                [(seen,)] = agent.execute(shown, (approval_id,)).fetchall()
                for part in ("o'brien", "brien", "alice", "(ops)", "192.0.2.1", "lastone"):
                    assert part not in seen.lower(), (smtp_host, seen)
                for part in ("jim", "dev.", "relay"):
                    assert part not in seen, (smtp_host, seen)


def test_a_mail_every_recipient_refused_is_retried_having_reached_nobody(
    conn: Conn, operator_dsn: str, agent_dsn: str, relay: Relay
) -> None:
    """All refused: nobody has the mail, so trying again duplicates nothing (the server
    may take it later: a 4xx answer, or an address fixed on its side)."""
    relay.refuse[TOLD[0]] = "450 4.2.1 <oncall@example.test>: try again later"
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, [TOLD[0], REFUSED])
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        [first] = notifications.deliver_due(op)
        assert first.state == "pending" and first.warning is None
        assert first.error is not None and REFUSED in first.error and TOLD[0] in first.error
        assert relay.mails == []
        del relay.refuse[TOLD[0]]  # the temporary refusal is over
        _due_now(conn)
        [second] = notifications.deliver_due(op)
    assert second.state == "sent" and second.warning is not None
    assert REFUSED in second.warning and "450" not in second.warning
    assert [rcpts for rcpts, _ in relay.mails] == [[TOLD[0]]]
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"]) == ("sent", 2)


def test_an_operator_retry_sends_to_every_recipient_and_clears_the_warning(
    conn: Conn, operator_dsn: str, agent_dsn: str, relay: Relay
) -> None:
    """`notifications retry` of a delivery sent with a warning is the operator's own
    choice to send it again: to every recipient (the delivery does not record who took
    it), and a send that all take leaves no warning behind."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, [TOLD[0], REFUSED])
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        [partial] = notifications.deliver_due(op)
        assert partial.state == "sent" and partial.warning is not None
        del relay.refuse[REFUSED]  # the operator fixed it on the server's side
        notifications.retry(op, partial.delivery_id, by=BY)
        [full] = notifications.deliver_due(op)
    assert (full.state, full.error, full.warning) == ("sent", None, None)
    assert [rcpts for rcpts, _ in relay.mails] == [[TOLD[0]], [TOLD[0], REFUSED]]
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"], row["last_error"]) == ("sent", 2, None)


def test_a_warning_is_for_a_sent_attempt_only(
    operator_dsn: str, agent_dsn: str, relay: Relay
) -> None:
    """A failed attempt is retried: a warning reported with its error would say that
    some were told, and be lost; finish_notification refuses it (UL008) and writes
    nothing, and the worker's finish() never passes one."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, TOLD)
        ask(agent_dsn, {"to": "acme"})
        notifications.enqueue(op)
        d = notifications.claim(op)
        assert d is not None
        with pytest.raises(psycopg.Error) as raised:
            op.execute(
                "SELECT undolog.finish_notification(%s, %s, 'HTTP 500', 'refused: x')",
                (d.delivery_id, d.attempt),
            )
        assert raised.value.sqlstate == "UL008"
        assert notifications.finish(op, d, "SMTPServerDisconnected", "ignored") == "pending"


def test_send_email_answers_the_refused_recipients_and_deliver_counts_it_sent(
    relay: Relay,
) -> None:
    """The worker's send without the database: a partial acceptance is a send (None: no
    error to retry), and what was refused comes back as the warning."""
    config = {"smtp_from": "u@example.test", "smtp_host": "127.0.0.1", "smtp_port": relay.port}
    d = _delivery("email", f"{TOLD[0]}, {REFUSED}", config, {"to": "acme"})
    error, warning = notifications.attempt(d, timeout=5.0)
    assert error is None and warning is not None
    assert warning.startswith(f"sent to 1 of 2 recipients ({TOLD[0]}); refused: {REFUSED}")
    assert notifications.deliver(d, timeout=5.0) is None
    assert relay.received(TOLD[0]) == 2  # each call is a send of its own (no database here)


def test_a_worker_of_this_package_reports_to_an_engine_before_its_warning(
    conn: Conn, operator_dsn: str, agent_dsn: str, relay: Relay
) -> None:
    """The package is upgraded before `undolog migrate` (docs/how-to/upgrading.md): its
    worker meets the engine's three-argument finish_notification. A mail that reached
    everyone is reported without naming p_warning, so it is recorded as sent once; a
    report naming it would fail after the send (42883), and the mail would go out again
    at every claim."""
    conn.execute("DROP FUNCTION undolog.finish_notification(uuid, integer, text, text)")
    conn.execute(
        "CREATE FUNCTION undolog.finish_notification(p_delivery_id uuid, p_attempt integer,"
        " p_error text) RETURNS text LANGUAGE sql SECURITY DEFINER"
        " SET search_path = undolog, pg_temp AS $$"
        " UPDATE undolog.undolog_notification_deliveries SET state = 'sent', sent_at = now(),"
        " claimed_until = NULL WHERE delivery_id = p_delivery_id AND p_error IS NULL"
        " RETURNING 'sent' $$"
    )
    conn.execute(
        "GRANT EXECUTE ON FUNCTION undolog.finish_notification(uuid, integer, text)"
        " TO undolog_operator"
    )
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        _channel(op, relay, TOLD)
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        [outcome] = notifications.deliver_due(op)
    assert (outcome.state, outcome.error) == ("sent", None)
    assert [relay.received(a) for a in TOLD] == [1, 1]
    [row] = deliveries(conn, approval_id)
    assert row["state"] == "sent"
