"""Notifications of approval requests, with real processes: a local HTTP server checking
the HMAC signature, a local SMTP server (aiosmtpd) receiving the mail, `undolog notify`
run as the operator's command; failure then retry with backoff; two workers at once
sending each delivery once; what an agent login may and may not read."""

from __future__ import annotations

import base64
import dataclasses
import email
import email.policy
import json
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from aiosmtpd.controller import Controller
from psycopg.conninfo import make_conninfo

from undolog import engine, errors, links, notifications
from undolog.walk import Worker

Conn = psycopg.Connection[Any]
SECRET = "k" * 16 + secrets.token_hex(8)
DASHBOARD = "https://undolog.example.test/dash"


# --- the receivers ------------------------------------------------------------------------


@dataclass
class Hook:
    """A webhook receiver: answers the next statuses of ``answers`` (then 200), records
    every POST and whether its signature verified."""

    url: str
    answers: list[int] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            header = self.headers.get(notifications.SIGNATURE_HEADER)
            with state.lock:
                state.received.append(
                    {
                        "path": self.path,
                        "body": body,
                        "verified": notifications.verify(SECRET, header, body),
                        "delivery": self.headers.get(notifications.DELIVERY_HEADER),
                        "header": header,
                    }
                )
                status = state.answers.pop(0) if state.answers else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/undolog"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@dataclass
class Mailbox:
    port: int
    messages: list[EmailMessage] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox(port=_free_port())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


# --- logins and requests ------------------------------------------------------------------


@pytest.fixture
def logins(conn: Conn, dsn: str) -> Iterator[Callable[[str], str]]:
    """logins("undolog_agent") -> the DSN of a new login holding that group role."""
    made: list[str] = []

    def make(group: str) -> str:
        name = f"n_{group.removeprefix('undolog_')}_{secrets.token_hex(3)}"
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {group}")
        made.append(name)
        return make_conninfo(dsn, user=name)

    yield make
    for name in made:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def operator_dsn(logins: Callable[[str], str]) -> str:
    return logins("undolog_operator")


def ask(
    agent_dsn: str, args: dict[str, Any], tool: str = "wire_money"
) -> tuple[uuid.UUID, uuid.UUID]:
    """An IRREVERSIBLE call of the agent login that waits for a human: (session, approval)."""
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        sid = engine.begin_session(agent, agent="payments-bot")
        answer = engine.intercept(agent, sid, 0, tool, "irreversible", args)
    assert answer.action == "await_approval" and answer.approval_id is not None
    return sid, answer.approval_id


def notify_once(operator_dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", operator_dsn, "--json", "notify", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def deliveries(conn: Conn, approval_id: uuid.UUID) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute(
        "SELECT * FROM undolog.undolog_notification_deliveries WHERE approval_id = %s"
        " ORDER BY channel_name",
        (approval_id,),
    ).fetchall()


def add_webhook(operator_dsn: str, hook: Hook, *extra: str, name: str = "ops-hook") -> None:
    env_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "undolog.cli",
            "--dsn",
            operator_dsn,
            "notifications",
            "add-webhook",
            name,
            hook.url,
            "--secret-env",
            "HOOK_SECRET",
            "--dashboard-url",
            DASHBOARD,
            "--by",
            "ops@example.test",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**_env(), "HOOK_SECRET": SECRET},
    )
    assert env_run.returncode == 0, env_run.stderr


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def add_email(operator_dsn: str, mailbox: Mailbox) -> None:
    out = cli(
        operator_dsn,
        "notifications",
        "add-email",
        "ops-mail",
        "--to",
        "oncall@example.test",
        "--to",
        "lead@example.test",
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        str(mailbox.port),
        "--from",
        "undolog@example.test",
        "--dashboard-url",
        DASHBOARD,
        "--by",
        "ops@example.test",
    )
    assert out.returncode == 0, out.stderr


# --- the tests ----------------------------------------------------------------------------


def test_a_request_reaches_the_webhook_signed_and_the_mail_escaped(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook, mailbox: Mailbox
) -> None:
    add_webhook(operator_dsn, hook)
    add_email(operator_dsn, mailbox)
    hostile = "<script>alert('x')</script> & <b>bold</b>"
    sid, approval_id = ask(agent_dsn, {"to": hostile, "cents": 125000})
    out = notify_once(operator_dsn)
    assert out.returncode == 0, out.stderr
    states = sorted(json.loads(line)["state"] for line in out.stdout.splitlines())
    assert states == ["sent", "sent"]

    [post] = hook.received
    assert post["verified"] and post["path"] == "/hooks/undolog"
    event = json.loads(post["body"])
    assert event["event"] == "approval.requested"
    assert event["approval_id"] == str(approval_id) and event["session_id"] == str(sid)
    assert event["tool_name"] == "wire_money" and event["args"]["to"] == hostile
    assert event["url"] == f"{DASHBOARD}/sessions/{sid}#approval-{approval_id}"
    # a replay of that body with another timestamp, or a tampered body, does not verify
    assert not notifications.verify(SECRET, post["header"], post["body"] + b" ")
    assert not notifications.verify(
        SECRET, post["header"], post["body"], now=int(post["header"][2:12]) + 3600
    )

    [mail] = mailbox.messages
    assert mail["To"] == "oncall@example.test, lead@example.test"
    assert mail["Subject"] == "[UndoLog] approval requested: wire_money"
    text = mail.get_body(("plain",))
    markup = mail.get_body(("html",))
    assert text is not None and markup is not None
    plain_text, html_text = text.get_content(), markup.get_content()
    assert event["url"] in plain_text and f'href="{event["url"]}"' in html_text
    assert "<script>" not in html_text and "<b>bold" not in html_text
    assert "&lt;script&gt;" in html_text and "&amp;" in html_text

    rows = deliveries(conn, approval_id)
    assert [(r["channel_name"], r["state"], r["attempts"]) for r in rows] == [
        ("ops-hook", "sent", 1),
        ("ops-mail", "sent", 1),
    ]
    assert str(rows[0]["delivery_id"]) == post["delivery"]
    # the next pass sends nothing again
    assert notify_once(operator_dsn).stdout == ""
    assert len(hook.received) == 1 and len(mailbox.messages) == 1


def test_slack_format_posts_text_with_the_link(
    operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook, "--slack", name="slack")
    sid, approval_id = ask(agent_dsn, {"to": "<@here>"})
    assert notify_once(operator_dsn).returncode == 0
    [post] = hook.received
    body = json.loads(post["body"])
    assert list(body) == ["text"] and post["verified"]
    assert f"<{DASHBOARD}/sessions/{sid}#approval-{approval_id}|" in body["text"]
    assert "&lt;@here&gt;" in body["text"]  # an agent's text cannot ping a channel


def test_a_failed_attempt_is_recorded_and_retried_with_backoff(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook)
    hook.answers = [500]
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    first = notify_once(operator_dsn)
    assert first.returncode == 0 and first.stdout, first.stderr
    assert json.loads(first.stdout)["state"] == "pending", first.stderr
    [row] = deliveries(conn, approval_id)
    assert row["state"] == "pending" and row["attempts"] == 1
    assert row["last_error"] == "RuntimeError: HTTP 500 Internal Server Error"
    # due again 10 s after the first failure (undolog.retry_delay), so not on this pass
    assert row["next_attempt_at"] - row["last_attempt_at"] >= notifications_delay(conn, 1)
    assert notify_once(operator_dsn).stdout == ""
    assert len(hook.received) == 1
    conn.execute("UPDATE undolog.undolog_notification_deliveries SET next_attempt_at = now()")
    assert notify_once(operator_dsn).returncode == 0
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"], row["last_error"]) == ("sent", 2, None)
    assert len(hook.received) == 2 and hook.received[0]["delivery"] == hook.received[1]["delivery"]


def notifications_delay(conn: Conn, attempt: int) -> Any:
    row = conn.execute(
        "SELECT undolog.retry_delay(%s, interval '10 seconds', interval '1 hour')", (attempt,)
    ).fetchone()
    assert row is not None
    return row[0]


def test_the_last_failure_fails_the_delivery_and_retry_sends_it_again(
    conn: Conn, dsn: str, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.notification_max_attempts = 2')
    add_webhook(operator_dsn, hook)
    hook.answers = [503, 503]
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    for _ in range(2):
        assert notify_once(operator_dsn).returncode == 0
        conn.execute("UPDATE undolog.undolog_notification_deliveries SET next_attempt_at = now()")
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"], row["max_attempts"]) == ("failed", 2, 2)
    assert "503" in row["last_error"]
    listed = cli(operator_dsn, "--json", "notifications", "deliveries", "--state", "failed")
    assert [d["delivery_id"] for d in json.loads(listed.stdout)] == [str(row["delivery_id"])]
    assert notify_once(operator_dsn).stdout == ""  # failed: no more attempts by itself

    retried = cli(
        operator_dsn, "notifications", "retry", str(row["delivery_id"])[:8], "--by", "ops"
    )
    assert retried.returncode == 0, retried.stderr
    assert notify_once(operator_dsn).returncode == 0
    [row] = deliveries(conn, approval_id)
    assert (row["state"], row["attempts"], row["max_attempts"]) == ("sent", 3, 4)
    assert len(hook.received) == 3


def test_two_workers_at_once_send_each_delivery_once(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook)
    asked = [ask(agent_dsn, {"n": i})[1] for i in range(12)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "undolog.cli", "--dsn", operator_dsn, "notify", "--once"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    sent = [r["delivery"] for r in hook.received]
    assert len(sent) == len(set(sent)) == 12
    states = conn.execute(
        "SELECT state, attempts, count(*) FROM undolog.undolog_notification_deliveries"
        " WHERE approval_id = ANY(%s) GROUP BY 1, 2",
        (asked,),
    ).fetchall()
    assert states == [("sent", 1, 12)]


def test_the_worker_delivers_after_its_walks(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook)
    ask(agent_dsn, {"to": "acme"})
    seen: list[notifications.Outcome] = []
    worker = Worker(
        lambda: psycopg.connect(operator_dsn, autocommit=True),
        {},
        notify=True,
        on_notified=seen.append,
    )
    assert worker.run(once=True)
    assert [o.state for o in seen] == ["sent"] and len(hook.received) == 1
    quiet = Worker(lambda: psycopg.connect(operator_dsn, autocommit=True), {})
    _, other = ask(agent_dsn, {"to": "other"})
    assert quiet.run(once=True)  # notify is off by default in the class (the CLI turns it on)
    assert deliveries(conn, other) == []


def test_a_request_decided_before_delivery_is_cancelled_not_sent(
    conn: Conn,
    dsn: str,
    operator_dsn: str,
    agent_dsn: str,
    hook: Hook,
    logins: Callable[[str], str],
) -> None:
    add_webhook(operator_dsn, hook)
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    hook.answers = [500]
    assert notify_once(operator_dsn).returncode == 0  # queued, one failed attempt
    with psycopg.connect(logins("undolog_approver"), autocommit=True) as approver:
        approver.execute("SELECT undolog.reject(%s, 'lead', 'no')", (approval_id,))
    conn.execute("UPDATE undolog.undolog_notification_deliveries SET next_attempt_at = now()")
    assert notify_once(operator_dsn).stdout == ""
    [row] = deliveries(conn, approval_id)
    assert row["state"] == "cancelled" and len(hook.received) == 1
    refused = cli(operator_dsn, "notifications", "retry", str(row["delivery_id"]), "--by", "ops")
    assert refused.returncode == 1 and "its request is rejected" in refused.stderr


def test_an_agent_reads_neither_secrets_nor_other_logins_deliveries(
    conn: Conn, operator_dsn: str, hook: Hook, logins: Callable[[str], str]
) -> None:
    add_webhook(operator_dsn, hook)
    mine_dsn, theirs_dsn = logins("undolog_agent"), logins("undolog_agent")
    _, mine = ask(mine_dsn, {"to": "mine"})
    _, theirs = ask(theirs_dsn, {"to": "theirs"})
    assert notify_once(operator_dsn).returncode == 0
    with psycopg.connect(mine_dsn, autocommit=True) as agent:
        seen = agent.execute(
            "SELECT approval_id, state FROM undolog.undolog_notification_deliveries"
        ).fetchall()
        assert seen == [(mine, "sent")]
        for forbidden in (
            "SELECT secret FROM undolog.undolog_notification_channels",
            "SELECT * FROM undolog.notification_channels",
            "SELECT * FROM undolog.claim_notification()",
            "SELECT undolog.enqueue_notifications()",
            f"SELECT undolog.retry_notification('{uuid.uuid4()}', 'me')",
            "SELECT undolog.remove_notification_channel('ops-hook', 'me')",
            "SELECT undolog.add_notification_channel('x', 'webhook', 'http://evil.test', '{}',"
            " 'k0123456789abcdef', NULL, 'me')",
            "UPDATE undolog.undolog_notification_deliveries SET state = 'sent'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent.execute(forbidden)
    # staff read the channels without their secret, and the webhook's URL without its path
    with psycopg.connect(logins("undolog_approver"), autocommit=True) as approver:
        row = approver.execute(
            "SELECT destination, has_secret FROM undolog.notification_channels"
        ).fetchone()
        assert row == (hook.url.split("/hooks")[0] + "/…", True)
        assert (
            len(approver.execute("SELECT FROM undolog.undolog_notification_deliveries").fetchall())
            == 2
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            approver.execute("SELECT * FROM undolog.claim_notification()")
    assert theirs != mine


def test_channel_commands_refuse_what_cannot_work(operator_dsn: str, hook: Hook) -> None:
    add_webhook(operator_dsn, hook)
    again = cli(operator_dsn, "notifications", "add-webhook", "ops-hook", hook.url, "--by", "ops")
    assert again.returncode == 2 and "exists" in again.stderr
    bad_url = cli(operator_dsn, "notifications", "add-webhook", "x", "ftp://h/x", "--by", "ops")
    assert bad_url.returncode == 2 and "webhook URL" in bad_url.stderr
    bad_to = cli(
        operator_dsn,
        "notifications",
        "add-email",
        "m",
        "--to",
        "a@b.test\r\nBcc: evil@x.test",
        "--smtp-host",
        "localhost",
        "--from",
        "u@b.test",
        "--by",
        "ops",
    )
    assert bad_to.returncode == 2 and "recipients" in bad_to.stderr
    gone = cli(operator_dsn, "notifications", "remove", "nope", "--by", "ops")
    assert gone.returncode == 3 and "no notification channel named nope" in gone.stderr
    made = cli(operator_dsn, "notifications", "add-webhook", "gen", hook.url, "--by", "ops")
    assert made.returncode == 0 and "secret: " in made.stdout  # generated, shown once
    listed = json.loads(cli(operator_dsn, "--json", "notifications", "list").stdout)
    assert [c["channel_name"] for c in listed] == ["gen", "ops-hook"]
    assert "secret" not in json.dumps(listed).replace("has_secret", "")
    assert cli(operator_dsn, "notifications", "remove", "gen", "--by", "ops").returncode == 0
    listed = json.loads(cli(operator_dsn, "--json", "notifications", "list").stdout)
    assert [c["channel_name"] for c in listed] == ["ops-hook"]


def _delivery(
    kind: str, target: str, config: dict[str, Any], args: Any, tool: str | None = "pay"
) -> notifications.Delivery:
    from datetime import UTC, datetime

    return notifications.Delivery(
        delivery_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        approval_id=uuid.uuid4(),
        attempt=1,
        max_attempts=8,
        channel_name="c",
        channel_kind=kind,
        target=target,
        config=config,
        secret=SECRET,
        dashboard_url=None,
        step_index=0,
        tool_name=tool,
        args=args,
        agent="x",
        owner_role="x",
        requested_at=datetime.now(UTC),
        expires_at=None,
    )


def test_an_agents_tool_name_cannot_add_a_mail_header() -> None:
    d = _delivery(
        "email",
        "a@example.test",
        {"smtp_from": "u@example.test"},
        {},
        tool="pay\r\nBcc: evil@example.test",
    )
    msg = notifications.email_message(d)
    # written out, as the CLI spells a name: one line, and not read as "pay"
    assert msg["Subject"] == "[UndoLog] approval requested: pay\\r\\nBcc: evil@example.test"
    parsed = email.message_from_string(msg.as_string(), policy=email.policy.default)
    assert parsed["Bcc"] is None and parsed["Subject"] == msg["Subject"]
    assert "Approval requested: pay\\r\\nBcc: evil@example.test (step 0)" in msg.as_string()


def test_an_agents_encoded_word_cannot_add_a_mail_header(
    operator_dsn: str, agent_dsn: str, mailbox: Mailbox
) -> None:
    """A tool's name is an agent login's text, and an RFC 2047 encoded word in it is
    ASCII, on one line: Python's email package decoded it where the Subject was set and
    wrote the CR LF it holds as it was, so that the mail arrived with the agent's headers
    (a Bcc, anything) under the Subject. Sent now with the name as written."""
    forged = b"\r\nX-Evil: forged\r\nBcc: evil@example.test"
    tool = f"pay=?utf-8?b?{base64.b64encode(forged).decode()}?="
    add_email(operator_dsn, mailbox)
    ask(agent_dsn, {"cents": 1}, tool=tool)
    out = notify_once(operator_dsn)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["state"] for line in out.stdout.splitlines()] == ["sent"]
    [mail] = mailbox.messages
    assert mail["X-Evil"] is None and mail["Bcc"] is None
    assert mail["Subject"] == "[UndoLog] approval requested: " + tool.replace("=?", "= ?")


def test_an_agents_backtick_cannot_end_a_slack_code_span() -> None:
    d = _delivery(
        "webhook",
        "http://127.0.0.1:9/",
        {"format": "slack"},
        {"memo": "` *APPROVED* `"},
        tool="pay` *by the CFO* `",
    )
    text = json.loads(notifications.webhook_body(d))["text"]
    first, args_line = text.splitlines()[:2]
    # the spans the notice opens are the only ones: the agent's text stays inside them
    assert first.startswith("Approval requested: `pay\u02cb *by the CFO* \u02cb` (step 0)")
    assert first.count("`") == 2
    assert args_line.count("`") == 2 and args_line.startswith("args: `")
    assert args_line.endswith("`") and "\u02cb *APPROVED* \u02cb" in args_line


@pytest.fixture
def dripping() -> Iterator[Callable[[bytes, bytes], str]]:
    """dripping(head, drop) -> host:port of a server that sends ``head``, then ``drop``
    every 0.1 s for as long as the client stays: each read gets its bytes before a
    socket timeout, so only a deadline for the whole send ends it."""
    servers: list[socket.socket] = []
    stop = threading.Event()

    def serve(listener: socket.socket, head: bytes, drop: bytes) -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                try:
                    client.sendall(head)
                    while not stop.wait(0.1):
                        client.sendall(drop)
                except OSError:
                    continue  # the client cut it off

    def start(head: bytes, drop: bytes) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        servers.append(listener)
        threading.Thread(target=serve, args=(listener, head, drop), daemon=True).start()
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    stop.set()
    for listener in servers:
        listener.close()


def test_a_receiver_that_answers_a_byte_at_a_time_is_cut_off_at_the_deadline(
    dripping: Callable[[bytes, bytes], str],
) -> None:
    webhook = dripping(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a")
    host, port = dripping(b"", b"220-still greeting\r\n").split(":")
    for d in (
        _delivery("webhook", f"http://{webhook}/hook", {}, {"to": "acme"}),
        _delivery(
            "email",
            "a@example.test",
            {"smtp_from": "u@example.test", "smtp_host": host, "smtp_port": int(port)},
            {"to": "acme"},
        ),
    ):
        started = time.monotonic()
        error = notifications.deliver(d, timeout=1.0)
        took = time.monotonic() - started
        assert error is not None and error.startswith("TimeoutError:"), error
        assert "within 1 s in all" in error
        assert took < 3.0, (d.channel_kind, took)  # not as long as the receiver drips


def test_a_pass_out_of_time_queues_but_sends_nothing_more(
    conn: Conn, operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook)
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    with psycopg.connect(operator_dsn, autocommit=True) as operator:
        assert notifications.deliver_due(operator, budget=0) == []
        [row] = deliveries(conn, approval_id)
        assert (row["state"], row["attempts"]) == ("pending", 0) and hook.received == []
        [sent] = notifications.deliver_due(operator, limit=1)
    assert sent.state == "sent" and len(hook.received) == 1


def test_a_listening_worker_sends_a_new_request_at_once_not_at_its_next_poll(
    operator_dsn: str, agent_dsn: str, hook: Hook
) -> None:
    add_webhook(operator_dsn, hook)
    seen: list[notifications.Outcome] = []
    worker = Worker(
        lambda: psycopg.connect(operator_dsn, autocommit=True),
        {},
        interval=60.0,  # the fallback poll: far longer than the test may wait
        walk=False,
        notify=True,
        on_notified=seen.append,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not worker._listening:  # the first pass is done; the worker waits
            assert time.monotonic() < deadline, "the worker never listened"
            time.sleep(0.05)
        time.sleep(0.3)
        for round_ in range(2):  # the second proves the first wake-up left it listening
            asked = time.monotonic()
            _, approval_id = ask(agent_dsn, {"to": f"acme-{round_}"})
            while len(hook.received) < round_ + 1:
                assert time.monotonic() - asked < 5, "not delivered well before the poll"
                time.sleep(0.02)
            assert json.loads(hook.received[round_]["body"])["approval_id"] == str(approval_id)
        # an operator's retry wakes it too (retry_notification NOTIFYs)
        with psycopg.connect(operator_dsn, autocommit=True) as op:
            asked = time.monotonic()
            notifications.retry(op, seen[0].delivery_id, by="ops@example.test")
        while len(hook.received) < 3:
            assert time.monotonic() - asked < 5, "a retry waited for the poll"
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive(), "the worker did not stop while waiting for a NOTIFY"
    assert [o.state for o in seen] == ["sent", "sent", "sent"]
    assert seen[2].delivery_id == seen[0].delivery_id and seen[2].attempt == 2


def test_a_notify_flood_from_any_login_does_not_spin_the_worker(
    operator_dsn: str, agent_dsn: str, hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any login may NOTIFY the channel the worker listens on (an agent's ``NOTIFY
    undolog_approvals`` every few milliseconds): a wake-up starts a pass no sooner than
    walk.MIN_WAKE_GAP seconds after the last one ended, so a flood costs one pass per gap,
    not one per NOTIFY, and a real request made during it is still announced within about
    that gap."""
    from undolog import walk

    gap = walk.MIN_WAKE_GAP
    add_webhook(operator_dsn, hook)
    passes: list[float] = []
    real = notifications.deliver_due

    def counting(*args: Any, **kwargs: Any) -> list[notifications.Outcome]:
        passes.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(notifications, "deliver_due", counting)
    worker = Worker(
        lambda: psycopg.connect(operator_dsn, autocommit=True),
        {},
        interval=60.0,  # the fallback poll: no pass of its own during the test
        walk=False,
        notify=True,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    flooding = threading.Event()
    sent: list[int] = []

    def flood() -> None:
        with psycopg.connect(agent_dsn, autocommit=True) as agent:
            while not flooding.is_set():
                agent.execute("NOTIFY undolog_approvals")
                sent.append(1)
                time.sleep(0.005)

    flooder = threading.Thread(target=flood, daemon=True)
    try:
        deadline = time.monotonic() + 10
        while not worker._listening:
            assert time.monotonic() < deadline, "the worker never listened"
            time.sleep(0.05)
        time.sleep(0.3)
        before = len(passes)
        started = time.monotonic()
        flooder.start()
        time.sleep(1.5)
        asked = time.monotonic()
        _, approval_id = ask(agent_dsn, {"to": "acme"})
        while not hook.received:
            assert time.monotonic() - asked < gap + 2.0, "the flood held a real request back"
            time.sleep(0.02)
        while time.monotonic() - started < 3.0:
            time.sleep(0.05)
        flooding.set()
        flooder.join(timeout=10)
        during = len(passes) - before
    finally:
        flooding.set()
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert json.loads(hook.received[0]["body"])["approval_id"] == str(approval_id)
    assert len(sent) > 100, len(sent)  # a flood it was
    # 3 s of flood: one pass per gap (and one for the request), not one per NOTIFY
    assert during <= 3.0 / gap + 2, (during, len(sent))


def test_notify_refuses_a_short_link_key_and_signs_the_links_with_a_good_one(
    operator_dsn: str, agent_dsn: str, mailbox: Mailbox
) -> None:
    add_email(operator_dsn, mailbox)
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    short = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", operator_dsn, "notify", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**_env(), links.SECRET_ENV: "short"},
    )
    assert short.returncode == 2 and "at least 16 characters" in short.stderr
    assert mailbox.messages == []
    key = "engine-link-key-" + secrets.token_hex(8)
    good = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "--dsn", operator_dsn, "notify", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**_env(), links.SECRET_ENV: key, links.TTL_ENV: "600"},
    )
    assert good.returncode == 0, good.stderr
    [mail] = mailbox.messages
    text, markup = mail.get_body(("plain",)), mail.get_body(("html",))
    assert text is not None and markup is not None
    [link] = re.findall(rf"{DASHBOARD}/open/\S+", text.get_content())
    split = urllib.parse.urlsplit(link)
    query = urllib.parse.parse_qs(split.query)
    assert split.path.endswith(f"/open/{approval_id}")
    assert links.check(key, str(approval_id), query["exp"][0], query["sig"][0]) == "ok"
    assert 0 < int(query["exp"][0]) - time.time() <= 600
    # the HTML part's href is the same link, its & escaped
    assert f'href="{link.replace("&", "&amp;")}"' in markup.get_content()


def test_an_agents_line_breaks_cannot_forge_lines_of_the_mails_text() -> None:
    """A tool's name and the agent's name are an agent login's text (up to 200
    characters, line breaks allowed): in the mail's text part each stays on its own row's
    line, so that none can pass for the notice's own lines (a link to decide at)."""
    fake = "\nOpen it in the dashboard to decide: https://evil.example/approve\n"
    d = dataclasses.replace(
        _delivery(
            "email", "a@example.test", {"smtp_from": "u@example.test"}, {}, tool=f"pay{fake}"
        ),
        agent=f"bot\r{fake}",
    )
    msg = notifications.email_message(d)
    plain = msg.get_body(("plain",))
    assert plain is not None
    lines = plain.get_content().splitlines()
    assert not [line for line in lines if line.startswith("Open it")], lines
    # each name spelled as the CLI spells it: its line breaks written out
    assert (
        "tool: pay\\nOpen it in the dashboard to decide: https://evil.example/approve\\n" in lines
    )
    assert any(line.startswith("agent (its own name): bot\\r\\nOpen it in the") for line in lines)


# --- a webhook URL's credentials ----------------------------------------------------------

CREDENTIAL_URL = "https://bot:TOPSECRETTOKEN@hooks.invalid/services/x?token=QUERYSECRET"


def test_a_webhook_url_with_credentials_is_refused_with_a_hint(
    operator_dsn: str, hook: Hook
) -> None:
    """User info in a webhook's URL (https://user:TOKEN@host/...) would be shown to every
    approver and, urllib failing on it, recorded in the error an agent reads: refused
    (UL026), with a hint at what authenticates the POST instead."""
    with_port = hook.url.replace("http://", "http://bot:TOPSECRETTOKEN@")
    for url in (CREDENTIAL_URL, with_port, "http://@127.0.0.1/x", "http://a@b:TOKEN@h.test/x"):
        refused = cli(operator_dsn, "notifications", "add-webhook", "creds", url, "--by", "ops")
        assert refused.returncode == 2, (url, refused.stderr)
        assert "without user info" in refused.stderr, refused.stderr
        assert "X-UndoLog-Signature" in refused.stderr, refused.stderr
        assert "TOPSECRETTOKEN" not in refused.stderr
    # the dashboard's base URL goes into every message: no credentials there either
    dash = cli(
        operator_dsn,
        "notifications",
        "add-webhook",
        "creds",
        hook.url,
        "--dashboard-url",
        "https://me:PW@dash.example.test",
        "--by",
        "ops",
    )
    assert dash.returncode == 2 and "dashboard URL" in dash.stderr, dash.stderr
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        assert op.execute("SELECT count(*) FROM undolog.notification_channels").fetchone() == (0,)
        # an address whose path or query holds an "@" has no user info: taken
        notifications.add_webhook(op, "at-in-path", hook.url + "/a@b?c=d@e", SECRET, by="ops")


@pytest.mark.parametrize("control", ["\x01", "\x1b", "\x7f"])
def test_a_url_with_a_control_character_is_refused_with_a_hint(
    operator_dsn: str, hook: Hook, control: str
) -> None:
    """A control character in a channel's URL (only white space was refused): Python's
    http.client refuses such a URL quoting its path escaped (\\x7f), which the error's
    text did not cut, so the path (a Slack webhook's token) reached last_error, which the
    agent whose request was announced reads. Refused (UL026) in either URL, with a hint."""
    with psycopg.connect(operator_dsn, autocommit=True) as op:
        for target, dashboard in (
            (f"https://hooks.test/services/T0/B0/TOKEN{control}", None),
            (f"https://hooks.test/h?token=TOKEN{control}x", None),
            (hook.url, f"https://dash.test/{control}"),
        ):
            with pytest.raises(errors.UndoLogError) as raised:
                notifications.add_webhook(
                    op, "cntrl", target, SECRET, by="ops", dashboard_url=dashboard
                )
            cause = raised.value.__cause__
            assert isinstance(cause, psycopg.Error) and cause.sqlstate == "UL026", cause
            assert "without control characters" in str(raised.value), raised.value
            assert raised.value.hint and "Percent-encode" in raised.value.hint
        assert op.execute("SELECT count(*) FROM undolog.notification_channels").fetchone() == (0,)
        notifications.add_webhook(op, "plain", hook.url + "/T0/B0%7F", SECRET, by="ops")


def test_credentials_in_a_channels_url_reach_neither_approver_nor_agent(
    conn: Conn, logins: Callable[[str], str]
) -> None:
    """A channel whose URL holds credentials (one added before they were refused): the
    view shows its scheme and host only, and the failed attempt's error, which the agent
    whose request it announced reads, names neither the user info nor the query."""
    conn.execute(
        "INSERT INTO undolog.undolog_notification_channels"
        " (channel_name, kind, destination, config, secret, created_by, created_role)"
        " VALUES ('old-hook', 'webhook', %s, '{}', %s, 'ops', current_user)",
        (CREDENTIAL_URL, SECRET),
    )
    agent_dsn, operator_dsn = logins("undolog_agent"), logins("undolog_operator")
    _, approval_id = ask(agent_dsn, {"to": "acme"})
    with psycopg.connect(logins("undolog_approver"), autocommit=True) as approver:
        shown = approver.execute("SELECT destination FROM undolog.notification_channels")
        assert shown.fetchall() == [("https://hooks.invalid/…",)]
    with psycopg.connect(operator_dsn, autocommit=True) as operator:
        [outcome] = notifications.deliver_due(operator, timeout=5)
    assert outcome.state == "pending" and outcome.error is not None
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        [(error,)] = agent.execute(
            "SELECT last_error FROM undolog.notification_deliveries WHERE approval_id = %s",
            (approval_id,),
        ).fetchall()
    # what urllib quoted of the authority reads as an address, which the agent reads
    # masked whole (undolog.delivery_last_error)
    assert outcome.error == "InvalidURL: nonnumeric port: '…@hooks.invalid'", outcome.error
    assert error == "InvalidURL: nonnumeric port: '…'", error
    for secret in ("TOPSECRETTOKEN", "QUERYSECRET", "bot:", "services/x"):
        assert secret not in error, error


def test_the_agent_reads_its_deliverys_error_without_the_webhooks_host(
    conn: Conn, operator_dsn: str, agent_dsn: str, logins: Callable[[str], str]
) -> None:
    """A channel's URL is staff's (undolog.notification_channels, which no agent reads),
    but the failed attempt's error, which the agent whose request it announced reads,
    kept the URL's scheme and host (the stored text cuts only its path), and the host
    alone as a receiver or a TLS error names it. The agent reads them as '…' (the row's
    channel_name and channel_id say which channel failed); staff read the error whole:
    the host is what an operator acts on."""

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            where = f"127.0.0.1:{port}"
            self.send_response(502, f"Bad Gateway: http://{where}/hooks did not answer ({where})")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with psycopg.connect(operator_dsn, autocommit=True) as op:
            url = f"http://127.0.0.1:{port}/hooks/T0/B0/TOKEN"
            notifications.add_webhook(op, "ops-hook", url, SECRET, by="ops")
            _, approval_id = ask(agent_dsn, {"to": "acme"})
            [outcome] = notifications.deliver_due(op, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    stored = (
        f"RuntimeError: HTTP 502 Bad Gateway: http://127.0.0.1:{port}/… did not answer"
        f" (127.0.0.1:{port})"
    )
    assert (outcome.state, outcome.error) == ("pending", stored)
    shown = (
        "SELECT channel_name, last_error FROM undolog.notification_deliveries"
        " WHERE approval_id = %s"
    )
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        assert agent.execute(shown, (approval_id,)).fetchall() == [
            ("ops-hook", "RuntimeError: HTTP 502 Bad Gateway: … did not answer (…)")
        ]
    for staff in (operator_dsn, logins("undolog_approver")):
        with psycopg.connect(staff, autocommit=True) as reader:
            assert reader.execute(shown, (approval_id,)).fetchall() == [("ops-hook", stored)]

    # the host as a TLS error or urllib quotes it, in any case, and any other URL; a longer
    # name that only holds it is not the host
    channel_host = "hooks.example.test"
    conn.execute(
        "UPDATE undolog.undolog_notification_channels SET destination = %s",
        (f"https://{channel_host}/services/T0",),
    )
    for error, seen in (
        (
            "URLError: <urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify"
            " failed: Hostname mismatch, certificate is not valid for 'Hooks.Example.TEST'.>",
            "URLError: <urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify"
            " failed: Hostname mismatch, certificate is not valid for '…'.>",
        ),
        (
            "InvalidURL: nonnumeric port: 'hooks.example.test:x'",
            "InvalidURL: nonnumeric port: '…:x'",
        ),
        ("RuntimeError: HTTP 503 see ftp://mirror.test/…", "RuntimeError: HTTP 503 see …"),
        ("ok at myhooks.example.tester", "ok at myhooks.example.tester"),
    ):
        conn.execute(
            "UPDATE undolog.undolog_notification_deliveries SET last_error = %s"
            " WHERE approval_id = %s",
            (error, approval_id),
        )
        with psycopg.connect(agent_dsn, autocommit=True) as agent:
            assert agent.execute(shown, (approval_id,)).fetchall() == [("ops-hook", seen)]

    # an IPv6 host, which a TLS error names without its brackets
    conn.execute(
        "UPDATE undolog.undolog_notification_channels SET destination = %s",
        ("https://[2001:db8::1]:8443/services/T0",),
    )
    conn.execute(
        "UPDATE undolog.undolog_notification_deliveries SET last_error = %s WHERE approval_id = %s",
        ("certificate is not valid for '2001:db8::1'. (2001:db8::1)", approval_id),
    )
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        assert agent.execute(shown, (approval_id,)).fetchall() == [
            ("ops-hook", "certificate is not valid for '…'. (…)")
        ]


def test_a_call_of_a_dropped_month_is_named_so_in_every_part_of_the_mail() -> None:
    """A delivery whose call's month was dropped since has no tool name: the Subject, the
    summary and the table say so, never "None"."""
    d = _delivery("email", "a@example.test", {"smtp_from": "u@example.test"}, None, tool=None)
    msg = notifications.email_message(d)
    assert msg["Subject"] == "[UndoLog] approval requested: (call of a dropped month)"
    assert "None" not in msg.as_string().replace("no deadline", "")
    assert "tool: (call of a dropped month)" in msg.as_string()


# Characters no reader sees, which Python's str.isprintable() calls printable (a Hangul
# filler, a variation selector, the combining grapheme joiner), and a bidi override: the
# dashboard writes each out as its escape; a notice showed them as they are (or as a
# blank), so "acct-1234" + U+3164 read "acct-1234" while the tool was sent another text.
HIDDEN_TAIL = "\u3164\ufe0f\u034f\U000e0101"


def test_a_notice_writes_out_what_no_reader_sees_as_the_dashboard_does() -> None:
    args = {"to": "acct-1234" + HIDDEN_TAIL, "memo": "\u202eevil"}
    slack = _delivery("webhook", "http://127.0.0.1:9/", {"format": "slack"}, args)
    text = json.loads(notifications.webhook_body(slack))["text"]
    assert '"acct-1234\\u3164\\ufe0f\\u034f\\udb40\\udd01"' in text, text
    assert '"\\u202eevil"' in text, text
    mail = notifications.email_message(
        _delivery("email", "a@x.test", {"smtp_from": "u@x.test"}, args)
    )
    body = mail.as_string()
    for hidden in HIDDEN_TAIL + "\u202e":
        assert hidden not in mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        assert hidden not in mail.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "acct-1234\\u3164\\ufe0f" in body


def test_a_notice_spells_a_lookalike_tool_name_as_the_cli_does() -> None:
    """ "pay" written with Cyrillic er and a is marked, as the CLI and the dashboard
    mark it: the notice said "Approval requested: `pay`"."""
    slack = _delivery(
        "webhook", "http://127.0.0.1:9/", {"format": "slack"}, {}, tool="\u0440\u0430y"
    )
    first = json.loads(notifications.webhook_body(slack))["text"].splitlines()[0]
    assert first.startswith("Approval requested: `\\u0440\\u0430y (non-ASCII)` (step 0)"), first
    mail = notifications.email_message(
        _delivery("email", "a@x.test", {"smtp_from": "u@x.test"}, {}, tool="pay\u3164")
    )
    assert mail["Subject"] == "[UndoLog] approval requested: pay\\u3164 (non-ASCII)"


def test_a_notice_lists_the_lookalikes_of_the_arguments_as_the_dashboard_does() -> None:
    """The arguments are shown as they are, and the line under them names each look-alike
    character (mathematical digits in "acct-1234", the Cyrillic er of "pay") with its code
    point: the notice showed "acct-1234" and said nothing. A Russian word adds nothing."""
    digits = "\U0001d7f7\U0001d7f8"
    args = {"to": f"acct-{digits}", "memo": "\u0440ay \u041c\u043e\u0441\u043a\u0432\u0430"}
    line = (
        "Look-alike characters: \u0440 U+0440 CYRILLIC SMALL LETTER ER, \U0001d7f7 U+1D7F7"
        " MATHEMATICAL MONOSPACE DIGIT ONE, \U0001d7f8 U+1D7F8 MATHEMATICAL MONOSPACE DIGIT TWO"
    )
    slack = _delivery("webhook", "http://127.0.0.1:9/", {"format": "slack"}, args)
    lines = json.loads(notifications.webhook_body(slack))["text"].splitlines()
    assert lines[1].startswith("args: `") and f"acct-{digits}" in lines[1], lines
    assert lines[2] == line, lines
    mail = notifications.email_message(
        _delivery("email", "a@x.test", {"smtp_from": "u@x.test"}, args)
    )
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "arguments: {" in text and f"\n{line}\n" in text, text
    html = mail.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "<th align=left>Look-alike characters</th><td><code>\u0440 U+0440" in html, html
    plain = _delivery("webhook", "http://127.0.0.1:9/", {"format": "slack"}, {"to": "caf\u00e9"})
    assert "Look-alike" not in json.loads(notifications.webhook_body(plain))["text"]
