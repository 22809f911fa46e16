"""A second upstream MCP server for the proxy's tests: what is not a tool.

Resources (``memory://knowledge-graph``, a ``users://{email}/profile`` template), a prompt,
resource subscriptions, tools that change its lists (and say so), and a tool that asks
the client for its roots. What it is told (roots changed, a subscription) is appended to
the JSON-lines ledger named by UPSTREAM_LEDGER. Run over stdio (default) or streamable
HTTP: ``mcp_library_upstream.py --http PORT``.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below come after the hand-over, mcp's above all)
import zygote

zygote.hand_over()  # in a child of the tests' zygote (tests/zygote.py), if they started one

import argparse
import json
import os
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources.types import TextResource

server = MCPServer("test-library")
facts: list[str] = []


def _record(op: str, **fields: Any) -> None:
    with Path(os.environ["UPSTREAM_LEDGER"]).open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"op": op, **fields}, sort_keys=True) + "\n")


@server.resource("memory://knowledge-graph", name="knowledge-graph", mime_type="application/json")
def knowledge_graph() -> str:
    """Every entity the library knows."""
    return json.dumps({"entities": [{"name": "Ada", "type": "person"}], "facts": facts})


@server.resource("users://{email}/profile", name="profile", mime_type="application/json")
def profile(email: str) -> str:
    """One user's profile."""
    return json.dumps({"email": email, "plan": "free"})


@server.prompt()
def summarize(topic: str) -> str:
    """Ask for a summary of what is known about a topic."""
    return f"Summarize what the knowledge graph says about {topic}."


@server.tool()
def echo(text: str) -> dict[str, Any]:
    """Answer the text."""
    return {"text": text}


@server.tool()
async def learn(fact: str, ctx: Context) -> dict[str, Any]:
    """Add a fact: a new resource, so the resource list changes (and the graph with it)."""
    facts.append(fact)
    uri = f"memory://facts/{len(facts)}"
    server.add_resource(TextResource(uri=uri, name=f"fact-{len(facts)}", text=fact))
    await ctx.session.send_resource_list_changed()
    await ctx.session.send_resource_updated("memory://knowledge-graph")
    return {"uri": uri}


def _extra_tool(text: str) -> dict[str, Any]:
    """A tool that exists only after grow."""
    return {"extra": text}


def _extra_prompt() -> str:
    """A prompt that exists only after grow."""
    return "An extra prompt."


@server.tool()
async def grow(ctx: Context) -> dict[str, Any]:
    """Add a tool and a prompt, and say that both lists changed."""
    server.add_tool(_extra_tool, name="extra")
    server.prompt(name="extra_prompt")(_extra_prompt)
    await ctx.session.send_tool_list_changed()
    await ctx.session.send_prompt_list_changed()
    return {"grown": True}


@server.tool()
async def drop_echo(ctx: Context) -> dict[str, Any]:
    """Stop offering echo, and say that the tool list changed."""
    server.remove_tool("echo")
    await ctx.session.send_tool_list_changed()
    return {"dropped": "echo"}


@server.tool()
async def restore_echo(ctx: Context) -> dict[str, Any]:
    """Offer echo again, and say that the tool list changed."""
    server.add_tool(echo, name="echo")
    await ctx.session.send_tool_list_changed()
    return {"restored": "echo"}


@server.tool()
async def client_roots(ctx: Context) -> dict[str, Any]:
    """Ask the client for its roots."""
    listed = await ctx.session.list_roots()
    return {"roots": [str(root.uri) for root in listed.roots]}


async def _subscribe(
    ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
) -> types.EmptyResult:
    _record("subscribe", uri=params.uri)
    return types.EmptyResult()


async def _unsubscribe(
    ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
) -> types.EmptyResult:
    _record("unsubscribe", uri=params.uri)
    return types.EmptyResult()


async def _roots_changed(
    ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
) -> None:
    _record("roots_changed")


lowlevel = server._lowlevel_server
lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _subscribe)
lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, _unsubscribe)
lowlevel.add_notification_handler(
    "notifications/roots/list_changed", types.NotificationParams, _roots_changed
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
