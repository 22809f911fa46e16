"""The proxy's connections to its upstream MCP servers (a stdio command or a URL each)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any, cast

import mcp_types as types
from mcp import Client, MCPError

from undolog.mcp_proxy.policy import Upstream
from undolog.mcp_proxy.stdio import UpstreamProcess, describe, innermost

log = logging.getLogger("undolog.mcp_proxy")


class UpstreamDown(Exception):
    """The upstream cannot be reached: the call was not sent."""


class OutcomeUnknown(Exception):
    """The call was sent but no answer came (timeout, or the connection broke meanwhile):
    it may have acted."""


class UpstreamConnection:
    """One upstream server. Its MCP client lives in a task of its own, so that an upstream
    that dies (which ends the client's task group) takes down only this connection, never
    the proxy; the next call reconnects."""

    def __init__(self, spec: Upstream, call_timeout: float) -> None:
        self.spec = spec
        self.call_timeout = call_timeout
        self.tools: dict[str, types.Tool] = {}
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._connecting = asyncio.Lock()
        self._process: UpstreamProcess | None = None  # the latest run of a stdio upstream

    def _target(self) -> Any:
        if self.spec.url is not None:
            return self.spec.url
        assert self.spec.command is not None
        self._process = UpstreamProcess(
            self.spec.command, {**os.environ, **self.spec.env}, self.spec.cwd
        )
        return self._process.open()

    def _why(self, exc: BaseException) -> str:
        """What went wrong, said plainly (not the client's "unhandled errors in a
        TaskGroup"): for a command, how its process ended and its stderr's last lines."""
        if self._process is not None:
            return self._process.why(innermost(exc))
        return f"{self.spec.url}: {describe(exc)}"

    async def _own(self, ready: asyncio.Future[None]) -> None:
        closing = self._closing  # this connection's; a reconnection makes its own
        client: Client | None = None
        try:
            async with Client(
                self._target(), read_timeout_seconds=self.call_timeout, cache=None
            ) as client:
                tools: dict[str, types.Tool] = {}
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.update({t.name: t for t in page.tools})
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools, self._client = tools, client
                ready.set_result(None)
                await closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(UpstreamDown(self._why(exc)))
            elif not closing.is_set():
                log.warning("upstream %s: connection lost: %s", self.spec.name, exc)
        finally:
            if self._client is client:  # not a newer connection's
                self._client = None

    def _lost(self, client: Client) -> None:
        """The connection died under a call: the next call reconnects before anything is
        journaled for it, instead of being sent into the dead connection (whose owner task
        may not have noticed yet) and counted as unknown."""
        if self._client is client:
            self._client = None
            self._closing.set()

    async def connect(self) -> None:
        """Connect (again) and list the upstream's tools; UpstreamDown when it fails."""
        async with self._connecting:
            if self._client is not None:
                return
            self._closing = asyncio.Event()
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._owner = asyncio.create_task(self._own(ready), name=f"upstream-{self.spec.name}")
            try:
                await ready
            except Exception as exc:
                failed = "is unreachable" if self.spec.url is not None else "did not start"
                raise UpstreamDown(f"upstream {self.spec.name!r} {failed}: {exc}") from (
                    exc.__cause__ or exc
                )

    async def close(self) -> None:
        self._closing.set()
        if self._owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._owner, 10)
        self._client = None

    def listing(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"inputSchema": t.input_schema, "outputSchema": t.output_schema}
            for name, t in self.tools.items()
        }

    async def ensure_connected(self) -> None:
        """Before a call is journaled: reconnect a lost upstream, or raise UpstreamDown so
        that nothing is journaled for a call that cannot be sent."""
        if self._client is None:
            await self.connect()

    async def call(
        self, tool: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        """Call one tool. UpstreamDown: not sent (nothing ran); OutcomeUnknown: sent, no
        answer; an MCPError the upstream answered with means the call was refused."""
        await self.ensure_connected()
        client = self._client
        if client is None:
            raise UpstreamDown(f"upstream {self.spec.name!r} is unreachable")
        try:
            request_meta = cast(types.RequestParamsMeta, dict(meta)) if meta else None
            return await client.call_tool(tool, dict(arguments), meta=request_meta)
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise OutcomeUnknown(
                    f"upstream {self.spec.name!r} did not answer {tool} within "
                    f"{self.call_timeout:g} s"
                ) from exc
            if exc.error.code == types.CONNECTION_CLOSED:
                self._lost(client)
                raise OutcomeUnknown(
                    f"the connection to upstream {self.spec.name!r} closed during {tool}"
                ) from exc
            raise
        except Exception as exc:  # the transport broke under the call
            self._lost(client)
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
            await conn.connect()
            out[name] = conn
    except BaseException:
        for conn in out.values():
            await conn.close()
        raise
    return out
