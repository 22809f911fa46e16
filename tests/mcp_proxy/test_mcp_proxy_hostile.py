"""The MCP proxy against careless or hostile peers, with real processes: JSON-RPC lines
written by hand to `undolog mcp-proxy` over stdio (a client that nests too deep, gives up
on a call, leaves in the middle of one), in front of tests/mcp_session_upstream.py and
tests/mcp_hostile_upstream.py (a result of tens of MiB)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import select
import sys
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from mcp import MCPError
from test_mcp_proxy import (
    HttpProxy,
    free_port,
    ledger,
    names,
    pending_approval,
    release_slow_make,
    sessions,
    stdio_proxy,
    wait_for,
)
from test_mcp_proxy_metrics import calls, samples, scrape
from test_mcp_proxy_sessions import effects, http_proxies, session_policy

from undolog import approvals
from undolog.mcp_proxy.metrics import OUTCOMES
from undolog.mcp_proxy.policy import Upstream
from undolog.mcp_proxy.stdio import LINE_LIMIT, bounded_lines
from undolog.mcp_proxy.upstream import UpstreamConnection

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name


class Line:
    """`undolog mcp-proxy` over stdio, written to line by line; answers read with a
    deadline (a proxy that died reads as end of file)."""

    def __init__(self, config: Path, dsn: str, ledger: Path) -> None:
        self.process = stdio_proxy(config, dsn, ledger)
        self.buffer = bytearray()
        self.eof = False

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.write(json.dumps(message).encode())

    def answer(self, request_id: int | None, timeout: float = 30) -> dict[str, Any] | None:
        """The answer to that request, or None (end of file, or none in time)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while (end := self.buffer.find(b"\n")) != -1:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                message: dict[str, Any] = json.loads(line)
                # (a null id: an error answering a line without one, not a notification)
                if message.get("id") == request_id and (
                    request_id is not None or "error" in message
                ):
                    return message
            left = deadline - time.monotonic()
            if self.eof or left <= 0:
                return None
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 20)
                self.eof = not chunk
                self.buffer += chunk

    def call(self, request_id: int, name: str, args: dict[str, Any], **meta: Any) -> None:
        params: dict[str, Any] = {"name": name, "arguments": args}
        if meta:
            params["_meta"] = meta
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    def start(self, list_tools: bool = False) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "line", "version": "1"},
                },
            }
        )
        assert self.answer(0) is not None
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if list_tools:  # after which the proxy relays COMPENSABLE calls itself
            self.send({"jsonrpc": "2.0", "id": -1, "method": "tools/list", "params": {}})
            assert self.answer(-1) is not None

    def leave(self) -> int:
        """Close stdin, as a client that quits; the proxy's exit code."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            return self.process.wait(60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process.stdout.close()


class RawHttp:
    """An MCP connection over streamable HTTP, its JSON-RPC written by hand: initialized,
    then each call one POST, its answers read from the SSE stream or the JSON body."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        self.url = url
        self.http = httpx.Client(timeout=timeout)
        plain = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        opened = self.http.post(
            url,
            headers=plain,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
        )
        self.headers = {
            **plain,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-06-18",
        }
        self.http.post(
            url,
            headers=self.headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )

    def leave(self) -> None:
        """End the MCP session (DELETE), as a client that quits."""
        self.http.delete(self.url, headers=self.headers)

    def call(
        self,
        request_id: int | str,
        name: str,
        args: dict[str, Any],
        meta: dict[str, Any] | None = None,
    ) -> tuple[int, list[dict[str, Any]]]:
        """The HTTP status and the JSON-RPC answers of one tools/call."""
        params: dict[str, Any] = {"name": name, "arguments": args}
        if meta is not None:
            params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        r = self.http.post(self.url, headers=self.headers, json=body)
        if "text/event-stream" in r.headers.get("content-type", ""):
            lines = r.text.splitlines()
            return r.status_code, [json.loads(x[5:]) for x in lines if x.startswith("data:")]
        return r.status_code, [r.json()]


def test_a_line_nested_too_deep_is_refused_and_the_proxy_goes_on(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A tools/call line nested past Python's recursion limit (json.loads raised
    RecursionError in the proxy's stdin reader, which ended it: the proxy exited)."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start()
        deep = "[" * 100_000 + "]" * 100_000
        line.write(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"put",'
            b'"arguments":{"key":"k","value":' + deep.encode() + b"}}}"
        )
        line.call(2, "read_all", {})
        answer = line.answer(2)
        assert answer is not None, "the proxy died"
        assert answer["result"]["structuredContent"]["store"] == {}
    finally:
        assert line.leave() == 0
    assert names(ledger) == []


def test_a_lone_surrogate_is_refused_as_the_sdk_refuses_it_and_never_relayed(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A read whose argument holds a lone UTF-16 surrogate ("\\ud800", as a model may emit
    a broken escape): Python's JSON reader took it, the SDK's refuses it. The proxy relayed
    it upstream, where the SDK's writer failed to encode it and closed the shared
    connection: the upstream process was replaced (its state lost) and a compensable call
    in flight on it ended with an unknown outcome. Now answered as a parse error (to the
    call's id, which was read)."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start()
        line.call(1, "put", {"key": "a", "value": "1"})
        assert line.answer(1) is not None
        line.call(2, "read_all", {})
        before = line.answer(2)
        assert before is not None
        line.call(3, "slow_make", {"key": "s", "seconds": 2})
        time.sleep(0.5)
        line.call(4, "read_all", {"x": "\ud800"})  # json.dumps writes it as an escape
        bad = line.answer(4, timeout=20)
        made = line.answer(3, timeout=20)
        line.call(5, "read_all", {})
        after = line.answer(5, timeout=20)
    finally:
        assert line.leave() == 0
    assert bad is not None and bad["error"]["code"] == -32700, bad
    assert made is not None and not made["result"].get("isError"), made
    assert after is not None
    assert (
        after["result"]["structuredContent"]["pid"] == before["result"]["structuredContent"]["pid"]
    )
    assert after["result"]["structuredContent"]["store"] == {"a": "1"}


def test_a_lone_surrogate_in_an_id_is_answered_with_a_null_id_and_the_proxy_goes_on(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A request whose id holds a lone surrogate, escaped or as raw bytes (ED A0 80, which
    Python's JSON reader decodes): the parse error echoed that id, could not be written,
    and its exception ended the proxy's stdin reader, so nothing was answered again. Now
    the id is not one (JSON-RPC's null), and the proxy goes on. Raw surrogate bytes in
    a call's arguments are refused as the escaped form is."""
    raw = b"\xed\xa0\x80"
    line = Line(session_policy(tmp_path), dsn, ledger)
    answers: list[dict[str, Any] | None] = []
    try:
        line.start()
        line.send({"jsonrpc": "2.0", "id": "\ud800", "method": "ping"})
        answers.append(line.answer(None, timeout=20))
        line.write(b'{"jsonrpc":"2.0","id":"' + raw + b'","method":"ping"}')
        answers.append(line.answer(None, timeout=20))
        line.write(
            b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_all",'
            b'"arguments":{"x":"' + raw + b'"}}}'
        )
        refused = line.answer(7, timeout=20)
        line.call(8, "read_all", {})
        after = line.answer(8, timeout=20)
    finally:
        assert line.leave() == 0
    for answer in answers:  # a parse error, or (raw bytes Python decodes) an invalid request
        assert answer is not None and answer["error"]["code"] in (-32700, -32600), answer
        assert answer["id"] is None
    assert refused is not None and ("error" in refused or refused["result"].get("isError")), refused
    assert after is not None and "result" in after, after


def test_a_call_that_cannot_be_sent_is_refused_alone() -> None:
    """The upstream connection refuses, per call, arguments it cannot write as UTF-8 JSON
    (nothing sent: a transport's writer failing on them would close the shared
    connection)."""

    async def call() -> tuple[MCPError, dict[str, Any]]:
        spec = Upstream(name="kv", command=[sys.executable, "tests/mcp_session_upstream.py"])
        upstream = UpstreamConnection(spec, call_timeout=10)
        await upstream.connect()
        try:
            with pytest.raises(MCPError) as refused:
                await upstream.call_raw("read_all", {"x": "\ud800"})
            return refused.value, await upstream.call_raw("read_all", {})
        finally:
            await upstream.close()

    refused, after = asyncio.run(call())
    assert refused.error.code == -32602 and "not valid Unicode" in refused.error.message
    assert not after.get("isError"), after


TYPED_UPSTREAM = '''
import asyncio
from pydantic import BaseModel
from mcp.server.mcpserver import MCPServer

server = MCPServer("typed")


class Thing(BaseModel):
    id: str
    label: str


@server.tool()
async def make_typed(key: str, seconds: float = 0) -> Thing:
    """Make a thing (its label holds a U+0000, which jsonb refuses)."""
    await asyncio.sleep(seconds)
    return Thing(id=key, label="a\\x00b")


@server.tool()
def unmake(id: str, idempotency_key: str) -> dict:
    """Undo make_typed."""
    return {"unmade": id}


server.run()
'''


def test_a_replayed_reduced_result_is_an_error_result_saying_the_call_ran(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A result the journal keeps reduced (a U+0000 in it) was replayed as a success whose
    structured content held only what the compensation reads, breaking the tool's output
    schema (the client SDKs check a success result against it and raise). A replay now
    answers an error result, as _unreadable_result does: a note saying the call ran, and
    the values kept."""
    script = tmp_path / "typed.py"
    script.write_text(TYPED_UPSTREAM)
    config = tmp_path / "typed.toml"
    config.write_text(
        f"[upstreams.t]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n"
        'hide = ["unmake"]\n'
        '[upstreams.t.tools.make_typed]\ntier = "compensable"\n'
        'compensation.unmake = { id = "result.id", idempotency_key = "undo_id" }\n'
    )
    line = Line(config, dsn, ledger)
    try:
        line.start()
        line.send({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}})
        listed = line.answer(9)
        assert listed is not None
        (tool,) = [t for t in listed["result"]["tools"] if t["name"] == "make_typed"]
        assert "outputSchema" in tool
        # the client gives up on the call while it runs, then makes it again: the same
        # call, answered from the journal
        line.call(1, "make_typed", {"key": "k", "seconds": 1.5})
        time.sleep(0.5)
        line.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "timeout"},
            }
        )
        wait_for(lambda: [e[2] for e in effects(conn)] == ["committed"])
        line.call(2, "make_typed", {"key": "k", "seconds": 1.5})
        again = line.answer(2)
    finally:
        assert line.leave() == 0
    assert again is not None
    result = again["result"]
    assert result["isError"] is True, result  # no client checks it against the schema
    assert result.get("structuredContent") == {"id": "k"}, result
    (note,) = result["content"]
    assert "This call ran and took effect" in note["text"]
    assert '{"id": "k"}' in note["text"] and "not run again" in note["text"]


def test_a_line_that_is_no_message_is_answered_as_json_rpc_says(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """Not JSON: a parse error (-32700) with a null id; JSON that is no JSON-RPC message:
    an invalid request (-32600) with its id when it has one. The SDK dropped both
    unanswered, leaving a client to wait for its timeout. Blank lines are skipped."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start()
        line.write(b"")  # a blank line: nothing to answer
        line.write(b"{not json")
        unparsed = line.answer(None)  # JSON-RPC's null id
        assert unparsed is not None
        assert unparsed["error"]["code"] == -32700
        line.write(b'{"jsonrpc": "2.0", "id": 7, "method": 42}')
        invalid = line.answer(7)
        assert invalid is not None and invalid["error"]["code"] == -32600
        line.call(8, "read_all", {})
        answer = line.answer(8)
        assert answer is not None and answer["result"]["structuredContent"]["store"] == {}
    finally:
        assert line.leave() == 0


def _padded(request_id: int, total: int) -> bytes:
    """A read_all call of exactly ``total`` bytes (an argument of padding)."""
    head = (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_all",'
        b'"arguments":{"pad":"' % request_id
    )
    tail = b'"}}}'
    return head + b"a" * (total - len(head) - len(tail)) + tail


def test_a_line_over_the_limit_is_answered_and_only_it_is_dropped(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A line over the stdin limit (64 MiB) is dropped and answered with a parse error
    (-32700, a null id: its id is never read), and the next message is served. The
    proxy's readline raised on the over-limit line after taking it whole from its
    buffer, then read on "to drop the rest" and dropped the next request too; the
    over-limit request itself was never answered."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.start()
        following = (
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":'
            b'{"name":"read_all","arguments":{}}}'
        )
        # one byte over, the next request in the same write (its newline already read)
        line.write(_padded(1, LINE_LIMIT + 1) + b"\n" + following)
        refused = line.answer(None, timeout=60)
        assert refused is not None, "the over-limit request got no answer"
        assert refused["error"]["code"] == -32700, refused
        answer = line.answer(2, timeout=60)
        assert answer is not None, "the request after the over-limit line was never answered"
        assert answer["result"]["structuredContent"]["store"] == {}
        # well over, its newline in a later read
        line.write(_padded(3, LINE_LIMIT + 5000))
        again = line.answer(None, timeout=60)
        assert again is not None and again["error"]["code"] == -32700, again
        line.call(4, "read_all", {})
        served = line.answer(4)
        assert served is not None and served["result"]["structuredContent"]["store"] == {}
    finally:
        assert line.leave() == 0


@pytest.mark.parametrize(
    "chunks",
    [
        [b"12345\nok\n"],  # over, its newline and the next line in one read
        [b"1234", b"56", b"\nok\n"],  # over across reads, dropped before its newline
        [b"123456789", b"0123\nok"],  # the rest dropped; a last line with no newline
    ],
    ids=["one-read", "across-reads", "rest-dropped"],
)
def test_lines_over_the_limit_are_dropped_alone(chunks: list[bytes]) -> None:
    """The proxy's stdin and an upstream's stdout split lines the same way (one
    definition): a line over the limit is one None, and only it is dropped."""

    async def lines() -> list[bytes | None]:
        async def source() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return [line async for line in bounded_lines(source(), 4)]

    assert asyncio.run(lines()) == [None, b"ok"]


@pytest.mark.parametrize(
    "initialized",
    [
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        # the same JSON, escaped where a byte filter would not look
        b'{"jsonrpc": "2.0", "method": "notifications\\/initialized"}',
        b'{"jsonrpc": "2.0", "method": "notifications/\\u0069nitialized"}',
    ],
    ids=["plain", "escaped-slash", "escaped-letter"],
)
def test_no_call_is_served_before_the_initialize_request(
    initialized: bytes, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A client that sends notifications/initialized before (or without) its initialize
    request: the relay took that notification as the end of the handshake and relayed
    the SAFE calls after it, and the SDK's server, which takes it so too, served the
    others (a COMPENSABLE call ran and was journaled). The MCP lifecycle begins with
    initialize: until it comes, a call is answered with a JSON-RPC error (the SDK's own
    for a request before the handshake), and nothing reaches the upstream."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    try:
        line.write(initialized + b"\n")
        line.call(1, "read_all", {})  # SAFE: the relay's
        line.call(2, "put", {"key": "a", "value": "1"})  # COMPENSABLE: the SDK's path
        line.send({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}})
        for request_id in (1, 2, 3):
            refused = line.answer(request_id)
            assert refused is not None, "the proxy died"
            assert "result" not in refused, refused
            assert refused["error"]["code"] == -32602, refused
        line.start()  # initialize, then notifications/initialized: calls are served
        line.call(4, "put", {"key": "a", "value": "1"})
        made = line.answer(4)
        assert made is not None and not made["result"]["isError"], made
        line.call(5, "read_all", {})
        read = line.answer(5)
        assert read is not None and read["result"]["structuredContent"]["store"] == {"a": "1"}
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["put"]
    assert effects(conn) == [("kv/put", 0, "committed")]


@pytest.mark.parametrize("path", ["relayed", "sdk"])
def test_arguments_nested_past_the_journals_limit_are_refused_saying_why(
    path: str, tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """65 levels of nesting parse, but the journal keeps 64 at most: the call is refused
    before anything runs, and the answer says it was the nesting."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    meta = {} if path == "relayed" else {"progressToken": "p"}
    nested: Any = "v"
    for _ in range(65):
        nested = [nested]
    try:
        line.start(list_tools=path == "relayed")
        line.call(1, "put", {"key": "k", "value": nested}, **meta)
        answer = line.answer(1)
        assert answer is not None
        assert answer["result"]["isError"] is True
        said = answer["result"]["content"][0]["text"]
        assert "put was not run" in said and "64" in said and "nest" in said, said
    finally:
        assert line.leave() == 0
    assert names(ledger) == []


@pytest.mark.parametrize("path", ["relayed", "sdk"])
def test_a_call_its_client_gives_up_on_is_recorded_and_never_run_twice(
    path: str, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """notifications/cancelled while a COMPENSABLE call runs upstream (what the TypeScript
    SDK sends when its request times out). The SDK's server cancelled the handler: the
    journal kept the call executing although the upstream answered; the relay answered
    it anyway, to a client that ignores the answer. Either way the same call made again
    was a new step, run upstream a second time. Now the call runs to its end and is
    recorded, and the same call made again is that call, its result replayed."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    meta = {} if path == "relayed" else {"progressToken": "p"}  # the SDK's path
    slow = {"key": "s", "seconds": 2}
    try:
        line.start(list_tools=path == "relayed")
        line.call(1, "slow_make", slow, **meta)
        wait_for(lambda: names(ledger) == ["slow_make"])  # running upstream
        line.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "timed out"},
            }
        )
        wait_for(lambda: effects(conn) == [("kv/slow_make", 0, "committed")])
        line.call(2, "slow_make", slow, **meta)
        again = line.answer(2)
        assert again is not None and not again["result"]["isError"], again
        assert again["result"]["structuredContent"] == {"id": "s"}
        assert names(ledger) == ["slow_make"]  # replayed, not run again
        assert effects(conn) == [("kv/slow_make", 0, "committed")]
        # a new identical call after that is a new call
        line.call(3, "slow_make", {"key": "s", "seconds": 0}, **meta)
        line.call(4, "slow_make", {"key": "s", "seconds": 0}, **meta)
        for request_id in (3, 4):
            made = line.answer(request_id)
            assert made is not None and not made["result"]["isError"], made
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["slow_make"] * 3
    assert [state for _, state in sessions(conn)] == ["completed"]


@pytest.mark.parametrize("path", ["relayed", "sdk"])
def test_a_call_its_client_gives_up_on_is_counted_in_the_metrics(
    path: str, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A COMPENSABLE call cancelled while it runs goes on to its end and is recorded,
    but the proxy's metrics never counted it (the count came after the answer, which a
    cancelled call never gets): it is counted with its outcome when it ends."""
    port = free_port()
    line = Line(session_policy(tmp_path, proxy=f'metrics_listen = "127.0.0.1:{port}"'), dsn, ledger)
    meta = {} if path == "relayed" else {"progressToken": "p"}
    try:
        line.start(list_tools=path == "relayed")
        line.call(1, "slow_make", {"key": "s", "seconds": 1}, **meta)
        wait_for(lambda: names(ledger) == ["slow_make"])  # running upstream
        line.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "timed out"},
            }
        )
        wait_for(lambda: effects(conn) == [("kv/slow_make", 0, "committed")])
        wait_for(lambda: calls(samples(scrape(port)[2]), "compensable", "executed") == 1)
        line.call(2, "put", {"key": "a", "value": "1"}, **meta)  # answered: counted too
        assert line.answer(2) is not None
        seen = samples(scrape(port)[2])
        assert calls(seen, "compensable", "executed") == 2
        assert sum(calls(seen, "compensable", o) for o in OUTCOMES["compensable"]) == 2
    finally:
        assert line.leave() == 0


def test_an_approved_payout_its_client_gives_up_on_is_counted_in_the_metrics(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The same for an IRREVERSIBLE call, approved and then cancelled while it runs
    upstream: it runs to its end, is recorded, and is counted as approved."""
    port = free_port()
    line = Line(session_policy(tmp_path, proxy=f'metrics_listen = "127.0.0.1:{port}"'), dsn, ledger)
    payout = {"account": "acc-1", "amount_cents": 5, "seconds": 1}
    try:
        line.start(list_tools=True)
        line.call(1, "pay", payout)  # held for hold_seconds, then "not run yet"
        held = line.answer(1)
        assert held is not None and "NOT RUN YET" in json.dumps(held), held
        approval_id = pending_approval(conn)
        assert approval_id is not None
        approvals.approve(conn, approval_id, "alice", "checked")
        line.call(2, "pay", payout)
        wait_for(lambda: names(ledger) == ["pay"])  # approved, running upstream
        line.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 2, "reason": "timed out"},
            }
        )
        wait_for(lambda: effects(conn) == [("kv/pay", 0, "committed")])
        wait_for(lambda: calls(samples(scrape(port)[2]), "irreversible", "approved") == 1)
        seen = samples(scrape(port)[2])
        assert calls(seen, "irreversible", "timed_out") == 1
        assert sum(calls(seen, "irreversible", o) for o in OUTCOMES["irreversible"]) == 3
    finally:
        assert line.leave() == 0
    assert names(ledger) == ["pay"]  # paid once


@pytest.mark.parametrize("path", ["relayed", "sdk"])
def test_a_client_that_leaves_mid_call_gets_the_call_recorded(
    path: str, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The client quits while a COMPENSABLE call runs upstream: the call is recorded
    once the upstream answers and the session completes (it was left executing, so the
    session was failed and its calls undone, though every one of them had worked)."""
    line = Line(session_policy(tmp_path), dsn, ledger)
    meta = {} if path == "relayed" else {"progressToken": "p"}
    try:
        line.start(list_tools=path == "relayed")
        line.call(1, "put", {"key": "a", "value": "1"})
        assert line.answer(1) is not None
        line.call(2, "slow_make", {"key": "s", "seconds": 2}, **meta)
        wait_for(lambda: names(ledger) == ["put", "slow_make"])
    finally:
        assert line.leave() == 0
    assert sorted(effects(conn)) == [("kv/put", 0, "committed"), ("kv/slow_make", 0, "committed")]
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert names(ledger) == ["put", "slow_make"]  # nothing undone


def test_the_proxy_exits_cleanly_while_a_left_session_is_undone(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A session with a call of unknown outcome is undone when its client leaves; the
    proxy, closing meanwhile, forgot the session under its own loop over the sessions
    (RuntimeError: dictionary changed size during iteration, exit code 1)."""
    line = Line(session_policy(tmp_path, timeout=1), dsn, ledger)
    try:
        line.start()
        line.call(1, "slow_make", {"key": "s", "seconds": 2})
        answer = line.answer(1)
        assert answer is not None and "outcome is unknown" in json.dumps(answer), answer
    finally:
        assert line.leave() == 0
    wait_for(lambda: [state for _, state in sessions(conn)] == ["compensated"])
    assert names(ledger) == ["slow_make", "unmake"]


BIG = """
[proxy]
call_timeout_seconds = 8
[upstreams.h]
command = ["python", "tests/mcp_hostile_upstream.py"]
[upstreams.h.tools.make]
tier = "safe"
"""


def test_a_big_upstream_result_is_read_in_linear_time(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A result of ~50 MB on one line (a big file read, say): the proxy joined the
    upstream's stdout chunks by copying the whole line so far at each 64 KiB chunk,
    quadratic (25 s for 64 MB, its event loop busy for every client meanwhile), so that
    the call outran call_timeout_seconds. Now it answers in about as long as the upstream
    takes to write it."""
    config = tmp_path / "big.toml"
    config.write_text(BIG)
    line = Line(config, dsn, ledger)
    try:
        line.start()
        size = 24 * 1024 * 1024  # twice over the wire: text and structured content
        line.call(1, "make", {"key": "big", "size": size})
        answer = line.answer(1, timeout=30)
        assert answer is not None
        result = answer["result"]
        assert not result.get("isError"), str(result)[:500]
        assert len(result["structuredContent"]["padding"]) == size
    finally:
        assert line.leave() == 0


def test_a_request_id_already_in_flight_is_refused_and_the_first_answered(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """Over streamable HTTP, a request sent with the id of one still in flight on the same
    MCP session (7, then 7 and "7" again): the SDK's transport keyed the answer stream by
    str(id), so the second replaced the first's: the first call's answer went to the
    second POST, and the first POST was never answered, nor closed when the session was
    deleted (bench/fuzz_mcp_proxy.py). Now the second is refused at once, nothing run,
    and the first is answered with its own result. The same id on another MCP session
    is its own."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)
    mcp, other = RawHttp(proxy.url, timeout=10), RawHttp(proxy.url, timeout=10)
    pool = ThreadPoolExecutor(1)
    try:
        first = pool.submit(mcp.call, 7, "slow_make", {"key": "s", "seconds": 20})
        wait_for(lambda: names(ledger) == ["slow_make"])
        twice = [mcp.call(7, "put", {"key": "a", "value": "1"}), mcp.call("7", "read_all", {})]
        elsewhere = other.call(7, "put", {"key": "b", "value": "2"})
        release_slow_make(ledger, "s")
        for status, messages in twice:
            assert status == 400, (status, messages)
            assert messages[0]["error"]["code"] == -32600, messages
            assert "already in flight" in messages[0]["error"]["message"], messages
        answered = first.result(30)
    finally:
        pool.shutdown(wait=False)
    assert answered[1][0]["result"]["structuredContent"] == {"id": "s"}, answered
    assert elsewhere[1][0]["result"]["structuredContent"] == {"key": "b"}, elsewhere
    assert names(ledger) == ["slow_make", "put"]


def test_a_body_past_the_bound_is_refused_before_it_is_read_whole(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """The MCP SDK reads a POST's body whole, however long: a client could make the proxy
    hold a body of any size. Past proxy.max_request_mib (here 1), the request is refused
    with HTTP 413 and a JSON-RPC error naming the key, at its Content-Length or, sent in
    chunks with none, once that much has come; nothing runs, and the client's next call
    is served."""
    proxy = HttpProxy(session_policy(tmp_path, proxy="max_request_mib = 1"), dsn, ledger)
    http_proxies.append(proxy)
    mcp = RawHttp(proxy.url, timeout=10)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read_all", "arguments": {"pad": "x" * (2 << 20)}},
        }
    ).encode()

    def chunks() -> Any:
        for at in range(0, len(body), 64 << 10):
            yield body[at : at + (64 << 10)]

    for content in (body, chunks()):  # with a Content-Length, then chunked
        answer = mcp.http.post(proxy.url, headers=mcp.headers, content=content)
        assert answer.status_code == 413, answer.text[:300]
        assert answer.json()["error"]["code"] == -32600
        assert "proxy.max_request_mib" in answer.json()["error"]["message"]
    status, served = mcp.call(2, "put", {"key": "k", "value": "v"})
    assert status == 200 and served[0]["result"]["structuredContent"] == {"key": "k"}
    assert names(ledger) == ["put"]


def test_a_session_its_client_left_while_a_call_awaits_approval_ends_once_decided(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Two HTTP clients each put a key, make a payout (held, then answered that it awaits
    approval) and leave (DELETE). The proxy forgot both sessions, awaiting_approval, and
    stopped their heartbeats: the approved one went back to active with no owner (and
    would have been failed at its lease's expiry, a worker undoing the put its client
    kept), found by bench/fuzz_mcp_proxy.py. Now each ends once decided: the approved
    one is completed (its put kept; the payout, never made again, does not run), the
    rejected one undone."""
    proxy = HttpProxy(session_policy(tmp_path), dsn, ledger)
    http_proxies.append(proxy)
    ends: dict[str, str] = {}
    for verdict in ("approve", "reject"):
        client = RawHttp(proxy.url)
        _, put = client.call(1, "put", {"key": verdict, "value": "1"})
        sid = put[0]["result"]["_meta"]["undolog/session"].split(".")[0]
        _, held = client.call(2, "pay", {"account": verdict, "amount_cents": 5})
        assert "NOT RUN YET" in held[0]["result"]["content"][0]["text"], held
        approval_id = pending_ids(conn)[0]
        client.leave()
        with psycopg.connect(dsn, autocommit=True) as person:
            decide = approvals.approve if verdict == "approve" else approvals.reject
            decide(person, approval_id, "alice", "checked")
        ends[verdict] = wait_for(functools.partial(_ended, conn, sid), timeout=15)
    assert ends == {"approve": "completed", "reject": "compensated"}
    assert names(ledger) == ["put", "put", "forget"]


def pending_ids(conn: psycopg.Connection[Any]) -> list[uuid.UUID]:
    rows = conn.execute("SELECT approval_id FROM undolog.pending_approvals").fetchall()
    return [uuid.UUID(str(r[0])) for r in rows]


def _ended(conn: psycopg.Connection[Any], sid: str) -> str | None:
    """The session's state once it is completed or compensated."""
    state = _state(conn, sid)
    return state if state in ("completed", "compensated") else None


def _state(conn: psycopg.Connection[Any], sid: str) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    return str(row[0]) if row else ""
