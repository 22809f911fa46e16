"""``undolog approvals``: the requests waiting for a human, and a human's decision."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from undolog import approvals
from undolog.cli._common import EXIT_OK, Parser, Subparsers, connect, query
from undolog.cli._ids import resolve_id
from undolog.cli._output import emit


def configure_approvals_parser(subparsers: Subparsers, common: Parser) -> None:
    appr = subparsers.add_parser(
        "approvals", parents=[common], help="approval requests"
    ).add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    p = appr.add_parser("list", parents=[common], help="requests waiting for a human")
    p.set_defaults(func=_cmd_approvals_list, needed_role="undolog_approver (or undolog_operator)")
    for name, decide in (("approve", approvals.approve), ("reject", approvals.reject)):
        p = appr.add_parser(name, parents=[common], help=f"{name} a request")
        p.add_argument("approval", metavar="APPROVAL", help="approval id or a unique prefix")
        p.add_argument("--by", required=True, help="who decides (recorded)")
        p.add_argument("--reason", help="why (recorded)")
        p.set_defaults(func=_decide(decide), needed_role="undolog_approver")


APPROVAL_COLUMNS = [
    "approval_id",
    "tool_name",
    "args",
    "agent",
    "session_id",
    "age",
    "expires_at",
    "expired",
]


def _cmd_approvals_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = query(conn, "SELECT * FROM undolog.pending_approvals ORDER BY requested_at")
    emit(args, rows, APPROVAL_COLUMNS)
    return EXIT_OK


def _decide(decide: Callable[..., str]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with connect(args) as conn:
            approval_id = resolve_id(conn, "approval", args.approval)
            state = decide(conn, approval_id, args.by, args.reason)
        if args.json:
            print(json.dumps({"approval_id": str(approval_id), "state": state}))
        else:
            print(f"approval {approval_id}: {state}")
        return EXIT_OK

    return run
