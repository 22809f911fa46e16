"""What UndoLog's HTTP servers share: how long a client may take to send its request.

Every HTTP face (the dashboard, ``undolog mcp-proxy --http``) and every metrics listener
(``undolog metrics``, the proxy's ``metrics_listen``) closes a connection that has not sent
a whole request within REQUEST_TIMEOUT: one that sends nothing, or sends its request line
and headers (or its body) a few bytes at a time. While a body arrives, every BODY_PROGRESS
bytes of it start the REQUEST_TIMEOUT again: a steady upload of any size at a few KB/s or
more goes through (the proxy takes a tool's arguments of megabytes), one dripped a byte at
a time is closed. A response, however long it streams (the proxy's MCP streams, the
dashboard's live pages), is not bounded by it, nor a connection upgraded to another
protocol (a WebSocket), and neither is the wait between two requests of a kept-alive
connection: that is uvicorn's own ``timeout_keep_alive`` (5 s).

uvicorn has no such setting: its h11 protocol starts no timer when a connection opens and
stops its keep-alive timer at a request's first byte, so a connection that never completes
a request stayed open for ever, and enough of them used up the server's file descriptors
(it then accepted no one). :func:`h11_protocol` is uvicorn's h11 protocol with the bound,
passed as uvicorn's ``http``. uvicorn is imported only there: the metrics listeners, which
need only the constant, run where no face's extra is installed.
"""

from __future__ import annotations

import asyncio
import functools
import logging

log = logging.getLogger("undolog.http")

# Seconds from a connection's opening (on a kept-alive one, from its next request's first
# byte) to its whole request: a person's browser or a scraper sends one in milliseconds.
REQUEST_TIMEOUT = 10.0
# Bytes of a request's body that, once arrived, give the rest of it REQUEST_TIMEOUT again:
# 16 KiB in 10 s is 1.6 KB/s, slower than any link an upload is made over, while a client
# holding a connection a few bytes at a time gets no more than 10 s from it.
BODY_PROGRESS = 16 * 1024


@functools.cache
def h11_protocol() -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request
    (line, headers and body) within REQUEST_TIMEOUT of its opening, or, on a kept-alive
    connection, of the next request's first byte; every BODY_PROGRESS bytes of a body
    restart that timer. A connection handed to another protocol (uvicorn's WebSocket
    protocols, on an upgrade) is no longer watched."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class RequestBoundedH11Protocol(H11Protocol):
        deadline: asyncio.TimerHandle | None = None
        # bytes of the body received since the deadline last started
        body_progress = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._watch()

        def data_received(self, data: bytes) -> None:
            in_body = self.conn.their_state is h11.SEND_BODY
            super().data_received(data)
            if in_body and self.conn.their_state is h11.SEND_BODY:
                # all of it body (the chunk that ends the headers is not counted)
                self.body_progress += len(data)
                if self.body_progress >= BODY_PROGRESS:
                    self._unwatch()  # _watch starts it again
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self._unwatch()
            super().connection_lost(exc)

        def _waiting(self) -> bool:
            """A request not yet whole: none begun on a new connection, or one begun
            (part of its line or headers buffered, or its body still coming); and the
            connection still this protocol's (an upgrade hands it to uvicorn's WebSocket
            protocol, without calling connection_lost here)."""
            return (
                self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
                and not self.transport.is_closing()
                and self.transport.get_protocol() is self
            )

        def _watch(self) -> None:
            # Between requests, uvicorn's keep-alive timer runs (it stops at the next
            # request's first byte): that wait is its own.
            if not self._waiting() or self.timeout_keep_alive_task is not None:
                self._unwatch()
            elif self.deadline is None:
                self.body_progress = 0
                self.deadline = self.loop.call_later(REQUEST_TIMEOUT, self._too_slow)

        def _unwatch(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _held_by_us(self) -> bool:
            """The client waits for this server, not the other way round: uvicorn stopped
            reading (64 KiB of body wait for the app to read them), or the client asked
            to be told to go on (Expect: 100-continue) and the app has not read yet."""
            cycle = getattr(self, "cycle", None)
            return bool(self.flow.read_paused) or bool(
                cycle is not None and cycle.waiting_for_100_continue
            )

        def _too_slow(self) -> None:
            self.deadline = None
            if not self._waiting():
                return
            if self._held_by_us():  # the wait is the app's: the client's time starts again
                self._watch()
                return
            log.debug("closed a connection that sent no whole request in %s s", REQUEST_TIMEOUT)
            self.transport.close()

    return RequestBoundedH11Protocol
