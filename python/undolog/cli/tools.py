"""``undolog tools``: the tool registry (each tool's tier and compensation), and an
operator's registering of an agent login's tool (before the agent first runs it) and
retiring of a registration."""

from __future__ import annotations

import argparse
import json

from psycopg.types.json import Jsonb

from undolog.cli._common import (
    EXIT_OK,
    OPERATOR,
    NotFound,
    Parser,
    Subparsers,
    UsageError,
    connect,
    query,
)
from undolog.cli._output import emit
from undolog.queries import QUERIES


def configure_tools_parser(subparsers: Subparsers, common: Parser) -> None:
    tools = subparsers.add_parser(
        "tools", parents=[common], help="the tool registry (tier and compensation per tool)"
    ).add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    p = tools.add_parser("list", parents=[common], help="registered tools, by owner")
    p.add_argument("--owner", help="only this login's tools")
    p.add_argument("--all", action="store_true", help="retired registrations too")
    p.set_defaults(func=_cmd_tools_list)
    p = tools.add_parser(
        "register",
        parents=[common],
        help="register an agent login's tool, its tier and compensation (operator)",
    )
    p.add_argument("tool", metavar="TOOL", help="the tool's name, as the agent calls it")
    p.add_argument("--owner", required=True, help="the agent login the tool is for")
    p.add_argument(
        "--tier",
        required=True,
        choices=("compensable", "irreversible"),
        help="compensable (journaled, undone by its compensation) or irreversible (runs "
        "once a person approves)",
    )
    p.add_argument(
        "--compensation",
        metavar="JSON",
        help='what undoes a compensable call, e.g. \'{"name": "delete_user"}\' (a '
        "compensation's name, and optionally static args and max_attempts)",
    )
    p.add_argument(
        "--on-reject",
        choices=("fail_session", "continue"),
        default="fail_session",
        help="what a person's refusal of an irreversible call does: undo the session "
        "(fail_session, the default) or let the agent go on (continue)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="retire the tool's live registration if it differs, and register this one, "
        "in one transaction (with --by and --reason, recorded): retired and registered in "
        "two commands, the agent (its binding registers again on its next call) takes the "
        "name back in between",
    )
    p.add_argument("--by", help="with --replace: who decides (recorded)")
    p.add_argument("--reason", help="with --replace: why (recorded)")
    p.set_defaults(func=_cmd_tools_register, needed_role=OPERATOR)
    p = tools.add_parser(
        "retire", parents=[common], help="end a tool's registration (operator; recorded)"
    )
    p.add_argument("tool", metavar="TOOL", help="the tool's name")
    p.add_argument("--owner", required=True, help="the login the tool is registered for")
    p.add_argument("--by", required=True, help="who decides (recorded)")
    p.add_argument("--reason", required=True, help="why (recorded)")
    p.set_defaults(func=_cmd_tools_retire, needed_role=OPERATOR)


TOOL_COLUMNS = [
    "tool_id",
    "owner_role",
    "tool_name",
    "tier",
    "compensation",
    "registered_at",
    "live",
    "retired_by",
    "retire_reason",
]


def _cmd_tools_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = query(conn, QUERIES["registered_tools"], {"owner": args.owner, "all": args.all})
    emit(args, rows, TOOL_COLUMNS)
    return EXIT_OK


def _cmd_tools_register(args: argparse.Namespace) -> int:
    """An operator pins an agent login's tool (its tier and compensation), so that the
    agent's own registration must agree with it (UL018 otherwise)."""
    compensation = None
    if args.compensation is not None:
        try:
            compensation = json.loads(args.compensation)
        except ValueError as exc:
            raise UsageError(f"--compensation is not JSON: {exc}") from exc
    if args.replace and not (args.by and args.reason):
        raise UsageError("--replace retires the live registration: name --by and --reason")
    if not args.replace and (args.by or args.reason):
        raise UsageError("--by and --reason go with --replace")
    params = {
        "tool_name": args.tool,
        "tier": args.tier,
        "compensation": None if compensation is None else Jsonb(compensation),
        "owner": args.owner,
        "on_reject": args.on_reject,
    }
    retired = None
    with connect(args) as conn:
        if args.replace:
            # One engine function (undolog.replace_tool, as the dashboard's form): retired
            # and registered in one transaction, an agent's register_tool of the name
            # waits for it, then finds this registration, never the gap between the two.
            row = query(
                conn,
                QUERIES["replace_tool_for"],
                {**params, "by": args.by, "reason": args.reason},
            )[0]
            tool_id, retired = row["tool_id"], row["retired"]
        else:
            tool_id = query(conn, QUERIES["register_tool_for"], params)[0]["tool_id"]
    if args.json:
        answer: dict[str, str | None] = {"tool_id": str(tool_id)}
        if args.replace:
            answer["retired"] = None if retired is None else str(retired)
        print(json.dumps(answer))
    elif retired is not None:
        print(f"tool {args.tool} of {args.owner}: registered ({tool_id}), replacing {retired}")
    else:
        print(f"tool {args.tool} of {args.owner}: registered ({tool_id})")
    return EXIT_OK


def _cmd_tools_retire(args: argparse.Namespace) -> int:
    """An operator ends a live registration (recorded), so that its author may register
    the tool again with another tier or compensation."""
    with connect(args) as conn:
        rows = query(
            conn, QUERIES["live_tool_registration"], {"owner": args.owner, "tool_name": args.tool}
        )
        if not rows:
            raise NotFound(
                f"no live registration of {args.tool!r} for {args.owner!r}",
                f"Check the name: undolog tools list --owner {args.owner} lists that "
                "login's live tools (--all the retired ones too).",
            )
        tool_id = rows[0]["tool_id"]
        retired = query(
            conn,
            QUERIES["retire_tool"],
            {"tool_id": tool_id, "by": args.by, "reason": args.reason},
        )[0]["at"]
    if args.json:
        print(json.dumps({"tool_id": str(tool_id), "retired_at": str(retired)}))
    else:
        print(f"tool {args.tool} of {args.owner} ({tool_id}): retired at {retired}")
    return EXIT_OK
