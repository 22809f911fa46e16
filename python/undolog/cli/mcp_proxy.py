"""``undolog mcp-proxy``: serve the MCP proxy (the extra ``undolog[mcp]``), imported only
when asked for."""

from __future__ import annotations

import argparse
import sys

from undolog.cli._common import EXIT_USAGE, Parser, Subparsers, dsn_of


def configure_mcp_proxy_parser(subparsers: Subparsers, common: Parser) -> None:
    p = subparsers.add_parser(
        "mcp-proxy", parents=[common], help="serve the MCP proxy (undolog[mcp])"
    )
    p.add_argument("--config", required=True, help="the policy file (TOML)")
    p.add_argument("--http", metavar="HOST:PORT", help="streamable HTTP instead of stdio")
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve the proxy's own metrics as GET /metrics there (Prometheus text format; "
        "default: the policy's proxy.metrics_listen, else not served)",
    )
    p.add_argument(
        "--durable-results",
        action="store_true",
        default=None,
        help="a COMPENSABLE call's answer waits for its result's commit "
        "(the policy's proxy.durable_results = true)",
    )
    p.add_argument(
        "--print-client-config",
        action="store_true",
        help="print a desktop client's mcpServers JSON for this proxy (absolute paths), exit",
    )
    p.add_argument(
        "--name", default="undolog", help="the server's name in that JSON (default undolog)"
    )
    p.set_defaults(func=_cmd_mcp_proxy)


def _cmd_mcp_proxy(args: argparse.Namespace) -> int:
    try:
        from undolog.mcp_proxy.server import serve
    except ImportError as exc:
        print(
            f"undolog: mcp-proxy needs the mcp extra (pip install 'undolog[mcp]'): {exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    dsn = dsn_of(args)
    if args.print_client_config:
        from undolog.mcp_proxy.client_config import print_client_config
        from undolog.mcp_proxy.policy import PolicyError

        try:
            return print_client_config(args.config, dsn, args.name)
        except PolicyError as exc:
            print(f"undolog mcp-proxy: policy refused: {exc}", file=sys.stderr)
            return EXIT_USAGE
    from undolog.mcp_proxy.server import Options

    options = Options(metrics_listen=args.metrics_listen, durable_results=args.durable_results)
    return serve(args.config, dsn, args.http, options)
