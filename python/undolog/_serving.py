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
and :func:`uvicorn_server` the uvicorn server every face runs it in. uvicorn is imported
only there: the metrics listeners, which need only the constant and
:class:`LongestWaiting`, run where no face's extra is installed.

The bound limits how long a connection waits, not how many wait: connections opened
faster than they time out still used up the descriptors. So each server also caps the
connections waiting for their request (:class:`LongestWaiting`): one more closes the one
that has waited longest. A person's browser, or a scraper, sends its request within
milliseconds of connecting, so it is never the longest waiting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("undolog.http")

# Seconds from a connection's opening (on a kept-alive one, from its next request's first
# byte) to its whole request: a person's browser or a scraper sends one in milliseconds.
REQUEST_TIMEOUT = 10.0
# Bytes of a request's body that, once arrived, give the rest of it REQUEST_TIMEOUT again:
# 16 KiB in 10 s is 1.6 KB/s, slower than any link an upload is made over, while a client
# holding a connection a few bytes at a time gets no more than 10 s from it.
BODY_PROGRESS = 16 * 1024
# Connections the h11 protocol lets wait for their request at once, at most: a quarter of
# the process's descriptors (RLIMIT_NOFILE's soft limit), no more than
# MAX_WAITING_CEILING. The other three quarters are for what the process needs besides:
# the connections it is serving (a live page, an MCP stream hold theirs for as long as
# they last), its PostgreSQL connections, the proxy's upstreams' pipes, log files; and
# the connections asyncio has accepted that have not reached the protocol yet
# (accept_batch() at each turn of the loop). A person's browser sends its request within
# milliseconds: even a few hundred connections waiting at once are a flood, not clients,
# and holding more of them only gives a flood more of the process; hence the ceiling.
MAX_WAITING_CEILING = 256
MAX_WAITING_FLOOR = 8
# The listening socket's queue of connections the kernel has completed and the server not
# yet accepted: uvicorn's default backlog.
LISTEN_QUEUE = 2048

C = TypeVar("C", bound=Hashable)


class LongestWaiting(Generic[C]):
    """The connections a server holds, at most ``cap``, and of those the ones waiting for
    their request, longest waiting first. One more when ``cap`` are held closes the one
    that has waited longest (``close``, which the caller's handler of it notices); when
    none waits (all are being answered, or ``spare`` says to leave each), the new one is
    to be refused. Every HTTP server of UndoLog holds its connections this way: the h11
    protocol counts only those waiting (a connection being answered, however long, is not
    held), the metrics listeners every connection they serve. Not thread-safe: a threaded
    server holds its own lock around every call."""

    def __init__(
        self,
        cap: int,
        close: Callable[[C], None],
        spare: Callable[[C], bool] = lambda conn: False,
    ) -> None:
        self.cap = cap
        self.close = close
        self.spare = spare
        self.held: set[C] = set()
        self.waiting: dict[C, float] = {}  # since when (time.monotonic()), longest first

    def admit(self, conn: C) -> bool:
        """``conn`` is held, waiting for its request, with room made for it: False when
        there was none (the caller closes ``conn``)."""
        if len(self.held) >= self.cap:
            oldest = next((c for c in self.waiting if not self.spare(c)), None)
            if oldest is None:
                return False
            self.release(oldest)
            self.close(oldest)
        self.held.add(conn)
        self.waiting[conn] = time.monotonic()
        return True

    def answered(self, conn: C) -> bool:
        """``conn``'s request has come: it waits no longer (it is still held). False when
        the server had closed it meanwhile (released)."""
        return self.waiting.pop(conn, None) is not None

    def release(self, conn: C) -> None:
        """``conn`` is no longer held (closed, or, for the h11 protocol, not waiting)."""
        self.held.discard(conn)
        self.waiting.pop(conn, None)

    def waiting_since(self, moment: float) -> list[C]:
        """The connections waiting since ``moment`` (time.monotonic()) or before."""
        return [conn for conn, since in self.waiting.items() if since <= moment]


def descriptor_limit() -> int | None:
    """The descriptors this process may hold: RLIMIT_NOFILE's soft limit (systemd's
    LimitNOFILE=, ``ulimit -n``); None when it has none (unlimited, or not a Unix)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def waiting_share(limit: int | None) -> int:
    """How many connections the h11 protocol lets wait for their request in a process
    that may hold ``limit`` descriptors (None: no limit; see MAX_WAITING_CEILING)."""
    if limit is None:
        return MAX_WAITING_CEILING
    return max(MAX_WAITING_FLOOR, min(MAX_WAITING_CEILING, limit // 4))


def max_waiting() -> int:
    """How many connections the h11 protocol lets wait for their request (see
    MAX_WAITING_CEILING)."""
    return waiting_share(descriptor_limit())


# Seconds between two log records of asyncio's failed accepts (below).
ACCEPT_ERROR_EVERY = 60.0


class FailedAcceptsFilter(logging.Filter):
    """asyncio's "socket.accept() out of system resource" (no descriptor left for a new
    connection), and its failed retries once the server has closed, each once every
    ACCEPT_ERROR_EVERY seconds, saying how many were left out.

    asyncio (until CPython's gh-151615, June 2026) goes on trying to accept after the
    first such failure, up to the server's backlog times at each turn of the loop,
    logging each with its traceback and scheduling as many retries a second later:
    244,516 lines in 12 s when 300 idle connections met a limit of 256 descriptors, and,
    when the server stopped within that second, a traceback for each retry (it finds the
    listening socket closed). The cap on waiting connections and accept_batch() keep an
    idle flood from using the descriptors up; what the process serves (live pages, MCP
    streams, many at once) still may, and one record says so as well as thousands."""

    KINDS = (
        "socket.accept() out of system resource",
        "Exception in callback BaseSelectorEventLoop._start_serving(",
    )

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.last: dict[str, float] = {}  # kind: when its last record was let through
        self.left_out: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        kind = next((k for k in self.KINDS if message.startswith(k)), None)
        if kind is None:
            return True
        now = self.clock()
        last = self.last.get(kind)
        if last is not None and now - last < ACCEPT_ERROR_EVERY:
            self.left_out[kind] = self.left_out.get(kind, 0) + 1
            return False
        if left_out := self.left_out.pop(kind, 0):
            record.msg = f"{message} ({left_out} more since the last one logged)"
        self.last[kind] = now
        return True


Headers = tuple[tuple[bytes, bytes], ...]


@functools.cache
def h11_protocol(error_headers: Headers = ()) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request
    (line, headers and body) within REQUEST_TIMEOUT of its opening, or, on a kept-alive
    connection, of the next request's first byte; every BODY_PROGRESS bytes of a body
    restart that timer. A connection handed to another protocol (uvicorn's WebSocket
    protocols, on an upgrade) is no longer watched. At most max_waiting() connections of
    a server wait for their request at once: one more closes the longest waiting (one
    whose wait is the server's, see _held_by_us, is left).

    ``error_headers`` are added to the 400 uvicorn sends by itself, before any app is
    called, for bytes that are no HTTP request (or an upgrade it does not serve): the
    app's own headers (the dashboard's security headers) are not on it. uvicorn's
    ``headers=`` setting would not do: its h11 protocol leaves them off that 400 too
    (only its httptools protocol sends them there), and it adds them to every response
    of the app, which has its own."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    logging.getLogger("asyncio").addFilter(FailedAcceptsFilter())

    class RequestBoundedH11Protocol(H11Protocol):
        # each server's connections waiting for their request (by uvicorn's server_state,
        # one per server)
        servers: ClassVar[
            weakref.WeakKeyDictionary[object, LongestWaiting[RequestBoundedH11Protocol]]
        ] = weakref.WeakKeyDictionary()
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
                if not self._waiting_here().admit(self):  # each one waiting is the server's
                    log.debug("refused a connection: every one waiting is held up by the server")
                    self.transport.close()

        def _unwatch(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None
                self._waiting_here().release(self)

        def _waiting_here(self) -> LongestWaiting[RequestBoundedH11Protocol]:
            """This server's connections waiting for their request."""
            waiting = self.servers.get(self.server_state)
            if waiting is None:
                waiting = LongestWaiting(max_waiting(), _close_longest, _held_by_us)
                self.servers[self.server_state] = waiting
            return waiting

        def _held_by_us(self) -> bool:
            """The client waits for this server, not the other way round: uvicorn stopped
            reading (64 KiB of body wait for the app to read them), or the client asked
            to be told to go on (Expect: 100-continue) and the app has not read yet."""
            cycle = getattr(self, "cycle", None)
            return bool(self.flow.read_paused) or bool(
                cycle is not None and cycle.waiting_for_100_continue
            )

        def send_400_response(self, msg: str) -> None:
            if not error_headers:
                super().send_400_response(msg)
                return
            # uvicorn's own (h11_impl.H11Protocol.send_400_response), with error_headers
            headers = [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"connection", b"close"),
                *error_headers,
            ]
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=msg.encode("ascii")),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
            self.transport.close()

        def _too_slow(self) -> None:
            self._unwatch()
            if not self._waiting():
                return
            if self._held_by_us():  # the wait is the app's: the client's time starts again
                self._watch()
                return
            log.debug("closed a connection that sent no whole request in %s s", REQUEST_TIMEOUT)
            self.transport.close()

    def _close_longest(protocol: RequestBoundedH11Protocol) -> None:
        log.debug("closed the connection that had waited longest for its request")
        protocol.transport.close()

    def _held_by_us(protocol: RequestBoundedH11Protocol) -> bool:
        return protocol._held_by_us()

    return RequestBoundedH11Protocol


def accept_batch() -> int:
    """How many connections asyncio accepts at one turn of its loop, at most: a quarter of
    max_waiting(). asyncio takes this from the server's backlog; with uvicorn's (2,048)
    it accepted a burst of connections whole, before the protocol's cap could close any
    (their connection_made comes turns later), ran out of descriptors, and stopped
    accepting for a second. Connections accepted and not yet closed are then at most
    max_waiting() plus a few turns' batches: about half the descriptors."""
    return max(1, max_waiting() // 4)


# Turns of the loop whose accepted batches (accept_batch()) may not have reached the
# protocol yet, counted in what a server keeps for connections not being answered.
ACCEPT_TURNS = 4


def unanswered_share(limit: int | None) -> int:
    """The descriptors a server of ours may hold, in a process that may hold ``limit``
    (None: no limit), for connections it is not answering: those waiting for their
    request (waiting_share) and those asyncio accepted that have not reached the protocol
    yet (ACCEPT_TURNS batches of accept_batch()). What the process serves for long (the
    dashboard's live pages) must fit in what is left, or a flood of idle connections and
    those long answers together use every descriptor up (half of them, at 1,024)."""
    waiting = waiting_share(limit)
    return waiting + ACCEPT_TURNS * max(1, waiting // 4)


def uvicorn_server(app: Any, *, error_headers: Headers = (), **options: Any) -> uvicorn.Server:
    """uvicorn's server for ``app`` (``options``: uvicorn.Config's), with
    h11_protocol(``error_headers``) and accept_batch(); its listening sockets keep a queue
    of LISTEN_QUEUE all the same (uvicorn's backlog sets both, and with a queue of
    accept_batch() a connection beyond it waits for the client to send its SYN again, a
    second or more: 300 connections took 9 s to open)."""
    import uvicorn

    config = uvicorn.Config(
        app, http=h11_protocol(error_headers), backlog=accept_batch(), **options
    )
    return _server_class()(config)


@functools.cache
def _server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            for server in self.servers:
                for listening in server.sockets:
                    # listen() again on a listening socket sets its queue (Linux, BSD)
                    with socket.socket(fileno=os.dup(listening.fileno())) as again:
                        again.listen(LISTEN_QUEUE)

    return Server
