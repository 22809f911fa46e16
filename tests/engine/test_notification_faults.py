"""Notifications and the approval wait under faults and hostile input, with a real
PostgreSQL, a real local HTTP server and a real local SMTP server (aiosmtpd): a send
still connecting when its deadline passes, a channel removed while a pass queues, a
mail sent again, a request past its deadline, a LISTEN connection lost while waiting."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import test_notifications
from test_notifications import SECRET, Hook, Mailbox, _delivery, ask, deliveries

from undolog import approvals, notifications

Conn = psycopg.Connection[Any]
BY = "ops@example.test"

# test_notifications' receivers and logins, as fixtures of this module too
hook = test_notifications.hook
mailbox = test_notifications.mailbox
logins = test_notifications.logins
operator_dsn = test_notifications.operator_dsn


def _slow_connections(monkeypatch: pytest.MonkeyPatch, delay: float) -> None:
    """Every new TCP connection (urllib's, smtplib's) takes ``delay`` seconds to make, as
    a slow resolver or a host dropping SYNs would: the send is still connecting when its
    deadline passes."""
    real = socket.create_connection

    def slow(*args: Any, **kwargs: Any) -> socket.socket:
        time.sleep(delay)
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", slow)


def _mail_delivery(mailbox: Mailbox) -> notifications.Delivery:
    config = {"smtp_from": "u@example.test", "smtp_host": "127.0.0.1", "smtp_port": mailbox.port}
    return _delivery("email", "a@example.test", config, {"to": "acme"})


def test_a_webhook_still_connecting_at_its_deadline_sends_nothing_after_it(
    hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt is recorded as failed (and retried later): the send it gave up on must
    not reach the receiver afterwards, a duplicate the worker never knew it made."""
    _slow_connections(monkeypatch, 1.5)
    d = _delivery("webhook", hook.url, {}, {"to": "acme"})
    error = notifications.deliver(d, timeout=0.5)
    assert error is not None and error.startswith("TimeoutError:"), error
    time.sleep(2.0)  # the connection is made meanwhile
    assert hook.received == []


def test_a_mail_still_connecting_at_its_deadline_is_not_sent_after_it(
    mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow_connections(monkeypatch, 1.5)
    error = notifications.deliver(_mail_delivery(mailbox), timeout=0.5)
    assert error is not None and error.startswith("TimeoutError:"), error
    time.sleep(2.0)
    assert mailbox.messages == []


def test_a_mail_sent_again_carries_the_same_message_id_and_delivery_id(
    mailbox: Mailbox,
) -> None:
    """At least once: a mail sent twice (a worker that died after sending, a timeout
    after the server took it) carries on every attempt what a receiver (or a mail client,
    which folds messages of one Message-ID) tells the copies apart by."""
    d = _mail_delivery(mailbox)
    assert notifications.deliver(d, timeout=5.0) is None
    assert notifications.deliver(dataclasses.replace(d, attempt=2), timeout=5.0) is None
    first, second = mailbox.messages
    assert first["Message-ID"] == second["Message-ID"]
    assert first[notifications.DELIVERY_HEADER] == str(d.delivery_id)
    assert second[notifications.DELIVERY_HEADER] == str(d.delivery_id)
    other = _mail_delivery(mailbox)
    assert notifications.email_message(other)["Message-ID"] != first["Message-ID"]


def test_a_channel_removed_while_a_pass_queues_is_sent_nothing(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    """remove_notification_channel cancels the channel's deliveries; one that a
    concurrent enqueue_notifications inserted (not yet committed, so not cancelled) must
    not be sent to the removed channel either."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        notifications.add_webhook(op, "ops-hook", hook.url, SECRET, by=BY)
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        with psycopg.connect(operator_dsn) as queuing:  # a transaction: not committed yet
            assert notifications.enqueue(queuing) == 1
            notifications.remove_channel(op, "ops-hook", by=BY)
            queuing.commit()
        outcomes = notifications.deliver_due(op)
    assert outcomes == [] and hook.received == []
    [row] = deliveries(conn, approval_id)
    assert row["state"] == "cancelled" and row["attempts"] == 0


def test_a_request_past_its_deadline_is_not_announced(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    """A request whose deadline passed cannot be approved any more (UL015), even before
    the worker marks it expired: announcing it would ask people for a decision that is
    no longer theirs to make."""
    conn.execute(f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '1s'")
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        notifications.add_webhook(op, "ops-hook", hook.url, SECRET, by=BY)
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        time.sleep(1.2)
        assert approvals.approval_state(op, approval_id) == "pending"  # not expired yet
        assert notifications.deliver_due(op) == []
        assert hook.received == []
        assert approvals.expire_approvals(op) == [approval_id]
        assert notifications.deliver_due(op) == []
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"]) == ("cancelled", 0)


# --- wait_for_decision ------------------------------------------------------------------


def _waiting(agent_dsn: str, approval_id: uuid.UUID, timeout: float) -> dict[str, Any]:
    """wait_for_decision in a thread of its own, on a connection of its own: what it
    answered (or raised) and when, and the backend pid of its connection."""
    out: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        with psycopg.connect(agent_dsn, autocommit=True) as c:
            out["pid"] = c.info.backend_pid
            ready.set()
            started = time.monotonic()
            try:
                out["answer"] = approvals.wait_for_decision(c, approval_id, timeout, 30.0)
            except Exception as exc:
                out["error"] = exc
            out["took"] = time.monotonic() - started

    out["thread"] = thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    return out


def test_a_decision_made_before_the_wait_is_answered_at_once(conn: Conn, agent_dsn: str) -> None:
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    approvals.reject(conn, approval_id, "lead@example.test", "no")
    waiting = _waiting(agent_dsn, approval_id, 30.0)
    waiting["thread"].join(10)
    assert waiting.get("answer") == "rejected" and waiting["took"] < 5


def test_a_wait_whose_connection_is_lost_raises_at_once_rather_than_hang(
    conn: Conn, agent_dsn: str
) -> None:
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    waiting = _waiting(agent_dsn, approval_id, 60.0)
    time.sleep(0.5)  # it is listening
    conn.execute("SELECT pg_terminate_backend(%s)", (waiting["pid"],))
    waiting["thread"].join(10)
    assert not waiting["thread"].is_alive(), "the wait hung on a lost connection"
    assert isinstance(waiting.get("error"), psycopg.OperationalError), waiting
    # the error says what happened to the connection, not only that it is closed now
    assert "terminat" in str(waiting["error"]), waiting["error"]


# --- what a receiver answers --------------------------------------------------------------


@pytest.fixture
def answering() -> Iterator[Callable[[bytes], str]]:
    """answering(head) -> the URL of a server that answers every request with ``head``,
    then body bytes for as long as the client reads (an endless body)."""
    listeners: list[socket.socket] = []

    def serve(listener: socket.socket, head: bytes) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                try:
                    client.recv(65536)
                    client.sendall(head)
                    while True:
                        client.sendall(b"x" * 65536)
                except OSError:
                    continue  # the client went

    def start(head: bytes) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        threading.Thread(target=serve, args=(listener, head), daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}/hook"

    yield start
    for listener in listeners:
        listener.close()


def test_a_redirect_is_a_failure_that_sends_nothing_elsewhere_and_shows_no_secret(
    hook: Hook, answering: Callable[[bytes], str]
) -> None:
    for location in (hook.url, "file:///etc/passwd"):
        url = answering(
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + location.encode() + b"\r\n"
            b"Content-Length: 0\r\n\r\n"
        )
        d = _delivery("webhook", url, {}, {"to": "acme"})
        error = notifications.deliver(d, timeout=5.0)
        # urllib's own refusal of a file: URL names it: the receiver's text, not ours
        assert error is not None and error.startswith("RuntimeError: HTTP 307"), error
        assert SECRET not in error and "/hook" not in error, error
    assert hook.received == []


def test_an_endless_answer_is_not_read(answering: Callable[[bytes], str]) -> None:
    url = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n")
    started = time.monotonic()
    assert notifications.deliver(_delivery("webhook", url, {}, {}), timeout=5.0) is None
    assert time.monotonic() - started < 3.0


def test_a_reason_phrase_with_control_characters_is_recorded_on_one_printable_line(
    answering: Callable[[bytes], str],
) -> None:
    """A receiver's reason phrase is its own text: its escape sequences and bell (which a
    terminal showing `undolog notifications deliveries` would obey) and format characters
    become spaces in the recorded error, as the agent's text does in a mail."""
    url = answering(
        b"HTTP/1.1 503 Busy\x1b[2J\x1b]0;owned\x07 now\xe2\x80\xae\x0b\r\nContent-Length: 0\r\n\r\n"
    )
    error = notifications.deliver(_delivery("webhook", url, {}, {}), timeout=5.0)
    assert error is not None and error.startswith("RuntimeError: HTTP 503 Busy"), error
    assert error.isprintable(), repr(error)
    assert "[2J" in error and "owned" in error  # the text is kept; only the controls went


def test_an_error_naming_the_url_records_neither_its_credentials_nor_its_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever text a send fails with, the error recorded (which the agent whose request
    it announced reads) shows the channel's URL, or any other, as scheme and host only:
    no user info, no path, no query."""
    target = "https://bot:PASSWORD1@hooks.example.test/services/T0/B1/SLACKPATH?token=QUERY1"

    def failing(d: notifications.Delivery, timeout: float, conns: Any) -> str | None:
        raise RuntimeError(
            f"cannot POST to {d.target}, redirected to http://u:PASSWORD2@else.test/p?k=QUERY2;"
            " auth bot:PASSWORD1 at 'PASSWORD1@hooks.example.test' query token=QUERY1"
        )

    monkeypatch.setitem(notifications.SENDERS, "webhook", failing)
    error = notifications.deliver(_delivery("webhook", target, {}, {}), timeout=5.0)
    assert error is not None and error.startswith("RuntimeError: cannot POST to "), error
    assert "https://hooks.example.test/…" in error and "http://else.test/…" in error, error
    for secret in ("PASSWORD1", "PASSWORD2", "QUERY1", "QUERY2", "SLACKPATH"):
        assert secret not in error, error


@pytest.mark.parametrize("control", ["\x01", "\x1b", "\x7f"])
def test_a_url_refused_with_its_path_escaped_records_no_piece_of_it(control: str) -> None:
    """A channel URL holding a control character (one added before they were refused):
    http.client refuses it with InvalidURL quoting the path with repr() (``\\x7f``), which
    neither the raw path cut out of the error nor the URL pattern (no scheme in it)
    matched: the path, a Slack webhook's token, is not in the recorded error either."""
    for target in (
        f"https://hooks.test/services/T0SECRET/B0SECRET/XXSLACKTOKENXX{control}",
        f"https://hooks.test/h?token=XXSLACKTOKENXX{control}",
    ):
        error = notifications.deliver(_delivery("webhook", target, {}, {}), timeout=5.0)
        assert error is not None and error.startswith("InvalidURL"), error
        for secret in ("SLACKTOKEN", "T0SECRET"):
            assert secret not in error, error
