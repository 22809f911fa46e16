"""OpenTelemetry spans for journaled calls, compensations and approval waits (the extra
``undolog[otel]``: opentelemetry-api; the application configures the SDK and its
exporter as it would for any library).

Each span is started as a child of the caller's current span, so that a journaled call
shows inside the agent's own trace. Names and attributes follow the OpenTelemetry GenAI
semantic conventions where they apply: ``execute_tool {name}`` with
``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name`` and
``gen_ai.tool.call.id`` (the effect id of a call; the undo id of a compensation); the
engine's own facts are ``undolog.*`` attributes.

Without opentelemetry installed, or while the application has set no tracer provider,
every hook is a shared no-op object: nothing allocated per call (and without it
installed, nothing imported). The decorator and the walk call these hooks and nothing
else of OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import os
import traceback
import uuid
from typing import Any

from undolog._version import __version__
from undolog.errors import AwaitingApprovalError

INSTRUMENTATION = "undolog"


class _NoSpan:
    """What a hook yields when there is no tracing: takes attributes, keeps nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None


class _NoOp(contextlib.AbstractContextManager[_NoSpan]):
    def __enter__(self) -> _NoSpan:
        return NO_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = _NoSpan()
NO_OP = _NoOp()

_tracer: Any = None
_trace: Any = None  # the opentelemetry.trace module, once found
_idle: tuple[type, ...] = ()  # its providers that record nothing
_span_kind: Any = None
_status: Any = None
_from_environment = False
_looked = False


def _get_tracer() -> Any:
    """The tracer, or None: without opentelemetry, and while the application has set no
    tracer provider (the API's own records nothing, and skipping it keeps a journaled
    call as cheap as without the package). Looked for once, at the first hook; the
    provider is asked at each, so that one set later is used from then on."""
    global _tracer, _trace, _idle, _span_kind, _status, _looked, _from_environment
    if not _looked:
        try:
            from opentelemetry import trace
        except ImportError:
            pass  # _trace stays None: every hook is the no-op
        else:
            _trace = trace
            _tracer = trace.get_tracer(INSTRUMENTATION, __version__)
            _idle = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
            _span_kind = trace.SpanKind.INTERNAL
            _status = (trace.Status, trace.StatusCode.ERROR)
            # a provider named by this variable is loaded at the first get_tracer_provider
            _from_environment = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
        _looked = True
    if _trace is None:
        return None
    # get_tracer_provider() reads os.environ at every call while none is set (~5 us);
    # the API's module global says the same at once. Read through getattr, so that an
    # API without it falls back to asking.
    provider = getattr(_trace, "_TRACER_PROVIDER", _trace)
    if provider is _trace:
        provider = _trace.get_tracer_provider()
    elif provider is None:
        return _tracer if _from_environment else None
    return None if isinstance(provider, _idle) else _tracer


class _Scope:
    """A span around the block, current inside it. An exception is recorded and sets the
    span's status to error, except AwaitingApprovalError: a call waiting for a person is
    the gate doing its work, not a failure."""

    __slots__ = ("_current", "_span")

    def __init__(self, name: str, attributes: dict[str, Any], tracer: Any) -> None:
        self._current = tracer.start_as_current_span(
            name,
            kind=_span_kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span: Any = None

    def __enter__(self) -> Any:
        self._span = self._current.__enter__()
        return self._span

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Any:
        if exc is not None and not isinstance(exc, AwaitingApprovalError):
            status, error = _status
            # A tool's exception text is its author's, of any length: what the span
            # carries is bounded (the SDK sets no limit unless the application does).
            message = _bounded(str(exc), MESSAGE_LIMIT)
            stacktrace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self._span.record_exception(
                exc,
                attributes={
                    "exception.message": message,
                    "exception.stacktrace": _bounded(stacktrace, STACKTRACE_LIMIT, keep_end=True),
                },
            )
            self._span.set_attribute("error.type", type(exc).__qualname__)
            self._span.set_status(status(error, message))
        return self._current.__exit__(kind, exc, tb)


MESSAGE_LIMIT = 1024
"""At most this many characters of an exception's text go into a span (its message and
status description)."""
STACKTRACE_LIMIT = 8192
"""At most this many characters of its traceback: the end, where the raise is."""


def _bounded(text: str, limit: int, *, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    cut = f" … ({len(text) - limit} characters left out) … "
    return cut + text[-limit:] if keep_end else text[:limit] + cut


def tool_call(name: str, tier: object) -> Any:
    """The span of one journaled call, around the decorator's whole work (intercept, the
    body, commit or fail); ``tier`` is a ToolTier or its value. ``called`` adds what
    intercept answered."""
    tracer = _get_tracer()
    if tracer is None:
        return NO_OP
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "undolog.tier": str(getattr(tier, "value", tier)),
    }
    return _Scope(f"execute_tool {name}", attributes, tracer)


def called(
    effect_id: uuid.UUID | None,
    action: str,
    session_id: uuid.UUID | None = None,
    approval_id: uuid.UUID | None = None,
    step_index: int | None = None,
) -> None:
    """What intercept answered, on the current call's span: the effect id is the call id
    (the same on every replay of the call), the step its place in the session."""
    if _get_tracer() is None:
        return
    span = _trace.get_current_span()
    if effect_id is not None:
        span.set_attribute("gen_ai.tool.call.id", str(effect_id))
    span.set_attribute("undolog.action", action)
    if session_id is not None:
        span.set_attribute("undolog.session.id", str(session_id))
    if approval_id is not None:
        span.set_attribute("undolog.approval.id", str(approval_id))
    if step_index is not None:
        span.set_attribute("undolog.step_index", step_index)


def compensation(
    name: str,
    undo_id: uuid.UUID,
    tool_name: str,
    attempt: int,
    session_id: uuid.UUID | None = None,
) -> Any:
    """The span of one compensation attempt (the walk runs the compensation inside it):
    the compensation is the tool executed, its undo id the call id, the same for every
    attempt at that entry."""
    tracer = _get_tracer()
    if tracer is None:
        return NO_OP
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": str(undo_id),
        "undolog.compensates": tool_name,
        "undolog.attempt": attempt,
    }
    if session_id is not None:
        attributes["undolog.session.id"] = str(session_id)
    return _Scope(f"execute_tool {name}", attributes, tracer)


def approval_wait(approval_id: uuid.UUID) -> Any:
    """The span of a wait for a person's decision; the block sets
    ``undolog.approval.decision`` (approved, rejected, expired, or timeout)."""
    tracer = _get_tracer()
    if tracer is None:
        return NO_OP
    return _Scope("undolog.approval_wait", {"undolog.approval.id": str(approval_id)}, tracer)


__all__ = ["NO_OP", "approval_wait", "called", "compensation", "tool_call"]
