"""The dashboard process's cap on open live pages (event streams), derived from its
open-file limit, and the share of it that agent-only logins hold together: on a real
server (uvicorn) over HTTP, with real logins on a real PostgreSQL.

Each stream holds a descriptor for as long as its page is open; the per-web-session and
per-login caps let one agent-only login hold 64 of them, and about a dozen such logins
used up a limit of 1,024: the process then accepted no connection, the staff's login
page's included."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from typing import cast

import httpx
import pytest
from test_dashboard import app_dsn
from test_dashboard_hostile import serving

from dashboard_helpers import PASSWORD, active_session, csrf_of
from undolog import _serving
from undolog.dashboard.app import (
    LIVE_FLOOR,
    LIVE_MARGIN,
    LIVE_RETRY_SECONDS,
    MAX_STREAMS,
    WEB_SESSION_CONNECTIONS,
    Dashboard,
    LiveCaps,
)
from undolog.dashboard.websessions import MAX_SESSIONS_PER_LOGIN

__all__ = ["app_dsn"]  # a fixture shared with test_dashboard

# An open-file limit whose caps are small enough for a test to fill (LiveCaps.of: 22
# streams in all, 11 for agent-only logins, with the dashboard's 100 web sessions).
SMALL_NOFILE = 568


def test_the_caps_leave_what_else_the_process_holds_its_descriptors() -> None:
    """At the usual 1,024: the cap, the HTTP server's connections not being answered, the
    web sessions' connections at their cap and the margin fit in the limit, and agents
    together hold no more than half the streams (at the per-login caps, two agent
    logins' worth; eleven of them used up every descriptor before)."""
    caps = LiveCaps.of(1024, 100)
    held = _serving.unanswered_share(1024) + 100 * WEB_SESSION_CONNECTIONS + LIVE_MARGIN
    assert not caps.short
    assert caps.all + held <= 1024
    assert caps.agents <= caps.all // 2
    assert caps.agents < 2 * MAX_SESSIONS_PER_LOGIN * MAX_STREAMS
    # a limit too small for the web sessions alone: the floor, said to be short
    assert LiveCaps.of(256, 100) == LiveCaps(LIVE_FLOOR, LIVE_FLOOR // 2, short=True)
    # no limit: only the per-web-session caps bound the streams
    assert LiveCaps.of(None, 100) == LiveCaps(100 * MAX_STREAMS, 50 * MAX_STREAMS)
    # a higher limit: more for everyone, never more than the web sessions could open
    assert caps.all < LiveCaps.of(2048, 100).all <= 100 * MAX_STREAMS


def _caps_in_a_process_limited_to(nofile: int) -> tuple[str, str]:
    """The caps a Dashboard reads by itself in a process whose RLIMIT_NOFILE soft limit
    is ``nofile`` (a child process: the test's own limit is left alone), and what it
    logged."""
    code = (
        "import resource\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, hard))\n"
        "from undolog.dashboard.app import Dashboard\n"
        "print(repr(Dashboard('dbname=unused').live_caps))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip(), done.stderr


def test_the_cap_is_read_from_the_processs_open_file_limit() -> None:
    shown, logged = _caps_in_a_process_limited_to(SMALL_NOFILE)
    assert shown == repr(LiveCaps.of(SMALL_NOFILE, 100))
    assert "LimitNOFILE" not in logged
    shown, logged = _caps_in_a_process_limited_to(256)
    assert shown == repr(LiveCaps(LIVE_FLOOR, LIVE_FLOOR // 2, short=True))
    # the operator is told at start, and how to raise it
    assert "open-file limit (256 descriptors)" in logged and "LimitNOFILE=" in logged


@contextlib.contextmanager
def logged_in(base: str, login: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        token = csrf_of(client.get("/login").text)
        answer = client.post("/login", data={"csrf": token, "login": login, "password": PASSWORD})
        assert answer.status_code == 303, answer.text
        yield client


def open_streams(stack: contextlib.ExitStack, client: httpx.Client, path: str, n: int) -> None:
    """``n`` live pages of ``client`` on ``path``, each served: its first read of what
    the page shows, as the person, has come."""
    for _ in range(n):
        stream = stack.enter_context(client.stream("GET", path))
        assert stream.status_code == 200, stream.read()
        # held by the stack: the lines' generator, once collected, would close the stream
        lines = stack.enter_context(
            contextlib.closing(cast(Generator[str, None, None], stream.iter_lines()))
        )
        assert next(lines).startswith("retry:")
        assert next(line for line in lines if line) in ("event: change", ": still here")


def refused(client: httpx.Client, path: str) -> httpx.Response:
    """The answer to one more live page of ``client``'s on ``path``: its body read unless
    it is a stream (which never ends: the caller's assertion on its status then fails)."""
    with client.stream("GET", path) as answer:
        if answer.status_code != 200:
            answer.read()
    return answer


def until(done: Callable[[], bool]) -> None:
    """A bound, not a wait: a stream's places are given back once the server sees its
    client gone."""
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, "the streams' places were not given back"
        time.sleep(0.05)


def test_agent_logins_fill_their_share_and_the_staff_still_open_their_live_pages(
    app_dsn: str, passwords_checked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    dashboard = Dashboard(app_dsn, nofile=SMALL_NOFILE)
    caps = dashboard.live_caps
    assert caps == LiveCaps.of(SMALL_NOFILE, dashboard.store.max_sessions)
    # small enough to fill here, and each login's part of it within its per-web-session cap
    assert not caps.short and caps.all - caps.agents <= MAX_STREAMS
    first, second = (caps.agents + 1) // 2, caps.agents // 2
    assert first <= MAX_STREAMS
    own = {login: active_session(app_dsn, login) for login in ("dash_agent", "dash_agent2")}
    page = {login: f"/events?view=session&id={sid}" for login, sid in own.items()}
    caplog.set_level(logging.WARNING, logger="undolog.dashboard")
    with (
        serving(dashboard) as base,
        logged_in(base, "dash_agent") as agent,
        logged_in(base, "dash_agent2") as agent2,
        logged_in(base, "dash_approver") as approver,
        contextlib.ExitStack() as agents_streams,
        contextlib.ExitStack() as staff_streams,
    ):
        with contextlib.ExitStack() as first_streams:
            open_streams(first_streams, agent, page["dash_agent"], first)
            open_streams(agents_streams, agent2, page["dash_agent2"], second)
            # the agents' share is full: either agent login is refused, saying what to do
            for client, login in ((agent, "dash_agent"), (agent2, "dash_agent2")):
                answer = refused(client, page[login])
                assert answer.status_code == 503, answer.status_code
                assert "without a staff role" in answer.text and "close some" in answer.text
                assert answer.headers["retry-after"] == str(LIVE_RETRY_SECONDS)
                # the page itself still works (its script then refreshes it: see
                # test_dashboard_browser's test_a_live_page_refused_its_stream_*)
                assert client.get(f"/sessions/{own[login]}?fragment=1").status_code == 200
            assert len(dashboard.live_agents) == caps.agents
            # the staff still get every stream the agents could not take, and each is
            # served: its reads of the inbox, as the approver, come
            open_streams(staff_streams, approver, "/events?view=inbox", caps.all - caps.agents)
            assert len(dashboard.live) == caps.all
            full = refused(approver, "/events?view=inbox")
            assert full.status_code == 503, full.status_code
            assert "for everyone" in full.text and "LimitNOFILE=" in full.text
            assert approver.get("/approvals").status_code == 200
        # the first agent's pages closed: their places are given back, and a page of the
        # other agent's, refused before, now opens
        until(lambda: len(dashboard.live_agents) == second)
        assert len(dashboard.live) == caps.all - first
        open_streams(agents_streams, agent2, page["dash_agent2"], 1)
        agents_streams.close()
        staff_streams.close()
        until(lambda: not dashboard.live)
        assert not dashboard.live_agents
        assert all(not ws.waiters for ws in dashboard.store.sessions.values())
    refusals = [r for r in caplog.records if "a live page refused" in r.getMessage()]
    # logged for the operator, once (a refused page tries again every 30 s: not per refusal)
    assert len(refusals) == 1 and "LimitNOFILE=" in refusals[0].getMessage()
