"""What is wrong with a client's message of the wrong shape, said so that the client (or
its model) knows what to send instead. The MCP SDK's own refusal of such a message is a
code and ``Invalid request parameters``, or a pydantic validation dump (``Validation
error: 1 validation error for ...``), with no next step. The proxy's two transports ask
here before the SDK sees the message (``server.PostGuard`` over streamable HTTP,
``server.MessageRelay`` over stdio); a message found nothing wrong with goes to the SDK as
before. Every refusal here is of a message the SDK refuses too
(tests/mcp_proxy/test_mcp_proxy_shapes.py holds the two to that)."""

from __future__ import annotations

from typing import Any

import mcp_types as types

# how a tools/call request's params look
CALL_SHAPE = '{"name": "TOOL", "arguments": {"ARGUMENT": VALUE, ...}}'
NOTHING_RUN = "nothing was run"


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def envelope_problem(message: Any) -> tuple[int, str] | None:
    """What makes a decoded message (an HTTP body, a line over stdio) no JSON-RPC message
    the SDK reads (JSON-RPC's code and the words), or None. Only what a client gets wrong
    most (a batch, the version left out, a method, an id or params of the wrong type);
    anything else is the SDK's to say."""
    if isinstance(message, list):
        return (
            types.INVALID_REQUEST,
            "a batch (a JSON array of messages) is not taken: MCP carries one JSON-RPC "
            "message at a time (batches were removed in protocol version 2025-06-18); "
            f"{NOTHING_RUN}. Send each request on its own (over HTTP, a POST each)",
        )
    if not isinstance(message, dict) or "method" not in message:
        return None  # a response, or no message at all: the SDK's to answer
    if message.get("jsonrpc") != "2.0":
        return (
            types.INVALID_REQUEST,
            'a JSON-RPC message carries "jsonrpc": "2.0"; this one has '
            + (f"{json_kind(message['jsonrpc'])} there" if "jsonrpc" in message else 'no "jsonrpc"')
            + f": {NOTHING_RUN}. Add it, e.g. "
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + CALL_SHAPE + "}",
        )
    if not isinstance(message["method"], str):
        return (
            types.INVALID_REQUEST,
            f'a JSON-RPC message\'s method is a string naming it, such as "tools/call"; '
            f"this one is {json_kind(message['method'])}: {NOTHING_RUN}",
        )
    if "id" in message and not valid_id(message["id"]):
        return (
            types.INVALID_REQUEST,
            f"a request's id is a string or a whole number; this one is "
            f"{json_kind(message['id'])}: {NOTHING_RUN}. Give it an id such as 1 or "
            '"call-1", one of its own among the requests not yet answered',
        )
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return (
            types.INVALID_PARAMS,
            f"{_named(message)}params is an object (by name), not "
            f"{json_kind(message['params'])}: {NOTHING_RUN}"
            + (
                f". A tools/call takes {CALL_SHAPE}"
                if message.get("method") == "tools/call"
                else ""
            ),
        )
    return None


def call_params_problem(params: Any) -> str | None:
    """What is wrong with a tools/call request's params for the SDK (which refuses each
    of these with ``Invalid request parameters``), said with what to send; None when it
    is none of these (the SDK then decides)."""
    if not isinstance(params, dict):
        return (
            f"tools/call takes params {CALL_SHAPE}; this request's params is "
            f"{'missing' if params is None else json_kind(params)}: {NOTHING_RUN}. "
            "tools/list lists the tools and the arguments each takes"
        )
    name = params.get("name")
    if not isinstance(name, str):
        return (
            f"tools/call params.name is the tool's name, a string; this one is "
            f"{'missing' if 'name' not in params else json_kind(name)}: {NOTHING_RUN}. "
            f"Send {CALL_SHAPE} (tools/list lists the tools)"
        )
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return (
            f"tools/call params.arguments is an object of {name!r}'s arguments by name "
            f"(leave it out, or {{}}, for none); this one is {json_kind(arguments)}: "
            f"{NOTHING_RUN}. Send {CALL_SHAPE} (tools/list gives each tool's inputSchema)"
        )
    meta = params.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        return (
            f"tools/call params._meta is an object (e.g. "
            '{"undolog/session": "<the handle a result gave you>"}), or left out; this '
            f"one is {json_kind(meta)}: {NOTHING_RUN}"
        )
    return None


def valid_id(value: Any) -> bool:
    """Whether a message's id is one JSON-RPC requests may carry here: a string or a
    whole number (never a boolean)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def _named(message: dict[str, Any]) -> str:
    method = message.get("method")
    return f"{method} " if isinstance(method, str) and len(method) <= 100 else ""
