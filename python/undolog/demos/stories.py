"""``make demo``: a small agent on UndoLog, told as four short stories.

The agent has four tools: a SAFE search, COMPENSABLE create_user and send_email, and an
IRREVERSIBLE payout. It runs on the database named by UNDOLOG_DSN (make demo starts a
throwaway PostgreSQL when none is given), installing the engine first:

1. a session that completes;
2. a session that fails, rolled back last action first;
3. a payout that waits for a human, approved from the command line, then run once;
4. an agent process that crashes mid-session and is restarted: what it already did comes
   back from the journal instead of running twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import psycopg

from undolog import (
    AwaitingApprovalError,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)
from undolog._conninfo import UNREACHABLE_HINT
from undolog.engine import session_state
from undolog.errors import UndoLogError, permission_hint
from undolog.ids import short_id
from undolog.migrations import MigrationError, describe_applied, migrate
from undolog.walk import CompensationCall


def say(text: str = "") -> None:
    print(text, flush=True)


def world(text: str) -> None:
    """Something happening in the outside world: a tool body or a compensation running."""
    say(f"      ~ {text}")


# --- the agent's tools, each declared with its tier by its author -----------------------


@undolog_tool(tier=ToolTier.SAFE)
def search_web(query: str) -> list[str]:
    world(f"search_web({query!r}) ran (SAFE: no journal)")
    return [f"result for {query}"]


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("delete_user", args={"soft": True}),
)
def create_user(email: str, name: str) -> dict[str, Any]:
    user_id = sum(email.encode()) % 9000 + 1000
    world(f"create_user ran: user {user_id} <{email}> created")
    return {"user_id": user_id, "email": email}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("retract_email"))
def send_email(to: str, subject: str) -> dict[str, Any]:
    if to.endswith(".invalid"):
        world(f"send_email to {to} failed: no such domain")
        raise ConnectionError(f"cannot deliver to {to}")
    world(f"send_email ran: {subject!r} sent to {to}")
    return {"message_id": f"<{abs(hash((to, subject))) % 10**6}@demo>"}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def process_payout(user_id: int, cents: int) -> dict[str, Any]:
    world(f"process_payout ran: {cents / 100:.2f} EUR paid to user {user_id}")
    return {"paid_cents": cents}


def build_app(dsn: str) -> UndoLog:
    ul = UndoLog(dsn)

    @ul.compensation("delete_user")
    def delete_user(call: CompensationCall) -> None:
        world(
            f"compensation delete_user(user {call.result['user_id']}, soft={call.args['soft']}) "
            f"ran, idempotency key {short_id(call.undo_id)}"
        )

    @ul.compensation("retract_email")
    def retract_email(call: CompensationCall) -> None:
        world(f"compensation retract_email(to {call.call_args['to']}) ran")

    return ul


class DemoStepFailed(Exception):
    """A command the demo runs failed; its own message says why."""


def cli(dsn: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "undolog.cli", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise DemoStepFailed(f"`undolog {' '.join(args)}` failed: {out.stderr.strip()}")
    return out.stdout


def onboard(email: str, name: str) -> dict[str, Any]:
    search_web(f"welcome template for {name}")
    user = create_user(email, name)
    send_email(email, f"Welcome, {name}")
    return user


def story_completes(ul: UndoLog) -> None:
    say("1. A session that completes")
    with ul.session(agent="onboarding") as session:
        onboard("ada@example.com", "Ada")
    say(f"   session {short_id(session.session_id)}: completed\n")


def story_rolls_back(ul: UndoLog, conn: psycopg.Connection[Any]) -> None:
    say("2. A session that fails: what it did is undone, last action first")
    try:
        with ul.session(agent="onboarding") as session:
            onboard("bob@example.com", "Bob")
            send_email("bob@mail.invalid", "Your account")  # fails: never took effect
    except ConnectionError as exc:
        say(f"   the agent failed: {exc}")
    state = session_state(conn, session.session_id)
    say(
        f"   session {short_id(session.session_id)}: {state}"
        " (the failed send was skipped: it never took effect)\n"
    )


def story_approval(ul: UndoLog, dsn: str) -> None:
    say("3. An irreversible payout waits for a human")
    session_id = uuid.uuid4()

    def pay_out() -> None:
        with ul.session(session_id, agent="payouts"):
            user = create_user("cy@example.com", "Cy")
            process_payout(user["user_id"], 5000)

    try:
        pay_out()
    except AwaitingApprovalError as waiting:
        say(
            f"   AwaitingApprovalError: approval {waiting.approval_id} requested; "
            "the payout body has not run"
        )
        say("   $ undolog approvals list")
        for line in cli(dsn, "approvals", "list").splitlines():
            say(f"     {line}")
        say(f"   $ undolog approvals approve {waiting.approval_id} --by finance-lead")
        decided = cli(
            dsn,
            "approvals",
            "approve",
            str(waiting.approval_id),
            "--by",
            "finance-lead",
            "--reason",
            "verified",
        )
        for line in decided.splitlines():  # the decision, then what it was about
            say(f"     {line}")
    say("   the agent makes the same calls again: create_user replays, the payout runs once")
    pay_out()
    say("")


def crash_midway(dsn: str, session_id: uuid.UUID) -> None:
    """Run in a child process: two steps, then the process dies without cleanup."""
    ul = build_app(dsn)
    with ul.session(session_id, agent="crashy"):
        create_user("dee@example.com", "Dee")
        send_email("dee@example.com", "Welcome, Dee")
        say("      ! the agent process crashes here (os._exit)")
        os._exit(1)


def story_crash_and_replay(ul: UndoLog, dsn: str) -> None:
    say("4. The agent crashes mid-session and is restarted with the same session id")
    session_id = uuid.uuid4()
    subprocess.run(
        [sys.executable, "-m", "undolog.demos", "--crash", str(session_id)],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        check=False,
    )
    say("   restarted: steps 0 and 1 come from the journal, their bodies do not run again")
    with ul.session(session_id, agent="crashy"):
        user = create_user("dee@example.com", "Dee")
        say(f"      create_user -> {user} (replayed from cache)")
        send_email("dee@example.com", "Welcome, Dee")
        search_web("next steps for Dee")
    say("")


def summary(dsn: str) -> None:
    say("What the journal says ($ undolog sessions list):")
    for line in cli(dsn, "sessions", "list").splitlines():
        say(f"  {line}")
    sessions = json.loads(cli(dsn, "sessions", "list", "--json", "--state", "compensated"))
    if sessions:
        sid = sessions[0]["session_id"]
        say(f"\nThe rolled-back session's timeline ($ undolog sessions show {short_id(sid)}):")
        for line in cli(dsn, "sessions", "show", sid).splitlines()[3:]:
            say(f"  {line}")


def run(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = migrate(conn)
        say(f"engine installed: {', '.join(describe_applied(applied)) or 'already up to date'}\n")
        ul = build_app(dsn)
        story_completes(ul)
        story_rolls_back(ul, conn)
        story_approval(ul, dsn)
        story_crash_and_replay(ul, dsn)
        summary(dsn)


def _described(exc: Exception) -> tuple[str, str | None]:
    """The database's own words (a failed migration's too) and what to do next."""
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(cause, psycopg.Error):
        return str(exc), None
    message = cause.diag.message_primary or " ".join(str(cause).split())
    if cause.sqlstate == "42501":
        return message, permission_hint(message)
    if isinstance(cause, psycopg.OperationalError) and cause.sqlstate is None:
        # no server answered UNDOLOG_DSN
        return (
            message,
            f"{UNREACHABLE_HINT}; or unset UNDOLOG_DSN, and make demo starts a throwaway one",
        )
    return message, cause.diag.message_hint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="undolog.demos")
    parser.add_argument("--crash", type=uuid.UUID, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dsn = os.environ.get("UNDOLOG_DSN")
    if not dsn:
        print("UNDOLOG_DSN is not set (make demo starts a throwaway PostgreSQL)", file=sys.stderr)
        return 2
    if args.crash:
        crash_midway(dsn, args.crash)
    try:
        run(dsn)
    except DemoStepFailed as exc:
        print(f"demo stopped: {exc}", file=sys.stderr)
        return 1
    except (psycopg.Error, UndoLogError, MigrationError) as exc:
        # e.g. a login that may not install the engine: say what to do, not a traceback
        message, hint = _described(exc)
        print(f"demo stopped: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
