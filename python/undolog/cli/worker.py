"""``undolog recover`` and ``undolog worker``: fail expired sessions, and walk the undo
stacks of failed ones with the application's compensations."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import signal
import sys
import uuid
from types import FrameType
from typing import Any

import psycopg

from undolog import links, logs, saga
from undolog._conninfo import with_keepalives
from undolog.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    OPERATOR,
    ConnectError,
    Parser,
    Subparsers,
    UsageError,
    connect,
    non_negative_float,
    positive_int,
)
from undolog.cli._output import emit, say_progress
from undolog.walk import STOP_GRACE, Worker, WorkerConfigError, WorkerStuck

# `undolog worker`'s exit status when compensations it gave up on still run (WorkerStuck):
# sysexits' EX_TEMPFAIL, "try again later". Only a new process ends them: its supervisor
# restarts it (systemd Restart=on-failure, Docker restart: on-failure).
EXIT_STUCK = 75

log = logging.getLogger("undolog.cli")

# An agent login registers its own tools, naming the compensation each call is undone by,
# and chooses the arguments and result its calls journal: a worker that walks a login's
# sessions runs the app's compensations on that login's word. Walking every login's
# sessions is the default still (a supervisor's unit that names no --owner keeps walking
# after an upgrade), said at start until the operator chooses.
EVERY_OWNER_WARNING = (
    "walking every login's sessions: any agent login can have this app's compensations "
    "run, with the arguments and results its own calls journaled. Name the agent logins "
    "whose compensations this app holds with --owner LOGIN (repeatable), or pass "
    "--all-owners if every agent login is trusted with them; a later release will ask for "
    "one of the two (docs/operations/worker.md)"
)


def configure_worker_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser("recover", parents=[common], help="fail expired sessions, list walks")
    p.add_argument(
        "--most",
        type=positive_int,
        metavar="N",
        help="fail at most N expired leases, the oldest first, and one batch more (50) at "
        "most in the last step, as a worker's pass (default: every one; under a flood of "
        "short-lease sessions that may never end)",
    )
    p.set_defaults(func=_cmd_recover, needed_role=OPERATOR)
    p = subparsers.add_parser(
        "worker", parents=[common], help="recover and walk until SIGTERM/SIGINT"
    )
    p.add_argument("--app", help="MODULE:OBJECT of the UndoLog instance")
    p.add_argument("--mcp-config", help="the MCP proxy's policy file: walk its sessions")
    p.add_argument(
        "--owner",
        action="append",
        metavar="ROLE",
        help="walk only the sessions begun by this login (repeatable; without it: every "
        "session, with a warning, or with --mcp-config the worker's own login's)",
    )
    p.add_argument(
        "--all-owners",
        action="store_true",
        help="walk every login's sessions, knowingly: any agent login may then have this "
        "app's compensations run with arguments of its choosing (silences the warning)",
    )
    p.add_argument(
        "--interval",
        type=non_negative_float,
        default=5.0,
        help="seconds between passes (default 5)",
    )
    p.add_argument(
        "--max-backoff",
        type=non_negative_float,
        default=30.0,
        metavar="SECONDS",
        help="longest pause between reconnection attempts (default 30)",
    )
    p.add_argument(
        "--compensation-timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="how long to wait for a compensation before its attempt is recorded as failed "
        "and the call left running, unrecorded (default, and at most: until shortly before "
        "its claim, undolog.claim_timeout, expires)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    p.add_argument(
        "--no-notify",
        action="store_true",
        help="do not deliver the notifications of approval requests (another worker, or "
        "`undolog notify`, does)",
    )
    p.set_defaults(func=_cmd_worker, needed_role=OPERATOR)


def _positive_seconds(value: str) -> float:
    number = non_negative_float(value)
    if number == 0:  # a compensation given no time at all would fail every attempt
        raise argparse.ArgumentTypeError("must be more than 0")
    return number


def _cmd_recover(args: argparse.Namespace) -> int:
    """Every active session whose lease expired is failed (with --most N, N at most, the
    oldest first), in transactions of at most saga.SWEEP_BATCH sessions each
    (saga.fail_expired_sessions, as walk.recover_due does in each worker pass): after a
    fleet of agents died, it says on standard error how far it got after each (not with
    --json, whose errors are JSON there), and whether --most stopped it with more
    expired; then saga.recover (with --most, failing one batch more at most) answers the
    sessions whose undo walk must run."""
    progress = None if args.json else _say_failed_so_far
    with connect(args) as conn:
        failed = saga.fail_expired_sessions(conn, most=args.most, on_progress=progress)
        if args.most is not None and len(failed) >= args.most and not args.json:
            say_progress(
                "recover",
                f"{len(failed):,} session(s) whose lease expired failed, as many as --most "
                "says: more may have expired (the oldest were failed first); the workers "
                "go on failing them, or run it again",
            )
        due = saga.recover(conn, limit=None if args.most is None else saga.SWEEP_BATCH)
    emit(
        args,
        [{"session_id": sid} for sid in due],
        ["session_id"],
        title="sessions whose undo walk must run:",
        whole=None,
    )
    return EXIT_OK


def _say_failed_so_far(count: int) -> None:
    say_progress(
        "recover", f"{count:,} session(s) whose lease expired failed so far (committed), going on"
    )


def _load_app(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError("--app takes MODULE:OBJECT, e.g. myagent.tools:ul")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--app {spec}: {exc}") from exc


def _cmd_worker(args: argparse.Namespace) -> int:
    if args.mcp_config is not None:  # the MCP proxy's compensations (undolog[mcp])
        try:
            from undolog.mcp_proxy.worker import load_worker_app
        except ImportError as exc:
            print(f"undolog: --mcp-config needs the mcp extra: {exc}", file=sys.stderr)
            return EXIT_USAGE
        app = load_worker_app(args.mcp_config)
    elif args.app is None:
        print("undolog: worker needs --app MODULE:OBJECT or --mcp-config FILE", file=sys.stderr)
        return EXIT_USAGE
    else:
        app = _load_app(args.app)
    if args.owner and args.all_owners:
        raise UsageError("--owner and --all-owners: name the logins to serve, or all of them")
    compensations = getattr(app, "compensations", None)
    if not isinstance(compensations, dict):
        raise UsageError(f"--app {args.app} is not an UndoLog (it has no compensations)")
    if not args.no_notify:
        try:  # a bad links key or lifetime would fail every delivery: say it at start
            links.check_env()
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    logs.basic_config(logging.INFO, "undolog worker: %(levelname)s %(message)s", sys.stderr)
    if args.app is not None and args.mcp_config is None and not (args.owner or args.all_owners):
        log.warning(EVERY_OWNER_WARNING)

    def walked(sid: uuid.UUID, state: str) -> None:
        line = json.dumps({"session_id": str(sid), "state": state}) if args.json else None
        print(line or f"session {sid}: {state}", flush=True)

    worker = Worker(
        lambda: connect_for_worker(args),
        compensations,
        interval=args.interval,
        max_backoff=args.max_backoff,
        on_walked=walked,
        # the proxy's worker walks the proxy's sessions, not another application's
        only_known=args.mcp_config is not None,
        # --owner ROLE: only those logins' sessions; the proxy's worker, by default, only
        # its own login's (run it as the proxy's login, or name that login); --all-owners
        # (or, for an app, neither, with the warning above): every login's
        owners=args.owner or ([] if args.mcp_config is not None and not args.all_owners else None),
        # the approval requests' notifications (undolog notifications): several workers
        # may deliver them at once, each claims its own
        notify=not args.no_notify,
        compensation_timeout=args.compensation_timeout,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.warning(
            "%s: finishing the entry in hand, then exiting; a compensation that has not "
            "returned within %.0f s is given up (its attempt recorded as failed, retried with "
            "the same undo_id) (again: exit at once)",
            name,
            STOP_GRACE,
        )
        # a second signal gets the default action: the process ends, the claim expires
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        worker.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        reached = worker.run(once=args.once)
    except WorkerStuck as exc:
        log.error("stuck (WorkerStuck): %s", exc)
        log.error("exiting with status %d, for its supervisor to restart it", EXIT_STUCK)
        return EXIT_STUCK
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if worker.stopping:
        log.info("stopped")
        return EXIT_OK
    return EXIT_OK if reached else EXIT_ERROR


# The server answered and refused this login or database: no retry fixes that (a server
# that is down or restarting is retried instead). libpq gives these as text only.
_REFUSED_LOGIN = re.compile(
    r'database "[^"]*" does not exist|role "[^"]*" does not exist'
    r"|password authentication failed|no password supplied|pg_hba\.conf rejects"
)


def connect_for_worker(args: argparse.Namespace) -> psycopg.Connection[Any]:
    """The worker's (and the notifier's) connection, kept for days: with TCP keepalives,
    so that a silent network partition ends it and the worker reconnects."""
    try:
        return connect(args, with_keepalives)
    except ConnectError as exc:
        if _REFUSED_LOGIN.search(str(exc)):
            raise WorkerConfigError(f"{exc}: fix --dsn / UNDOLOG_DSN") from exc
        # the worker's backoff retries psycopg's own class
        raise psycopg.OperationalError(str(exc)) from exc
    except UsageError as exc:
        raise WorkerConfigError(str(exc)) from exc
