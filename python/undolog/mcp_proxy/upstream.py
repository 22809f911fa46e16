"""The proxy's connections to its upstream MCP servers (a stdio command or a URL each)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import mcp_types as types
import pydantic
from mcp import Client, MCPError
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from undolog.mcp_proxy.policy import Upstream
from undolog.mcp_proxy.relay import TapClosed, Unsendable, UpstreamTap, encodable
from undolog.mcp_proxy.stdio import UpstreamProcess, describe, innermost

log = logging.getLogger("undolog.mcp_proxy")
START_TIMEOUT = 30.0  # seconds an upstream may take to answer its handshake


class UpstreamDown(Exception):
    """The upstream cannot be reached: the call was not sent."""


class OutcomeUnknown(Exception):
    """The call was sent but no answer came (timeout, or the connection broke meanwhile):
    it may have acted. ``late``: when the caller asked for it (``call(late_seconds=)``)
    and the call timed out, the answer still awaited, for at most ``late_seconds`` more
    (its result, or an exception: none came); cancelling it gives up on it.
    ``timed_out``: no answer within the timeout (else the connection broke)."""

    def __init__(
        self,
        message: str,
        late: asyncio.Future[types.CallToolResult] | None = None,
        *,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.late = late
        self.timed_out = timed_out or late is not None


class ResultUnreadable(OutcomeUnknown):
    """The call was sent and answered, but its answer is no valid CallToolResult (a text
    item without its text, a content type of a newer specification): the upstream acted
    (or, ``isError`` in what came, refused), and what it said cannot be read whole.
    ``received``: the answer's result as it came (None when the SDK read it: its client
    keeps no copy)."""

    def __init__(self, message: str, received: Any = None) -> None:
        super().__init__(message)
        self.received = received


def _unreadable(
    upstream: str, tool: str, exc: pydantic.ValidationError, received: Any = None
) -> ResultUnreadable:
    """The error of a result that will not validate, said in one line (not the SDK's
    dozen, one per content type it tried)."""
    first = exc.errors()[0] if exc.error_count() else None
    where = ".".join(str(p) for p in first["loc"]) if first else ""
    why = f"{where}: {first['msg']}" if first else str(exc).splitlines()[0]
    count = exc.error_count()
    return ResultUnreadable(
        f"upstream {upstream!r} answered {tool} with what is not a valid MCP tool result "
        f"({count} validation error{'s' if count != 1 else ''}; the first: {why})"[:1000],
        received,
    )


def _unsendable(tool: str) -> MCPError:
    """The refusal of a call whose arguments cannot be sent as UTF-8 JSON (a lone UTF-16
    surrogate in a string): nothing sent, nothing ran."""
    return MCPError(
        code=types.INVALID_PARAMS,
        message=f"{tool}: a string in the arguments is not valid Unicode "
        "(a lone UTF-16 surrogate): not sent, nothing ran",
    )


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
        self._tap: UpstreamTap | None = None
        # set by the proxy's server: where the upstream's roots/list requests and its
        # change notifications go (see passthrough.py)
        self.on_roots: Callable[[], Awaitable[types.ListRootsResult | types.ErrorData]] | None = (
            None
        )
        self.on_notification: Callable[[str, str, dict[str, Any]], Awaitable[None]] | None = None
        # set by the proxy's server: called once a reconnection listed the tools again
        # (self.tools: a restarted upstream may list them changed, with no list_changed)
        self.on_relisted: Callable[[UpstreamConnection], Awaitable[None]] | None = None
        self._connected_once = False
        self.capabilities: types.ServerCapabilities | None = None

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

    def _tapped(self) -> UpstreamTap:
        target = self._target()
        return UpstreamTap(
            streamable_http_client(target) if isinstance(target, str) else target,
            self._notified,
        )

    async def _notified(self, method: str, params: dict[str, Any]) -> None:
        if self.on_notification is not None:
            await self.on_notification(self.spec.name, method, params)

    async def _roots(
        self, context: ClientRequestContext
    ) -> types.ListRootsResult | types.ErrorData:
        if self.on_roots is None:
            return types.ListRootsResult(roots=[])
        return await self.on_roots()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        closing = self._closing  # this connection's; a reconnection makes its own
        client: Client | None = None
        tap = self._tapped()
        try:
            # The handshake era: the one in which an upstream sends its change
            # notifications and asks for roots on the connection itself (every dual-era
            # server speaks it), and the one the proxy relays calls in unparsed.
            async with Client(
                tap,
                # the handshake and listings: a process starting (imports, a package
                # download by npx/uvx) is not a tool call; calls carry call_timeout
                read_timeout_seconds=max(self.call_timeout, START_TIMEOUT),
                cache=None,
                mode="legacy",
                list_roots_callback=self._roots,
            ) as client:
                self._tap = tap
                self.capabilities = client.server_capabilities
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
        """Connect (again) and list the upstream's tools; UpstreamDown when it fails. A
        reconnection (not the first connection) then calls ``on_relisted``, before the
        call that reconnected goes on: the tools it listed are checked as a
        tools/list_changed's are."""
        async with self._connecting:
            if self._client is not None:
                return
            self._tap = None
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
            relisted, self._connected_once = self._connected_once, True
            if relisted and self.on_relisted is not None:
                try:
                    await self.on_relisted(self)
                except Exception:  # the connection stands; the call's own check refuses
                    log.exception("upstream %s: checking its tools again failed", self.spec.name)

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
        that nothing is journaled for a call that cannot be sent.

        An upstream whose connection closed between calls (its process died, its server
        ended the stream) is lost even when nothing was sent into it since: its tap saw
        the end. Sent into it (the SDK's client session, whose owner task has not noticed,
        takes the request), a call was answered "connection closed" and counted as of
        unknown outcome, so that the session was rolled back for a call that never left
        the proxy; a read was refused as unreachable, with no reconnection, ever."""
        client, tap = self._client, self._tap
        if client is not None and tap is not None and tap.closed:
            log.warning("upstream %s: its connection closed; connecting again", self.spec.name)
            self._lost(client)
        if self._client is None:
            await self.connect()

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        *,
        late_seconds: float = 0.0,
    ) -> types.CallToolResult:
        """Call one tool. UpstreamDown: not sent (nothing ran); OutcomeUnknown: sent, no
        answer (ResultUnreadable: an answer that is no valid result); an MCPError the
        upstream answered with means the call was refused.

        ``late_seconds`` > 0: a call that does not answer within the call timeout is not
        given up on: the OutcomeUnknown raised then carries (``late``) the call still
        waiting for its answer, for at most ``late_seconds`` more."""
        if late_seconds <= 0:
            return await self._call_once(tool, arguments, meta, self.call_timeout)
        await self.ensure_connected()
        attempt = asyncio.ensure_future(
            self._call_once(tool, arguments, meta, self.call_timeout + late_seconds)
        )
        try:
            return await asyncio.wait_for(asyncio.shield(attempt), self.call_timeout)
        except TimeoutError:
            raise OutcomeUnknown(
                f"upstream {self.spec.name!r} did not answer {tool} within {self.call_timeout:g} s",
                late=attempt,
            ) from None
        except BaseException:
            attempt.cancel()  # cancelled, or it failed itself (then a no-op)
            raise

    async def _call_once(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None,
        timeout: float,
    ) -> types.CallToolResult:
        await self.ensure_connected()
        if not encodable({"arguments": dict(arguments), "_meta": dict(meta or {})}):
            raise _unsendable(tool)  # never into a writer that would close the connection
        if self.relayable() is not None:
            received = await self.call_raw(tool, arguments, meta, timeout=timeout)
            try:
                return types.CallToolResult.model_validate(received)
            except pydantic.ValidationError as exc:  # it answered: it ran (or refused)
                raise _unreadable(self.spec.name, tool, exc, received) from exc
        client = self._client
        if client is None:
            raise UpstreamDown(f"upstream {self.spec.name!r} is unreachable")
        try:
            request_meta = cast(types.RequestParamsMeta, dict(meta)) if meta else None
            return await client.call_tool(
                tool, dict(arguments), read_timeout_seconds=timeout, meta=request_meta
            )
        except MCPError as exc:
            raise self._unknown(client, tool, exc, timeout) from exc
        except pydantic.ValidationError as exc:  # answered, the connection still good
            raise _unreadable(self.spec.name, tool, exc) from exc
        except Exception as exc:  # the transport broke under the call
            self._lost(client)
            raise OutcomeUnknown(
                f"the connection to upstream {self.spec.name!r} broke during {tool}: {exc}"
            ) from exc

    async def call_raw(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``call`` as one JSON-RPC message each way (the answer's result as it came),
        with the same errors: the client at the far end validates the result. ``timeout``:
        the call timeout unless given."""
        timeout = self.call_timeout if timeout is None else timeout
        await self.ensure_connected()
        client, tap = self._client, self.relayable()
        if client is None or tap is None:
            raise UpstreamDown(f"upstream {self.spec.name!r} is unreachable")
        params: dict[str, Any] = {"name": tool, "arguments": dict(arguments)}
        if meta:
            params["_meta"] = dict(meta)
        try:
            return await tap.request("tools/call", params, timeout)
        except TimeoutError as exc:
            raise OutcomeUnknown(
                f"upstream {self.spec.name!r} did not answer {tool} within {timeout:g} s",
                timed_out=True,
            ) from exc
        except TapClosed as exc:
            self._lost(client)
            raise OutcomeUnknown(
                f"the connection to upstream {self.spec.name!r} closed during {tool}"
            ) from exc
        except MCPError as exc:
            raise self._unknown(client, tool, exc, timeout) from exc
        except Unsendable as exc:  # not sent: this call refused, the connection untouched
            raise _unsendable(tool) from exc

    def _unknown(self, client: Client, tool: str, exc: MCPError, timeout: float) -> Exception:
        """An MCPError as the caller should see it: a timeout or a closed connection means
        the outcome is unknown; anything else the upstream answered (a refusal)."""
        if exc.error.code == types.REQUEST_TIMEOUT:
            return OutcomeUnknown(
                f"upstream {self.spec.name!r} did not answer {tool} within {timeout:g} s",
                timed_out=True,
            )
        if exc.error.code == types.CONNECTION_CLOSED:
            self._lost(client)
            return OutcomeUnknown(
                f"the connection to upstream {self.spec.name!r} closed during {tool}"
            )
        return exc

    def relayable(self) -> UpstreamTap | None:
        """The tap to send unparsed requests into, when the connection is up and in the
        handshake era (whose messages need no per-request envelope)."""
        client = self._client
        if client is None or self._tap is None or self._tap.closed:
            return None
        if client.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None
        return self._tap

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request of any method (a resource read, a prompt): its result; MCPError as
        the upstream answered; UpstreamDown when it cannot be sent or answered."""
        await self.ensure_connected()
        client, tap = self._client, self.relayable()
        if client is None or tap is None:
            raise UpstreamDown(f"upstream {self.spec.name!r} is unreachable")
        try:
            return await tap.request(method, params, self.call_timeout)
        except TimeoutError as exc:
            raise UpstreamDown(
                f"upstream {self.spec.name!r} did not answer {method} within "
                f"{self.call_timeout:g} s"
            ) from exc
        except TapClosed as exc:
            self._lost(client)
            raise UpstreamDown(f"upstream {self.spec.name!r}: {exc}") from exc
        except Unsendable as exc:  # not sent: this request refused, the connection untouched
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from exc

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        tap = self.relayable()
        if tap is not None:
            await tap.notify(method, params)


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
