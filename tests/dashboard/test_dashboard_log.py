"""`undolog dashboard`'s web server lines (uvicorn's loggers: the access log, its
warnings, an application's traceback) are written as the rest of its log is: every
character that is not printable as its escape (undolog.logs). A client on a trusted
address (127.0.0.1) names the client address the access log writes, in X-Forwarded-For,
whose value may hold an escape sequence or a C1 control (NEL, a line break to many
readers); before, uvicorn's formatter wrote them raw to the operator's terminal."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from dashboard_helpers import without_user

FORGED = b"\x1b[2J\x85INFO uvicorn.access: forged"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_the_web_servers_lines_are_escaped(dsn: str) -> None:
    port = _free_port()
    command = ["-m", "undolog.dashboard", "--dsn", without_user(dsn), "--port", str(port)]
    server = subprocess.Popen(
        [sys.executable, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.communicate()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the dashboard did not start listening"
            time.sleep(0.1)
        answer = _request(
            port,
            b"GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"X-Forwarded-For: " + FORGED + b"\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        # a request h11 refuses: uvicorn warns of it
        assert _request(port, b"\x1b[2J\r\n\r\n").startswith(b"HTTP/1.1 400")
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    text = (out + err).decode("latin1")
    assert "\x1b" not in text and "\x85" not in text, text
    lines = err.decode().splitlines()
    (access,) = [line for line in lines if "GET /login" in line]
    forged = "\\x1b[2J\\x85INFO uvicorn.access: forged"
    assert access == f'INFO uvicorn.access: {forged}:0 - "GET /login HTTP/1.1" 200'
    assert "WARNING uvicorn.error: Invalid HTTP request received." in lines
