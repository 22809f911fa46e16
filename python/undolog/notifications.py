"""Notifications of approval requests: a webhook (signed JSON, or a Slack-compatible body)
and e-mail over SMTP, delivered by a worker with retries.

The agent's transaction writes nothing for this: :func:`deliver_due` (run by
``undolog worker`` and ``undolog notify``, as an operator login) first asks the engine to
add one delivery per pending request and live channel (``undolog.enqueue_notifications``),
then claims the due deliveries one at a time (``FOR UPDATE SKIP LOCKED``: several
workers never take the same one), sends each outside any transaction, and reports the
outcome (``undolog.finish_notification``): sent, or due again after an exponential
backoff, or failed after its last attempt. Every attempt is recorded on the delivery
(``undolog.notification_deliveries``).

A webhook's POST carries the header :data:`SIGNATURE_HEADER`,
``t=<unix seconds>,v1=<hex>``, where ``<hex>`` is HMAC-SHA256 with the channel's secret
of ``<unix seconds>.`` followed by the exact body bytes. A receiver recomputes it
(:func:`verify`), compares in constant time, and refuses a timestamp older than a few
minutes: a body replayed later fails. :data:`DELIVERY_HEADER` names the delivery, the
same on every attempt: a receiver that got it twice (a worker that died after sending,
before recording it) can tell. A mail carries it too, as the same header, and its
``Message-ID`` is the delivery's, the same on every attempt.

A mail the SMTP server takes for some of the channel's recipients and refuses for others
has reached the ones it took: it is sent, never retried (each retry would give them one
more copy), and the refused addresses, with the server's answers, are recorded on the
delivery as its warning (``last_error``) and logged. A mail refused for every recipient
reached nobody, and is retried like any failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import html
import http.client
import json
import logging
import re
import smtplib
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any, Final

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from undolog import links
from undolog.engine import Connection, fetch_one, translated
from undolog.names import LOOKALIKES_LABEL, lookalike_list, spell_ascii_name, spell_unseen
from undolog.queries import QUERIES

SIGNATURE_HEADER: Final = "X-UndoLog-Signature"
"""The webhook's signature header: ``t=<unix seconds>,v1=<hex HMAC-SHA256>``."""
DELIVERY_HEADER: Final = "X-UndoLog-Delivery"
"""The delivery's id, the same on every attempt of one delivery."""
EVENT: Final = "approval.requested"
"""The webhook body's ``event``."""
DEFAULT_TOLERANCE: Final = 300.0
"""How old (seconds) a signed timestamp :func:`verify` accepts by default."""
# What a mail or a Slack message shows of the call's arguments (the dashboard has all).
ARGS_PREVIEW = 2000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """One claimed delivery: what claim_notification answered."""

    delivery_id: uuid.UUID
    session_id: uuid.UUID
    approval_id: uuid.UUID
    attempt: int
    max_attempts: int
    channel_name: str
    channel_kind: str
    target: str
    config: dict[str, Any]
    secret: str | None
    dashboard_url: str | None
    step_index: int | None
    tool_name: str | None
    args: Any
    agent: str | None
    owner_role: str | None
    requested_at: datetime
    expires_at: datetime | None

    @property
    def url(self) -> str | None:
        """The request in the dashboard, when the channel names the dashboard: a signed,
        expiring link when the worker holds the links' key (:data:`undolog.links.SECRET_ENV`),
        the session's page otherwise."""
        secret = links.secret_from_env()
        if secret is None or not self.dashboard_url:
            return request_url(self.dashboard_url, self.session_id, self.approval_id)
        # counted from the request, not from this attempt: every message of one request
        # (the mail, the webhook, a retry) carries the same link
        start = self.requested_at.timestamp()
        expires = links.expiry(links.ttl_from_env(), self.expires_at, now=start)
        return links.signed_url(self.dashboard_url, self.approval_id, secret, expires)


@dataclass(frozen=True)
class Outcome:
    """What became of one attempt: ``state`` is finish_notification's answer (sent,
    pending: due again, failed: no attempt left, stale: no longer this worker's);
    ``error`` what failed it, ``warning`` what a sent one did not reach."""

    delivery_id: uuid.UUID
    channel_name: str
    attempt: int
    state: str
    error: str | None
    warning: str | None = None
    """What a sent attempt did not reach (the recipients an SMTP server refused), or None."""


def request_url(base: str | None, session_id: uuid.UUID, approval_id: uuid.UUID) -> str | None:
    """The dashboard's page of the request: its session's page, at the request."""
    if not base:
        return None
    return f"{base.rstrip('/')}/sessions/{session_id}#approval-{approval_id}"


# --- signing ----------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str,
    header: str | None,
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``header`` (the :data:`SIGNATURE_HEADER` received) signs ``body`` with
    ``secret`` at a time within ``tolerance`` seconds of ``now``: what a receiver checks."""
    if not header:
        return False
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if not stamp.isdigit() or not given:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        return False
    expected = sign(secret, int(stamp), body).partition(",v1=")[2]
    return hmac.compare_digest(expected, given)


# --- what is sent -----------------------------------------------------------------------


def _args_text(args: Any) -> str:
    text = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= ARGS_PREVIEW else text[:ARGS_PREVIEW] + " …"


def _printable(text: str) -> str:
    """``text`` with every character no reader sees as itself (a bidi override, a
    zero-width space, U+2028, a Hangul filler, a variation selector) written out as the
    dashboard writes it (``\\u202e``: :func:`undolog.names.spell_unseen`), and every other
    one that is not printable (a tab, a line break, U+00A0) as a space."""
    text = spell_unseen(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else " " for c in text)


def _one_line(text: object) -> str:
    """The agent's text on one line: no line break of it reaches a header or a summary."""
    return " ".join(_printable(str(text)).split())


def _header_text(text: object) -> str:
    """The agent's text as a mail header may hold it: on one line, and with no ``=?``,
    which opens an RFC 2047 encoded word. Python's email package decodes the encoded words
    of a value it is given (``msg["Subject"] = ...``) and writes their characters back as
    they are: a tool named ``=?utf-8?b?DQpCY2M6IC4uLg==?=`` (its bytes a CR LF, then
    ``Bcc: ...``) added headers to the mail, or began its body, where the approver reads
    the notice. ``= ?`` is not one: the header shows the name as written."""
    return _one_line(text).replace("=?", "= ?")


def _set_header(msg: EmailMessage, name: str, value: str) -> None:
    """Set ``msg[name]`` to ``value``, and make sure it reads back as ``value``: any other
    decoding of the agent's text (of which the header would then say something else) is
    an attempt that fails, never a mail that says what the agent wrote."""
    msg[name] = value
    if str(msg[name]) != value:
        raise ValueError(f"the {name} header would not read as written: not sent")


def _tool_shown(d: Delivery) -> str:
    """The tool's name as a notice says it (none: its call's month was dropped since),
    spelled as the CLI spells it (:func:`undolog.names.spell_ascii_name`): "pay" written
    with Cyrillic letters is never read as the tool "pay"."""
    return spell_ascii_name(d.tool_name) if d.tool_name is not None else "(call of a dropped month)"


def summary(d: Delivery, quote: Callable[[str], str] = str) -> str:
    """One line: which call asks for a decision; ``quote`` marks up the tool's name (an
    agent login registers it: any text)."""
    return (
        f"Approval requested: {quote(_one_line(_tool_shown(d)))}"
        f" (step {d.step_index}) in session {d.session_id} of {d.owner_role}"
    )


def _slack_code(text: str) -> str:
    """``text`` as a Slack code span: mrkdwn has no escape for a backtick inside one, and
    one would end the span, formatting what follows (bold, links) as if the notice said
    it, so it becomes U+02CB, which looks alike."""
    return "`" + text.replace("`", "\u02cb") + "`"


def webhook_body(d: Delivery) -> bytes:
    """The POST body: the event as JSON, or ``{"text": ...}`` for format ``slack``."""
    url = d.url
    if d.config.get("format") == "slack":
        # Slack's mrkdwn needs &, < and > escaped; everything else is plain text
        def esc(text: str) -> str:
            return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

        # the agent's text (the tool's name, its args) only inside code spans
        shown = _printable(_args_text(d.args))
        lines = [esc(summary(d, _slack_code)), f"args: {_slack_code(esc(shown))}"]
        if lookalikes := lookalike_list(shown):
            # the line that names the look-alikes (the dashboard's: names.lookalike_list); the
            # arguments are shown as they are
            lines.append(f"{LOOKALIKES_LABEL}: {esc(lookalikes)}")
        if d.expires_at is not None:
            lines.append(f"decide before {d.expires_at.isoformat()}")
        if url:
            lines.append(f"<{url}|Open the request in the dashboard>")
        return json.dumps({"text": "\n".join(lines)}).encode()
    event = {
        "event": EVENT,
        "delivery_id": str(d.delivery_id),
        "approval_id": str(d.approval_id),
        "session_id": str(d.session_id),
        "step_index": d.step_index,
        "tool_name": d.tool_name,
        "args": d.args,
        "agent": d.agent,
        "owner_role": d.owner_role,
        "requested_at": d.requested_at.isoformat(),
        "expires_at": d.expires_at.isoformat() if d.expires_at else None,
        "url": url,
    }
    return json.dumps(event, ensure_ascii=False).encode()


def email_message(d: Delivery) -> EmailMessage:
    """The mail: a text part and an HTML part, every value from the call escaped."""
    url = d.url
    msg = EmailMessage()
    _set_header(
        msg, "Subject", f"[UndoLog] approval requested: {_header_text(_tool_shown(d))}"[:200]
    )
    msg["From"] = str(d.config["smtp_from"])
    msg["To"] = d.target
    msg["Date"] = formatdate(localtime=False)
    # The same on every attempt of the delivery (at least once: a mail may be sent twice),
    # so that a mail client folds the copies into one and a receiver can tell.
    msg["Message-ID"] = f"<{d.delivery_id}@undolog>"
    msg[DELIVERY_HEADER] = str(d.delivery_id)
    # Each value on its row's one line: an agent's line break (in its tool's name, its own
    # name, U+2028 in an argument) must not forge a line of the notice, such as a link.
    args = _printable(_args_text(d.args))
    rows = [
        ("tool", _one_line(_tool_shown(d))),
        ("step", str(d.step_index)),
        ("arguments", args),
        *([(LOOKALIKES_LABEL, lookalikes)] if (lookalikes := lookalike_list(args)) else []),
        ("session", str(d.session_id)),
        ("login", _one_line(d.owner_role)),
        (
            "agent (its own name)",
            _one_line(d.agent if d.agent is None else spell_ascii_name(d.agent)),
        ),
        ("requested", d.requested_at.isoformat()),
        ("decide before", d.expires_at.isoformat() if d.expires_at else "no deadline"),
        ("approval", str(d.approval_id)),
    ]
    text = [summary(d), ""] + [f"{k}: {v}" for k, v in rows]
    if url:
        text += ["", f"Open it in the dashboard to decide: {url}"]
    msg.set_content("\n".join(text) + "\n")
    cells = "".join(
        f"<tr><th align=left>{html.escape(k)}</th><td><code>{html.escape(v)}</code></td></tr>"
        for k, v in rows
    )
    link = (
        f'<p><a href="{html.escape(url, quote=True)}">Open the request in the dashboard</a>'
        " to decide.</p>"
        if url
        else ""
    )
    msg.add_alternative(
        f"<html><body><p>{html.escape(summary(d))}</p><table>{cells}</table>{link}</body></html>",
        subtype="html",
    )
    return msg


# --- sending ----------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is a failure: following it would send the signed body elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Connections:
    """The connections one send opens, so that another thread can cut them off: a socket
    timeout bounds each read, not the whole send, and a receiver answering one byte at a
    time would otherwise hold the worker (and its undo walks) for as long as it likes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection | smtplib.SMTP] = []
        self._aborted = False

    def add(self, conn: http.client.HTTPConnection | smtplib.SMTP) -> None:
        with self._lock:
            self._open.append(conn)
            aborted = self._aborted
        if aborted:  # the deadline passed while this one was being made
            self._cut(conn)

    def connected(self, conn: http.client.HTTPConnection | smtplib.SMTP) -> None:
        """``conn`` has its socket: past the deadline (a slow resolver, a host dropping
        SYNs: :meth:`abort` found no socket to cut then), cut it and raise, so that an
        attempt already recorded as failed sends nothing afterwards."""
        with self._lock:
            aborted = self._aborted
        if aborted:
            self._cut(conn)
            raise TimeoutError("the deadline passed while connecting; nothing was sent")

    def abort(self) -> None:
        """Shut every socket down: a read blocked on one returns at once."""
        with self._lock:
            self._aborted = True
            conns = list(self._open)
        for conn in conns:
            self._cut(conn)

    @staticmethod
    def _cut(conn: http.client.HTTPConnection | smtplib.SMTP) -> None:
        sock = getattr(conn, "sock", None)
        if isinstance(sock, socket.socket):
            # not connected yet, or already closed: nothing to cut
            with contextlib.suppress(OSError):
                # the plain socket's shutdown, also for TLS: the descriptor, not the
                # TLS session another thread is reading from
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _opener(conns: Connections) -> urllib.request.OpenerDirector:
    """urllib's opener, refusing redirects, whose connections ``conns`` holds."""

    def tracked(
        kind: type[http.client.HTTPConnection],
    ) -> Callable[..., http.client.HTTPConnection]:
        def connect(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = kind(host, **kwargs)
            conns.add(conn)
            return conn

        return connect

    # A connection made only once the deadline passed sends nothing (Connections.connected)
    class HttpConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            conns.connected(self)

    class HttpsConnection(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()  # TCP, then TLS
            conns.connected(self)

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(tracked(HttpConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(tracked(HttpsConnection), req, context=ssl.create_default_context())

    return urllib.request.build_opener(_NoRedirect, Http, Https)


def send_webhook(d: Delivery, timeout: float, conns: Connections) -> str | None:
    """POST the body; raises on anything but a 2xx answer. One URL, one receiver:
    nothing partial to warn of (None)."""
    body = webhook_body(d)
    request = urllib.request.Request(
        d.target,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "undolog-notify",
            SIGNATURE_HEADER: sign(d.secret or "", int(time.time()), body),
            DELIVERY_HEADER: str(d.delivery_id),
        },
    )
    try:
        with _opener(conns).open(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code} {exc.reason}") from exc
    if not 200 <= status < 300:
        raise RuntimeError(f"HTTP {status}")
    return None


class _SMTP(smtplib.SMTP):
    """An SMTP client whose connection, made only once the deadline passed, sends
    nothing (:meth:`Connections.connected`)."""

    conns: Connections | None = None

    def connect(
        self, host: str = "localhost", port: int = 0, source_address: Any = None
    ) -> tuple[int, bytes]:
        reply = super().connect(host, port, source_address)
        if self.conns is not None:
            self.conns.connected(self)
        return reply


class _SMTPSSL(_SMTP, smtplib.SMTP_SSL):
    """:class:`_SMTP` over TLS from the start."""


def _refusals(refused: dict[str, tuple[int, bytes]]) -> str:
    """``refused`` (smtplib's: address -> the server's code and answer) on one line, as
    ``a@x (550 5.1.1 no such user), b@y (...)``, in address order."""

    def one(address: str, code: int, answer: bytes) -> str:
        text = _one_line(answer.decode("utf-8", "replace"))
        return f"{address} ({code} {text})" if text else f"{address} ({code})"

    return ", ".join(one(address, *reply) for address, reply in sorted(refused.items()))


def partial_warning(recipients: Sequence[str], refused: dict[str, tuple[int, bytes]]) -> str:
    """The warning of a mail the server took for some of ``recipients`` and refused for
    the others (``refused``): who has it, who not and why, and what the operator does."""
    took = [r for r in recipients if r not in refused]
    return (
        f"sent to {len(took)} of {len(recipients)} recipients ({', '.join(took)}); "
        f"refused: {_refusals(refused)}. Not sent again (the others would get it twice): "
        "tell the refused ones yourself (the request waits in the dashboard's approvals "
        "inbox), and fix the address or the server (a 5xx answer: refused for good; 4xx: "
        "for now) before the next request."
    )


def send_email(d: Delivery, timeout: float, conns: Connections) -> str | None:
    """Hand the mail to the channel's SMTP server; raises if it takes it for no
    recipient. Taken for some and refused for others, the mail has reached the ones it
    took: no error (sending it again would give them a second copy), and the answer is
    the warning naming the refused ones (None when all took it)."""
    cfg = d.config
    host, port = str(cfg["smtp_host"]), int(cfg["smtp_port"])
    smtp: _SMTP
    # Made unconnected, so that ``conns`` holds it before connect() reads the greeting.
    if cfg.get("ssl"):
        smtp = _SMTPSSL(timeout=timeout, context=ssl.create_default_context())
    else:
        smtp = _SMTP(timeout=timeout)
    smtp.conns = conns
    conns.add(smtp)
    with smtp:
        smtp.connect(host, port)
        if cfg.get("starttls"):
            smtp.starttls(context=ssl.create_default_context())
        if cfg.get("smtp_user"):
            smtp.login(str(cfg["smtp_user"]), d.secret or "")
        msg = email_message(d)
        try:
            refused = smtp.send_message(msg)
        except smtplib.SMTPRecipientsRefused as exc:  # nobody has it: retried
            raise RuntimeError(f"every recipient refused: {_refusals(exc.recipients)}") from exc
    if not refused:
        return None
    recipients = [a.strip() for a in d.target.split(",") if a.strip()]
    return partial_warning(recipients, refused)


# A sender raises when nothing was delivered; it answers a warning when the message was
# delivered, but not to every recipient (a retry would repeat it to the others), or None.
SENDERS: dict[str, Callable[[Delivery, float, Connections], str | None]] = {
    "webhook": send_webhook,
    "email": send_email,
}


# A URL in an error's text: its scheme, then everything up to a space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")


def redact_url(url: str) -> str:
    """``url`` as its scheme and host only, as ``undolog.notification_channels`` shows a
    webhook's: ``https://host[:port]/…``, without the user info (``user:password@``), the
    path (a Slack incoming-webhook URL's is its token) and the query."""
    scheme, _, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return f"{scheme}://{authority.rpartition('@')[2]}/…"


def _secrets_of(url: str) -> list[str]:
    """What of ``url`` an error's text must not show even on its own: its user info (and
    the password alone), its path, query and fragment, as written, decoded, as the
    error's one printable line shows them and as ``repr()`` quotes them (http.client's
    InvalidURL shows a path holding a control character as ``'/services/TOKEN\\x7f'``);
    longest first."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not even a URL: all of it past the scheme
        parts = None
    if parts is None:
        found = {url.partition("://")[2]}
    else:
        userinfo = parts.netloc.rpartition("@")[0]
        found = {userinfo, userinfo.partition(":")[2], parts.query, parts.fragment}
        if len(parts.path) > 1:  # a path of "/" would blank every slash
            found.add(parts.path)
        found |= {urllib.parse.unquote(text) for text in found}
    found |= {repr(text)[1:-1] for text in found} | {_one_line(text) for text in found}
    return sorted((text for text in found if text), key=len, reverse=True)


def _error_text(exc: BaseException, target: str | None = None) -> str:
    """What an attempt failed with, as recorded in ``last_error``, which the agent whose
    request was announced reads. A receiver's words (an HTTP reason phrase, an SMTP
    answer) on one printable line: no escape sequence or bell reaches the terminal that
    shows last_error, and no U+0000 the text column would refuse. Any URL in it as its
    scheme and host only (:func:`redact_url`), and no piece of the channel's URL
    (``target``) that the channel's view hides, wherever it appears (urllib quotes a host
    it cannot parse: ``nonnumeric port: 'TOKEN@host'``). The scheme and host stay for
    staff to act on; the agent reads them as '…' (undolog.delivery_last_error)."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), _one_line(exc))
    if target is not None:
        for secret in _secrets_of(target):
            text = text.replace(secret, "…")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the worker's pass ------------------------------------------------------------------


def enqueue(conn: Connection) -> int:
    """Add the deliveries of pending requests not yet queued (operator); answers how
    many."""
    return int(fetch_one(conn, QUERIES["enqueue_notifications"])[0])


def claim(conn: Connection, lease: timedelta = timedelta(minutes=5)) -> Delivery | None:
    """The oldest due delivery, now this worker's for ``lease`` (operator), or None."""
    with translated():
        row = (
            conn.cursor(row_factory=dict_row)
            .execute(QUERIES["claim_notification"], {"lease": lease})
            .fetchone()
        )
    if row is None:
        return None
    row["config"] = dict(row["config"] or {})
    return Delivery(**row)


def finish(conn: Connection, d: Delivery, error: str | None, warning: str | None = None) -> str:
    """Record the attempt's outcome: ``error`` None is sent (``warning``: what it did not
    reach); answers the delivery's state (or ``'stale'``)."""
    params = {"delivery_id": d.delivery_id, "attempt": d.attempt, "error": error}
    if error is None and warning is not None:
        warned = {"delivery_id": d.delivery_id, "attempt": d.attempt, "warning": warning}
        return str(fetch_one(conn, QUERIES["finish_notification_warned"], warned)[0])
    return str(fetch_one(conn, QUERIES["finish_notification"], params)[0])


def deliver(d: Delivery, timeout: float = 10.0) -> str | None:
    """Send one claimed delivery within ``timeout`` seconds in all; answers None when
    sent (to every recipient or, a mail, to some: :func:`attempt` answers which were
    refused), or what went wrong."""
    return attempt(d, timeout)[0]


def attempt(d: Delivery, timeout: float = 10.0) -> tuple[str | None, str | None]:
    """Send one claimed delivery within ``timeout`` seconds in all; answers ``(error,
    warning)``: error None when sent, with the warning of a mail some recipients refused
    (it reached the others: it is sent, and not retried), or what went wrong. The send
    runs in a thread of its own: past the deadline its connections are cut off (a read
    blocked on one ends at once) and the attempt is a failure, retried later like any
    other."""
    conns = Connections()
    failure: list[BaseException] = []
    warning: list[str] = []
    done = threading.Event()

    def send() -> None:
        try:
            note = SENDERS[d.channel_kind](d, timeout, conns)
            if note is not None:
                warning.append(note)
        except Exception as exc:  # a channel's failure is recorded, never the worker's end
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=send, name=f"undolog-notify-{d.delivery_id}", daemon=True).start()
    if not done.wait(timeout):
        conns.abort()
        # A thread still resolving the host name (or connecting) cannot be cut off; it
        # ends on its own, and sends nothing once it has connected.
        done.wait(1.0)
        return (
            f"TimeoutError: the {d.channel_kind} channel did not take the message within "
            f"{timeout:g} s in all (a slow or stalled receiver)"
        ), None
    if failure:
        target = d.target if d.channel_kind == "webhook" else None
        return _error_text(failure[0], target), None
    return None, (warning[0] if warning else None)


def deliver_due(
    conn: Connection,
    *,
    limit: int = 100,
    timeout: float = 10.0,
    lease: timedelta = timedelta(minutes=5),
    budget: float = 30.0,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[Outcome]:
    """One pass: queue the new requests' deliveries, then send the due ones (at most
    ``limit``, and no new one once ``budget`` seconds have gone: receivers that hang
    until their timeout must not hold the worker's undo walks back for long), each
    claimed, sent, and reported. ``conn`` in autocommit mode (each claim and report its
    own transaction; nothing is held while sending)."""
    enqueue(conn)
    done: list[Outcome] = []
    until = time.monotonic() + budget
    while len(done) < limit and not should_stop() and time.monotonic() < until:
        d = claim(conn, lease)
        if d is None:
            break
        error, warning = attempt(d, timeout)
        state = finish(conn, d, error, warning)
        if warning is not None:  # sent, but some were not told: the operator's to see
            log.warning("delivery %s (%s): %s", d.delivery_id, d.channel_name, warning)
        done.append(Outcome(d.delivery_id, d.channel_name, d.attempt, state, error, warning))
    return done


# --- the operator's configuration -------------------------------------------------------


def _add(
    conn: Connection,
    name: str,
    kind: str,
    target: str,
    config: dict[str, Any],
    secret: str | None,
    dashboard_url: str | None,
    by: str,
) -> uuid.UUID:
    params = {
        "name": name,
        "kind": kind,
        "target": target,
        "config": Jsonb(config),
        "secret": secret,
        "dashboard_url": dashboard_url,
        "by": by,
    }
    return uuid.UUID(str(fetch_one(conn, QUERIES["add_notification_channel"], params)[0]))


def add_webhook(
    conn: Connection,
    name: str,
    url: str,
    secret: str,
    *,
    by: str,
    slack: bool = False,
    dashboard_url: str | None = None,
) -> uuid.UUID:
    """Announce requests by POST to ``url``, signed with ``secret`` (operator)."""
    config = {"format": "slack" if slack else "json"}
    return _add(conn, name, "webhook", url, config, secret, dashboard_url, by)


def add_email(
    conn: Connection,
    name: str,
    recipients: Sequence[str],
    *,
    smtp_host: str,
    smtp_port: int,
    smtp_from: str,
    by: str,
    smtp_user: str | None = None,
    password: str | None = None,
    starttls: bool = False,
    use_ssl: bool = False,
    dashboard_url: str | None = None,
) -> uuid.UUID:
    """Announce requests by mail to ``recipients`` through an SMTP server (operator)."""
    config: dict[str, Any] = {
        "smtp_host": smtp_host,
        "smtp_port": smtp_port,
        "smtp_from": smtp_from,
        "starttls": starttls,
        "ssl": use_ssl,
    }
    if smtp_user:
        config["smtp_user"] = smtp_user
    target = ",".join(recipients)
    return _add(conn, name, "email", target, config, password, dashboard_url, by)


def remove_channel(conn: Connection, name: str, *, by: str) -> datetime:
    """Remove a live channel; its deliveries not yet sent are cancelled (operator)."""
    params = {"name": name, "by": by}
    answer: datetime = fetch_one(conn, QUERIES["remove_notification_channel"], params)[0]
    return answer


def retry(conn: Connection, delivery_id: uuid.UUID, *, by: str) -> int:
    """Send a delivery again now (operator); answers its new max_attempts."""
    params = {"delivery_id": delivery_id, "by": by}
    return int(fetch_one(conn, QUERIES["retry_notification"], params)[0])
