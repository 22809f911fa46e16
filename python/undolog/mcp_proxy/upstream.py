"""The proxy's connections to its upstream MCP servers (a stdio command or a URL each)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any, cast

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters

from undolog.mcp_proxy.policy import Upstream

log = logging.getLogger("undolog.mcp_proxy")


class UpstreamDown(Exception):
    """The upstream cannot be reached: the call was not sent."""


class OutcomeUnknown(Exception):
    """The call was sent but no answer came (timeout, or the connection broke meanwhile):
    it may have acted."""


class UpstreamConnection:
    """One upstream server: connected at start, reconnected once when found closed."""

    def __init__(self, spec: Upstream, call_timeout: float) -> None:
        self.spec = spec
        self.call_timeout = call_timeout
        self.tools: dict[str, types.Tool] = {}
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Client | None = None

    def _target(self) -> StdioServerParameters | str:
        if self.spec.url is not None:
            return self.spec.url
        assert self.spec.command is not None
        return StdioServerParameters(
            command=self.spec.command[0],
            args=self.spec.command[1:],
            env={**os.environ, **self.spec.env},
            cwd=self.spec.cwd,
        )

    async def connect(self) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            client = await stack.enter_async_context(
                Client(self._target(), read_timeout_seconds=self.call_timeout, cache=None)
            )
            tools: dict[str, types.Tool] = {}
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.update({t.name: t for t in page.tools})
                cursor = page.next_cursor
                if not cursor:
                    break
        except BaseException:
            with contextlib.suppress(Exception):
                await stack.aclose()
            raise
        self._stack, self._client, self.tools = stack, client, tools

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    def listing(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"inputSchema": t.input_schema, "outputSchema": t.output_schema}
            for name, t in self.tools.items()
        }

    async def call(
        self, tool: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        """Call one tool. UpstreamDown: not sent (nothing ran); OutcomeUnknown: sent, no
        answer; an MCPError the upstream answered with means the call was refused."""
        if self._client is None:
            try:
                await self.connect()
            except Exception as exc:
                raise UpstreamDown(f"upstream {self.spec.name!r} is unreachable: {exc}") from exc
        assert self._client is not None
        try:
            request_meta = cast(types.RequestParamsMeta, dict(meta)) if meta else None
            return await self._client.call_tool(tool, dict(arguments), meta=request_meta)
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise OutcomeUnknown(
                    f"upstream {self.spec.name!r} did not answer {tool} within "
                    f"{self.call_timeout:g} s"
                ) from exc
            if exc.error.code == types.CONNECTION_CLOSED:
                await self.close()
                raise OutcomeUnknown(
                    f"the connection to upstream {self.spec.name!r} closed during {tool}"
                ) from exc
            raise
        except (OSError, EOFError) as exc:
            await self.close()
            raise OutcomeUnknown(
                f"the connection to upstream {self.spec.name!r} broke during {tool}: {exc}"
            ) from exc


async def connect_all(
    upstreams: Mapping[str, Upstream], call_timeout: float
) -> dict[str, UpstreamConnection]:
    """Connect to every upstream and list its tools; the ones connected so far are closed
    if one fails."""
    out: dict[str, UpstreamConnection] = {}
    try:
        for name, spec in upstreams.items():
            conn = UpstreamConnection(spec, call_timeout)
            try:
                await conn.connect()
            except Exception as exc:
                raise UpstreamDown(f"upstream {name!r} is unreachable at start: {exc}") from exc
            out[name] = conn
    except BaseException:
        for conn in out.values():
            await conn.close()
        raise
    return out
