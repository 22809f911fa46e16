"""``@undolog_tool``: the tier of a tool, declared by its author.

SAFE tools are returned as they are: calling one is calling the function, no database
work at all. COMPENSABLE and IRREVERSIBLE tools are wrapped (signature and docstring
kept): each call binds its arguments (defaults applied), takes the session and the next
step index from the current session, computes the signature, and intercepts. The body
runs only on 'execute'; its result is committed (it must be JSON) or its exception
recorded with fail(); 'replay' returns the cached result without running the body;
'await_approval' raises AwaitingApprovalError; 'rejected' raises ApprovalRejectedError,
carrying the decision (reason, who, when; undolog.approval_decision) and whether the
session goes on (a tool declared ``on_reject="continue"``).
'in_progress' (an earlier run of the session started this call and never reported its
outcome) is logged at once and asked again for the session's ``in_progress_wait``
seconds, then raises CallInProgress.

The wrapper is written once, for async tools, in undolog.adecorator; the sync tools'
(undolog.decorator_sync) is generated from it by tools/async_to_sync.py, and what both
share is in undolog.decorator_common.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast, overload

from undolog import adecorator, decorator_sync
from undolog.decorator_common import ToolSpec as ToolSpec
from undolog.decorator_common import last_edit as last_edit
from undolog.tiers import CompensationDescriptor, OnReject, ToolTier, check_on_reject

__all__ = ["ToolSpec", "last_edit", "tool_spec", "undolog_tool"]

P = ParamSpec("P")
R = TypeVar("R")

# The wrappers of a journaled tool: written once, async, in undolog.adecorator; the sync
# one is generated from it (undolog.decorator_sync).
_async_wrapper = adecorator.wrap
_sync_wrapper = decorator_sync.wrap


@overload
def undolog_tool(
    *,
    tier: ToolTier,
    compensation: CompensationDescriptor | None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
@overload
def undolog_tool(
    fn: Callable[P, R],
    /,
    *,
    tier: ToolTier = ...,
    compensation: None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Callable[P, R]: ...
def undolog_tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    tier: ToolTier = ToolTier.SAFE,
    compensation: CompensationDescriptor | None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
) -> Any:
    """Declare a tool's tier (and, for COMPENSABLE, its compensation).

    ``on_reject`` (IRREVERSIBLE only) is what a human's rejection of a call does:
    "fail_session" (the default) fails the session and undoes its calls; "continue"
    keeps the session active, and the call raises ApprovalRejectedError with the
    person's reason (``session_continues`` True) for the caller to handle.
    """
    if not isinstance(tier, ToolTier):
        raise TypeError(f"tier must be a ToolTier, not {tier!r}")
    if tier is ToolTier.COMPENSABLE and compensation is None:
        raise ValueError("a COMPENSABLE tool needs compensation=CompensationDescriptor.new(...)")
    if tier is not ToolTier.COMPENSABLE and compensation is not None:
        raise ValueError(f"a {tier.name} tool cannot carry a compensation")
    checked_on_reject = check_on_reject(on_reject, tier)

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        if tier is ToolTier.SAFE:
            return func  # called directly: no wrapper, no database, no overhead
        signature = inspect.signature(func)
        spec = ToolSpec(
            name or func.__name__,
            tier,
            compensation,
            signature,
            checked_on_reject,
            method=_is_method(func, signature),
        )
        wrap = _async_wrapper if inspect.iscoroutinefunction(func) else _sync_wrapper
        wrapped = wrap(spec, func)
        wrapped.__undolog_tool__ = spec  # type: ignore[attr-defined]
        return cast(Callable[P, R], wrapped)

    return decorate(fn) if fn is not None else decorate


def _is_method(func: Callable[..., Any], signature: inspect.Signature) -> bool:
    """Whether ``func``, being declared, is a method whose first parameter is its
    instance or class (left out of its journaled calls): it is defined in a class body
    (its qualified name's last scope is a class, ``Outer.f``, not a function's
    ``<locals>``), and that parameter is named ``self`` or ``cls``. The name alone would
    take a plain function's argument so named (a class label, ``cls``) for an instance
    and leave it out of the call's signature: calls that differ only in it would replay
    each other's result. (A ``staticmethod`` of a class whose first parameter is named
    so cannot be told from a method when it is declared: name it otherwise.)"""
    scopes = getattr(func, "__qualname__", "").split(".")
    if len(scopes) < 2 or scopes[-2] == "<locals>":
        return False
    return next(iter(signature.parameters), None) in ("self", "cls")


def tool_spec(fn: Callable[..., Any]) -> ToolSpec | None:
    """The declaration behind a journaled tool (None for SAFE and plain functions)."""
    spec: ToolSpec | None = getattr(fn, "__undolog_tool__", None)
    return spec
