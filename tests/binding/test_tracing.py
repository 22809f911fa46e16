"""OpenTelemetry spans of the binding (undolog.tracing): each journaled call, each
compensation attempt and each approval wait is a span, a child of the caller's current
span, with the GenAI semantic conventions' attributes; without opentelemetry installed
every hook is a no-op and nothing of it is imported. Recorded with the SDK's
InMemorySpanExporter."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    undolog_tool,
)

ROOT = Path(__file__).resolve().parents[2]
Conn = psycopg.Connection[Any]
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The finished spans of this test. The global provider can be set once per process:
    ours, unless another test set an SDK provider first (then ours is added to it)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not getattr(provider, "_undolog_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._undolog_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


tracer = trace.get_tracer("tests")
ran: list[str] = []


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("traced_undo"))
def traced_create(name: str) -> dict[str, str]:
    ran.append(name)
    if name == "boom":
        raise ConnectionError("the directory is down")
    return {"name": name}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def traced_payout(cents: int) -> dict[str, int]:
    return {"paid": cents}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("traced_undo"))
async def traced_acreate(name: str) -> dict[str, str]:
    return {"name": name}


def by_name(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def effect_ids(conn: Conn, session_id: uuid.UUID) -> list[str]:
    rows = conn.execute(
        "SELECT effect_id FROM undolog.undolog_effect_log WHERE session_id = %s "
        "ORDER BY step_index",
        (session_id,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def test_a_journaled_call_is_a_child_of_the_callers_span(
    dsn: str, conn: Conn, spans: InMemorySpanExporter
) -> None:
    ul = UndoLog(dsn)
    with tracer.start_as_current_span("agent") as agent, ul.session(agent="t") as session:
        traced_create("ada")
    (span,) = by_name(spans, "execute_tool traced_create")
    assert span.parent is not None
    assert span.parent.span_id == agent.get_span_context().span_id
    assert span.context.trace_id == agent.get_span_context().trace_id
    (effect_id,) = effect_ids(conn, session.session_id)
    assert attrs(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "traced_create",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": effect_id,
        "undolog.tier": "compensable",
        "undolog.action": "execute",
        "undolog.session.id": str(session.session_id),
        "undolog.step_index": 0,
    }
    assert span.status.status_code == StatusCode.UNSET

    # the same session again: the call replays, under the same call id
    spans.clear()
    with ul.session(session.session_id):
        traced_create("ada")
    (replay,) = by_name(spans, "execute_tool traced_create")
    assert attrs(replay)["gen_ai.tool.call.id"] == effect_id
    assert attrs(replay)["undolog.action"] == "replay"
    assert replay.parent is None  # no span was current: a root span


def test_a_failing_call_is_an_error_and_its_compensation_a_span(
    dsn: str, conn: Conn, spans: InMemorySpanExporter
) -> None:
    ul = UndoLog(dsn)
    undone: list[uuid.UUID] = []

    @ul.compensation("traced_undo")
    def traced_undo(call: CompensationCall) -> None:
        undone.append(call.undo_id)

    with (
        tracer.start_as_current_span("agent") as agent,
        pytest.raises(ConnectionError),
        ul.session(agent="t"),
    ):
        traced_create("ada")
        traced_create("boom")
    ok, failed = by_name(spans, "execute_tool traced_create")
    assert ok.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR
    assert attrs(failed)["error.type"] == "ConnectionError"
    assert [e.name for e in failed.events] == ["exception"]

    (compensation,) = by_name(spans, "execute_tool traced_undo")
    assert compensation.parent is not None
    assert compensation.parent.span_id == agent.get_span_context().span_id
    a = attrs(compensation)
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "traced_undo"
    assert a["gen_ai.tool.call.id"] == str(undone[0])
    assert a["undolog.compensates"] == "traced_create"
    assert a["undolog.attempt"] == 1


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("traced_undo"))
def traced_verbose(size: int) -> None:
    raise RuntimeError("x" * size)


def test_what_a_span_carries_of_an_exceptions_text_is_bounded(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    ul = UndoLog(dsn)
    with pytest.raises(RuntimeError), ul.session(agent="t"):
        traced_verbose(100_000)
    (span,) = by_name(spans, "execute_tool traced_verbose")
    (event,) = span.events
    message = str((event.attributes or {})["exception.message"])
    stacktrace = str((event.attributes or {})["exception.stacktrace"])
    assert message.startswith("x" * 1024) and "(98976 characters left out)" in message
    assert len(message) < 1100 and len(stacktrace) < 8300
    assert stacktrace.rstrip().endswith("x" * 100)  # the end of the traceback: the raise
    assert span.status.description == message


def test_a_call_waiting_for_approval_is_no_error_and_the_wait_is_a_span(
    dsn: str, conn: Conn, login: Any, spans: InMemorySpanExporter
) -> None:
    ul = UndoLog(dsn)
    with pytest.raises(AwaitingApprovalError) as waiting, ul.session(agent="t"):
        traced_payout(500)
    (span,) = by_name(spans, "execute_tool traced_payout")
    assert span.status.status_code == StatusCode.UNSET
    assert attrs(span)["undolog.action"] == "await_approval"
    assert attrs(span)["undolog.approval.id"] == str(waiting.value.approval_id)
    assert attrs(span)["undolog.tier"] == "irreversible"

    approval_id = uuid.UUID(str(waiting.value.approval_id))
    with tracer.start_as_current_span("waiter") as waiter:
        assert ul.wait_for_decision(approval_id, timeout=0.05, poll_interval=0.05) is None
    (wait,) = by_name(spans, "undolog.approval_wait")
    assert wait.parent is not None and wait.parent.span_id == waiter.get_span_context().span_id
    assert attrs(wait) == {
        "undolog.approval.id": str(approval_id),
        "undolog.approval.decision": "timeout",
    }

    spans.clear()
    approver = login("undolog_approver")
    approver.execute("SELECT undolog.approve(%s, 'alice', 'fine')", (approval_id,))
    assert ul.wait_for_decision(approval_id, timeout=5) == "approved"
    (wait,) = by_name(spans, "undolog.approval_wait")
    assert attrs(wait)["undolog.approval.decision"] == "approved"


def test_an_async_call_is_a_child_of_the_callers_span(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    ul = AsyncUndoLog(dsn)

    async def agent() -> int:
        with tracer.start_as_current_span("agent") as root:
            async with ul.session(agent="t"):
                await traced_acreate("ada")
                await traced_acreate("bob")
        return root.get_span_context().span_id

    root_id = asyncio.run(agent())
    calls = by_name(spans, "execute_tool traced_acreate")
    assert len(calls) == 2
    assert all(s.parent is not None and s.parent.span_id == root_id for s in calls)
    assert len({attrs(s)["gen_ai.tool.call.id"] for s in calls}) == 2


def _python(code: str, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UNDOLOG_DSN": dsn, "PYTHONPATH": str(ROOT / "python")}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_without_opentelemetry_the_hooks_are_no_ops(dsn: str) -> None:
    """opentelemetry made unimportable: a journaled call still runs, the hooks answer the
    shared no-op, and no module of opentelemetry is loaded."""
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if not installed: its import raises ImportError
from undolog import CompensationDescriptor, ToolTier, UndoLog, tracing, undolog_tool

@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("undo"))
def make(n: int) -> int:
    return n

with UndoLog().session(agent="no-otel"):
    assert make(1) == 1
assert tracing.tool_call("make", "compensable") is tracing.NO_OP
assert tracing.approval_wait(None) is tracing.NO_OP
loaded = [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]]
assert not loaded, loaded
print("ok")
"""
    done = _python(code, dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_importing_undolog_imports_no_opentelemetry(dsn: str) -> None:
    """Installed but unused, it is not even imported: the first hook looks for it."""
    code = "import sys, undolog; print(sorted(m for m in sys.modules if 'opentelemetry' in m))"
    done = _python(code, dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_tracing_example_runs(dsn: str) -> None:
    env = {**os.environ, "UNDOLOG_DSN": dsn, "PYTHONPATH": str(ROOT / "python")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tracing.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("execute_tool create_account under agent: operation=execute_tool")
    assert lines[0].endswith("action=execute")
    assert lines[1].startswith("execute_tool delete_account under agent: operation=execute_tool")
    assert lines[2].startswith("agent under (root)")
    assert len(lines) == 3


def test_until_the_application_sets_a_provider_the_hooks_are_no_ops(dsn: str) -> None:
    """opentelemetry-api installed, no provider set: nothing would be recorded, so no span
    is made; one set later is used from then on."""
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from undolog import tracing

assert tracing.tool_call("make", "compensable") is tracing.NO_OP
trace.set_tracer_provider(TracerProvider())
with tracing.tool_call("make", "compensable") as span:
    assert span.is_recording()
print("ok")
"""
    done = _python(code, dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
