"""The MCP proxy with real processes: the SDK's MCP client drives `undolog mcp-proxy`
(over stdio and over streamable HTTP), which fronts tests/mcp_upstream_server.py (two
upstream processes). Every execution upstream lands in a ledger file, so a double
execution, or a missing compensation, is visible."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Literal, cast

import mcp_types as types
import psycopg
import pytest
from mcp import Client, StdioServerParameters

from undolog import approvals, engine, saga
from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.queries import QUERIES

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "mcp-proxy" / "policy.toml"
SESSION = "undolog/session"  # the proxy's handle
RAW_SESSION = "undolog/session_id"
# `python -m undolog.cli`, forked from the tests' zygote (tests/undolog_main.py)
UNDOLOG = [sys.executable, str(ROOT / "tests" / "undolog_main.py")]
WORKER = [*UNDOLOG, "worker"]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


def _env(ledger: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "UPSTREAM_LEDGER": str(ledger), "PATH": f"{bindir}:{os.environ['PATH']}"}


def _proxy_args(config: Path, dsn: str) -> list[str]:
    return [*UNDOLOG[1:], "mcp-proxy", "--config", str(config), "--dsn", dsn]


def stdio_proxy(config: Path, dsn: str, ledger: Path) -> subprocess.Popen[bytes]:
    """`undolog mcp-proxy` over stdio, its pipes ours to write JSON-RPC lines to by hand
    (its stderr dropped)."""
    return subprocess.Popen(
        [sys.executable, *_proxy_args(config, dsn)],
        env=_env(ledger),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def ops(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines()]


def names(ledger: Path) -> list[str]:
    return [entry["op"] for entry in ops(ledger)]


def release_slow_make(ledger: Path, key: str) -> None:
    """Let tests/mcp_session_upstream.py's slow_make of that key answer now (its file
    ``release-<key>`` beside the ledger), instead of after its seconds."""
    ledger.with_name(f"release-{key}").write_text("")


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def derived_policy(tmp_path: Path, **proxy: float) -> Path:
    """The example policy with other [proxy] numbers (shorter holds for the tests)."""
    source = POLICY.read_text()
    for key, value in proxy.items():
        source, count = re.subn(rf"^{key} = .*$", f"{key} = {value}", source, flags=re.M)
        assert count == 1
    path = tmp_path / "policy.toml"
    path.write_text(source)
    return path


SAFE, IRREVERSIBLE = 'tier = "safe"', 'tier = "irreversible"'  # a tool's lines in a policy


def compensable(undo: str, **reads: str) -> str:
    """A COMPENSABLE tool's lines in a policy: undone by the upstream's tool ``undo``, whose
    arguments are read from these paths, the undo_id its idempotency key."""
    args = "".join(f'{arg} = "{path}", ' for arg, path in reads.items())
    return f'tier = "compensable"\ncompensation.{undo} = {{ {args}idempotency_key = "undo_id" }}'


def upstream_policy(
    path: Path, upstream: str, script: str, hide: str, tools: dict[str, str], **proxy: float
) -> Path:
    """A policy file fronting one upstream, ``python tests/<script>``, its tool ``hide`` (the
    compensations') not offered: each tool's lines (SAFE, IRREVERSIBLE, compensable), and
    [proxy] hold_seconds = 2, call_timeout_seconds = 5 or these numbers."""
    numbers = {"hold_seconds": 2, "call_timeout_seconds": 5, **proxy}
    lines = ["[proxy]", *(f"{key} = {value}" for key, value in numbers.items()), ""]
    lines += [f"[upstreams.{upstream}]", f'command = ["python", "tests/{script}"]']
    lines.append(f'hide = ["{hide}"]')
    for tool, tier in tools.items():
        lines += [f"[upstreams.{upstream}.tools.{tool}]", tier]
    path.write_text("\n".join(lines) + "\n")
    return path


def stdio_client(config: Path, dsn: str, ledger: Path, mode: str = "auto") -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=_proxy_args(config, dsn), env=_env(ledger), cwd=str(ROOT)
    )
    return Client(params, mode=mode, read_timeout_seconds=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpProxy:
    """`undolog mcp-proxy --http` as a child process of the test."""

    def __init__(self, config: Path, dsn: str, ledger: Path, **popen: Any) -> None:
        """``popen``: more of Popen's arguments (its standard error a pipe unless given)."""
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, *_proxy_args(config, dsn), "--http", f"127.0.0.1:{self.port}"],
            env=_env(ledger),
            cwd=ROOT,
            text=True,
            **{"stderr": subprocess.PIPE, **popen},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr and self.process.stderr.read()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError("the proxy did not start listening")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def client(self) -> Client:
        # legacy: the handshake era, where the MCP session (Mcp-Session-Id) is the
        # UndoLog session unless the client names one in _meta
        return Client(self.url, mode="legacy", read_timeout_seconds=60)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture
def http_proxies() -> Iterator[list[HttpProxy]]:
    started: list[HttpProxy] = []
    yield started
    for proxy in started:
        proxy.stop()


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sessions(conn: psycopg.Connection[Any]) -> list[tuple[uuid.UUID, str]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT session_id, state FROM undolog.undolog_sessions ORDER BY created_at"
        ).fetchall()
    ]


@contextlib.contextmanager
def holding_the_session_row(dsn: str, sid: uuid.UUID | str) -> Iterator[psycopg.Connection[Any]]:
    """An operator's open transaction holding the session's row (FOR UPDATE) until the
    block ends: what moves the session (rollback_last, completion) waits for it."""
    with psycopg.connect(dsn) as operator:
        operator.execute(
            "SELECT 1 FROM undolog.undolog_sessions WHERE session_id = %s FOR UPDATE", (sid,)
        )
        yield operator


def run_worker(dsn: str, config: Path, ledger: Path) -> subprocess.CompletedProcess[str]:
    """`undolog worker --once` with the proxy's configuration (its compensations are the
    upstreams' tools), as an operator would run it; it must succeed."""
    worker = subprocess.run(
        [*WORKER, "--once", "--dsn", dsn, "--mcp-config", str(config)],
        env=_env(ledger),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 0, worker.stderr
    return worker


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {check}")


def pending_approval(conn: psycopg.Connection[Any]) -> uuid.UUID | None:
    row = conn.execute("SELECT approval_id FROM undolog.pending_approvals").fetchone()
    return None if row is None else uuid.UUID(str(row[0]))


async def decided(
    conn: psycopg.Connection[Any],
    call: Coroutine[Any, Any, types.CallToolResult],
    verdict: Literal["approve", "reject"],
    by: str,
    reason: str | None = None,
) -> types.CallToolResult:
    """The answer to a call held for a person, once ``by`` has decided its approval
    request: the call sent, its request awaited, then approved or rejected."""
    held = asyncio.create_task(call)
    approval_id = await asyncio.to_thread(wait_for, lambda: pending_approval(conn))
    if verdict == "approve":
        approvals.approve(conn, approval_id, by, reason)
    else:
        approvals.reject(conn, approval_id, by, reason)
    return await held


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------


def test_session_completes_over_stdio(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    async def body() -> None:
        async with stdio_client(POLICY, dsn, ledger) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) == {
                "crm__lookup_user",
                "crm__create_user",
                "crm__send_email",
                "crm__slow_echo",
                "payments__process_payout",
            }  # hidden tools are not listed; two upstreams are namespaced
            assert "COMPENSABLE" in (listed["crm__create_user"].description or "")
            assert "SAFE" in (listed["crm__lookup_user"].description or "")
            assert "IRREVERSIBLE" in (listed["payments__process_payout"].description or "")

            made = await client.call_tool("crm__create_user", {"email": "a@x", "name": "Ada"})
            assert not made.is_error and made.structured_content == {"user_id": 1, "email": "a@x"}
            sent = await client.call_tool("crm__send_email", {"to": "a@x", "subject": "hi"})
            assert not sent.is_error
            found = await client.call_tool("crm__lookup_user", {"email": "a@x"})
            assert found.structured_content == {"email": "a@x", "found": False}
            # SAFE is not journaled: two effects, both committed. The proxy answers a
            # COMPENSABLE call while its commit is being recorded (docs/performance.md),
            # and a SAFE call does not wait for it: so the last commit may land a moment
            # after the answers (under load, it did: send_email read as executing).
            committed = [("crm/create_user", "committed"), ("crm/send_email", "committed")]
            wait_for(
                lambda: (
                    conn.execute(
                        "SELECT tool_name, state FROM undolog.undolog_effect_log ORDER BY tool_name"
                    ).fetchall()
                    == committed
                ),
                timeout=10,
            )
            unknown = await client.call_tool("crm__delete_user", {"user_id": 1})
            assert unknown.is_error and "unknown tool" in text(unknown)

    run(body)
    # the client went away: its session completed, nothing was undone
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert names(ledger) == ["create_user", "send_email"]


def test_rollback_undoes_through_the_upstream_lifo(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    proxy = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(proxy)

    async def body() -> None:
        async with Client(proxy.url, read_timeout_seconds=60) as stateless:  # 2026 era
            # stateless HTTP: a call with no handle starts a session and is told its handle
            nameless = await stateless.call_tool("crm__send_email", {"to": "z@x", "subject": "s"})
            handle = (nameless.meta or {})[SESSION]
            again = await stateless.call_tool(
                "crm__send_email",
                {"to": "z@x", "subject": "s"},
                meta=cast(types.RequestParamsMeta, {SESSION: handle}),
            )
            assert not again.is_error and (again.meta or {})[SESSION] == handle
            ((stateless_sid, _),) = sessions(conn)
        async with proxy.client() as client:
            first = await client.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            mail = await client.call_tool("crm__send_email", {"to": "a@x", "subject": "hi"})
            second = await client.call_tool("crm__create_user", {"email": "b@x", "name": "B"})
            assert not (first.is_error or mail.is_error or second.is_error)
            ((sid, state),) = [s for s in sessions(conn) if s[0] != stateless_sid]
            assert state == "active"
            assert saga.rollback_session(conn, sid, "alice", "wrong customer") == "failed"
            refused = await client.call_tool("crm__create_user", {"email": "c@x", "name": "C"})
            assert refused.is_error and "undone" in text(refused)
            wait_for(lambda: dict(sessions(conn))[sid] == "compensated")

    run(body)
    undo = [e for e in ops(ledger) if e["op"] in ("delete_user", "retract_email")]
    # last first, once each, with the undo entry's id as the idempotency key
    assert [(e["op"], e.get("user_id")) for e in undo] == [
        ("delete_user", 2),
        ("retract_email", None),
        ("delete_user", 1),
    ]
    undo_ids = {
        str(r[0])
        for r in conn.execute(
            "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id ="
            " (SELECT session_id FROM undolog.undolog_sessions WHERE state = 'compensated')"
        ).fetchall()
    }
    assert {e["idempotency_key"] for e in undo} == undo_ids
    assert names(ledger).count("create_user") == 2  # C was refused, not run


def test_the_web_servers_lines_are_written_as_the_proxys_log(
    dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """Over HTTP, uvicorn's lines (at WARNING: a request it refuses, an application's
    traceback) are the proxy's log lines, made printable (undolog.logs), not written by
    uvicorn's own formatter. (The escaping itself: tests/dashboard/test_dashboard_log.py.)"""
    proxy = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(proxy)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(b"\x1b[2J\r\n\r\n")  # no request line: h11 refuses it, uvicorn warns
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    proxy.process.send_signal(signal.SIGINT)
    _, err = proxy.process.communicate(timeout=15)
    lines = err.splitlines()
    assert "undolog mcp-proxy: Invalid HTTP request received." in lines, err
    assert not any(line.startswith("WARNING:") for line in lines), err


def test_irreversible_approved_during_the_hold_runs_once(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def body() -> None:
        async with stdio_client(POLICY, dsn, ledger, mode="legacy") as client:
            call = asyncio.create_task(
                client.call_tool(
                    "payments__process_payout",
                    {"account": "acc-1", "amount_cents": 500},
                    progress_callback=on_progress,
                )
            )
            approval_id = await asyncio.to_thread(wait_for, lambda: pending_approval(conn))
            assert names(ledger) == []  # held: nothing ran yet
            await asyncio.sleep(2.5)  # long enough for a progress notification
            with psycopg.connect(dsn, autocommit=True) as approver:
                approvals.approve(approver, approval_id, "alice", "checked")
            paid = await call
            assert not paid.is_error, text(paid)
            assert paid.structured_content == {"payout_id": "po-1", "amount_cents": 500}
            again = await client.call_tool(
                "payments__process_payout", {"account": "acc-1", "amount_cents": 500}
            )
            assert again.structured_content == paid.structured_content  # replayed

    run(body)
    assert seen, "no progress notification while the call was held"
    assert names(ledger) == ["process_payout"]
    assert [state for _, state in sessions(conn)] == ["completed"]


def test_many_held_calls_share_one_listen_connection_and_are_capped(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, tmp_path: Path
) -> None:
    """120 irreversible calls at once from one client: the proxy's PostgreSQL connections
    stay bounded (its pool and one LISTEN connection, not one per hold), and the calls past
    the per-client cap are told so at once."""
    # held 5 s: every call that is not held is answered well before (within a second
    # here), so no hold ends and frees its place while calls still come
    policy = derived_policy(tmp_path, hold_seconds=5)
    policy.write_text(
        policy.read_text().replace("[proxy]\n", "[proxy]\nmax_holds_per_client = 6\n", 1)
    )
    peak = [0]
    stop = [False]

    def sample() -> None:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not stop[0]:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = 'undolog-mcp-proxy'"
                ).fetchone()
                assert row is not None
                peak[0] = max(peak[0], int(row[0]))
                time.sleep(0.05)

    async def body() -> list[types.CallToolResult]:
        async with stdio_client(policy, dsn, ledger, mode="legacy") as client:
            watcher = asyncio.create_task(asyncio.to_thread(sample))
            try:
                return list(
                    await asyncio.gather(
                        *(
                            client.call_tool(
                                "payments__process_payout",
                                {"account": "acc-1", "amount_cents": 500},
                            )
                            for _ in range(120)
                        )
                    )
                )
            finally:
                stop[0] = True
                await watcher

    results = asyncio.run(body())
    capped = [r for r in results if "NOT HELD" in text(r)]
    held = [r for r in results if "NOT RUN YET: " in text(r)]
    assert all(r.is_error for r in results)
    # identical concurrent calls: the journal answers some "this very call is running
    # now" at once; of those it answers "awaits approval", at most 6 are held and the rest
    # are told at once that the cap is reached
    running = [r for r in results if "this very call is running now" in text(r)]
    assert len(capped) + len(held) + len(running) == 120
    assert len(held) == 6 and len(capped) >= 1, (len(held), len(capped), len(running))
    assert "max_holds_per_client" in text(capped[0])
    assert 1 <= peak[0] <= 8 + 1, peak[0]  # the pool's connections and one LISTEN
    assert names(ledger) == []
    print(
        f"120 concurrent irreversible calls: peak {peak[0]} proxy connections;"
        f" {len(held)} held, {len(capped)} capped, {len(running)} answered running"
    )


def test_one_client_cannot_use_up_the_logins_pending_approvals(
    tmp_path: Path,
    dsn: str,
    conn: psycopg.Connection[Any],
    ledger: Path,
    http_proxies: list[HttpProxy],
) -> None:
    """Every client of the proxy shares its login, and the engine bounds that login's
    pending approval requests as a whole (undolog.max_pending_approvals). A call past
    max_holds_per_client was still asked before it was refused a hold, so one client
    that made distinct irreversible calls and left kept the whole bound pending (its
    session waits for people, with no deadline) and every other client's irreversible
    call was refused (UL029). proxy.max_pending_approvals_per_client bounds one client's
    requests: a call past it asks nobody; a call already asked still finds its request."""
    conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET undolog.max_pending_approvals = 5')
    config = tmp_path / "pending-cap.toml"
    config.write_text(
        "[proxy]\nhold_seconds = 1\ncall_timeout_seconds = 5\nmax_holds_per_client = 2\n"
        "max_pending_approvals_per_client = 2\n"
        '[upstreams.payments]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
        '[upstreams.payments.tools.process_payout]\ntier = "irreversible"\n'
    )
    proxy = HttpProxy(config, dsn, ledger)
    http_proxies.append(proxy)

    def payout(account: str) -> dict[str, Any]:
        return {"account": account, "amount_cents": 100}

    def pending() -> list[uuid.UUID]:
        rows = conn.execute(
            "SELECT approval_id FROM undolog.pending_approvals ORDER BY requested_at"
        ).fetchall()
        return [uuid.UUID(str(r[0])) for r in rows]

    async def body() -> None:
        async with proxy.client() as hostile:
            # at once, then one at a time: the bound is exact either way
            accounts = [f"acc-{n}" for n in range(6)]
            answers = list(
                await asyncio.gather(
                    *(hostile.call_tool("process_payout", payout(a)) for a in accounts[:3])
                )
            )
            for account in accounts[3:]:
                answers.append(await hostile.call_tool("process_payout", payout(account)))
            assert all(a.is_error for a in answers)
            asked = pending()
            assert len(asked) == 2, [text(a) for a in answers]
            told = {
                account: answer
                for account, answer in zip(accounts, answers, strict=True)
                if "NOT RUN YET: process_payout is irreversible" in text(answer)
            }
            assert len(told) == 2, [text(a) for a in answers]
            assert {next(str(i) for i in asked if str(i) in text(a)) for a in told.values()} == {
                str(i) for i in asked
            }
            for account, refused in zip(accounts, answers, strict=True):
                if account not in told:
                    assert "max_pending_approvals_per_client = 2" in text(refused), text(refused)
                    assert "NOT RUN, NOT ASKED" in text(refused), text(refused)
            # at its bound, a call already asked still finds its own request
            first = next(iter(told))
            again = await hostile.call_tool("process_payout", payout(first))
            assert "NOT RUN YET: " in text(again), text(again)
            assert next(str(i) for i in asked if str(i) in text(told[first])) in text(again)
        # the client left; its two requests wait for people, and another client asks
        async with proxy.client() as other:
            theirs = await other.call_tool("process_payout", payout("acc-other"))
            assert "NOT RUN YET: " in text(theirs), text(theirs)
        assert len(pending()) == 3

    run(body)
    assert names(ledger) == []


def test_the_pending_approvals_cap_is_checked(tmp_path: Path) -> None:
    def policy(line: str) -> Path:
        path = tmp_path / "cap.toml"
        path.write_text(POLICY.read_text().replace("[proxy]\n", f"[proxy]\n{line}\n", 1))
        return path

    assert load_policy(policy("")).max_pending_approvals_per_client == 16
    capped = load_policy(policy("max_pending_approvals_per_client = 3"))
    assert capped.max_pending_approvals_per_client == 3
    for bad in ("0", "1001", '"3"', "2.5", "true"):
        with pytest.raises(PolicyError, match=r"proxy\.max_pending_approvals_per_client"):
            load_policy(policy(f"max_pending_approvals_per_client = {bad}"))


def test_the_holds_cap_is_a_whole_number_from_1_to_1000(tmp_path: Path) -> None:
    """docs/mcp-proxy.md: max_holds_per_client is 1 to 1000. It was read as a number of
    seconds over 1: 1 was refused ("a number of seconds in (1, 1000]") and 2.5 taken as
    2."""

    def policy(line: str) -> Path:
        path = tmp_path / "holds.toml"
        path.write_text(POLICY.read_text().replace("[proxy]\n", f"[proxy]\n{line}\n", 1))
        return path

    assert load_policy(policy("")).max_holds_per_client == 16
    for good in (1, 1000):
        assert load_policy(policy(f"max_holds_per_client = {good}")).max_holds_per_client == good
    for bad in ("0", "1001", '"3"', "2.5", "true"):
        with pytest.raises(PolicyError, match=r"proxy\.max_holds_per_client: expected a whole"):
            load_policy(policy(f"max_holds_per_client = {bad}"))


def test_irreversible_approved_after_the_hold(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    config = derived_policy(tmp_path, hold_seconds=1.5, call_timeout_seconds=1)
    payout = {"account": "acc-2", "amount_cents": 700}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            waiting = await client.call_tool("payments__process_payout", payout)
            approval_id = pending_approval(conn)
            assert waiting.is_error and f"approval {approval_id}" in text(waiting)
            assert "same call again" in text(waiting)
            # while it waits, the session's other calls that act are refused; SAFE works
            refused = await client.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            assert refused.is_error and "waits for a human" in text(refused)
            found = await client.call_tool("crm__lookup_user", {"email": "a@x"})
            assert not found.is_error
            # asking again before the decision is the same request, not a second one
            still = await client.call_tool("payments__process_payout", payout)
            assert f"approval {approval_id}" in text(still)
            assert approval_id is not None
            approvals.approve(conn, approval_id, "alice")
            paid = await client.call_tool("payments__process_payout", payout)
            assert paid.structured_content == {"payout_id": "po-1", "amount_cents": 700}
            replay = await client.call_tool("payments__process_payout", payout)
            assert replay.structured_content == paid.structured_content
            # an upstream too slow is a clear tool error
            slow = await client.call_tool("crm__slow_echo", {"text": "zz", "seconds": 3})
            assert slow.is_error and "did not answer" in text(slow)

    run(body)
    assert [n for n in names(ledger) if n != "slow_echo"] == ["process_payout"]
    count = conn.execute("SELECT count(*) FROM undolog.undolog_approval_requests").fetchone()
    assert count == (1,)


def test_rejection_is_reported_and_the_session_undone(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    config = derived_policy(tmp_path, hold_seconds=1.5)
    payout = {"account": "acc-3", "amount_cents": 900}

    async def body() -> None:
        async with stdio_client(config, dsn, ledger) as client:
            made = await client.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            assert not made.is_error
            waiting = await client.call_tool("payments__process_payout", payout)
            assert waiting.is_error and "NOT RUN YET" in text(waiting)
            approval_id = pending_approval(conn)
            assert approval_id is not None
            approvals.reject(conn, approval_id, "bob", "not this account")
            # reported each time, never a second request: asked again in the same
            # session (its handle sent back; without it the next call is a new session's)
            handle = cast(types.RequestParamsMeta, {SESSION: (waiting.meta or {})[SESSION]})
            for meta in (None, handle):
                rejected = await client.call_tool("payments__process_payout", payout, meta=meta)
                assert rejected.is_error and "REJECTED" in text(rejected)
                assert "bob" in text(rejected) and "not this account" in text(rejected)
            wait_for(lambda: sessions(conn)[0][1] == "compensated")

    run(body)
    assert names(ledger) == ["create_user", "delete_user"]  # the payout never ran
    count = conn.execute("SELECT count(*) FROM undolog.undolog_approval_requests").fetchone()
    assert count == (1,)


def test_sigkill_then_restart_replays_and_runs_nothing_twice(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    first = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(first)
    results: dict[str, Any] = {}

    async def before() -> None:
        async with first.client() as client:
            made = await client.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            handle = (made.meta or {})[SESSION]
            meta = cast(types.RequestParamsMeta, {SESSION: handle})
            sent = await client.call_tool(
                "crm__send_email", {"to": "a@x", "subject": "hi"}, meta=meta
            )
            assert (sent.meta or {})[SESSION] == handle
            results["made"], results["sent"] = made.structured_content, sent.structured_content
            results["meta"] = meta
            first.kill()  # mid-session: the client is still connected

    run(before)  # the client only logs that it could not end the HTTP session
    [(sid, state)] = sessions(conn)
    assert state == "active"
    # the handle names its session (found by primary key after the restart), then a secret
    named, dot, secret = results["meta"][SESSION].partition(".")
    assert (named, dot) == (str(sid), ".") and len(secret) >= 32
    assert names(ledger) == ["create_user", "send_email"]

    second = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(second)
    meta = results["meta"]

    async def after() -> None:
        async with second.client() as client:
            made = await client.call_tool(
                "crm__create_user", {"email": "a@x", "name": "A"}, meta=meta
            )
            sent = await client.call_tool(
                "crm__send_email", {"to": "a@x", "subject": "hi"}, meta=meta
            )
            assert made.structured_content == results["made"]  # replayed from the journal
            assert sent.structured_content == results["sent"]
            new = await client.call_tool(
                "crm__create_user", {"email": "b@x", "name": "B"}, meta=meta
            )
            assert new.structured_content == {"user_id": 2, "email": "b@x"}

    run(after)
    assert names(ledger) == ["create_user", "send_email", "create_user"]
    wait_for(lambda: sessions(conn) == [(sid, "completed")])


def test_a_handle_from_before_handles_named_their_session_still_resumes_it(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """A session begun by an older proxy holds the hash of a handle that is a secret
    alone: it is found by that hash (a scan of the login's sessions, one at a time), and
    a handle naming that session with another secret is refused."""
    old_handle = secrets.token_urlsafe(32)
    sid = uuid.uuid4()
    conn.execute(
        "SELECT undolog.begin_session(%s, 'mcp-proxy', %s::jsonb)",
        (sid, json.dumps({"face": "mcp-proxy", "handle_sha256": sha256_hex(old_handle)})),
    )
    proxy = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as client:
            for forged in (f"{sid}.{old_handle}", f"{sid}.{secrets.token_urlsafe(32)}"):
                refused = await client.call_tool(
                    "crm__create_user",
                    {"email": "x@x", "name": "X"},
                    meta=cast(types.RequestParamsMeta, {SESSION: forged}),
                )
                assert refused.is_error and "unknown session handle" in text(refused)
            made = await client.call_tool(
                "crm__create_user",
                {"email": "a@x", "name": "A"},
                meta=cast(types.RequestParamsMeta, {SESSION: old_handle}),
            )
            assert not made.is_error, text(made)
            assert (made.meta or {})[SESSION] == old_handle

    run(body)
    assert names(ledger) == ["create_user"]
    count = conn.execute(
        "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s", (sid,)
    ).fetchone()
    assert count == (1,)


def test_a_handle_is_found_by_its_sessions_primary_key(agent_dsn: str) -> None:
    """The lookup of a handle after a restart, as an agent login (row-level security
    on): its session id is a condition on the sessions' primary key, where the hash alone
    (a handle from before) can only filter every session of the login. Sequential scans
    are priced out, so only a condition an index can serve avoids one."""
    with psycopg.connect(agent_dsn, autocommit=True) as agent:
        agent.execute("SELECT undolog.begin_session() FROM generate_series(1, 50)")
        agent.execute("SET enable_seqscan = off")

        def plan(name: str) -> str:
            params = {"session_id": uuid.uuid4(), "handle_sha256": "0" * 64}
            rows = agent.execute("EXPLAIN " + QUERIES[name], params)
            return "\n".join(str(r[0]) for r in rows)

        named, unnamed = plan("session_of_handle"), plan("session_of_unnamed_handle")
    assert "undolog_sessions_pkey" in named and "Seq Scan" not in named, named
    # the hash alone: every session of the login read (the owners' index), then filtered
    assert "undolog_sessions_pkey" not in unnamed and "Filter: ((metadata" in unnamed, unnamed


def test_a_client_cannot_take_over_another_clients_session(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """Client B knows client A's handle and A's session id (leaked, or guessed from the
    dashboard): the proxy refuses both, journals nothing in A's session, and B leaving does
    not end A's session."""
    proxy = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as a:
            made = await a.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            handle = (made.meta or {})[SESSION]
            assert len(handle) >= 32
            [(sid, _)] = sessions(conn)
            async with proxy.client() as b:
                for meta in ({SESSION: handle}, {RAW_SESSION: str(sid)}, {SESSION: "x" * 43}):
                    res = await b.call_tool(
                        "crm__create_user",
                        {"email": "b@x", "name": "B"},
                        meta=cast(types.RequestParamsMeta, meta),
                    )
                    assert res.is_error, meta
                    assert "not run" in text(res) and (
                        "another client" in text(res)
                        or "refused" in text(res)
                        or "unknown session handle" in text(res)
                    ), text(res)
            # B has gone: A's session is still A's, still active, with A's call alone
            count = conn.execute(
                "SELECT count(*) FROM undolog.undolog_effect_log WHERE session_id = %s", (sid,)
            ).fetchone()
            assert count == (1,)
            assert dict(sessions(conn))[sid] == "active"
            again = await a.call_tool(
                "crm__create_user",
                {"email": "c@x", "name": "C"},
                meta=cast(types.RequestParamsMeta, {SESSION: handle}),
            )
            assert not again.is_error, text(again)

    run(body)
    assert names(ledger) == ["create_user", "create_user"]
    wait_for(lambda: dict(sessions(conn)) and all(s == "completed" for _, s in sessions(conn)))


def test_worker_walks_a_crashed_proxy_session(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    proxy = HttpProxy(POLICY, dsn, ledger)
    http_proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as client:
            await client.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            await client.call_tool("crm__send_email", {"to": "a@x", "subject": "hi"})
            proxy.kill()

    run(body)
    ((sid, _),) = sessions(conn)
    saga.rollback_session(conn, sid, "alice", "the proxy crashed")
    worker = run_worker(dsn, POLICY, ledger)
    assert f"session {sid}: compensated" in worker.stdout
    assert names(ledger) == ["create_user", "send_email", "retract_email", "delete_user"]


def test_the_proxy_worker_leaves_other_applications_sessions_alone(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A session of another application (its compensation is not the proxy's) is not
    the proxy worker's to walk: it is left as it is, with no attempt used up, for that
    application's worker (before, one pass halted it for good)."""
    other = engine.begin_session(conn, agent="someone-else")
    made = engine.intercept(
        conn,
        other,
        0,
        "create_user",
        "compensable",
        {"email": "eve@x"},
        {"name": "delete_user", "args": {}, "max_attempts": 1},
    )
    assert made.effect_id is not None
    engine.commit(conn, made.effect_id, {"user_id": 5})
    engine.fail_session(conn, other, "its agent died")
    run_worker(dsn, POLICY, ledger)
    assert sessions(conn) == [(other, "failed")]
    entry = conn.execute("SELECT state, attempts FROM undolog.undolog_undo_stack").fetchone()
    assert entry == ("pending", 0)


def test_sigterm_ends_the_proxy_like_a_client_that_left(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """SIGTERM (a service manager's stop; the SDKs' stdio clients send it when the proxy
    does not exit within a few seconds of stdin closing) ends the sessions as a client
    leaving does: completed. Before, the proxy died at once and left them active, so
    that once their lease ran out the worker undid work nobody had asked to undo."""
    proxy = subprocess.Popen(
        [sys.executable, *_proxy_args(hostile_policy(tmp_path), dsn)],
        env=_env(ledger),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        for message in (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "make", "arguments": {"key": "k"}},
            },
        ):
            proxy.stdin.write(json.dumps(message).encode() + b"\n")
            proxy.stdin.flush()
            if "id" in message:
                answer = json.loads(proxy.stdout.readline())
                assert answer["id"] == message["id"] and "result" in answer, answer
        # recorded while the answer travels: the journal has it moments after the client
        wait_for(lambda: effects(conn) == [("k", "committed")])
        proxy.send_signal(signal.SIGTERM)  # stdin still open: the client is still there
        assert proxy.wait(30) == 0
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        proxy.stdin.close()
        proxy.stdout.close()
    assert [state for _, state in sessions(conn)] == ["completed"]


BAD_POLICIES = {
    # refused after listing the upstream's tools: every problem is named at once
    "does not fit the upstream": (
        '[upstreams.crm.tools.frobnicate]\ntier = "safe"\n'
        '[upstreams.crm.tools.send_email]\ntier = "compensable"\n'
        'compensation.undo_it = { message_id = "result.message_id" }\n'
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n'
        'compensation.delete_user = { user_id = "args.user" }\n',
        [
            "names tool 'frobnicate', which the upstream does not list",
            "compensation tool 'undo_it' is not listed",
            "create_user has no argument 'user'",
            "delete_user requires 'idempotency_key'",
        ],
    ),
    # refused as soon as the file is read
    "not an expression": (
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n'
        'compensation.delete_user = { user_id = "__import__(os)" }\n',
        ["is not args.PATH, result.PATH or undo_id"],
    ),
    "no compensation": (
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n',
        ["a compensable tool names exactly one compensation"],
    ),
    "unknown key": ("[proxy]\nhold = 5\n", ["unknown key(s) hold"]),
    # a shared upstream's roots: the operator's choice, never a client's by accident
    "roots not a setting": ('roots = "everything"\n', ['upstreams.crm.roots: "none"']),
    "roots not file URIs": ('roots = ["/etc"]\n', ["a list of file:// URIs"]),
    "no sessions at all": (
        "[proxy]\nmax_sessions_per_client = 0\n",
        ["proxy.max_sessions_per_client"],
    ),
    "no processes at all": (
        "[proxy]\nmax_upstream_processes = 0\n",
        ["proxy.max_upstream_processes"],
    ),
    "hold too long": ("[proxy]\nhold_seconds = 120\n", ["proxy.hold_seconds"]),
    "negative hold": ("[proxy]\nhold_seconds = -1\n", ["proxy.hold_seconds"]),
    "compensation arguments not a table": (
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n'
        "compensation.delete_user = [{ user_id = 1 }]\n",
        ["compensation.delete_user: expected a table"],
    ),
    # the walk would run it with nobody approving it
    "an irreversible compensation": (
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n'
        'compensation.process_payout = { account = "args.email", amount_cents = 1 }\n'
        '[upstreams.crm.tools.process_payout]\ntier = "irreversible"\n',
        ["process_payout, which this policy tiers irreversible"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_POLICIES))
def test_a_bad_policy_is_refused_at_start(
    case: str, tmp_path: Path, dsn: str, ledger: Path
) -> None:
    body, messages = BAD_POLICIES[case]
    upstream = '[upstreams.crm]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
    config = tmp_path / "bad.toml"
    config.write_text(upstream + body)
    done = subprocess.run(
        [sys.executable, *_proxy_args(config, dsn)],
        env=_env(ledger),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "policy refused" in done.stderr, done.stderr
    for message in messages:
        assert message in done.stderr, done.stderr


def test_the_documented_client_configuration_starts_the_proxy() -> None:
    """examples/mcp-proxy/mcp_servers.json (docs/mcp-proxy.md) names a command line that
    `undolog` accepts as the proxy."""
    from undolog.cli import build_parser
    from undolog.cli.mcp_proxy import _cmd_mcp_proxy

    config = json.loads((ROOT / "examples" / "mcp-proxy" / "mcp_servers.json").read_text())
    (server,) = config["mcpServers"].values()
    # absolute: a desktop app does not search the shell's PATH (--print-client-config)
    assert os.path.isabs(server["command"]) and Path(server["command"]).name == "undolog"
    parsed = build_parser().parse_args(server["args"])
    assert parsed.func is _cmd_mcp_proxy
    assert parsed.config.endswith(".toml") and parsed.http is None
    assert "UNDOLOG_DSN" in server["env"]


def start_http_upstream(port: int, ledger: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "tests/mcp_upstream_server.py", "--http", str(port)],
        env=_env(ledger),
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.1)
    raise AssertionError("the upstream did not start listening")


def test_an_http_upstream_that_goes_down(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    port = free_port()
    config = tmp_path / "http-upstream.toml"
    config.write_text(
        f'[upstreams.crm]\nurl = "http://127.0.0.1:{port}/mcp"\n'
        '[upstreams.crm.tools.create_user]\ntier = "compensable"\n'
        'compensation.delete_user = { user_id = "result.user_id", idempotency_key = "undo_id" }\n'
    )
    upstream = start_http_upstream(port, ledger)
    try:

        async def body() -> None:
            nonlocal upstream
            async with stdio_client(config, dsn, ledger) as client:
                made = await client.call_tool("create_user", {"email": "a@x", "name": "A"})
                assert made.structured_content == {"user_id": 1, "email": "a@x"}
                upstream.kill()
                upstream.wait()
                lost = await client.call_tool("create_user", {"email": "b@x", "name": "B"})
                assert lost.is_error, text(lost)
                down = await client.call_tool("create_user", {"email": "c@x", "name": "C"})
                assert down.is_error and "was not run" in text(down) and "unreachable" in text(down)
                upstream = start_http_upstream(port, ledger)
                back = await client.call_tool("create_user", {"email": "d@x", "name": "D"})
                assert back.structured_content == {"user_id": 2, "email": "d@x"}, text(back)

        run(body)
    finally:
        upstream.kill()
        upstream.wait()
    assert [e["email"] for e in ops(ledger) if e["op"] == "create_user"] == ["a@x", "d@x"]
    journaled = dict(
        conn.execute("SELECT args->>'email', state FROM undolog.undolog_effect_log").fetchall()
    )
    # c was never journaled: the upstream was known to be down before it was sent. b was
    # sent as the connection died: its outcome counts as unknown, so the session was not
    # completed but failed, and its undo walk deleted d (b has no result to undo from: a
    # human will).
    assert "c@x" not in journaled
    assert journaled["a@x"] in ("committed", "compensating", "compensated")
    assert journaled.get("b@x") in ("compensating", "executing")
    assert [state for _, state in sessions(conn)] != ["completed"]


def test_the_readme_shows_the_policy_the_tests_load() -> None:
    """README.md's policy (comments trimmed) is examples/mcp-proxy/policy.toml."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Put UndoLog in front of an MCP server") :]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    assert tomllib.loads(block.group(1)) == tomllib.loads(POLICY.read_text())


def hostile_policy(tmp_path: Path) -> Path:
    by_result, by_key = compensable("unmake", id="result.id"), compensable("unmake", id="args.key")
    tools = {"make": by_result, "make_with_nul": by_result, "nul_error": by_key, "crash": by_key}
    path = tmp_path / "hostile.toml"
    return upstream_policy(path, "h", "mcp_hostile_upstream.py", "unmake", tools, hold_seconds=1.5)


def effects(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT args->>'key', state FROM undolog.undolog_effect_log ORDER BY executed_at"
        ).fetchall()
    ]


def test_an_error_result_with_nul_is_journaled_as_failed(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """An upstream's error text is the upstream's: a U+0000 in it must not keep the
    journal from recording that the call failed (it never took effect)."""

    async def body() -> None:
        async with stdio_client(hostile_policy(tmp_path), dsn, ledger) as client:
            for _ in range(2):  # failed, so made again it is retried, not "running"
                refused = await client.call_tool("nul_error", {"key": "n"})
                assert refused.is_error and "refused n" in text(refused), text(refused)
            assert effects(conn) == [("n", "pending")]

    run(body)
    assert [state for _, state in sessions(conn)] == ["completed"]
    assert names(ledger) == []  # nothing was undone: nothing had been done


def test_a_result_the_journal_cannot_hold_whole_is_still_undoable(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """A result over the journal's 1 MiB limit, or with a U+0000 (jsonb refuses it): the
    call ran and its result is known, so it is committed with what its compensation
    reads (and a note), the client gets the result, and a rollback undoes the call."""

    async def body() -> None:
        async with stdio_client(hostile_policy(tmp_path), dsn, ledger) as client:
            big = await client.call_tool("make", {"key": "big", "size": 2_000_000})
            assert not big.is_error, text(big)[:300]
            assert big.structured_content is not None
            assert len(big.structured_content["padding"]) == 2_000_000
            nul = await client.call_tool("make_with_nul", {"key": "nul"})
            assert not nul.is_error, text(nul)
            # the client has its answer before the journal has its result: wait for it
            wait_for(lambda: effects(conn) == [("big", "committed"), ("nul", "committed")])
            (sid, _), *_ = sessions(conn)
            saga.rollback_session(conn, sid, "alice", "undo it all")

    run(body)
    wait_for(lambda: sessions(conn)[0][1] == "compensated")
    undone = [e["id"] for e in ops(ledger) if e["op"] == "unmake"]
    assert undone == ["nul", "big"]


def test_the_call_after_an_upstream_crash_reconnects_first(
    tmp_path: Path, dsn: str, conn: psycopg.Connection[Any], ledger: Path
) -> None:
    """An upstream that dies in the middle of a call: that call's outcome is unknown (it
    did act), but the next call is sent to a restarted upstream, not journaled as
    unknown without being sent; the session is then undone, every call once."""

    async def body() -> None:
        async with stdio_client(hostile_policy(tmp_path), dsn, ledger) as client:
            crashed = await client.call_tool("crash", {"key": "c"})
            assert crashed.is_error and "outcome is unknown" in text(crashed)
            after = await client.call_tool("make", {"key": "after"})
            assert not after.is_error, text(after)
            wait_for(lambda: effects(conn) == [("c", "executing"), ("after", "committed")])

    run(body)
    wait_for(lambda: sessions(conn)[0][1] == "compensated")
    assert [(e["op"], e.get("key", e.get("id"))) for e in ops(ledger)] == [
        ("crash", "c"),
        ("make", "after"),
        ("unmake", "after"),
        ("unmake", "c"),
    ]


def test_an_http_clients_safe_calls_in_flight_are_capped(
    tmp_path: Path, dsn: str, ledger: Path, http_proxies: list[HttpProxy]
) -> None:
    """proxy.max_safe_calls_per_client over streamable HTTP: SAFE calls touch no journal,
    so nothing bounded how many one client had in flight (each an upstream request, on
    upstreams every client shares). Past the bound a call is refused, saying so, and
    nothing is sent; another client is not held back; once a call has answered, the
    client's next one runs."""
    config = tmp_path / "safe-cap.toml"
    config.write_text(
        "[proxy]\nmax_safe_calls_per_client = 2\n"
        '[upstreams.crm]\ncommand = ["python", "tests/mcp_upstream_server.py"]\n'
        '[upstreams.crm.tools.slow_echo]\ntier = "safe"\n'
        '[upstreams.crm.tools.lookup_user]\ntier = "safe"\n'
    )
    proxy = HttpProxy(config, dsn, ledger)
    http_proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as client, proxy.client() as other:
            slow = [
                asyncio.create_task(client.call_tool("slow_echo", {"text": t, "seconds": 4}))
                for t in ("a", "b")
            ]
            await asyncio.sleep(1.5)  # both sent, both waiting for the upstream
            refused = await client.call_tool("lookup_user", {"email": "a@x"})
            assert refused.is_error, text(refused)
            assert "max_safe_calls_per_client = 2" in text(refused), text(refused)
            assert "NOT RUN" in text(refused)
            elsewhere = await other.call_tool("lookup_user", {"email": "a@x"})
            assert not elsewhere.is_error, text(elsewhere)
            for task in slow:
                assert not (await task).is_error
            later = await client.call_tool("lookup_user", {"email": "a@x"})
            assert not later.is_error, text(later)

    run(body)
    assert names(ledger) == ["slow_echo", "slow_echo"]
