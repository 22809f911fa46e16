"""The proxy's own metrics and its durable_results setting, with real processes: the
SDK's MCP client drives `undolog mcp-proxy` over stdio, in front of
tests/mcp_upstream_server.py, and the test scrapes the proxy's GET /metrics over HTTP."""

from __future__ import annotations

import asyncio
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcp import Client, StdioServerParameters
from test_mcp_proxy import (
    ROOT,
    _env,
    _proxy_args,
    derived_policy,
    free_port,
    names,
    ops,
    pending_approval,
    run,
    sessions,
    text,
    wait_for,
)

from slow_clients import assert_closed_within_the_bound, closing_times
from undolog import approvals, saga
from undolog.mcp_proxy.metrics import (
    MAX_HANDLERS,
    METRIC_NAMES,
    OUTCOMES,
    ProxyMetrics,
    serve_metrics,
)
from undolog.mcp_proxy.policy import PolicyError, load_policy
from undolog.metrics import CONTENT_TYPE


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def client(config: Path, dsn: str, ledger: Path, *extra: str, mode: str = "auto") -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=[*_proxy_args(config, dsn), *extra],
        env=_env(ledger),
        cwd=str(ROOT),
    )
    return Client(params, mode=mode, read_timeout_seconds=60)


def scrape(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def samples(exposition: str) -> dict[str, float]:
    """Each sample line's name{labels} -> value (labels as written)."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, line
        out[match[1] + (match[2] or "")] = float(match[3])
    return out


def calls(seen: dict[str, float], tier: str, outcome: str) -> float:
    return seen[f'undolog_proxy_calls_total{{tier="{tier}",outcome="{outcome}"}}']


async def ascrape(port: int) -> dict[str, float]:
    status, ctype, body = await asyncio.to_thread(scrape, port)
    assert status == 200 and ctype == CONTENT_TYPE
    return samples(body)


def test_metrics_count_each_tiers_outcomes(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, tmp_path: Path
) -> None:
    port = free_port()
    policy = derived_policy(tmp_path, hold_seconds=3)
    # the policy's key (the command line's --metrics-listen would win over it)
    policy.write_text(
        policy.read_text().replace(
            "[proxy]\n", f'[proxy]\nmetrics_listen = "127.0.0.1:{port}"\n', 1
        )
    )
    payout = {"account": "acc-1", "amount_cents": 500}

    async def body() -> None:
        async with client(policy, dsn, ledger, mode="legacy") as mcp:
            start = await ascrape(port)
            assert {k.split("{")[0] for k in start} == METRIC_NAMES
            for tier, outcomes in OUTCOMES.items():  # every counter there from the start
                assert all(calls(start, tier, o) == 0 for o in outcomes)
            assert start["undolog_proxy_holds_in_progress"] == 0

            assert not (await mcp.call_tool("crm__lookup_user", {"email": "a@x"})).is_error
            bad = await mcp.call_tool("crm__lookup_user", {})  # the upstream answers an error
            assert bad.is_error
            made = await mcp.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            assert not made.is_error

            held = asyncio.create_task(mcp.call_tool("payments__process_payout", payout))
            during = await asyncio.to_thread(
                wait_for,
                lambda: (s := scrape(port)) and "undolog_proxy_holds_in_progress 1" in s[2],
            )
            assert during
            timed_out = await held
            assert timed_out.is_error and "NOT RUN YET" in text(timed_out)
            approval_id = pending_approval(conn)
            assert approval_id is not None
            approvals.approve(conn, approval_id, "alice", "checked")
            paid = await mcp.call_tool("payments__process_payout", payout)
            assert not paid.is_error, text(paid)
            replayed = await mcp.call_tool("payments__process_payout", payout)
            assert replayed.structured_content == paid.structured_content

            ((sid, _),) = sessions(conn)
            assert saga.rollback_session(conn, sid, "alice", "wrong customer") == "failed"
            refused = await mcp.call_tool("crm__create_user", {"email": "b@x", "name": "B"})
            assert refused.is_error

            seen = await ascrape(port)
            assert calls(seen, "safe", "relayed") == 2
            assert calls(seen, "safe", "failed") == 0
            assert calls(seen, "compensable", "executed") == 1
            assert calls(seen, "compensable", "refused") == 1
            assert calls(seen, "irreversible", "held") == 1
            assert calls(seen, "irreversible", "timed_out") == 1
            assert calls(seen, "irreversible", "approved") == 1
            assert calls(seen, "irreversible", "replayed") == 1
            assert calls(seen, "irreversible", "rejected") == 0
            assert seen["undolog_proxy_holds_in_progress"] == 0
            assert seen['undolog_proxy_upstream_errors_total{upstream="crm",kind="error_result"}']
            assert seen['undolog_proxy_upstream_errors_total{upstream="crm",kind="down"}'] == 0
            assert seen['undolog_proxy_unrecorded_results_total{reason="late"}'] == 0
            assert seen["undolog_proxy_sessions"] == 1
            status, _, missing = await asyncio.to_thread(scrape, port, "/other")
            assert status == 404 and "GET /metrics" in missing

    run(body)
    assert names(ledger).count("process_payout") == 1


def _slow_commits(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Every commit of a result takes ``seconds`` longer (a journal slow to record)."""
    conn.execute(
        f"""
        CREATE FUNCTION public.test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state = 'committed' THEN PERFORM pg_sleep({seconds}); END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER slow_commit BEFORE UPDATE ON undolog.undolog_effect_log
            FOR EACH ROW EXECUTE FUNCTION public.test_slow_commit();
        """
    )


@pytest.mark.parametrize("setting", ["off", "policy", "flag"])
def test_durable_results_answer_after_the_commit(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, tmp_path: Path, setting: str
) -> None:
    """durable_results (the policy's key or --durable-results): the client's answer comes
    once its result is committed; without it the answer comes first and the result is
    recorded after."""
    durable = setting != "off"
    policy = derived_policy(tmp_path, hold_seconds=3)
    extra = ["--durable-results"] if setting == "flag" else []
    if setting == "policy":
        policy.write_text(
            policy.read_text().replace("[proxy]\n", "[proxy]\ndurable_results = true\n", 1)
        )
    _slow_commits(conn, 1.5)

    def state() -> str:
        row = conn.execute(
            "SELECT state FROM undolog.undolog_effect_log WHERE tool_name = 'crm/create_user'"
        ).fetchone()
        return "none" if row is None else str(row[0])

    async def body() -> tuple[str, float]:
        async with client(policy, dsn, ledger, *extra) as mcp:
            started = time.monotonic()
            made = await mcp.call_tool("crm__create_user", {"email": "a@x", "name": "A"})
            took = time.monotonic() - started
            assert not made.is_error, text(made)
            seen = await asyncio.to_thread(state)
            # either way the result is committed in the end (the session's next call, or
            # its end, waits for the recording)
            await asyncio.to_thread(wait_for, lambda: state() == "committed")
            return seen, took

    seen, took = asyncio.run(body())
    if durable:
        assert seen == "committed" and took >= 1.5
    else:
        assert seen == "executing" and took < 1.5
    assert [s for _, s in sessions(conn)] == ["completed"]


def test_every_proxy_metric_is_documented() -> None:
    page = (ROOT / "docs" / "mcp-proxy.md").read_text(encoding="utf-8")
    table = page[page.index("## Metrics") : page.index("## Performance")]
    for name in METRIC_NAMES:
        assert f"| `{name}` |" in table, name
    for outcomes in OUTCOMES.values():
        for outcome in outcomes:
            assert f"`{outcome}`" in table, outcome


@pytest.mark.parametrize("durable", [False, True], ids=["answered-first", "durable"])
def test_a_result_the_journal_cannot_record(
    dsn: str, conn: psycopg.Connection[Any], ledger: Path, tmp_path: Path, durable: bool
) -> None:
    """The journal fails the commit of a result (slowly: the session's next call comes
    while it is still being recorded). Answered first, the next call is refused and
    never reaches the upstream, its own journal entry recorded as never having acted;
    durable, the call itself answers that its outcome is unknown. Counted either way."""
    port = free_port()
    policy = derived_policy(tmp_path, hold_seconds=3)
    conn.execute(
        """
        CREATE FUNCTION public.test_failing_commit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state = 'committed' AND NEW.args->>'email' = 'lost@x' THEN
                PERFORM pg_sleep(1);
                RAISE EXCEPTION 'the disk is full (a test)';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER failing_commit BEFORE UPDATE ON undolog.undolog_effect_log
            FOR EACH ROW EXECUTE FUNCTION public.test_failing_commit();
        """
    )
    extra = ["--metrics-listen", f"127.0.0.1:{port}", *(["--durable-results"] if durable else [])]

    async def body() -> None:
        async with client(policy, dsn, ledger, *extra) as mcp:
            lost = await mcp.call_tool("crm__create_user", {"email": "lost@x", "name": "L"})
            assert lost.is_error == durable, text(lost)
            if durable:
                assert "outcome is unknown" in text(lost)
            after = await mcp.call_tool("crm__create_user", {"email": "next@x", "name": "N"})
            if durable:
                assert not after.is_error, text(after)
            else:
                assert after.is_error and "was not run" in text(after), text(after)
                assert "disk is full" in text(after)
                # told once: the session's calls after that are refused by the journal
                # only once the session is rolled back (at its end)
            seen = await ascrape(port)
            assert seen['undolog_proxy_unrecorded_results_total{reason="error"}'] == 1
            assert seen["undolog_proxy_late_answers_total"] == (0 if durable else 1)
            assert calls(seen, "compensable", "unknown" if durable else "executed") >= 1
            if not durable:
                assert calls(seen, "compensable", "refused") == 1

    run(body)
    created = [e.get("email") for e in ops(ledger) if e["op"] == "create_user"]
    assert created == (["lost@x", "next@x"] if durable else ["lost@x"])
    states = dict(
        conn.execute(
            "SELECT args->>'email', state FROM undolog.undolog_effect_log"
            " WHERE tool_name = 'crm/create_user'"
        ).fetchall()
    )
    assert states["lost@x"] == "executing" or states["lost@x"].startswith("compensat")
    if not durable:
        # the refused call was journaled (its intercept overlapped the failing commit)
        # and then recorded as never having acted
        assert states.get("next@x") == "pending"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("durable_results = 1", "proxy.durable_results: expected true or false"),
        ('metrics_listen = "nowhere"', "metrics_listen takes HOST:PORT"),
        ("metrics_listen = 9465", 'proxy.metrics_listen: expected "HOST:PORT"'),
        (
            "max_safe_calls_per_client = 0",
            "proxy.max_safe_calls_per_client: expected a whole number from 1 to 10000",
        ),
        ("walk_wait_seconds = 0", "proxy.walk_wait_seconds: expected a number of seconds"),
    ],
)
def test_the_policy_refuses_bad_proxy_keys(tmp_path: Path, line: str, message: str) -> None:
    policy = derived_policy(tmp_path, hold_seconds=3)
    policy.write_text(policy.read_text().replace("[proxy]\n", f"[proxy]\n{line}\n", 1))
    with pytest.raises(PolicyError, match=re.escape(message)):
        load_policy(policy)


def test_the_policy_reads_the_proxy_keys(tmp_path: Path) -> None:
    policy = derived_policy(tmp_path, hold_seconds=3)
    assert load_policy(policy).durable_results is False
    assert load_policy(policy).metrics_listen is None
    assert load_policy(policy).walk_wait_seconds == 10
    policy.write_text(
        policy.read_text().replace(
            "[proxy]\n",
            '[proxy]\ndurable_results = true\nmetrics_listen = "[::1]:0"\nwalk_wait_seconds = 1\n',
            1,
        )
    )
    loaded = load_policy(policy)
    assert loaded.durable_results is True and loaded.metrics_listen == "[::1]:0"
    assert loaded.walk_wait_seconds == 1
    assert loaded.max_safe_calls_per_client == 64  # the default


def test_clients_that_never_finish_a_request_cannot_keep_a_scrape_out() -> None:
    """Each client that never completes its request (idle, a partial request line,
    slowloris) is closed within REQUEST_TIMEOUT; and MAX_HANDLERS of them, which a client
    could open again every REQUEST_TIMEOUT, no longer keep a scrape out: the new connection
    closes the one that has waited longest for its request, instead of being refused."""

    async def main() -> None:
        server = await serve_metrics(ProxyMetrics(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            assert_closed_within_the_bound(await asyncio.to_thread(closing_times, port, "/metrics"))
            idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_HANDLERS)]
            await asyncio.sleep(0.2)
            started = time.monotonic()
            status, _, body = await asyncio.to_thread(scrape, port)
            assert status == 200 and "undolog_proxy_calls_total" in body
            assert time.monotonic() - started < 2
            for _, writer in idle:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_idle_connections_to_the_metrics_listener_are_bounded() -> None:
    """The listener has no authentication, and a connection that sends nothing held a
    file descriptor of the proxy for REQUEST_TIMEOUT: a client opening them without end
    used up the process's descriptors, and with them the proxy's connections to the
    journal and its upstreams. At most MAX_HANDLERS are held at once: each one more closes
    the oldest still waiting, and a scrape works once the idle ones are gone."""

    async def main() -> None:
        server = await serve_metrics(ProxyMetrics(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]

            async def closed(reader: asyncio.StreamReader) -> bool:
                try:
                    return await asyncio.wait_for(reader.read(), 1.0) == b""
                except TimeoutError:
                    return False

            seen = await asyncio.gather(*(closed(r) for r, _ in idle))
            assert sum(seen) == 40 - MAX_HANDLERS, seen
            for _, writer in idle:
                writer.close()
            await asyncio.sleep(0.2)
            status, _, body = await asyncio.to_thread(scrape, port)
            assert status == 200 and "undolog_proxy_calls_total" in body
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
