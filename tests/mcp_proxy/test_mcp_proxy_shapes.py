"""Messages of the wrong shape: the proxy says what is wrong and what to send instead
(undolog/mcp_proxy/shapes.py), where the MCP SDK answered ``Invalid request parameters``
or a pydantic validation dump; only what the SDK refuses too, over both transports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import psycopg
import pytest
from mcp_types import methods
from pydantic import ValidationError
from test_mcp_proxy import HttpProxy, ledger, names
from test_mcp_proxy_hostile import Line, RawHttp
from test_mcp_proxy_sessions import http_proxies, session_policy

from undolog.mcp_proxy.shapes import call_params_problem, envelope_problem

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name

CALL = {"name": "put", "arguments": {"key": "a", "value": "1"}}
# a tools/call's params: those the SDK takes, then those it refuses
PARAMS_TAKEN: list[Any] = [
    CALL,
    {"name": "read_all"},
    {"name": "read_all", "arguments": None},
    {"name": "put", "arguments": {}, "_meta": {"undolog/session": "x"}},
    {"name": "put", "arguments": {}, "_meta": None},
]
PARAMS_REFUSED: list[Any] = [
    None,
    [1, 2],
    "put",
    {},
    {"name": 7, "arguments": {}},
    {"name": None},
    {"name": "put", "arguments": "key=a"},
    {"name": "put", "arguments": ["a", "1"]},
    {"name": "put", "arguments": {}, "_meta": "x"},
]
# whole messages, and what the SDK's transport does with each: takes it, refuses it
# (HTTP 400, a pydantic dump), or reads a request whose id is invalid as a notification,
# which is never answered (the client waits for its timeout)
ENVELOPES: list[tuple[Any, str]] = [
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL}, "taken"),
    ({"jsonrpc": "2.0", "id": "call-1", "method": "tools/list"}, "taken"),
    ({"jsonrpc": "2.0", "method": "notifications/initialized"}, "taken"),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": None}, "taken"),
    ({"jsonrpc": "2.0", "id": 1, "result": {}}, "taken"),
    ([], "refused"),
    ([{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL}], "refused"),
    ({"id": 1, "method": "tools/call", "params": CALL}, "refused"),
    ({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": CALL}, "refused"),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1, 2]}, "refused"),
    ({"jsonrpc": "2.0", "id": 1, "method": 42}, "refused"),
    ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/call", "params": CALL}, "unanswered"),
    ({"jsonrpc": "2.0", "id": True, "method": "tools/call", "params": CALL}, "unanswered"),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": CALL}, "unanswered"),
]


def _sdk_refuses_params(params: Any) -> bool:
    """As the SDK's server validates a tools/call's params (mcp/server/runner.py)."""
    try:
        methods.validate_client_request("tools/call", "2025-06-18", params)
        types.CallToolRequestParams.model_validate({} if params is None else params, by_name=False)
    except ValidationError:
        return True
    return False


def _sdk_reads(message: Any) -> str:
    """What the SDK's transport makes of a message: "taken", "refused" or "unanswered"
    (a request read as a notification)."""
    try:
        read = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError:
        return "refused"
    if isinstance(read, types.JSONRPCNotification) and "id" in message:
        return "unanswered"
    return "taken"


@pytest.mark.parametrize("params", PARAMS_TAKEN + PARAMS_REFUSED)
def test_a_calls_params_are_refused_for_their_shape_as_the_sdk_refuses_them_saying_what_to_send(
    params: Any,
) -> None:
    problem = call_params_problem(params)
    refused = any(params is p for p in PARAMS_REFUSED)
    assert (problem is not None) == _sdk_refuses_params(params) == refused
    if problem is not None:
        assert "nothing was run" in problem
        assert '"name": "TOOL"' in problem or "an object" in problem, problem


@pytest.mark.parametrize(("message", "sdk"), ENVELOPES)
def test_a_message_is_refused_for_its_shape_only_as_the_sdk_refuses_it_saying_what_to_send(
    message: Any, sdk: str
) -> None:
    """Refused as the SDK refuses it, and a request with an invalid id too, which the SDK
    read as a notification and never answered."""
    assert _sdk_reads(message) == sdk
    problem = envelope_problem(message)
    assert (problem is not None) == (sdk != "taken"), problem
    if problem is not None:
        code, words = problem
        assert code in (types.INVALID_REQUEST, types.INVALID_PARAMS)
        assert "nothing was run" in words, words


def test_a_wrong_shape_over_http_is_answered_with_what_to_send(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """Each kind of wrong shape the fuzz sends, over streamable HTTP: the SDK answered a
    code and "Invalid request parameters" (or, for the whole message, "Validation error:
    " and a pydantic dump); now the same status and code with words that say what to send.
    Nothing runs, and a call of the right shape is served after them."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)
    mcp = RawHttp(proxy.url, timeout=10)

    def post(body: Any) -> tuple[int, dict[str, Any]]:
        r = mcp.http.post(proxy.url, headers=mcp.headers, content=json.dumps(body).encode())
        if "text/event-stream" in r.headers.get("content-type", ""):
            data = [x[5:] for x in r.text.splitlines() if x.startswith("data:")]
            return r.status_code, json.loads(data[-1])
        return r.status_code, r.json()

    def call(params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}

    cases = [
        (call({"name": "put", "arguments": "key=a"}), 200, -32602, "params.arguments"),
        (call({"name": 7, "arguments": {}}), 200, -32602, "params.name"),
        (call({**CALL, "_meta": "x"}), 200, -32602, "params._meta"),
        (call([1, 2]), 400, -32602, "params is an object"),
        ([call(CALL)], 400, -32600, "a batch"),
        ({"id": 9, "method": "tools/call", "params": CALL}, 400, -32600, '"jsonrpc": "2.0"'),
    ]
    for body, status, code, said in cases:
        got_status, answer = post(body)
        assert (got_status, answer["error"]["code"]) == (status, code), answer
        assert said in answer["error"]["message"], answer
        assert "nothing was run" in answer["error"]["message"], answer
        assert answer["id"] == (None if isinstance(body, list) else 9), answer
    status, served = mcp.call(10, "put", {"key": "k", "value": "v"})
    assert status == 200 and served[0]["result"]["structuredContent"] == {"key": "k"}
    assert names(ledger) == ["put"]


def test_a_wrong_shape_naming_an_unknown_mcp_session_is_answered_that_it_is_unknown(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """A request whose Mcp-Session-Id the proxy does not know (deleted, expired, made up):
    the SDK answers 404 "Session not found" (initialize again) before it reads the body,
    but the proxy answered a wrong shape first (200 -32602 for a call's params, 400 for
    the message), so the client learned it had to start over only after fixing them. Now
    the SDK's answer comes first, as for a request of the right shape."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)
    mcp = RawHttp(proxy.url, timeout=10)
    mcp.leave()  # DELETE: its MCP session id is no longer known

    def call(params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}

    bodies: list[Any] = [
        call({"name": "put", "arguments": "key=a"}),
        call([1, 2]),
        [call(CALL)],
        {"id": 9, "method": "tools/call", "params": CALL},
        call(CALL),
    ]
    for session in (mcp.headers["Mcp-Session-Id"], "f" * 32):
        for body in bodies:
            r = mcp.http.post(
                proxy.url,
                headers={**mcp.headers, "Mcp-Session-Id": session},
                content=json.dumps(body).encode(),
            )
            assert r.status_code == 404, (body, r.text)
            assert r.json()["error"]["message"] == "Session not found", r.text
    assert names(ledger) == []


def test_a_wrong_shape_over_stdio_is_answered_with_what_to_send(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The same over stdio, where the relay reads every tools/call line first: its
    params of the wrong shape (the SDK's "Invalid request parameters"), and a batch (the
    relay's "not a JSON-RPC 2.0 request")."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start()
        wrong = {**CALL, "arguments": "key=a"}
        line.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": wrong})
        line.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [1, 2]})
        batch_of = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": CALL}
        line.write(json.dumps([batch_of]).encode())
        for request_id, code, said in ((1, -32602, "params.arguments"), (2, -32602, "params")):
            answer = line.answer(request_id)
            assert answer is not None and answer["error"]["code"] == code, answer
            assert said in answer["error"]["message"], answer
            assert "nothing was run" in answer["error"]["message"], answer
        batch = line.answer(None)
        assert batch is not None and batch["error"]["code"] == -32600, batch
        assert "a batch" in batch["error"]["message"], batch
        line.call(4, "put", {"key": "k", "value": "v"})
        made = line.answer(4)
        assert made is not None and not made["result"]["isError"], made
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["put"]
