"""`undolog metrics` bounded: a scrape of a journal table locked by a migration, or of a
server that accepts and never answers, answers undolog_up 0 within the scrape's bound; a
scrape stuck past every bound does not make the later ones queue; idle clients of the
HTTP server neither hold a thread for ever nor add threads without end."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from test_metrics import operator_dsn, parse, run_cli, value

from slow_clients import SLACK, assert_closed_within_the_bound, closing_times
from undolog import metrics as undolog_metrics
from undolog._serving import REQUEST_TIMEOUT
from undolog.cli import _common as cli_common
from undolog.cli.metrics import MAX_HANDLERS, Scraper, make_server

__all__ = ["operator_dsn"]  # a fixture shared with test_metrics
Conn = psycopg.Connection[Any]
T = TypeVar("T")
# Prometheus's default scrape_timeout: a scrape must answer within it (docs/operations/
# monitoring.md), undolog_up 0 if it cannot read
BOUND = 10.0


def within(seconds: float, work: Callable[[], T]) -> tuple[T, float]:
    """work()'s answer and the seconds it took, failing (not hanging) if it takes longer
    than ``seconds``: the thread left behind ends once the test releases what it waits on."""
    answer: list[T] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: answer.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert answer, f"no answer within {seconds} s"
    return answer[0], time.monotonic() - started


def scraper_of(dsn: str) -> Scraper:
    return Scraper(type("Args", (), {"dsn": dsn})())


@pytest.fixture
def locked_journal(dsn: str) -> Iterator[Conn]:
    """A transaction holding the sessions table ACCESS EXCLUSIVE, as a migration does."""
    with psycopg.connect(dsn) as migration:
        migration.execute("LOCK TABLE undolog.undolog_sessions IN ACCESS EXCLUSIVE MODE")
        yield migration
        migration.rollback()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A DSN naming a server that accepts connections and never answers (a hung host: the
    kernel completes the handshake, nobody reads)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        yield f"host=127.0.0.1 port={port} user=nobody dbname=nothing"


def test_a_locked_journal_answers_up_0_within_the_bound(
    operator_dsn: str, locked_journal: Conn
) -> None:
    scraper = scraper_of(operator_dsn)
    text, took = within(BOUND + 5, scraper.text)
    assert value(parse(text), "undolog_up") == 0 and took < BOUND
    assert "lock timeout" in text  # the failure says which wait it was
    locked_journal.rollback()  # the migration ends: the same connection reads again
    assert value(parse(scraper.text()), "undolog_up") == 1
    scraper.close()


def test_once_on_a_locked_journal_fails_within_the_bound(
    operator_dsn: str, locked_journal: Conn
) -> None:
    (code, out, err), took = within(
        BOUND + 5, lambda: run_cli("metrics", "--once", "--dsn", operator_dsn)
    )
    assert code == 1 and out == "" and "lock timeout" in err and took < BOUND


def test_a_server_that_never_answers_is_up_0_within_the_bound(silent_server: str) -> None:
    scraper = scraper_of(silent_server)
    for _ in range(2):  # and the next scrape too: nothing is left waiting
        text, took = within(BOUND + 5, scraper.text)
        assert value(parse(text), "undolog_up") == 0 and took < BOUND
    scraper.close()
    (code, _, err), took = within(
        BOUND + 5, lambda: run_cli("metrics", "--once", "--dsn", silent_server)
    )
    assert code == 1 and "timeout" in err and took < BOUND


@pytest.mark.parametrize(
    "command", [("sessions", "list"), ("approvals", "list"), ("health",), ("verify",)]
)
def test_every_command_gives_up_on_a_server_that_never_answers(
    silent_server: str, command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the scrape: any command's connection is bounded (cli._common.CONNECT_TIMEOUT,
    10 s; 1 s here), and says it timed out."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(cli_common, "CONNECT_TIMEOUT", 1)
    (code, out, err), took = within(8, lambda: run_cli(*command, "--dsn", silent_server))
    assert code == 1 and "timeout" in out + err and took < 5, out + err


def test_a_dsn_or_pgconnect_timeout_sets_how_long_a_connection_waits(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_common, "CONNECT_TIMEOUT", 60)  # the user's own value wins
    (code, _, _), took = within(
        8, lambda: run_cli("sessions", "list", "--dsn", f"{silent_server} connect_timeout=1")
    )
    assert code == 1 and took < 5
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "1")
    (code, _, _), took = within(8, lambda: run_cli("sessions", "list", "--dsn", silent_server))
    assert code == 1 and took < 5


def test_a_stuck_scrape_does_not_make_the_next_ones_queue(
    operator_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scrape stuck past the server-side bounds (a server that stopped answering once
    connected) holds the lock: the next ones answer undolog_up 0 after SCRAPE_TIMEOUT."""
    monkeypatch.setattr(undolog_metrics, "SCRAPE_TIMEOUT", 0.5)
    scraper = scraper_of(operator_dsn)
    scraper.lock.acquire()  # as the stuck scrape holds it
    try:
        text, took = within(5, scraper.text)
        assert value(parse(text), "undolog_up") == 0 and 0.5 <= took < 5
        assert "still runs" in text
    finally:
        scraper.lock.release()
    assert value(parse(scraper.text()), "undolog_up") == 1
    scraper.close()


def closed_by_server(sock: socket.socket) -> bool:
    with contextlib.suppress(ConnectionResetError):
        return sock.recv(1) == b""
    return True


def test_idle_clients_neither_hold_threads_for_ever_nor_add_them_without_end(
    operator_dsn: str,
) -> None:
    """At most 16 connections are served at once (one more closes the one that has waited
    longest for its request), and one that sends no request is closed after
    REQUEST_TIMEOUT (docs/operations/monitoring.md)."""
    scraper = scraper_of(operator_dsn)
    server = make_server(scraper, "127.0.0.1", 0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    address = ("127.0.0.1", server.server_address[1])
    try:
        before = threading.active_count()
        idle = [socket.create_connection(address) for _ in range(40)]  # each sends nothing
        time.sleep(0.5)
        assert threading.active_count() <= before + 16
        started = time.monotonic()
        for sock in idle:  # over the cap: the older closed at once; the others in time
            sock.settimeout(REQUEST_TIMEOUT + SLACK)
            assert closed_by_server(sock)
            sock.close()
        assert time.monotonic() - started < REQUEST_TIMEOUT + SLACK
        deadline = time.monotonic() + 3
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() == before
        with urllib.request.urlopen(f"http://127.0.0.1:{address[1]}/metrics") as answer:
            assert value(parse(answer.read().decode()), "undolog_up") == 1
    finally:
        server.shutdown()
        server.server_close()
        scraper.close()
        serving.join()


def test_clients_that_never_finish_a_request_cannot_keep_a_scrape_out(operator_dsn: str) -> None:
    """Each client that never completes its request is closed within REQUEST_TIMEOUT: the
    socket's timeout bounded each read, not the request, so a header line every second
    (slowloris) held a thread for ever. And MAX_HANDLERS of them, which a client could
    open again every few seconds, no longer keep a scrape out: the new connection closes
    the one that has waited longest for its request, instead of being refused."""
    scraper = scraper_of(operator_dsn)
    server = make_server(scraper, "127.0.0.1", 0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_address[1]
    try:
        assert_closed_within_the_bound(closing_times(port, "/metrics"))
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_HANDLERS)]
        time.sleep(0.2)
        (status, text), _ = within(5, lambda: scrape(port))
        assert status == 200 and value(parse(text), "undolog_up") == 1
        for sock in idle:
            sock.close()
    finally:
        server.shutdown()
        server.server_close()
        scraper.close()
        serving.join()


def scrape(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return int(answer.status), answer.read().decode()
