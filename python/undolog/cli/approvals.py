"""``undolog approvals``: the requests waiting for a human, and a human's decision.

``approve --args JSON`` (or ``--args-file F``, ``-`` for standard input) approves the
call with these arguments instead of the requested ones: edit, then approve
(undolog.approve_edited). The journal keeps both, who edited (``--by``) and why
(``--reason``); the agent's call then runs once, with the approved arguments."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from undolog import approvals
from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    Parser,
    Subparsers,
    UsageError,
    connect,
    positive_int,
    query,
    timestamptz,
)
from undolog.cli._ids import resolve_id
from undolog.cli._output import emit, plain, print_json, printable, say_progress
from undolog.errors import UnknownApproval
from undolog.names import spell_spaces
from undolog.queries import QUERIES
from undolog.signature import NotAsTyped, loads_as_typed

# `approvals list` shows the oldest this many unless --limit says otherwise: thousands may
# wait (each login up to undolog.max_pending_approvals), and a person decides from the top.
LIST_LIMIT = 50


def configure_approvals_parser(subparsers: Subparsers, common: Parser) -> None:
    appr = subparsers.add_parser(
        "approvals", parents=[common], help="approval requests"
    ).add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    p = appr.add_parser(
        "list",
        parents=[common],
        help="requests waiting for a human, oldest first",
        description="The requests waiting for a human, oldest first, at most --limit of "
        "them; when more wait, a line on standard error says how many (not with --json).",
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=LIST_LIMIT,
        help=f"at most this many, the oldest (default {LIST_LIMIT})",
    )
    p.set_defaults(func=_cmd_approvals_list, needed_role="undolog_approver (or undolog_operator)")
    p = appr.add_parser(
        "show",
        parents=[common],
        help="one waiting request whole: its arguments uncut, who asked, until when",
        description="A pending request as a person deciding it must read it: the tool, "
        "its step and tier, its whole arguments (the list cuts them at its column's "
        "width), the session, the login that asked and the name the agent gives itself, "
        "what the agent says the session is for, when it asked and until when a decision "
        "is taken, and the commands that decide it (the dashboard's Edit, then approve "
        "page).",
    )
    p.add_argument("approval", metavar="APPROVAL", help="approval id or a unique prefix")
    p.set_defaults(func=_cmd_approvals_show, needed_role="undolog_approver (or undolog_operator)")
    p = appr.add_parser(
        "decided",
        parents=[common],
        help="past decisions, newest first: approved, rejected, expired; who and why",
        description="Every decided request, newest decision first (the dashboard's Past "
        "decisions): the decision and what became of the call, the tool and its "
        "arguments (and the ones approved instead, for an edited approval), who asked "
        "(the agent's claimed name, its logins), who decided (the name given, the login "
        "that recorded it) and why, and how long it waited.",
    )
    p.add_argument(
        "--since",
        type=timestamptz,
        default=None,
        help="only decisions from this instant on (ISO 8601 with a zone, e.g. 2026-12-01Z)",
    )
    p.add_argument("--mine", action="store_true", help="only the decisions this login recorded")
    p.add_argument("--limit", type=positive_int, default=50, help="at most this many (default 50)")
    p.set_defaults(
        func=_cmd_approvals_decided, needed_role="undolog_approver (or undolog_operator)"
    )
    for name, decide in (("approve", approvals.approve), ("reject", approvals.reject)):
        p = appr.add_parser(name, parents=[common], help=f"{name} a request")
        p.add_argument("approval", metavar="APPROVAL", help="approval id or a unique prefix")
        p.add_argument("--by", required=True, help="who decides (recorded)")
        p.add_argument("--reason", help="why (recorded)")
        if name == "approve":
            edit = p.add_mutually_exclusive_group()
            edit.add_argument(
                "--args",
                dest="edited_args",
                metavar="JSON",
                help="approve the call with these arguments instead (a JSON object "
                "naming the same arguments as the call)",
            )
            edit.add_argument(
                "--args-file",
                dest="edited_args_file",
                metavar="FILE",
                help="as --args, read from FILE (- for standard input)",
            )
        p.set_defaults(func=_decide(decide), needed_role="undolog_approver")
    p = appr.add_parser(
        "expire",
        parents=[common],
        help="close every request past its deadline as expired (operator; the worker "
        "does it on each pass)",
    )
    p.set_defaults(func=_cmd_approvals_expire, needed_role=OPERATOR)


# The table a person reads: who asked is the login (the database's word: owner_role, and
# requested_by when another login made the call), beside the name the agent gave itself
# (its claim: "payroll-team (trusted)" is any agent's to choose). Names are spelled as
# printable(name=True) spells them: a lookalike is never read as the tool it mimics.
APPROVAL_COLUMNS = [
    "approval_id",
    "tool_name",
    "args",
    "login",
    "agent_claims",
    "session_id",
    "age",
    "expires_at",
    "expired",
]
# --json: the view's own names and values
APPROVAL_JSON_COLUMNS = [
    "approval_id",
    "tool_name",
    "args",
    "agent",
    "owner_role",
    "requested_by",
    "session_id",
    "age",
    "expires_at",
    "expired",
]


def _cmd_approvals_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = query(conn, QUERIES["pending_approvals"], {"head": None, "limit": args.limit})
    if args.json:
        emit(args, rows, APPROVAL_JSON_COLUMNS)
        return EXIT_OK
    emit(
        args,
        [_as_read(r) for r in rows],
        APPROVAL_COLUMNS,
        whole="undolog approvals show ID prints a request whole",
    )
    # total was counted in the same statement (one snapshot) as the rows shown
    more = int(rows[0]["total"]) - len(rows) if rows else 0
    if more > 0:
        print(
            f"hint: {more:,} more waiting, not shown (the oldest {len(rows):,} are); "
            f"--limit {len(rows) + more} lists them all",
            file=sys.stderr,
        )
    return EXIT_OK


def _cmd_approvals_show(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        approval_id = resolve_id(conn, "approval", args.approval)
        rows = query(conn, QUERIES["dashboard_edit_of"], {"approval_id": approval_id})
    if not rows:
        gone = UnknownApproval(f"approval {approval_id} is not waiting for a decision")
        gone.hint = (
            "undolog approvals decided lists the decided and expired requests; undolog "
            "approvals list the waiting ones."
        )
        raise gone
    (row,) = rows
    if args.json:
        print_json({key: plain(value) for key, value in row.items()})
        return EXIT_OK
    # First what nobody but the engine wrote: the id and the commands that decide it.
    # Below come the agent's words, which may be written to look like these lines.
    print(f"approval {approval_id}: waiting for a decision")
    print(f"  approve: undolog approvals approve {approval_id} --by NAME [--args JSON]")
    print(f"  reject:  undolog approvals reject {approval_id} --by NAME --reason WHY")
    deadline = "none" if row["expires_at"] is None else str(row["expires_at"])
    expired = " (past it: approve is refused; it expires)" if row["expired"] else ""
    print(f"  asked:   {row['requested_at']}; decide by: {deadline}{expired}")
    for line in _what_was_decided(row, None, whole=True):
        print(f"  {line}")
    if row["purpose"] is not None:
        purpose = _unforgeable(json.dumps(row["purpose"]))
        print(f"  the agent says the session is for: {purpose} (its claim)")
    return EXIT_OK


def _unforgeable(text: str) -> str:
    """JSON text as ``approvals show`` prints it, after its indentation: every space but
    a single one between two other characters written ``\\u0020`` (inside a JSON string,
    the same value). A value padded with spaces, which a terminal wraps, can then never
    start a line of its own that reads like the command lines above it."""
    body = text.lstrip(" ")
    return text[: len(text) - len(body)] + printable(spell_spaces(body))


def _login(row: dict[str, Any]) -> str | None:
    """Who asked, as the database knows it: the session's login, and the login that made
    the call when it is another one."""
    owner, made_by = row.get("owner_role"), row.get("requested_by")
    if made_by is None or made_by == owner:
        return owner
    return f"{owner} (call made by {made_by})"


def _as_read(row: dict[str, Any]) -> dict[str, Any]:
    """A request's row as its table shows it: the names spelled for an approver, the
    login beside the agent's claim, and for an edited approval the arguments approved."""
    out = dict(row)
    for key in ("tool_name", "agent"):
        if out.get(key) is not None:
            out[key] = printable(str(out[key]), name=True)
    out["login"] = _login(row)
    out["agent_claims"] = out.get("agent")
    if row.get("approved_args") is not None:
        # ASCII (\u escapes), as the requested args' cell beside it
        out["approved_args"] = "edited: " + json.dumps(row["approved_args"], separators=(",", ":"))
    return out


DECIDED_COLUMNS = [
    "approval_id",
    "decided_at",
    "decision",
    "effect_state",
    "tool_name",
    "args",
    "approved_args",
    "login",
    "agent_claims",
    "decided_by",
    "decided_role",
    "reason",
    "waited",
]
# --json carries the view's own names and values
DECIDED_JSON_COLUMNS = [
    "approval_id",
    "decided_at",
    "decision",
    "effect_state",
    "tool_name",
    "args",
    "agent",
    "owner_role",
    "decided_by",
    "decided_role",
    "reason",
    "waited",
    "approved_args",
    "session_id",
    "step_index",
    "requested_by",
    "requested_at",
]


def _cmd_approvals_decided(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = query(
            conn,
            QUERIES["decided_approvals"],
            {"since": args.since, "mine": args.mine, "limit": args.limit},
        )
    if args.json:
        emit(args, rows, DECIDED_JSON_COLUMNS)
    else:
        emit(args, [_as_read(r) for r in rows], DECIDED_COLUMNS)
    return EXIT_OK


def _edited_args(args: argparse.Namespace) -> Any:
    """The edited arguments of ``approve --args``/``--args-file`` (None: none given), as
    parsed JSON: whether it is an object that fits the call is the engine's to say."""
    text: str | None = getattr(args, "edited_args", None)
    path: str | None = getattr(args, "edited_args_file", None)
    if path is not None:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--args-file {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:  # JSON is UTF-8 text (RFC 8259)
            byte = exc.object[exc.start : exc.start + 1].hex()
            raise UsageError(
                f"--args-file {path}: not UTF-8 text ({exc.reason}: 0x{byte})"
            ) from exc
    if text is None:
        return None
    flag = "--args" if path is None else f"--args-file {path}"
    try:
        # what was typed is what is approved, with no page to read it on first: a key
        # named twice, or a number that parses to another, decides nothing
        return loads_as_typed(text)
    except NotAsTyped as exc:
        raise UsageError(f"{flag}: {exc}: nothing was decided") from exc
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{flag} is not JSON: {exc}") from exc


def _cmd_approvals_expire(args: argparse.Namespace) -> int:
    """Every pending request past its deadline becomes expired, and its session goes on
    as after a rejection (undolog.expire_approvals). In transactions of at most
    approvals.SWEEP_BATCH requests each: a long sweep says on standard error how far it
    got after each (not with --json, whose errors are JSON there), since the list of
    what it expired comes only at its end."""
    with connect(args) as conn:
        expired = approvals.expire_approvals(
            conn, on_progress=None if args.json else _say_expired_so_far
        )
    emit(
        args,
        [{"approval_id": a, "state": "expired"} for a in expired],
        EXPIRED_COLUMNS,
        whole=None,
    )
    return EXIT_OK


EXPIRED_COLUMNS = ["approval_id", "state"]


def _say_expired_so_far(count: int) -> None:
    say_progress("approvals expire", f"{count:,} expired so far (committed), going on")


def _decide(decide: Callable[..., str]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        edited = _edited_args(args)
        with connect(args) as conn:
            approval_id = resolve_id(conn, "approval", args.approval)
            # what is decided, read before (the request leaves the pending view): an id
            # prefix names a call the person may not have in mind, so the answer says it
            asked = query(conn, QUERIES["dashboard_edit_of"], {"approval_id": approval_id})
            if edited is None:
                state = decide(conn, approval_id, args.by, args.reason)
            else:
                state = decide(conn, approval_id, args.by, args.reason, args=edited)
        if args.json:
            out: dict[str, Any] = {"approval_id": str(approval_id), "state": state}
            if edited is not None:
                out["approved_args"] = edited
            print(json.dumps(out))
            return EXIT_OK
        if edited is not None:
            print(f"approval {approval_id}: {state}, with edited args")
        else:
            print(f"approval {approval_id}: {state}")
        for line in _what_was_decided(asked[0] if asked else None, edited):
            print(f"  {line}")
        return EXIT_OK

    return run


def _what_was_decided(row: dict[str, Any] | None, edited: Any, *, whole: bool = False) -> list[str]:
    """The call a decision was about, as a person reads it: the tool and its step, the
    arguments it runs with (the edited ones, the requested ones beside), its session and
    who asked (the login, then the agent's claim). ``whole``: the arguments indented, a
    line a member, as ``approvals show`` prints them to be read before deciding."""
    if row is None:
        return []

    def compact(value: Any) -> str:
        # ASCII (\u escapes), as show's lines and the list's cells: a look-alike digit or
        # letter ("acct-1234" in mathematical digits, U+1D7F7...) is seen as one
        return printable(json.dumps(value, separators=(",", ":")))

    tool = printable(str(row["tool_name"]), name=True)
    lines = [f"tool:    {tool} (step {row['step_index']}, {row['tier'] or 'tier unknown'})"]
    if whole:
        # ASCII (\u escapes), as the list's cells: a lookalike letter is seen as one
        indented = json.dumps(row["args"], indent=2)
        lines.append("args:")
        lines.extend(f"  {_unforgeable(line)}" for line in indented.splitlines())
    elif edited is None:
        lines.append(f"args:    {compact(row['args'])}")
    else:
        lines.append(f"args:    {compact(edited)} (edited; asked {compact(row['args'])})")
    lines.append(f"session: {row['session_id']}")
    agent = "-" if row["agent"] is None else printable(str(row["agent"]), name=True)
    login = printable(str(_login(row)))
    lines.append(f"asked by login {login}; the agent calls itself {agent} (its claim)")
    return lines
