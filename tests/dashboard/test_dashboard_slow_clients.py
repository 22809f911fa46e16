"""`undolog dashboard`, the real command on a real port, and clients that never finish a
request: each is closed within undolog._serving.REQUEST_TIMEOUT (uvicorn alone kept them
open for ever, and about a thousand of them used up the process's file descriptors: it
then accepted no one), while a slow client that does finish is answered, and so is an
upload that takes longer than the bound but keeps its body coming. And a connection
upgraded to a WebSocket is not bounded by it. Nor does a flood of connections that send
nothing, more than the process has descriptors for, keep a request out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from dashboard_helpers import running_in_thread
from slow_clients import (
    FLOOD_FD_LIMIT,
    assert_a_flood_keeps_no_request_out,
    assert_closed_within_the_bound,
    closed_by_server,
    closing_times,
    fd_limit,
    idle_flood,
    slow_but_whole,
    steady_upload,
)
from undolog import _serving

ROOT = Path(__file__).resolve().parents[2]


def start_dashboard(dsn: str, **popen: Any) -> tuple[subprocess.Popen[str], int]:
    """`undolog dashboard` on a free port (``popen``: more of Popen's arguments), once it
    listens: the process and its port."""
    from pgcluster import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "undolog.cli", "dashboard", "--dsn", dsn, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        text=True,
        **popen,
    )
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, process.communicate()[1]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process, port
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the dashboard did not start listening")
        time.sleep(0.1)


@pytest.fixture
def dashboard_port(dsn: str) -> Iterator[int]:
    process, port = start_dashboard(dsn, stderr=subprocess.PIPE)
    try:
        yield port
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
        assert "Traceback" not in err, err


def test_a_connection_that_never_finishes_its_request_is_closed(dashboard_port: int) -> None:
    # meanwhile, a login form of almost MAX_BODY_BYTES over 15 s (some 65 KB/s): its
    # body took longer than the bound but kept coming, so it is read and answered (403:
    # it has no form token). Before each BODY_PROGRESS restarted the bound, it was cut
    # at 10 s.
    uploaded: list[bytes] = []
    uploading = threading.Thread(
        target=lambda: uploaded.append(steady_upload(dashboard_port, "/login", 1_000_000, 15))
    )
    uploading.start()
    found = closing_times(dashboard_port, "/login")
    assert_closed_within_the_bound(found)
    assert slow_but_whole(dashboard_port, "/login") == b"200 200"
    uploading.join()
    assert uploaded == [b"403"]


LOGIN = b"GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def test_a_flood_of_idle_connections_does_not_keep_a_request_out(dsn: str, tmp_path: Path) -> None:
    """GET /login during a flood of idle connections: answered at 11.8 s before the cap
    on connections waiting for their request (244,516 log lines of failed accepts), now
    within a second."""
    log = tmp_path / "dashboard.log"
    with log.open("w") as err:
        process, port = start_dashboard(dsn, stderr=err, preexec_fn=fd_limit(FLOOD_FD_LIMIT))

    def stop() -> None:
        process.terminate()
        process.wait(15)

    try:
        assert_a_flood_keeps_no_request_out(port, LOGIN, log, stop)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextlib.contextmanager
def served(app: Starlette) -> Iterator[int]:
    """``app`` served as the HTTP faces serve (_serving.uvicorn_server), in a thread: its
    port."""
    from pgcluster import free_port

    port = free_port()
    server = _serving.uvicorn_server(  # as the faces serve
        app, host="127.0.0.1", port=port, log_level="warning"
    )
    with running_in_thread(server):
        yield port


def test_a_connection_upgraded_to_a_websocket_is_not_bounded() -> None:
    """uvicorn hands an upgraded connection to its WebSocket protocol without telling the
    h11 one it has gone: its timer closed the socket at REQUEST_TIMEOUT all the same."""

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            await websocket.send_text(await websocket.receive_text())

    with served(Starlette(routes=[WebSocketRoute("/echo", echo)])) as port:

        async def talk() -> int:
            said = 0
            async with websockets.connect(f"ws://127.0.0.1:{port}/echo") as socket_:
                began = time.monotonic()
                while time.monotonic() - began < _serving.REQUEST_TIMEOUT + 2:
                    await socket_.send(f"{said}")
                    assert await asyncio.wait_for(socket_.recv(), 5) == f"{said}"
                    said += 1
                    await asyncio.sleep(1)
            return said

        assert asyncio.run(talk()) >= _serving.REQUEST_TIMEOUT + 2


def test_a_client_waiting_for_the_app_is_not_charged_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An app busy before it reads the body: uvicorn stops reading at 64 KiB, and a client
    that sent Expect: 100-continue waits to be told to go on. That wait is the server's:
    both were closed at the bound (1 s here), the client as fast as it could be."""
    monkeypatch.setattr(_serving, "REQUEST_TIMEOUT", 1.0)

    async def busy_then_read(request: Request) -> PlainTextResponse:
        await asyncio.sleep(2.5)
        return PlainTextResponse(str(len(await request.body())))

    body = b"x" * 1_000_000
    with served(Starlette(routes=[Route("/up", busy_then_read, methods=["POST"])])) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            assert client.post("/up", content=body).text == str(len(body))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            )
            told = sock.recv(4096)  # closed at the bound before the fix: b""
            assert told.startswith(b"HTTP/1.1 100"), told
            sock.sendall(b"hello")
            answer = b""
            while not answer.endswith(b"\r\n\r\n5"):
                more = sock.recv(4096)
                assert more, answer
                answer += more


def test_failed_accepts_are_logged_once_a_minute_with_a_count() -> None:
    """asyncio logs a failed accept up to its backlog times at one turn of its loop (and
    each retry that finds the server closed): one record of each kind a minute is let
    through, the next one counting those left out; other records pass."""
    clock = [1000.0]
    quiet = _serving.FailedAcceptsFilter(clock=lambda: clock[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    failed = "socket.accept() out of system resource\nsocket: <...>"
    retry = "Exception in callback BaseSelectorEventLoop._start_serving(<...>)"
    assert [quiet.filter(record(failed)) for _ in range(2048)].count(True) == 1
    assert quiet.filter(record(retry)) and not quiet.filter(record(retry))
    assert quiet.filter(record("Unclosed connection"))
    clock[0] += _serving.ACCEPT_ERROR_EVERY
    again = record(failed)
    assert quiet.filter(again)
    assert again.getMessage().endswith("(2047 more since the last one logged)")


def test_a_flood_does_not_close_an_answer_that_streams() -> None:
    """The cap is on connections waiting for their request, not on connections: an answer
    streaming (as a live page, an MCP stream) while more idle connections than the cap
    arrive is not closed, and the newest of the flood still wait. A guard (there was no
    cap before, so it passed then too)."""

    async def ticks(request: Request) -> StreamingResponse:
        async def each() -> AsyncIterator[bytes]:
            for i in range(6):
                yield f"{i}\n".encode()
                await asyncio.sleep(0.5)

        return StreamingResponse(each(), media_type="text/plain")

    with served(Starlette(routes=[Route("/ticks", ticks)])) as port:
        cap = _serving.max_waiting()
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
            client.stream("GET", "/ticks") as answer,
        ):
            lines = answer.iter_lines()
            assert next(lines) == "0"
            with idle_flood(port, 2 * cap) as flood:
                assert list(lines) == ["1", "2", "3", "4", "5"]
                closed = closed_by_server(flood)
        assert all(closed[: cap - 1]) and not any(closed[-cap // 2 :]), closed


def test_a_body_cut_short_by_the_server_is_not_logged_as_an_error(dsn: str, tmp_path: Path) -> None:
    """A POST whose body never came whole, closed by the server (the cap on connections
    waiting for their request, or REQUEST_TIMEOUT): the endpoint's form read ends in
    Starlette's ClientDisconnect, which uvicorn logged as "Exception in ASGI
    application" with a traceback of some 50 lines, one for each such connection: a
    flood of them, each closed at once by the next, wrote the log as fast as it came.
    Nobody is left to answer, and nothing went wrong on the server's side: not logged.
    (Those still waiting at shutdown are uvicorn's: its graceful shutdown waits for them,
    then cancels them, and logs that.)"""
    log = tmp_path / "dashboard.log"
    with log.open("w") as err:
        # max_waiting() 16: the 40 connections below close 24 of their own
        process, port = start_dashboard(dsn, stderr=err, preexec_fn=fd_limit(64))
    cut: list[socket.socket] = []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                b"POST /login HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100\r\n\r\nusername=a"
            )
            cut.append(s)
        time.sleep(1)
        assert sum(closed_by_server(cut)) >= 20  # the longest waiting, by the cap
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(LOGIN)
            assert s.recv(12) == b"HTTP/1.1 200"
        time.sleep(0.5)
        text = log.read_text()
        assert "ClientDisconnect" not in text and "Traceback" not in text, text[:3000]
    finally:
        for s in cut:
            s.close()
        process.terminate()
        process.wait(15)
