"""``undolog sessions``: list and show sessions, and an operator's actions on one
(resume, retry, abandon, rollback, undo-to)."""

from __future__ import annotations

import argparse
import datetime
import json
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from undolog import saga
from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    PERSON,
    Parser,
    Subparsers,
    connect,
    positive_int,
    query,
    timestamptz,
)
from undolog.cli._ids import not_found, resolve_id
from undolog.cli._output import emit, plain, print_json, printable
from undolog.engine import SESSION_STATES
from undolog.errors import InvalidStateTransition
from undolog.queries import QUERIES
from undolog.session_filter import SessionFilter, filter_params, id_prefix_range, sessions_query

SESSION_HELP = "session id, a unique prefix of it, or …its end"


def configure_sessions_parser(subparsers: Subparsers, common: Parser) -> None:
    sessions = subparsers.add_parser(
        "sessions", parents=[common], help="list, show and act on sessions"
    ).add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    p = sessions.add_parser("list", parents=[common], help="sessions, newest first")
    p.add_argument("--state", choices=SESSION_STATES, help="only sessions in this state")
    p.add_argument("--agent", help="only sessions of this agent (its claimed name, exactly)")
    p.add_argument(
        "--since",
        type=timestamptz,
        metavar="INSTANT",
        help="only sessions created at or after this instant: ISO 8601 with a zone, "
        "e.g. 2025-01-01Z",
    )
    p.add_argument(
        "--until",
        type=timestamptz,
        metavar="INSTANT",
        help="only sessions created before this instant (as --since)",
    )
    p.add_argument(
        "--id-prefix",
        type=_id_prefix,
        metavar="HEX",
        help="only sessions whose id starts so: 4 to 32 hex digits (dashes allowed)",
    )
    p.add_argument("--tool", help="only sessions one of whose calls used this tool")
    p.add_argument(
        "--limit",
        type=_list_limit,
        default=50,
        help=f"at most this many, 1 to {LIST_LIMIT_MAX:,} (default 50)",
    )
    p.set_defaults(func=_cmd_sessions_list)
    p = sessions.add_parser("show", parents=[common], help="one session and its timeline")
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.set_defaults(func=_cmd_sessions_show)
    for action, summary, reason_required in (
        ("resume", "move a halted walk on past the entry it stopped at", False),
        ("retry", "give the compensation a halted walk stopped at one more attempt", False),
        ("abandon", "close a halted session as resolved by hand (it stays halted)", True),
        ("rollback", "fail an active or waiting session so that its work is undone", True),
    ):
        p = sessions.add_parser(action, parents=[common], help=summary)
        p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
        p.add_argument("--by", required=True, help="who acts (recorded)")
        p.add_argument(
            "--reason",
            required=reason_required,
            help="why (recorded)" + ("; required" if reason_required else ""),
        )
        if action in SEEN_ACTIONS:
            p.add_argument(
                "--seen",
                type=_seen,
                metavar="UPDATED_AT",
                help="the session's updated_at as `sessions show` printed it: act only if the "
                "session is still as it was then (checked under its lock, in the action's "
                "transaction); refused (UL001, exit 1) when another operator or its walk "
                "moved it since",
            )
        # rollback: a person stops a session, an approver as well (sql/grants.sql)
        role = OPERATOR if action in SEEN_ACTIONS else PERSON
        p.set_defaults(func=_operator_action(action), needed_role=role)
    p = sessions.add_parser(
        "undo-to",
        parents=[common],
        help="undo an active session's calls down to a step, last first; it then goes on",
        description="Undo an active session's calls from the latest down to and including "
        "STEP, last first, through the undo walk (`undolog worker` runs it), after which "
        "the session goes on: its next calls take later steps, and a replay of an undone "
        "step is refused (UL022). An irreversible call in the range halts the walk there, "
        "as in any walk. Prints what will be undone, in that order.",
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.add_argument("step", metavar="STEP", type=_step, help="the lowest step to undo")
    p.add_argument("--reason", required=True, help="why (recorded); required")
    p.add_argument("--by", help="who acts (recorded; default: the login)")
    p.add_argument(
        "--plan", action="store_true", help="only print what would be undone; change nothing"
    )
    p.set_defaults(func=_cmd_sessions_undo_to, needed_role=PERSON)


# The actions on a halted session that take --seen (undolog.expect_session).
SEEN_ACTIONS = frozenset({"resume", "retry", "abandon"})


def _seen(value: str) -> datetime.datetime:
    try:
        seen = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time as `sessions show` prints it: {value!r}"
        ) from None
    if seen.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} has no time zone: pass updated_at as `sessions show` prints it"
        )
    return seen


SESSION_COLUMNS = [
    "session_id",
    "agent",
    "state",
    "calls",
    "committed_calls",
    "undone_calls",
    "replays",
    "created_at",
    "error",
    "needs_attention",
]
# --json carries these too: they tell what "halted" means for this session
SESSION_JSON_COLUMNS = [
    *SESSION_COLUMNS,
    "compensating_calls",
    "compensation_failed_calls",
    "awaiting_approval_calls",
    "resolved_by",
    "resolved_at",
    "resolution",
    "attention_reason",
]


def _shown_state(row: dict[str, Any]) -> str:
    """Halted sessions an operator abandoned (resolved) and ones still waiting for one
    need different things from a person: the table says which."""
    if row["state"] != "halted":
        return str(row["state"])
    return "halted (abandoned)" if row.get("resolved_at") else "halted (needs operator)"


# The most sessions one `sessions list` prints: its query's LIMIT is an integer (a larger
# one failed, "integer out of range"), and a list longer than this is a job for SQL.
LIST_LIMIT_MAX = 10_000


def _list_limit(value: str) -> int:
    number = positive_int(value)
    if number > LIST_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be from 1 to {LIST_LIMIT_MAX}, not {number}")
    return number


def _id_prefix(value: str) -> str:
    if id_prefix_range(value) is None:
        raise argparse.ArgumentTypeError(
            f"not a session id prefix (4 to 32 hex digits, dashes allowed): {value!r}"
        )
    return value


# The dashboard's Sessions page filters with the same query and parameters
# (undolog.session_filter): one rule for both faces.
def _cmd_sessions_list(args: argparse.Namespace) -> int:
    params = filter_params(
        SessionFilter(
            state=args.state,
            # stripped, blank meaning no filter, as the Sessions page reads its fields
            agent=(args.agent or "").strip() or None,
            since=args.since,
            until=args.until,
            id_prefix=args.id_prefix,
            tool=(args.tool or "").strip() or None,
        )
    )
    statement = sql.SQL(QUERIES["sessions_overview_filtered"]).format(page=sessions_query(params))
    with connect(args) as conn:
        rows = query(
            conn, statement, {**params, "after_at": None, "after_id": None, "limit": args.limit}
        )
    if args.json:
        emit(args, rows, SESSION_JSON_COLUMNS)
    else:
        emit(args, [{**r, "state": _shown_state(r)} for r in rows], SESSION_COLUMNS)
    return EXIT_OK


TIMELINE_COLUMNS = [
    "at",
    "step_index",
    "tool_name",
    "tier",
    "event",
    "from_state",
    "to_state",
    "actor",
    "detail",
]


def _cmd_sessions_show(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        sid = resolve_id(conn, "session", args.session)
        session = query(conn, QUERIES["session_overview"], {"session_id": sid})
        if not session:
            raise not_found("session", f"unknown session {sid} (or not yours to read)")
        timeline = query(conn, QUERIES["session_timeline"], {"session_id": sid})
    if args.json:
        print_json(
            {
                "session": {k: plain(v) for k, v in session[0].items()},
                "timeline": [{c: plain(r[c]) for c in TIMELINE_COLUMNS} for r in timeline],
            }
        )
        return EXIT_OK
    s = session[0]
    print(
        printable(
            f"session {s['session_id']}  agent={s['agent'] or '-'}  state={_shown_state(s)}  "
            f"calls={s['calls']}  owner={s['owner_role']}"
        )
    )
    if s["error"]:
        print(f"error: {printable(s['error'])}")
    if s.get("needs_attention"):  # a result arrived after its compensation: see README
        print(f"NEEDS ATTENTION: {printable(s['attention_reason'])}")
    if s.get("resolved_at"):
        by, why = printable(s["resolved_by"]), printable(s["resolution"])
        print(f"abandoned by {by} at {s['resolved_at']}: {why}")
    updated = s["updated_at"].isoformat()
    if s["state"] == "halted" and not s.get("resolved_at"):
        # what an operator's resume, retry or abandon passes to act on this state only
        print(f"updated_at: {updated}  (--seen {updated}: act on this state only)")
    else:
        print(f"updated_at: {updated}")
    emit(args, timeline, TIMELINE_COLUMNS, title="\ntimeline:")
    if any(r["from_state"] == "executing" and r["to_state"] == "pending" for r in timeline):
        # the engine's word for a call that raised reads as "not started yet" otherwise
        print("(executing → pending: the call raised, took no effect, and may be made again)")
    return EXIT_OK


def _halted_entry(conn: psycopg.Connection[Any], sid: uuid.UUID) -> uuid.UUID:
    """The undo entry a halted session stopped at (what `sessions retry` retries)."""
    rows = query(conn, QUERIES["session_halt"], {"session_id": sid})
    if not rows:
        raise not_found("session", f"unknown session {sid} (or not yours to read)")
    if rows[0]["halt_undo_id"] is None:
        # a state conflict (UL001, exit 1), as `sessions resume|abandon` of that session
        not_halted = InvalidStateTransition(
            f"session {sid} is {rows[0]['state']}, not halted at a compensation: nothing to retry"
        )
        not_halted.hint = (
            "Operators act only on halted sessions: undolog sessions show SESSION says its state."
        )
        raise not_halted
    return uuid.UUID(str(rows[0]["halt_undo_id"]))


def _operator_action(action: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        seen: datetime.datetime | None = getattr(args, "seen", None)
        with connect(args) as conn, conn.transaction():
            sid = resolve_id(conn, "session", args.session)
            if seen is not None:  # the session stays locked until the action commits
                saga.expect_session(conn, sid, seen)
            if action == "resume":
                state = saga.resume_session(conn, sid, args.by, args.reason)
            elif action == "retry":
                undo_id = _halted_entry(conn, sid)
                state = saga.retry_compensation(conn, undo_id, args.by, args.reason)
            elif action == "abandon":
                state = saga.abandon_session(conn, sid, args.by, args.reason)
            else:
                state = saga.rollback_session(conn, sid, args.by, args.reason)
        if args.json:
            print(json.dumps({"session_id": str(sid), "action": action, "state": state}))
        else:
            print(f"session {sid}: {state}")
        return EXIT_OK

    return run


def _step(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a step index: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"a step index is 0 or more, not {number}")
    return number


PLAN_COLUMNS = ["order", "step_index", "tool_name", "tier", "effect_state", "action"]


def _plan_moved(sid: uuid.UUID, step: int, planned: int) -> InvalidStateTransition:
    moved = InvalidStateTransition(
        f"session {sid} moved on while its plan was read (the walk would now undo calls "
        f"other than the {planned} planned): nothing changed"
    )
    moved.hint = (
        f"Look at the plan again: undolog sessions undo-to {sid} {step} --plan; then run "
        "undo-to again if it is still what you want undone."
    )
    return moved


def _cmd_sessions_undo_to(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        sid = resolve_id(conn, "session", args.session)
        plan = saga.rollback_to_plan(conn, sid, args.step)
        state = None
        if not args.plan:
            # what is printed is what the walk undoes: a call the agent journals between
            # the plan's read and rollback_to's lock is not undone unseen (refused, as the
            # dashboard's Undo from here asks again)
            planned = [p.undo_id for p in plan]
            state = saga.rollback_to_as_planned(conn, sid, args.step, planned, args.reason, args.by)
            if state is None:
                raise _plan_moved(sid, args.step, len(plan))
    rows = [
        {
            "order": i,
            "step_index": p.step_index,
            "tool_name": p.tool_name,
            "tier": p.tier,
            "effect_state": p.effect_state,
            "action": p.action,
        }
        for i, p in enumerate(plan, 1)
    ]
    if args.json:
        print_json({"session_id": str(sid), "action": "undo-to", "state": state, "plan": rows})
        return EXIT_OK
    emit(
        args,
        rows,
        PLAN_COLUMNS,
        title="to undo, in this order:" if rows else "",
        whole=None if state is None else f"undolog sessions show {sid} --json prints them whole",
    )
    if state is None:
        print(f"session {sid}: nothing changed (--plan)")
    else:
        print(f"session {sid}: {state} (the walk undoes these, then the session goes on)")
    return EXIT_OK
