"""Clients that never finish their request, for the tests of every HTTP server's bound
(undolog._serving.REQUEST_TIMEOUT): one that sends nothing, one that stops inside its
request line, one that sends a header line every second for ever (slowloris), one that
sends its body a byte a second; a slow client that does finish within the bound, and a
steady upload that takes longer than the bound but keeps its body coming. And a flood:
more connections that send nothing than the server has file descriptors for."""

from __future__ import annotations

import contextlib
import http.client
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from undolog._serving import REQUEST_TIMEOUT, FailedAcceptsFilter

# the server's timer, and a threaded server's poll of its deadlines (0.5 s)
SLACK = 2.0


def seconds_until_closed(
    port: int, opening: bytes, drip: bytes = b"", limit: float = REQUEST_TIMEOUT + 10
) -> float | None:
    """Connect, send ``opening``, then ``drip`` every second: the seconds until the server
    closed the connection, or None when it was still open after ``limit``."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(1.0)
        with contextlib.suppress(OSError):
            sock.sendall(opening)
        while time.monotonic() - started < limit:
            try:
                if sock.recv(4096) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                pass
            except OSError:  # reset
                return time.monotonic() - started
            if drip:
                try:
                    sock.sendall(drip)
                except OSError:
                    return time.monotonic() - started
    return None


def never_finishing(path: str) -> dict[str, tuple[bytes, bytes]]:
    """Each kind of client that never completes a request to ``path``: (opening, drip)."""
    return {
        "idle": (b"", b""),
        "partial request line": (f"GET {path} HT".encode(), b""),
        "slowloris": (f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode(), b"X-Slow: 1\r\n"),
        "slow body": (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".encode(),
            b"a",
        ),
    }


def closing_times(port: int, path: str) -> dict[str, float | None]:
    """seconds_until_closed of each never-finishing client, all at once."""
    found: dict[str, float | None] = {}

    def probe(name: str, opening: bytes, drip: bytes) -> None:
        found[name] = seconds_until_closed(port, opening, drip)

    threads = [
        threading.Thread(target=probe, args=(name, *how))
        for name, how in never_finishing(path).items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def assert_closed_within_the_bound(found: dict[str, float | None]) -> None:
    late = {
        name: seconds
        for name, seconds in found.items()
        if seconds is None or seconds > REQUEST_TIMEOUT + SLACK
    }
    assert not late, f"open past {REQUEST_TIMEOUT} s (None: still open): {late}; all: {found}"


def slow_but_whole(port: int, path: str, seconds: float = 3.0) -> bytes:
    """A request whose line and headers take ``seconds`` to arrive (well within the bound),
    then a second one on the same kept-alive connection 2 s after the first answer (within
    uvicorn's keep-alive): the status lines of both answers."""
    lines = [f"GET {path} HTTP/1.1\r\n", "Host: x\r\n", "User-Agent: slow\r\n", "\r\n"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for line in lines:
            sock.sendall(line.encode())
            time.sleep(seconds / len(lines))
        first = http.client.HTTPResponse(sock)
        first.begin()
        first.read()
        time.sleep(2)
        sock.sendall("".join(lines).encode())
        second = http.client.HTTPResponse(sock)
        second.begin()
        second.read()
        return f"{first.status} {second.status}".encode()


def steady_upload(port: int, path: str, size: int, seconds: float) -> bytes:
    """POST a form body of ``size`` bytes to ``path`` in equal pieces over ``seconds``
    (longer than the bound: every piece is well past BODY_PROGRESS a second): the status
    line of the answer, or what went wrong."""
    body = b"login=" + b"a" * (size - len(b"login="))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    pieces = 150
    step = -(-len(body) // pieces)
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(head)
            for i in range(pieces):
                time.sleep(max(0.0, started + (i + 1) * seconds / pieces - time.monotonic()))
                sock.sendall(body[i * step : (i + 1) * step])
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            answer.read()
            return f"{answer.status}".encode()
    except OSError as exc:
        sent = f"{time.monotonic() - started:.1f} s"
        return f"{type(exc).__name__} after {sent}".encode()


def fd_limit(soft: int) -> Callable[[], None]:
    """A child's preexec_fn: its RLIMIT_NOFILE's soft limit lowered to ``soft`` (a flood
    beyond it is then cheap to open)."""

    def lower() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return lower


@contextlib.contextmanager
def idle_flood(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that send nothing, opened at once, oldest first (the kernel
    completes each one into the listener's queue whether the server accepts it or not);
    closed when the block ends."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield opened
    finally:
        for sock in opened:
            sock.close()


def closed_by_server(socks: list[socket.socket]) -> list[bool]:
    """For each connection, whether the server has closed it (end of file or reset)."""
    found: list[bool] = []
    for sock in socks:
        sock.setblocking(False)
        try:
            found.append(sock.recv(1, socket.MSG_PEEK) == b"")
        except BlockingIOError:
            found.append(False)
        except OSError:  # reset
            found.append(True)
    return found


def seconds_to_answer(
    port: int, request: bytes, limit: float, expect: bytes = b"HTTP/1.1 200 "
) -> float | None:
    """Connect, send ``request`` whole, and wait for the answer's first bytes: the seconds
    that took, or None when nothing came within ``limit`` (or the server closed, or the
    answer did not begin with ``expect``)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
        sock.sendall(request)
        sock.settimeout(max(0.01, limit - (time.monotonic() - started)))
        try:
            first = sock.recv(64)
        except OSError:
            return None
    return time.monotonic() - started if first.startswith(expect) else None


# The server's descriptors in the flood tests: _serving.max_waiting() lets a quarter wait.
FLOOD_FD_LIMIT = 256


def assert_a_flood_keeps_no_request_out(
    port: int, request: bytes, log: Path, stop: Callable[[], None]
) -> None:
    """A server started with fd_limit(FLOOD_FD_LIMIT), its standard error in ``log``: 300
    connections that send nothing, then ``request``, which is answered (200) within a
    second (measured: 0.2 s; before the cap, nothing until the flood timed out, at
    REQUEST_TIMEOUT; with the cap but uvicorn's accept batch of 2,048, at 1.05 s, asyncio
    having run out of descriptors in the burst and waited a second to accept again). The
    longest waiting were closed, the last ones still wait; and no accept failed (before,
    thousands, each logged)."""
    time.sleep(0.5)  # the lines of its start written
    before = len(log.read_text().splitlines())
    with idle_flood(port, FLOOD_FD_LIMIT + 44) as flood:
        seconds = seconds_to_answer(port, request, limit=4)
        closed = closed_by_server(flood)
    stop()
    lines = log.read_text().splitlines()[before:]
    assert seconds is not None and seconds < 1.0, (seconds, len(lines), lines[:8])
    cap = FLOOD_FD_LIMIT // 4
    assert all(closed[: len(closed) - cap - 1]), closed
    assert not any(closed[-cap // 2 :]), closed
    # asyncio's records of a failed accept, and of its retry failing once the server stopped
    errors = [line for line in lines if any(kind in line for kind in FailedAcceptsFilter.KINDS)]
    assert not errors, (len(errors), errors[:4])
