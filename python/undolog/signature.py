"""The call signature, a fixed contract shared by every client (DESIGN.md):

    call_signature = hex(BLAKE3-256(JCS([session_id, step_index, tool_name, args])))

JCS is RFC 8785 canonical JSON, done by the maintained ``rfc8785`` package. Arguments
JSON cannot carry exactly (NaN, infinities, integers beyond 2**53 - 1, bytes, sets,
non-string keys, lone surrogates) raise SignatureError before anything is written, and
so do values nested deeper than MAX_NESTING_DEPTH, the limit the engine enforces too.

U+0000 is valid JSON and is signed like any other character (RFC 8785 writes it
``\\u0000``), so that every client agrees on the signature; PostgreSQL's jsonb cannot
store it, so ``check_storable`` refuses it on the way into the journal (the binding's
intercept calls it before sending anything).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import blake3
import rfc8785

from undolog.errors import SignatureError

# The deepest nesting of objects and arrays accepted in args, results, metadata and
# compensation descriptors: ``{}`` is one level, ``{"a": []}`` two. The engine refuses
# deeper payloads with UL009 (undolog.max_nesting_depth()), Python's recursion gives out
# near 1,000 and PostgreSQL's jsonb accepts far more: one documented limit for all.
MAX_NESTING_DEPTH = 64

_CONTAINERS = (dict, list, tuple)


def _scan(value: Any, max_depth: int, *, refuse_nul: bool) -> None:
    """Walk ``value`` without recursion (so depth cannot exhaust Python's stack): raise
    SignatureError past ``max_depth`` levels, or at U+0000 in a string if asked."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if refuse_nul and "\x00" in item:
                raise SignatureError(
                    "arguments cannot contain the character U+0000: "
                    "PostgreSQL's jsonb cannot store it"
                )
            continue
        if not isinstance(item, _CONTAINERS):
            continue
        if depth > max_depth:
            raise SignatureError(
                f"arguments nest deeper than the limit of {max_depth} levels of objects and arrays"
            )
        if isinstance(item, dict):
            for key, member in item.items():
                stack.append((key, depth))  # keys are checked for U+0000 too
                stack.append((member, depth + 1))
        else:
            stack.extend((member, depth + 1) for member in item)


def check_storable(value: Any, what: str = "arguments") -> None:
    """Refuse, before anything is written, what the journal cannot store although it can
    be signed: U+0000 in a string (jsonb refuses it) and nesting past the limit."""
    try:
        _scan(value, MAX_NESTING_DEPTH, refuse_nul=True)
    except SignatureError as exc:
        raise SignatureError(str(exc).replace("arguments", what, 1)) from None


def canonical_json(value: Any, *, max_depth: int = MAX_NESTING_DEPTH) -> bytes:
    """RFC 8785 canonical JSON of ``value``, as UTF-8 bytes (at most ``max_depth``
    levels of objects and arrays)."""
    _scan(value, max_depth, refuse_nul=False)
    return _canonical(value)


def _canonical(value: Any) -> bytes:
    try:
        out: bytes = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise SignatureError(f"arguments cannot be signed exactly as JSON: {exc}") from exc
    return out


def call_signature(
    session_id: uuid.UUID | str, step_index: int, tool_name: str, args: Mapping[str, Any]
) -> str:
    """The 64-hex-digit BLAKE3 signature of one tool call."""
    session = str(uuid.UUID(str(session_id)))  # lowercase, hyphenated
    if isinstance(step_index, bool) or not isinstance(step_index, int) or step_index < 0:
        raise SignatureError(f"step_index must be an integer >= 0, not {step_index!r}")
    if not isinstance(tool_name, str) or not tool_name:
        raise SignatureError("tool_name must be a non-empty string")
    if not isinstance(args, Mapping):
        raise SignatureError(f"args must be a mapping, not {type(args).__name__}")
    # The limit applies to args; the preimage's array adds one level around them.
    plain = dict(args)
    _scan(plain, MAX_NESTING_DEPTH, refuse_nul=False)
    preimage = _canonical([session, step_index, tool_name, plain])
    return blake3.blake3(preimage).hexdigest()
