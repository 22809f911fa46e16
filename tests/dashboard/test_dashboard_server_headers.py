"""`undolog dashboard`'s server answers bytes that are no HTTP request (or an upgrade it
does not serve) with uvicorn's own 400, sent before the app is called: it carries the
dashboard's security headers too, and the app's responses carry each of them once."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from test_dashboard_log import _free_port, _request

from dashboard_helpers import without_user
from undolog.dashboard.app import SECURITY_HEADERS


def headers_of(answer: bytes) -> list[tuple[bytes, bytes]]:
    head = answer.split(b"\r\n\r\n", 1)[0]
    return [
        (name.strip().lower(), value.strip())
        for name, value in (line.split(b":", 1) for line in head.split(b"\r\n")[1:])
    ]


def test_uvicorns_own_400_carries_the_security_headers(dsn: str) -> None:
    port = _free_port()
    command = ["-m", "undolog.dashboard", "--dsn", without_user(dsn), "--port", str(port)]
    server = subprocess.Popen(
        [sys.executable, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, "the dashboard exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the dashboard did not start listening"
            time.sleep(0.1)
        refused = [
            _request(port, b"\x00\x01 not HTTP\r\n\r\n"),
            _request(port, b"GET /login HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"),
        ]
        # a WebSocket: the dashboard serves none (uvicorn hands it over as one where a
        # WebSocket library is installed, 403; as a plain request where none is, 401)
        websocket = _request(
            port,
            b"GET /events HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
            b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        page = _request(port, b"GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    for answer in refused:
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert websocket.startswith((b"HTTP/1.1 403", b"HTTP/1.1 401")), websocket[:200]
    assert page.startswith(b"HTTP/1.1 200"), page[:200]
    for answer in [*refused, websocket, page]:
        got = headers_of(answer)
        for header in SECURITY_HEADERS:
            assert got.count(header) == 1, (header, answer[:600])
