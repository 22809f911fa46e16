"""What the MCP proxy passes through besides tools, with real processes: the SDK's MCP
client (over stdio, in both protocol eras, and over streamable HTTP) drives
`undolog mcp-proxy`, which fronts tests/mcp_library_upstream.py (and, namespaced beside
it, tests/mcp_upstream_server.py). Resources, templates, prompts, roots and change
notifications are reads: nothing of theirs is journaled."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import psycopg
import pytest
from mcp import Client, MCPError
from mcp.client.context import ClientRequestContext
from test_mcp_proxy import (
    SESSION,
    HttpProxy,
    http_proxies,
    ledger,
    ops,
    pending_approval,
    sessions,
    stdio_client,
    stdio_proxy,
    text,
    wait_for,
)

from undolog import approvals

__all__ = ["http_proxies", "ledger"]  # fixtures, used by name

ONE = """
[proxy]
default_tier = "safe"
[upstreams.lib]
command = ["python", "tests/mcp_library_upstream.py"]
"""

TWO = """
[proxy]
default_tier = "safe"
[upstreams.lib]
command = ["python", "tests/mcp_library_upstream.py"]
[upstreams.crm]
command = ["python", "tests/mcp_upstream_server.py"]
hide = ["create_user", "delete_user", "send_email", "retract_email", "process_payout"]
"""


def policy(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "passthrough.toml"
    path.write_text(body)
    return path


def journaled(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM undolog.undolog_sessions),"
        " (SELECT count(*) FROM undolog.undolog_effect_log)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def contents_text(result: types.ReadResourceResult) -> str:
    (content,) = result.contents
    assert isinstance(content, types.TextResourceContents)
    return content.text


async def check_reads(client: Client, prefix: str = "", name: str = "") -> None:
    """The library's resources, template and prompt through the proxy, as `prefix` and
    `name` (the namespacing of several upstreams) say they are called."""
    graph = f"{prefix}memory://knowledge-graph"
    listed = {r.uri: r for r in (await client.list_resources()).resources}
    assert graph in listed, listed
    assert listed[graph].name == f"{name}knowledge-graph"
    assert listed[graph].mime_type == "application/json"
    read = await client.read_resource(graph)
    assert json.loads(contents_text(read))["entities"] == [{"name": "Ada", "type": "person"}]
    assert str(read.contents[0].uri) == graph
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == [f"{prefix}users://{{email}}/profile"]
    profile = await client.read_resource(f"{prefix}users://ada@x/profile")
    assert json.loads(contents_text(profile)) == {"email": "ada@x", "plan": "free"}
    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert f"{name}summarize" in prompts
    assert [a.name for a in prompts[f"{name}summarize"].arguments or []] == ["topic"]
    got = await client.get_prompt(f"{name}summarize", {"topic": "Ada"})
    message = got.messages[0].content
    assert isinstance(message, types.TextContent) and "about Ada" in message.text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_resources_and_prompts_pass_through_over_stdio(
    mode: str, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    async def body() -> None:
        async with stdio_client(policy(tmp_path, ONE), dsn, ledger, mode=mode) as client:
            caps = client.server_capabilities
            assert caps.resources is not None and caps.prompts is not None
            await check_reads(client)
            with pytest.raises(MCPError, match="Unknown resource: memory://nothing-here"):
                await client.read_resource("memory://nothing-here")
            # a SAFE tool, relayed unparsed, answers as the upstream did
            echoed = await client.call_tool("echo", {"text": "hi"})
            assert not echoed.is_error and echoed.structured_content == {"text": "hi"}
            bad = await client.call_tool("echo", {})
            assert bad.is_error and "text" in text(bad)

    asyncio.run(body())
    assert journaled(conn) == (0, 0)  # reads: no session, no effect


def test_several_upstreams_are_namespaced(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    async def body() -> None:
        async with stdio_client(policy(tmp_path, TWO), dsn, ledger) as client:
            await check_reads(client, prefix="lib+", name="lib__")
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"lib__echo", "crm__echo", "crm__lookup_user"} <= tools
            with pytest.raises(MCPError, match="starts with the upstream's name and '\\+'"):
                await client.read_resource("memory://knowledge-graph")
            with pytest.raises(MCPError, match="UPSTREAM__NAME"):
                await client.get_prompt("summarize", {"topic": "x"})

    asyncio.run(body())
    assert journaled(conn) == (0, 0)


class Heard:
    """The notifications a client received."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.params: list[Any] = []

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if isinstance(method, str):
            self.methods.append(method)
            self.params.append(getattr(root, "params", None))

    async def wait(self, method: str) -> None:
        for _ in range(200):
            if method in self.methods:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {method} among {self.methods}")


# resources/subscribe and roots are handshake-era features, deprecated for the 2026 era
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_list_changed_and_resource_updates_reach_a_handshake_client(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    heard = Heard()

    async def body() -> None:
        config = policy(tmp_path, ONE)
        client = stdio_client(config, dsn, ledger, mode="legacy")
        client.message_handler = heard
        async with client:
            caps = client.server_capabilities
            assert caps.tools is not None and caps.tools.list_changed
            assert caps.resources is not None and caps.resources.subscribe
            assert "extra" not in {t.name for t in (await client.list_tools()).tools}
            await client.session.subscribe_resource("memory://knowledge-graph")
            grown = await client.call_tool("grow", {})
            assert not grown.is_error, text(grown)
            await heard.wait("notifications/tools/list_changed")
            await heard.wait("notifications/prompts/list_changed")
            # the proxy listed the upstream's tools again: the new one is offered (SAFE,
            # the policy's default tier) and runs
            assert "extra" in {t.name for t in (await client.list_tools()).tools}
            extra = await client.call_tool("extra", {"text": "x"})
            assert extra.structured_content == {"extra": "x"}, text(extra)
            assert "extra_prompt" in {p.name for p in (await client.list_prompts()).prompts}
            learned = await client.call_tool("learn", {"fact": "Ada wrote the first program"})
            assert learned.structured_content == {"uri": "memory://facts/1"}
            await heard.wait("notifications/resources/list_changed")
            await heard.wait("notifications/resources/updated")
            updated = heard.params[heard.methods.index("notifications/resources/updated")]
            assert str(updated.uri) == "memory://knowledge-graph"
            uris = {r.uri for r in (await client.list_resources()).resources}
            assert "memory://facts/1" in uris
            graph = await client.read_resource("memory://knowledge-graph")
            assert json.loads(contents_text(graph))["facts"] == ["Ada wrote the first program"]
            await client.session.unsubscribe_resource("memory://knowledge-graph")

    asyncio.run(body())
    assert [(e["op"], e["uri"]) for e in ops(ledger)] == [
        ("subscribe", "memory://knowledge-graph"),
        ("unsubscribe", "memory://knowledge-graph"),
    ]
    assert journaled(conn) == (0, 0)


def test_list_changed_reaches_a_2026_client_on_its_listen_stream(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    async def body() -> None:
        async with stdio_client(policy(tmp_path, ONE), dsn, ledger, mode="auto") as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(tools_list_changed=True, resources_list_changed=True) as sub:
                await client.call_tool("grow", {})
                event = await asyncio.wait_for(sub.__anext__(), 10)
                assert type(event).__name__ == "ToolsListChanged"
                await client.call_tool("learn", {"fact": "f"})
                event = await asyncio.wait_for(sub.__anext__(), 10)
                assert type(event).__name__ == "ResourcesListChanged"
            assert "extra" in {t.name for t in (await client.list_tools()).tools}

    asyncio.run(body())


def roots_client(config: Path, dsn: str, ledger: Path, asked: list[int]) -> Client:
    """A handshake-era client that declares the root file:///work/project."""

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        asked.append(1)
        root = types.Root.model_validate({"uri": "file:///work/project", "name": "project"})
        return types.ListRootsResult(roots=[root])

    client = stdio_client(config, dsn, ledger, mode="legacy")
    client.list_roots_callback = roots
    return client


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_roots_are_asked_of_the_client_and_their_change_told_upstream(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A shared upstream the operator opted in (roots = "client")."""
    asked: list[int] = []

    async def body() -> None:
        config = policy(tmp_path, ONE + 'roots = "client"\n')
        async with roots_client(config, dsn, ledger, asked) as client:
            listed = await client.call_tool("client_roots", {})
            assert listed.structured_content == {"roots": ["file:///work/project"]}, text(listed)
            assert asked == [1]
            await client.session.send_roots_list_changed()
            await asyncio.to_thread(
                wait_for, lambda: any(e["op"] == "roots_changed" for e in ops(ledger))
            )

    asyncio.run(body())


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize(
    ("setting", "answered"),
    [("", []), ('roots = ["file:///srv/sandbox"]\n', ["file:///srv/sandbox"])],
    ids=["default-none", "operator-list"],
)
def test_a_shared_upstream_is_not_governed_by_a_clients_roots(
    tmp_path: Path, dsn: str, ledger: Path, setting: str, answered: list[str]
) -> None:
    """By default a shared upstream asking for roots is answered an empty list (or the
    operator's list): a client declaring its roots never widens it for every client, and
    its roots changing is not passed on."""
    asked: list[int] = []

    async def body() -> None:
        async with roots_client(policy(tmp_path, ONE + setting), dsn, ledger, asked) as client:
            listed = await client.call_tool("client_roots", {})
            assert listed.structured_content == {"roots": answered}, text(listed)
            await client.session.send_roots_list_changed()
            await client.call_tool("echo", {"text": "after"})  # the notification went by
            await asyncio.sleep(0.5)

    asyncio.run(body())
    assert asked == []
    assert not any(e["op"] == "roots_changed" for e in ops(ledger))


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_a_per_session_upstream_is_wired_to_its_own_client(
    tmp_path: Path, dsn: str, ledger: Path
) -> None:
    """A per-session process asks its own client for roots (the default for per_session),
    its change notifications reach that client, its roots changing is told to it, and the
    session's resource and prompt reads go to it (before the session's first call, to the
    process started at proxy start)."""
    asked: list[int] = []
    heard = Heard()

    async def facts(client: Client) -> list[str]:
        graph = await client.read_resource("memory://knowledge-graph")
        return cast(list[str], json.loads(contents_text(graph))["facts"])

    async def body() -> None:
        config = policy(tmp_path, ONE + 'instances = "per_session"\n')
        client = roots_client(config, dsn, ledger, asked)
        client.message_handler = heard
        async with client:
            assert await facts(client) == []  # no session process yet
            listed = await client.call_tool("client_roots", {})
            assert listed.structured_content == {"roots": ["file:///work/project"]}, text(listed)
            assert asked == [1]
            learned = await client.call_tool("learn", {"fact": "Ada wrote the first program"})
            assert learned.structured_content == {"uri": "memory://facts/1"}, text(learned)
            await heard.wait("notifications/resources/list_changed")
            assert await facts(client) == ["Ada wrote the first program"]
            uris = {r.uri for r in (await client.list_resources()).resources}
            assert "memory://facts/1" in uris
            grown = await client.call_tool("grow", {})
            assert not grown.is_error, text(grown)
            await heard.wait("notifications/prompts/list_changed")
            assert "extra_prompt" in {p.name for p in (await client.list_prompts()).prompts}
            await client.session.send_roots_list_changed()
            await asyncio.to_thread(
                wait_for, lambda: any(e["op"] == "roots_changed" for e in ops(ledger))
            )

    asyncio.run(body())


def test_passthrough_over_streamable_http(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    proxy = HttpProxy(policy(tmp_path, TWO), dsn, ledger)
    http_proxies.append(proxy)
    heard = Heard()

    async def body() -> None:
        client = proxy.client()
        client.message_handler = heard
        async with client:
            await check_reads(client, prefix="lib+", name="lib__")
            echoed = await client.call_tool("lib__echo", {"text": "over http"})
            assert echoed.structured_content == {"text": "over http"}
            await client.call_tool("lib__grow", {})
            await heard.wait("notifications/tools/list_changed")
            assert "lib__extra" in {t.name for t in (await client.list_tools()).tools}
        async with Client(proxy.url, read_timeout_seconds=60) as modern:  # 2026 era
            await check_reads(modern, prefix="lib+", name="lib__")

    asyncio.run(body())
    assert journaled(conn) == (0, 0)


RELAYED = """
[upstreams.crm]
command = ["python", "tests/mcp_upstream_server.py"]
[upstreams.crm.tools.echo]
tier = "safe"
[upstreams.crm.tools.create_user]
tier = "compensable"
compensation.delete_user = { user_id = "result.user_id", idempotency_key = "undo_id" }
"""


class Wire:
    """`undolog mcp-proxy` over stdio, spoken to line by line."""

    def __init__(self, config: Path, dsn: str, ledger: Path) -> None:
        self.process = stdio_proxy(config, dsn, ledger)
        self.ids = 0

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params or {}}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        while True:  # notifications (progress) may come first
            answer: dict[str, Any] = json.loads(self.process.stdout.readline())
            if answer.get("id") == self.ids:
                return answer

    def notify(self, method: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process.stdout.close()


MODERN = {
    types.PROTOCOL_VERSION_META_KEY: "2026-07-28",
    types.CLIENT_INFO_META_KEY: {"name": "wire", "version": "1"},
    types.CLIENT_CAPABILITIES_META_KEY: {},
}


@pytest.mark.parametrize("era", ["2026", "handshake"])
def test_calls_relayed_at_the_message_level_answer_as_the_sdk_does(
    era: str, tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The SAFE and COMPENSABLE calls the proxy answers without the SDK's server (plain
    _meta) and the ones it leaves to it (a progress token) give the same answers on the
    wire, in the era's shape, and the journaled ones are journaled alike."""
    wire = Wire(policy(tmp_path, RELAYED), dsn, ledger)
    meta: dict[str, Any] = dict(MODERN) if era == "2026" else {}
    try:
        if era == "handshake":
            started = wire.send(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "wire", "version": "1"},
                },
            )
            assert "result" in started, started
            wire.notify("notifications/initialized")
        listed = wire.send("tools/list", {"_meta": meta})
        assert {"echo", "create_user"} <= {t["name"] for t in listed["result"]["tools"]}
        answers: list[dict[str, Any]] = []
        for extra in ({}, {"progressToken": "p"}):  # relayed, then the SDK's path
            for name, args in (
                ("echo", {"text": "hi"}),
                ("create_user", {"email": f"{len(answers)}@x", "name": "A"}),
            ):
                answer = wire.send(
                    "tools/call", {"name": name, "arguments": args, "_meta": {**meta, **extra}}
                )
                assert "result" in answer, answer
                answers.append(answer["result"])
        relayed_echo, relayed_made, sdk_echo, sdk_made = answers
        for result in answers:
            assert not result["isError"], result
            if era == "2026":
                assert result["resultType"] == "complete"
                assert result["_meta"][types.SERVER_INFO_META_KEY]["name"] == "undolog-mcp-proxy"
            else:
                assert "resultType" not in result
                assert types.SERVER_INFO_META_KEY not in result.get("_meta", {})
        assert relayed_echo["structuredContent"] == sdk_echo["structuredContent"] == {"text": "hi"}
        assert relayed_made["structuredContent"] == {"user_id": 1, "email": "0@x"}
        assert sdk_made["structuredContent"] == {"user_id": 2, "email": "2@x"}
        # one session for the connection, whichever path answered
        assert relayed_made["_meta"][SESSION] == sdk_made["_meta"][SESSION]
        unknown = wire.send("tools/call", {"name": "nope", "arguments": {}, "_meta": meta})
        assert unknown["result"]["isError"], unknown
    finally:
        wire.close()
    states = conn.execute(
        "SELECT args->>'email', state FROM undolog.undolog_effect_log ORDER BY 1"
    ).fetchall()
    assert states == [("0@x", "committed"), ("2@x", "committed")]
    assert [s for _, s in sessions(conn)] == ["completed"]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_a_tell_model_tool_dropped_and_offered_again_keeps_its_policy(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """The upstream stops offering an irreversible tell_model tool, then offers it again:
    the proxy lists it again with the policy's tier and on_reject (registered in the
    journal as at start, so not refused as a changed registration), and a rejection of it
    is told to the model, the session going on."""
    heard = Heard()
    body_toml = ONE.replace("[proxy]\n", "[proxy]\nhold_seconds = 2\n")
    config = policy(
        tmp_path,
        body_toml + '[upstreams.lib.tools.echo]\ntier = "irreversible"\non_reject = "tell_model"\n',
    )

    async def body() -> None:
        client = stdio_client(config, dsn, ledger, mode="legacy")
        client.message_handler = heard
        async with client:
            assert not (await client.call_tool("drop_echo", {})).is_error
            await heard.wait("notifications/tools/list_changed")
            assert "echo" not in {t.name for t in (await client.list_tools()).tools}
            heard.methods.clear()
            assert not (await client.call_tool("restore_echo", {})).is_error
            await heard.wait("notifications/tools/list_changed")
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "echo" in tools and "IRREVERSIBLE" in (tools["echo"].description or "")
            call = asyncio.create_task(client.call_tool("echo", {"text": "hi"}))
            approval_id = await asyncio.to_thread(wait_for, lambda: pending_approval(conn))
            approvals.reject(conn, approval_id, "bob", "not now")
            rejected = await call
            assert rejected.is_error and "goes on" in text(rejected), text(rejected)
            assert [s for _, s in sessions(conn)] == ["active"]

    asyncio.run(body())
    assert [s for _, s in sessions(conn)] == ["completed"]
