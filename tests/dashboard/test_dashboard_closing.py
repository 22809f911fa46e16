"""A web session ending while the database answers nothing on its connection: the person
logging in (a fifth login replacing the oldest web session), logging out, or the reaper,
is answered at once, and the connection is closed once the database answers again.

The database's silence is real: the dashboard reaches PostgreSQL through a TCP relay
that holds the bytes of the web session's own connections (as a network that dropped
them would), while every other connection (the new login's, the cancel request's) goes
through."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from starlette.applications import Starlette
from test_dashboard import app_dsn

from dashboard_helpers import PASSWORD, csrf_of
from undolog.dashboard.app import Dashboard
from undolog.dashboard.websessions import MAX_SESSIONS_PER_LOGIN

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn"]  # a fixture shared with test_dashboard

GAVE_UP = "answers neither a query nor its cancel"


@dataclass
class Relay:
    """A TCP relay to PostgreSQL. freeze() holds every byte of the links open now, in
    both directions, until thaw(); links opened later pass."""

    host: str
    port: int
    links: list[asyncio.Event] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[int]:
        server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        try:
            yield int(server.sockets[0].getsockname()[1])
        finally:
            server.close()
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def freeze(self) -> list[asyncio.Event]:
        frozen = list(self.links)
        for link in frozen:
            link.clear()
        return frozen

    @staticmethod
    def thaw(frozen: list[asyncio.Event]) -> None:
        for link in frozen:
            link.set()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
            passing = asyncio.Event()
            passing.set()
            self.links.append(passing)
            await asyncio.gather(
                self._pipe(reader, up_writer, passing), self._pipe(up_reader, writer, passing)
            )
        except asyncio.CancelledError:
            pass  # the relay's end: a link still open (the asyncio server logs a cancel)
        finally:
            writer.close()
            self.tasks.discard(task)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, passing: asyncio.Event
    ) -> None:
        try:
            while data := await source.read(65536):
                await passing.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()


async def browser(app: Any, login: str) -> httpx.AsyncClient:
    """A browser logged in as ``login`` (its own cookies)."""
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://dash", timeout=60
    )
    token = csrf_of((await client.get("/login")).text)
    done = await client.post("/login", data={"csrf": token, "login": login, "password": PASSWORD})
    assert done.status_code == 303, done.text
    return client


def backend_alive(conn: Conn, pid: int) -> bool:
    """Whether the backend ``pid`` is still there (a closed connection's leaves within 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        alive = conn.execute("SELECT FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        if alive is None or time.monotonic() > deadline:
            return alive is not None
        time.sleep(0.05)


@pytest.mark.parametrize("ending", ["replaced by a fifth login", "logged out", "reaped"])
def test_a_web_session_whose_database_answers_nothing_ends_without_holding_anyone_up(
    ending: str,
    app_dsn: str,
    passwords_checked: bool,
    conn: Conn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    params = conninfo_to_dict(app_dsn)
    relay = Relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))

    async def body() -> int:
        async with relay.serving() as port:
            dashboard = Dashboard(make_conninfo(app_dsn, host="127.0.0.1", port=port))
            async with dashboard.lifespan(Starlette()):
                app = dashboard.app()
                first = await browser(app, "dash_approver")
                token = csrf_of((await first.get("/approvals")).text)
                (old,) = dashboard.store.sessions.values()
                pid = old.conn.info.backend_pid
                frozen = relay.freeze()  # the first web session's two connections
                # a page's read on it, sent and never answered: it holds the connection
                stuck = asyncio.create_task(first.get("/approvals"))
                while not old.lock.locked():
                    assert not stuck.done(), stuck.result()
                    await asyncio.sleep(0.01)
                others: list[httpx.AsyncClient] = []
                if ending == "replaced by a fifth login":
                    for _ in range(MAX_SESSIONS_PER_LOGIN):
                        others.append(await browser(app, "dash_approver"))
                elif ending == "logged out":  # in another tab
                    answer = await first.post("/logout", data={"csrf": token})
                    assert answer.status_code == 303
                else:
                    old.last_seen -= dashboard.store.idle_timeout + 1
                    await dashboard.store.reap()
                # answered while the close still waits for the database, before it gave
                # up waiting (a close that held the answer up gave up first)
                assert GAVE_UP not in caplog.text
                assert old.sid not in dashboard.store.sessions and old.closed
                assert not old.conn.closed and dashboard.store.closing
                relay.thaw(frozen)  # the database answers again
                read = await stuck
                # its read was answered (200), or ended with the web session (503)
                assert read.status_code in (200, 503), read.status_code
                await asyncio.gather(*dashboard.store.closing)
                assert old.conn.closed and old.listener.closed
                for client in (first, *others):
                    await client.aclose()
            return pid

    with caplog.at_level(logging.INFO, logger="undolog.dashboard"):
        pid = asyncio.run(body())
    assert GAVE_UP not in caplog.text  # closed by its own closing, once answered
    assert not backend_alive(conn, pid)
