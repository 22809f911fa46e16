"""What the proxy passes through without journaling: resources, prompts, roots, and the
upstreams' change notifications. All of them are reads (SAFE): nothing here acts, so
nothing is journaled, and no session is begun for them.

Names. With one upstream the client sees its resources, templates and prompts as the
upstream names them. With several, each is namespaced as tools are: a prompt ``NAME__PROMPT``
(and a resource's or template's ``name`` ``NAME__NAME``), and a resource URI or URI template
gets ``NAME+`` in front of its scheme (``crm+memory://knowledge-graph``), which is still a
URI; the proxy strips the prefix to route a read, a subscription or a completion.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from undolog.mcp_proxy.proxy import McpProxy, ProxySession, client_connection
from undolog.mcp_proxy.upstream import UpstreamConnection, UpstreamDown

log = logging.getLogger("undolog.mcp_proxy")

PAGE_CAP = 100  # pages read from one upstream for one listing


class Passthrough:
    """The proxy's non-tool surface, and the relay of notifications both ways."""

    def __init__(self, proxy: McpProxy) -> None:
        self.proxy = proxy
        self.upstreams = proxy.upstreams
        self.several = len(self.upstreams) > 1
        self.bus = InMemorySubscriptionBus()  # 2026-era clients' subscriptions/listen
        # handshake-era client connections, to send notifications and ask for roots:
        # connection -> a session object of it (sends on the connection's own stream)
        self.clients: dict[Any, Any] = {}
        self.subscribed: dict[str, set[Any]] = {}  # exposed URI -> connections
        # upstream -> the number of its latest tools/list taken, and of the latest followed
        self._listings: dict[str, int] = {}
        self._followed: dict[str, int] = {}
        for up in self.upstreams.values():
            up.on_notification = self.from_upstream
            up.on_relisted = self.relisted
            up.on_roots = functools.partial(self.roots, up.spec.name, None)
        proxy.wire_instance = self._wire

    def _wire(self, ps: ProxySession, up: UpstreamConnection) -> None:
        """A session's own process: it is asked its session's client's roots, and what it
        tells reaches that client."""
        up.on_roots = functools.partial(self.roots, up.spec.name, ps)
        up.on_notification = functools.partial(self.from_instance, ps)

    # -- which upstreams serve what ------------------------------------------------------

    def serving(self, capability: str) -> list[UpstreamConnection]:
        return [
            up
            for up in self.upstreams.values()
            if up.capabilities is not None and getattr(up.capabilities, capability) is not None
        ]

    def subscribable(self) -> bool:
        return any(
            up.capabilities is not None
            and up.capabilities.resources is not None
            and bool(up.capabilities.resources.subscribe)
            for up in self.upstreams.values()
        )

    def _for(
        self, ctx: ServerRequestContext[Any, Any], up: UpstreamConnection
    ) -> UpstreamConnection:
        """The process a read of this upstream goes to: for a per-session upstream, the
        process of the request's session once its first call started it."""
        if self.proxy.policy.upstreams[up.spec.name].instances == "shared":
            return up
        ps = self.proxy.current_session(ctx)
        own = ps.instances.get(up.spec.name) if ps is not None else None
        return own if own is not None and own.capabilities is not None else up

    def _uri_out(self, upstream: str, uri: str) -> str:
        return f"{upstream}+{uri}" if self.several else uri

    def _name_out(self, upstream: str, name: str) -> str:
        return f"{upstream}__{name}" if self.several else name

    def _uri_in(self, uri: str) -> tuple[UpstreamConnection, str]:
        if not self.several:
            return next(iter(self.upstreams.values())), uri
        name, sep, rest = uri.partition("+")
        if sep and name in self.upstreams:
            return self.upstreams[name], rest
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown resource {uri!r}: with several upstreams a resource URI starts "
            f"with the upstream's name and '+' ({', '.join(sorted(self.upstreams))}); "
            "list the resources to see them",
        )

    def _name_in(self, name: str, what: str) -> tuple[UpstreamConnection, str]:
        if not self.several:
            return next(iter(self.upstreams.values())), name
        up, sep, rest = name.partition("__")
        if sep and up in self.upstreams:
            return self.upstreams[up], rest
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown {what} {name!r}: with several upstreams it is named UPSTREAM__NAME; "
            f"list the {what}s to see them",
        )

    def remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep a handshake-era connection (from its first request) to send it
        notifications and ask it for roots."""
        connection = client_connection(ctx)
        if connection is None or connection in self.clients:
            return
        if getattr(connection, "protocol_version", None) not in _handshake():
            return
        self.clients[connection] = ctx.session
        with contextlib.suppress(Exception):
            connection.exit_stack.push_callback(self._forget, connection)

    def _forget(self, connection: Any) -> None:
        self.clients.pop(connection, None)
        for holders in self.subscribed.values():
            holders.discard(connection)

    # -- requests, relayed ---------------------------------------------------------------

    async def _ask(self, up: UpstreamConnection, method: str, params: dict[str, Any]) -> Any:
        try:
            return await up.request(method, params)
        except UpstreamDown as exc:
            raise MCPError(
                code=types.INTERNAL_ERROR, message=f"{exc}; try again when it is back"
            ) from exc

    async def _listing(self, up: UpstreamConnection, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(PAGE_CAP):
            result = await self._ask(up, method, {"cursor": cursor} if cursor else {})
            items.extend(result.get(key) or [])
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return items

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self.remember(ctx)
        out = []
        for shared in self.serving("resources"):
            up = self._for(ctx, shared)
            for item in await self._listing(up, "resources/list", "resources"):
                item = {**item, "uri": self._uri_out(up.spec.name, item["uri"])}
                item["name"] = self._name_out(up.spec.name, item.get("name", ""))
                out.append(item)
        return types.ListResourcesResult.model_validate({"resources": out})

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self.remember(ctx)
        out = []
        for shared in self.serving("resources"):
            up = self._for(ctx, shared)
            for item in await self._listing(up, "resources/templates/list", "resourceTemplates"):
                item = {**item, "uriTemplate": self._uri_out(up.spec.name, item["uriTemplate"])}
                item["name"] = self._name_out(up.spec.name, item.get("name", ""))
                out.append(item)
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": out})

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self.remember(ctx)
        up, uri = self._uri_in(params.uri)
        result = await self._ask(self._for(ctx, up), "resources/read", {"uri": uri})
        contents = [
            {**c, "uri": self._uri_out(up.spec.name, c["uri"])} if "uri" in c else c
            for c in result.get("contents") or []
        ]
        return types.ReadResourceResult.model_validate({**result, "contents": contents})

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        self.remember(ctx)
        up, uri = self._uri_in(params.uri)
        caps = up.capabilities.resources if up.capabilities else None
        if caps is None or not caps.subscribe:
            raise MCPError(
                code=types.METHOD_NOT_FOUND,
                message=f"upstream {up.spec.name!r} does not offer resource subscriptions",
            )
        holders = self.subscribed.setdefault(params.uri, set())
        if not holders:
            await self._ask(up, "resources/subscribe", {"uri": uri})
        connection = client_connection(ctx)
        if connection is not None:
            holders.add(connection)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        up, uri = self._uri_in(params.uri)
        holders = self.subscribed.get(params.uri, set())
        holders.discard(client_connection(ctx))
        if not holders:
            self.subscribed.pop(params.uri, None)
            await self._ask(up, "resources/unsubscribe", {"uri": uri})
        return types.EmptyResult()

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self.remember(ctx)
        out = []
        for shared in self.serving("prompts"):
            up = self._for(ctx, shared)
            for item in await self._listing(up, "prompts/list", "prompts"):
                out.append({**item, "name": self._name_out(up.spec.name, item["name"])})
        return types.ListPromptsResult.model_validate({"prompts": out})

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        self.remember(ctx)
        up, name = self._name_in(params.name, "prompt")
        request: dict[str, Any] = {"name": name}
        if params.arguments is not None:
            request["arguments"] = params.arguments
        answer = await self._ask(self._for(ctx, up), "prompts/get", request)
        return types.GetPromptResult.model_validate(answer)

    # -- roots: the upstream asks, the client answers -----------------------------------

    async def roots(
        self, upstream: str, ps: ProxySession | None
    ) -> types.ListRootsResult | types.ErrorData:
        """An upstream's roots/list, answered as its policy says (``roots``): the
        operator's list, nothing, or a client's roots. A per-session process asks its own
        session's client; a shared upstream (roots = "client", opted in by the operator)
        the client connection that connected last of those still connected that declare
        roots. A server such as server-filesystem makes those roots its sandbox, so by
        default a shared one is told none: one client's roots would govern it for all."""
        setting = self.proxy.policy.upstreams[upstream].roots
        if isinstance(setting, tuple):
            return types.ListRootsResult(
                roots=[types.Root.model_validate({"uri": uri}) for uri in setting]
            )
        if setting == "none":
            return types.ListRootsResult(roots=[])
        if ps is not None:
            own = self.clients.get(ps.owner) if ps.owner is not None else None
            candidates = [own] if own is not None else []
        else:
            candidates = list(reversed(list(self.clients.values())))
        for session in candidates:
            caps = getattr(session, "client_capabilities", None)
            if caps is None or caps.roots is None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # deprecated in the 2026 era, not in this one
                    result: types.ListRootsResult = await session.list_roots()
                return result
            except Exception as exc:
                return types.ErrorData(
                    code=types.INTERNAL_ERROR, message=f"the client did not list its roots: {exc}"
                )
        return types.ListRootsResult(roots=[])

    async def client_roots_changed(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams | None
    ) -> None:
        self.remember(ctx)
        for up in self.upstreams.values():
            if self.proxy.policy.upstreams[up.spec.name].roots == "client":
                await up.notify("notifications/roots/list_changed")
        connection = client_connection(ctx)
        for ps in list(self.proxy.sessions.values()):
            if connection is None or ps.owner is not connection:
                continue
            for name, own in list(ps.instances.items()):
                if self.proxy.policy.upstreams[name].roots == "client":
                    await own.notify("notifications/roots/list_changed")

    async def client_initialized(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams | None
    ) -> None:
        self.remember(ctx)

    # -- change notifications: the upstream tells, the clients hear ---------------------

    async def from_upstream(self, upstream: str, method: str, params: dict[str, Any]) -> None:
        event: ServerEvent
        if method == "notifications/tools/list_changed":
            await self.refresh_tools(self.upstreams[upstream])
            event = ToolsListChanged()
        elif method == "notifications/prompts/list_changed":
            event = PromptsListChanged()
        elif method == "notifications/resources/list_changed":
            event = ResourcesListChanged()
        else:  # notifications/resources/updated
            uri = self._uri_out(upstream, str(params.get("uri", "")))
            await self.bus.publish(ResourceUpdated(uri=uri))
            for connection in list(self.subscribed.get(uri, ())):
                session = self.clients.get(connection)
                if session is not None:
                    await self._send(connection, session.send_resource_updated(uri))
            return
        await self._tell_clients(method, event)

    async def _tell_clients(self, method: str, event: ServerEvent) -> None:
        """A list change, told to every client (2026-era ones through the bus)."""
        await self.bus.publish(event)
        for connection, session in list(self.clients.items()):
            sender: Callable[[], Awaitable[None]] = {
                "notifications/tools/list_changed": session.send_tool_list_changed,
                "notifications/prompts/list_changed": session.send_prompt_list_changed,
                "notifications/resources/list_changed": session.send_resource_list_changed,
            }[method]
            await self._send(connection, sender())

    async def from_instance(
        self, ps: ProxySession, upstream: str, method: str, params: dict[str, Any]
    ) -> None:
        """A session's own process told something: its session's client hears it (the
        tool table follows the process started at proxy start, so a tools change is only
        passed on)."""
        session = self.clients.get(ps.owner) if ps.owner is not None else None
        if session is None:
            return  # a 2026-era or stateless client: it has no session stream to be told on
        if method == "notifications/resources/updated":
            uri = self._uri_out(upstream, str(params.get("uri", "")))
            if ps.owner in self.subscribed.get(uri, ()):
                await self._send(ps.owner, session.send_resource_updated(uri))
            return
        sender: Callable[[], Awaitable[None]] | None = {
            "notifications/tools/list_changed": session.send_tool_list_changed,
            "notifications/prompts/list_changed": session.send_prompt_list_changed,
            "notifications/resources/list_changed": session.send_resource_list_changed,
        }.get(method)
        if sender is not None:
            await self._send(ps.owner, sender())

    async def _send(self, connection: Any, sending: Awaitable[None]) -> None:
        try:
            await sending
        except Exception:  # that client is gone
            self._forget(connection)

    async def refresh_tools(self, up: UpstreamConnection) -> None:
        """The upstream's tools changed: list them again. A tool the policy names keeps
        its tier; a new one gets the policy's default tier (registered in the journal like
        those at start); a tool gone is no longer offered. Listings are followed one at a
        time (McpProxy.refresh_lock), and one taken before another that was followed
        already is dropped: the newest stands. (The lock is not held while listing: a
        listing that reconnects calls relisted, which takes it.)"""
        taken = self._take_listing(up)
        try:
            listed: dict[str, types.Tool] = {}
            for item in await self._listing(up, "tools/list", "tools"):
                tool = types.Tool.model_validate(item)
                listed[tool.name] = tool
        except Exception as exc:
            log.warning("upstream %s: re-listing its tools failed: %s", up.spec.name, exc)
            return
        await self._follow(up, listed, taken)

    async def relisted(self, up: UpstreamConnection) -> None:
        """A shared upstream connected again (it restarted, perhaps upgraded) and listed
        its tools: they are followed as after its tools/list_changed (a restart need not
        send one), as the newest listing, and the clients are told that the list
        changed."""
        if await self._follow(up, dict(up.tools), self._take_listing(up)):
            await self._tell_clients("notifications/tools/list_changed", ToolsListChanged())

    def _take_listing(self, up: UpstreamConnection) -> int:
        """The number of a listing of the upstream's tools, in the order they were taken."""
        name = up.spec.name
        taken = self._listings[name] = self._listings.get(name, 0) + 1
        return taken

    async def _follow(
        self, up: UpstreamConnection, listed: dict[str, types.Tool], taken: int
    ) -> bool:
        """The routes follow listing number `taken`, unless a newer one was followed
        meanwhile (an older one, its handling awaiting the journal, never undoes what a
        newer one decided): whether it was followed."""
        proxy, name = self.proxy, up.spec.name
        async with proxy.refresh_lock(name):
            if taken < self._followed.get(name, 0):
                return False
            self._followed[name] = taken
            up.tools = listed
            await proxy.reroute(name, listed)
        return True


def _handshake() -> tuple[str, ...]:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return tuple(HANDSHAKE_PROTOCOL_VERSIONS)
