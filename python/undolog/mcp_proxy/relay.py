"""The proxy's JSON-RPC message level: what it forwards without the SDK's session layers.

Two pieces, one on each side of the proxy:

- ``UpstreamTap`` wraps the transport of an upstream connection (stdio or streamable
  HTTP). The SDK's client session runs over it as usual (handshake, listings, the roots
  callback); besides, the proxy sends requests of its own into the same transport and
  takes their answers off it before the session sees them. A tool call, a resource read
  or a prompt is then one message out and one message in, with no result validation in
  the client session on the way (the client at the far end validates what it gets).
  Change notifications from the upstream are handed to a callback as they pass.
- ``relaying_stdio`` is the proxy's own stdio server transport: stdin and stdout on the
  event loop (no worker thread per message), and a hook that answers some requests (the
  SAFE tool calls) before the SDK's server parses them into its models.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from undolog.mcp_proxy.shapes import envelope_problem
from undolog.mcp_proxy.stdio import LINE_LIMIT, bounded_lines

log = logging.getLogger("undolog.mcp_proxy")

Streams = tuple[Any, Any]
LIST_CHANGED = {
    "notifications/tools/list_changed",
    "notifications/resources/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/updated",
}


class TapClosed(Exception):
    """The upstream transport closed while a request of the proxy's own was out."""


class Unsendable(ValueError):
    """A message that cannot be written as JSON in UTF-8 (a string with a lone UTF-16
    surrogate, as Python's JSON reader accepts): refused before it is sent, since a
    transport's writer failing on it would close the connection shared by every call."""


def encodable(value: Any) -> bool:
    """Whether ``value`` can be written as a JSON message in UTF-8 (a value of a type
    JSON lacks is left to the writer's own serialiser: only the text is checked)."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode()
    except (ValueError, TypeError, RecursionError):
        return False
    return True


class UpstreamTap:
    """A client transport around another one (see the module's docstring)."""

    def __init__(
        self,
        inner: AbstractAsyncContextManager[Streams],
        on_notification: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.inner = inner
        self.on_notification = on_notification
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._write: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    async def __aenter__(self) -> Streams:
        inner_read, inner_write = await self.inner.__aenter__()
        self._write = inner_write
        sdk_writer, sdk_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self._pump_task = asyncio.create_task(self._pump(inner_read, sdk_writer))
        return sdk_read, inner_write

    async def __aexit__(self, *exc: Any) -> bool | None:
        self._pump_task.cancel()
        with contextlib.suppress(BaseException):
            await self._pump_task
        self._fail_pending()
        return await self.inner.__aexit__(*exc)

    def _fail_pending(self) -> None:
        self.closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(TapClosed("the upstream connection closed"))
        self._pending.clear()

    async def _pump(self, inner_read: Any, sdk_writer: Any) -> None:
        try:
            async with sdk_writer:
                async for item in inner_read:
                    if isinstance(item, SessionMessage):
                        message = item.message
                        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                            future = self._pending.pop(str(message.id), None)
                            if future is not None and isinstance(message.id, str):
                                if not future.done():
                                    if isinstance(message, types.JSONRPCResponse):
                                        future.set_result(message.result)
                                    else:
                                        future.set_exception(
                                            types_error(message.error.code, message.error.message)
                                        )
                                continue
                        elif (
                            isinstance(message, types.JSONRPCNotification)
                            and message.method in LIST_CHANGED
                            and self.on_notification is not None
                        ):
                            # in a task of its own: relaying may ask the upstream (a tools
                            # list), whose answer comes through this very pump
                            task = asyncio.create_task(
                                self._notified(message.method, message.params or {})
                            )
                            self._tasks.add(task)
                            task.add_done_callback(self._tasks.discard)
                    await sdk_writer.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._fail_pending()

    async def _notified(self, method: str, params: dict[str, Any]) -> None:
        assert self.on_notification is not None
        try:
            await self.on_notification(method, params)
        except Exception:
            log.exception("relaying %s failed", method)

    async def request(
        self, method: str, params: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        """Send one request of the proxy's own; its result, or MCPError as answered.
        TimeoutError: no answer in time; TapClosed: the connection went away; Unsendable:
        not sent (the connection untouched)."""
        if self.closed or self._write is None:
            raise TapClosed("the upstream connection is closed")
        if not encodable(params):
            raise Unsendable(f"{method}: a string in the request is not valid Unicode: not sent")
        request_id = f"undolog-{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            message = types.JSONRPCRequest(
                jsonrpc="2.0", id=request_id, method=method, params=params
            )
            try:
                await self._write.send(SessionMessage(message))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                raise TapClosed(f"the upstream connection is closed: {exc}") from exc
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if self.closed or self._write is None:
            return
        if not encodable(params):
            log.warning("%s not sent upstream: a string in it is not valid Unicode", method)
            return
        message = types.JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._write.send(SessionMessage(message))


def types_error(code: int, message: str) -> Exception:
    from mcp import MCPError

    return MCPError(code=code, message=message)


# -- the proxy's stdio server transport ---------------------------------------------------

READ_CHUNK = 1 << 16
Write = Callable[[dict[str, Any]], None]
# answers a request itself (True) or leaves it to the SDK's server (False)
Hook = Callable[[dict[str, Any], Write], bool]


@contextlib.asynccontextmanager
async def relaying_stdio(
    reader: asyncio.StreamReader, hook: Hook | None = None, limit: int = LINE_LIMIT
) -> AsyncIterator[Streams]:
    """The server's streams over stdin (an asyncio reader) and a private duplicate of
    stdout. fd 1 then points at stderr, so that stray output of a library never tears a
    frame of the wire. A message is one line of at most ``limit`` bytes: a longer one is
    dropped (only it) and answered with a parse error."""
    loop = asyncio.get_running_loop()
    private = os.dup(1)
    saved = os.dup(1)
    os.dup2(2, 1)
    pipe = os.fdopen(private, "wb", buffering=0, closefd=True)
    transport, protocol = await loop.connect_write_pipe(asyncio.Protocol, pipe)
    del protocol

    def write_line(data: bytes) -> None:
        if not transport.is_closing():
            transport.write(data)

    def write_json(message: dict[str, Any]) -> None:
        try:
            data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        except (ValueError, TypeError):  # no answer may end the reader: this one is lost
            log.warning("an answer to the client could not be written: %r", message)
            return
        write_line(data + b"\n")

    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdin_reader() -> None:
        async with read_writer:
            async for line in bounded_lines(_chunks(reader), limit):
                if line is None:  # over the limit: dropped, answered as unreadable
                    log.warning("client line refused: a message over %d bytes", limit)
                    write_json(_over_limit(limit))
                    continue
                if not line.strip():
                    continue
                # The hook decides on the decoded message: a line it may concern, and every
                # line with an escape in it (JSON may spell "notifications/initialized" as
                # "notifications\/initialized" or with \u escapes, which a byte filter misses
                # and the SDK's parser reads the same).
                if hook is not None and (
                    b'"tools/call"' in line
                    or b'"initialize"' in line
                    or b'"notifications/initialized"' in line
                    or b'"notifications/cancelled"' in line
                    or b"\\" in line
                ):
                    try:
                        decoded = _loads(line)
                    except (ValueError, RecursionError):  # nesting past Python's stack
                        decoded = None  # the SDK's parser refuses it: answered below
                    if isinstance(decoded, dict) and hook(decoded, write_json):
                        continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:
                    # answered here, as JSON-RPC asks (the SDK would drop it unanswered)
                    write_json(_unreadable(line, exc))
                    continue
                await read_writer.send(SessionMessage(message))

    async def stdout_writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                write_line(data.encode() + b"\n")

    writer_task = asyncio.create_task(stdout_writer())
    reader_task = asyncio.create_task(stdin_reader())
    try:
        yield read_stream, write_stream
    finally:
        reader_task.cancel()
        with contextlib.suppress(BaseException):
            await reader_task
        write_stream.close()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(writer_task, 5)
        transport.close()
        os.dup2(saved, 1)
        os.close(saved)


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """What stdin has, as it comes (never waiting for a newline), until end of file."""
    while chunk := await reader.read(READ_CHUNK):
        yield chunk


def _over_limit(limit: int) -> dict[str, Any]:
    """The answer to a line over the limit: its id is never read (null), as JSON-RPC 2.0
    says for a request that cannot be parsed."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": types.PARSE_ERROR,
            "message": f"Parse error: a message over {limit} bytes (one line): dropped unread",
        },
    }


def _loads(line: bytes) -> Any:
    """A line's JSON as the SDK's parser reads it: ValueError for what it refuses and
    Python's reader accepts, a lone UTF-16 surrogate escape ("\\ud800"), which no UTF-8
    writer can send on (relayed upstream, it would close the connection shared by every
    call)."""
    decoded = json.loads(line)
    if b"\\u" in line and not encodable(decoded):
        raise _NotUnicode(decoded)
    return decoded


class _NotUnicode(ValueError):
    """JSON that holds a string which is not valid Unicode (``decoded``: as Python read it)."""

    def __init__(self, decoded: Any) -> None:
        super().__init__("a string that is not valid Unicode (a lone surrogate escape)")
        self.decoded = decoded


def _unreadable(line: bytes, exc: Exception) -> dict[str, Any]:
    """JSON-RPC's answer to a line that is not a message: a parse error (-32700) when it
    is not JSON, or holds a string that is not valid Unicode, an invalid request (-32600)
    when it is JSON of another shape; with the request's id when it has a readable one,
    else null, as JSON-RPC 2.0 says."""
    log.warning("client line refused: %s", " ".join(str(exc).split())[:300])
    try:
        decoded = _loads(line)
    except _NotUnicode as not_unicode:
        # a parse error, answered to the request's id when it has one: its id was read
        return {
            "jsonrpc": "2.0",
            "id": _given_id(not_unicode.decoded),
            "error": {
                "code": types.PARSE_ERROR,
                "message": "Parse error: a string in the message is not valid Unicode (a "
                "lone UTF-16 surrogate escape such as \\ud800): not run, nothing sent on",
            },
        }
    except (ValueError, RecursionError):
        return {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": types.PARSE_ERROR,
                "message": "Parse error: not JSON, or nested too deep to read",
            },
        }
    code, words = envelope_problem(decoded) or (
        types.INVALID_REQUEST,
        "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
    )
    return {"jsonrpc": "2.0", "id": _given_id(decoded), "error": {"code": code, "message": words}}


def _given_id(decoded: Any) -> str | int | None:
    """A decoded message's id when it has a valid one, else None (JSON-RPC's null): an id
    that cannot be written back (a lone surrogate) is not one."""
    given = decoded.get("id") if isinstance(decoded, dict) else None
    valid = isinstance(given, str | int) and not isinstance(given, bool) and encodable(given)
    return given if valid else None
