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
import sys
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
    method: bool | None = None,
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
    method: bool | None = None,
) -> Callable[P, R]: ...
def undolog_tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    tier: ToolTier = ToolTier.SAFE,
    compensation: CompensationDescriptor | None = None,
    name: str | None = None,
    on_reject: OnReject = "fail_session",
    method: bool | None = None,
) -> Any:
    """Declare a tool's tier (and, for COMPENSABLE, its compensation).

    ``on_reject`` (IRREVERSIBLE only) is what a human's rejection of a call does:
    "fail_session" (the default) fails the session and undoes its calls; "continue"
    keeps the session active, and the call raises ApprovalRejectedError with the
    person's reason (``session_continues`` True) for the caller to handle.

    ``method``: whether the tool is a method, whose first parameter (its instance or
    class) is left out of its journaled calls. None (the default) infers it: a function
    whose first parameter is named ``self`` or ``cls`` and that is defined in a class
    body (its ``__qualname__`` has a class scope) or declared there (``go =
    undolog_tool(...)(make("go"))`` in the class body). True or False says so for a
    function the inference cannot tell: one made a method elsewhere (``Tools.go =
    undolog_tool(...)(f)``, setattr), or a ``staticmethod`` whose first parameter is
    named ``self`` or ``cls``.
    """
    if not isinstance(tier, ToolTier):
        raise TypeError(f"tier must be a ToolTier, not {tier!r}")
    if method is not None and not isinstance(method, bool):
        raise TypeError(f"method must be True, False or None (inferred), not {method!r}")
    if tier is ToolTier.COMPENSABLE and compensation is None:
        raise ValueError("a COMPENSABLE tool needs compensation=CompensationDescriptor.new(...)")
    if tier is not ToolTier.COMPENSABLE and compensation is not None:
        raise ValueError(f"a {tier.name} tool cannot carry a compensation")
    checked_on_reject = check_on_reject(on_reject, tier)

    def declared(func: Callable[P, R], caller: int) -> Callable[P, R]:
        """``func`` declared; its declaration is the code ``caller`` frames above."""
        if tier is ToolTier.SAFE:
            return func  # called directly: no wrapper, no database, no overhead
        signature = inspect.signature(func)
        spec = ToolSpec(
            name or func.__name__,
            tier,
            compensation,
            signature,
            checked_on_reject,
            method=_is_method(func, signature, method, caller + 1),
        )
        wrap = _async_wrapper if inspect.iscoroutinefunction(func) else _sync_wrapper
        wrapped = wrap(spec, func)
        wrapped.__undolog_tool__ = spec  # type: ignore[attr-defined]
        return cast(Callable[P, R], wrapped)

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        return declared(func, 2)  # declared by decorate's caller

    return declared(fn, 2) if fn is not None else decorate  # by undolog_tool's caller


def _is_method(
    func: Callable[..., Any], signature: inspect.Signature, method: bool | None, caller: int
) -> bool:
    """Whether ``func``, being declared (by the code ``caller`` frames above), is a
    method whose first parameter is its instance or class (left out of its journaled
    calls). ``method`` says so when given (True: ValueError when there is no such
    parameter). Else it is inferred: that parameter is named ``self`` or ``cls``, and the
    function is defined in a class body (its qualified name's last scope is a class,
    ``Outer.f``, not a function's ``<locals>``) or declared there (a function made
    elsewhere, by a factory or at module level, and taken into the class by
    ``undolog_tool(...)(f)`` in its body). The name alone would take a plain function's
    argument so named (a class label, ``cls``) for an instance and leave it out of the
    call's signature: calls that differ only in it would replay each other's result."""
    params = list(signature.parameters.values())
    if method is not None:
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if method and (not params or params[0].kind not in positional):
            raise ValueError(
                f"method=True: {getattr(func, '__qualname__', func)!r} has no first "
                "positional parameter to take its instance or class"
            )
        return method
    if not params or params[0].name not in ("self", "cls"):
        return False
    scopes = getattr(func, "__qualname__", "").split(".")
    return (len(scopes) >= 2 and scopes[-2] != "<locals>") or _in_class_body(caller + 1)


def _in_class_body(caller: int) -> bool:
    """Whether the code ``caller`` frames above runs a class body (CPython's frames: a
    class body's is unoptimized and its namespace, not the module's, holds
    ``__module__`` and ``__qualname__``). False where frames cannot be read."""
    try:
        frame = sys._getframe(caller)
    except (AttributeError, ValueError):
        return False
    if frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        return False  # a function's body
    names = frame.f_locals
    return names is not frame.f_globals and "__module__" in names and "__qualname__" in names


def tool_spec(fn: Callable[..., Any]) -> ToolSpec | None:
    """The declaration behind a journaled tool (None for SAFE and plain functions)."""
    spec: ToolSpec | None = getattr(fn, "__undolog_tool__", None)
    return spec
