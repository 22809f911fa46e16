"""Traces of journaled calls: each call, compensation and approval wait is an
OpenTelemetry span, a child of the caller's current span.

UNDOLOG_DSN=postgresql://... python examples/tracing.py   (pip install 'undolog[otel]'
opentelemetry-sdk; a real application exports with OTLP instead of printing)
"""

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from undolog import CompensationCall, CompensationDescriptor, ToolTier, UndoLog, undolog_tool


def one_line(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    parent = "agent" if span.parent is not None else "(root)"
    return (
        f"{span.name} under {parent}: operation={attributes.get('gen_ai.operation.name')} "
        f"call_id={attributes.get('gen_ai.tool.call.id')} "
        f"action={attributes.get('undolog.action', '-')}\n"
    )


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("my-agent")


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("delete_account"))
def create_account(email: str) -> dict[str, Any]:
    return {"account": email}


ul = UndoLog()  # the DSN from UNDOLOG_DSN, else libpq's PG* variables


@ul.compensation("delete_account")
def delete_account(call: CompensationCall) -> None:
    pass  # undo create_account here


with tracer.start_as_current_span("agent"):
    try:
        with ul.session(agent="traced"):
            create_account("ada@example.com")
            raise RuntimeError("the agent changed its mind")  # the walk undoes the call
    except RuntimeError:
        pass
