"""``undolog notifications``: the channels approval requests are announced through (a
signed webhook, e-mail over SMTP), the deliveries and their retries; ``undolog notify``:
the delivery loop alone (``undolog worker`` runs it too)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
from types import FrameType

from undolog import links, logs, notifications
from undolog.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    OPERATOR,
    Parser,
    Subparsers,
    UsageError,
    connect,
    non_negative_float,
    positive_int,
    query,
)
from undolog.cli._ids import resolve_id
from undolog.cli._output import emit
from undolog.cli.worker import connect_for_worker
from undolog.queries import QUERIES
from undolog.walk import Worker

log = logging.getLogger("undolog.cli")


def configure_notifications_parser(subparsers: Subparsers, common: Parser) -> None:
    notif = subparsers.add_parser(
        "notifications",
        parents=[common],
        help="channels announcing approval requests (webhook, e-mail), their deliveries",
    ).add_subparsers(dest="notifications_command", required=True, metavar="ACTION")

    p = notif.add_parser(
        "add-webhook", parents=[common], help="POST each new request, signed (operator)"
    )
    p.add_argument("name", metavar="NAME", help="the channel's name (letters, digits, _ . -)")
    p.add_argument("url", metavar="URL", help="the http(s) URL to POST to")
    p.add_argument(
        "--secret-env",
        metavar="VAR",
        help="the environment variable holding the HMAC key (at least 16 characters; "
        "default: a new random key, printed once)",
    )
    p.add_argument("--slack", action="store_true", help='a Slack-compatible body {"text": ...}')
    _dashboard_and_by(p)
    p.set_defaults(func=_cmd_add_webhook, needed_role=OPERATOR)

    p = notif.add_parser(
        "add-email", parents=[common], help="mail each new request over SMTP (operator)"
    )
    p.add_argument("name", metavar="NAME", help="the channel's name (letters, digits, _ . -)")
    p.add_argument(
        "--to", action="append", required=True, metavar="ADDRESS", help="a recipient (repeatable)"
    )
    p.add_argument("--smtp-host", required=True, help="the SMTP server")
    p.add_argument("--smtp-port", type=positive_int, default=25, help="its port (default 25)")
    p.add_argument("--from", dest="smtp_from", required=True, help="the sender's address")
    p.add_argument("--smtp-user", help="log in as this user")
    p.add_argument(
        "--password-env", metavar="VAR", help="the environment variable holding the password"
    )
    p.add_argument("--starttls", action="store_true", help="STARTTLS after connecting")
    p.add_argument("--ssl", action="store_true", help="TLS from the start (port 465)")
    _dashboard_and_by(p)
    p.set_defaults(func=_cmd_add_email, needed_role=OPERATOR)

    p = notif.add_parser("remove", parents=[common], help="remove a channel (operator)")
    p.add_argument("name", metavar="NAME", help="the channel's name")
    p.add_argument("--by", required=True, help="who decides (recorded)")
    p.set_defaults(func=_cmd_remove, needed_role=OPERATOR)

    p = notif.add_parser("list", parents=[common], help="the channels (never their secrets)")
    p.add_argument("--all", action="store_true", help="removed channels too")
    p.set_defaults(func=_cmd_list, needed_role="undolog_approver (or undolog_operator)")

    p = notif.add_parser(
        "deliveries", parents=[common], help="each request's deliveries: sent, failed, why"
    )
    p.add_argument("--approval", metavar="APPROVAL", help="only this request's (id or prefix)")
    p.add_argument("--state", choices=("pending", "sent", "failed", "cancelled"), help="only those")
    p.add_argument("--limit", type=positive_int, default=50, help="newest first (default 50)")
    p.set_defaults(func=_cmd_deliveries)

    p = notif.add_parser("retry", parents=[common], help="send a delivery again now (operator)")
    p.add_argument("delivery", metavar="DELIVERY", help="delivery id or a unique prefix")
    p.add_argument("--by", required=True, help="who decides")
    p.set_defaults(func=_cmd_retry, needed_role=OPERATOR)

    p = subparsers.add_parser(
        "notify",
        parents=[common],
        help="deliver the notifications of approval requests until SIGTERM/SIGINT",
    )
    p.add_argument(
        "--interval",
        type=non_negative_float,
        default=5.0,
        help="seconds between passes (default 5)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    p.set_defaults(func=_cmd_notify, needed_role=OPERATOR)


def _dashboard_and_by(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dashboard-url",
        metavar="URL",
        help="the dashboard's base URL: the message links to the request there",
    )
    p.add_argument("--by", required=True, help="who adds it (recorded)")


def _from_env(var: str | None, what: str) -> str | None:
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"{what}: the environment variable {var} is unset or empty")
    return value


def _added(args: argparse.Namespace, channel_id: object, extra: dict[str, str]) -> None:
    if args.json:
        print(json.dumps({"channel_id": str(channel_id), "name": args.name, **extra}))
        return
    print(f"channel {args.name} ({channel_id}) added")
    for key, value in extra.items():
        print(f"{key}: {value}")


def _cmd_add_webhook(args: argparse.Namespace) -> int:
    given = _from_env(args.secret_env, "--secret-env")
    secret = given or secrets.token_hex(32)
    with connect(args) as conn:
        channel_id = notifications.add_webhook(
            conn,
            args.name,
            args.url,
            secret,
            by=args.by,
            slack=args.slack,
            dashboard_url=args.dashboard_url,
        )
    # a key the command made is shown this once: nobody can read it back afterwards
    _added(args, channel_id, {} if given else {"secret": secret})
    return EXIT_OK


def _cmd_add_email(args: argparse.Namespace) -> int:
    password = _from_env(args.password_env, "--password-env")
    with connect(args) as conn:
        channel_id = notifications.add_email(
            conn,
            args.name,
            args.to,
            smtp_host=args.smtp_host,
            smtp_port=args.smtp_port,
            smtp_from=args.smtp_from,
            smtp_user=args.smtp_user,
            password=password,
            starttls=args.starttls,
            use_ssl=args.ssl,
            dashboard_url=args.dashboard_url,
            by=args.by,
        )
    _added(args, channel_id, {})
    return EXIT_OK


def _cmd_remove(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        at = notifications.remove_channel(conn, args.name, by=args.by)
    if args.json:
        print(json.dumps({"name": args.name, "removed_at": str(at)}))
    else:
        print(f"channel {args.name}: removed at {at}")
    return EXIT_OK


CHANNEL_COLUMNS = [
    "channel_name",
    "kind",
    "body_format",
    "destination",
    "has_secret",
    "dashboard_url",
    "created_by",
    "created_at",
    "live",
]


def _cmd_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = query(conn, QUERIES["notification_channels"], {"all": args.all})
    emit(args, rows, CHANNEL_COLUMNS)
    return EXIT_OK


DELIVERY_COLUMNS = [
    "delivery_id",
    "approval_id",
    "channel_name",
    "channel_kind",
    "state",
    "attempts",
    "max_attempts",
    "next_attempt_at",
    "sent_at",
    "last_error",
]


def _cmd_deliveries(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        approval = resolve_id(conn, "approval", args.approval) if args.approval else None
        params = {"approval_id": approval, "state": args.state, "limit": args.limit}
        rows = query(conn, QUERIES["notification_deliveries"], params)
    for r in rows:  # the next try means something only for a delivery still due
        r["next_attempt_at"] = r.pop("next_attempt")
    emit(args, rows, DELIVERY_COLUMNS)
    return EXIT_OK


def _cmd_retry(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        delivery_id = resolve_id(conn, "delivery", args.delivery)
        max_attempts = notifications.retry(conn, delivery_id, by=args.by)
    if args.json:
        print(json.dumps({"delivery_id": str(delivery_id), "max_attempts": max_attempts}))
    else:
        print(f"delivery {delivery_id}: due now (up to attempt {max_attempts})")
    return EXIT_OK


def _cmd_notify(args: argparse.Namespace) -> int:
    logs.basic_config(logging.INFO, "undolog notify: %(levelname)s %(message)s")
    try:  # a bad links key or lifetime would fail every delivery: say it once, at start
        links.check_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc

    def notified(outcome: notifications.Outcome) -> None:
        record = {
            "delivery_id": str(outcome.delivery_id),
            "channel": outcome.channel_name,
            "attempt": outcome.attempt,
            "state": outcome.state,
            "error": outcome.error,
        }
        line = json.dumps(record) if args.json else None
        print(
            line
            or f"delivery {outcome.delivery_id} ({outcome.channel_name}), attempt "
            f"{outcome.attempt}: {outcome.state}",
            flush=True,
        )

    worker = Worker(
        lambda: connect_for_worker(args),
        {},
        interval=args.interval,
        walk=False,
        notify=True,
        on_notified=notified,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.warning("%s: finishing the delivery in hand, then exiting", signal.Signals(signum).name)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        worker.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        reached = worker.run(once=args.once)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return EXIT_OK if reached or worker.stopping else EXIT_ERROR
