"""`undolog dashboard`, the real command on a real port, and clients that never finish a
request: each is closed within undolog._serving.REQUEST_TIMEOUT (uvicorn alone kept them
open for ever, and about a thousand of them used up the process's file descriptors: it
then accepted no one), while a slow client that does finish is answered, and so is an
upload that takes longer than the bound but keeps its body coming."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slow_clients import (
    assert_closed_within_the_bound,
    closing_times,
    slow_but_whole,
    steady_upload,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dashboard_port(dsn: str) -> Iterator[int]:
    from pgcluster import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "undolog.cli", "dashboard", "--dsn", dsn, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()[1]
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the dashboard did not start listening"
            time.sleep(0.1)
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
