"""The call signature, a fixed contract shared by every client (docs/design/signature.md):

    call_signature = hex(BLAKE3-256(JCS([session_id, step_index, tool_name, args])))

JCS is RFC 8785 canonical JSON, done by the maintained ``rfc8785`` package, or by the
C-accelerated ``json`` module for the values it writes in the very same bytes (_JSON).
Arguments JSON cannot carry exactly (NaN, infinities, integers beyond 2**53 - 1, bytes, sets,
non-string keys, lone surrogates) raise SignatureError before anything is written, and
so do values nested deeper than MAX_NESTING_DEPTH, the limit the engine enforces too.

U+0000 is valid JSON and is signed like any other character (RFC 8785 writes it
``\\u0000``), so that every client agrees on the signature; PostgreSQL's jsonb cannot
store it, so ``check_storable`` refuses it on the way into the journal (the binding's
intercept calls it before sending anything).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
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

# The integers an IEEE-754 double (every client's JSON number) holds exactly; rfc8785
# refuses the others.
_MAX_SAFE_INT = 2**53 - 1

# The fast path: for a *plain* value (see _scan) the C-accelerated json encoder writes
# exactly the bytes of RFC 8785, about five times faster than the pure-Python rfc8785:
# - strings: both escape only '"', '\\' and U+0000-U+001F (\b \t \n \f \r, others as
#   lowercase \u00xx) and write everything else, U+007F and U+2028/2029 included, as is;
# - integers within +/-(2**53 - 1), true, false, null: the same text;
# - key order: RFC 8785 sorts by UTF-16 code units, json by code points; the two agree
#   unless keys mix characters above U+FFFF (surrogate pairs, 0xD800-0xDBFF in UTF-16)
#   with U+E000-U+FFFF, so plain keys stay within the BMP;
# - floats never take it (ECMAScript number text: 1.0 -> 1, -0.0 -> 0, 1e21 -> 1e+21);
# - lone surrogates make the UTF-8 encoding fail, and then rfc8785 decides.
# Anything else, floats, subclasses, sets, bytes, non-string keys, goes to rfc8785, so the
# bytes and the errors are those of rfc8785 for every input
# (tests/binding/test_signature_fast_path.py).
_JSON = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
    check_circular=False,  # a cycle cannot get here: _scan refuses it as too deep
)


def _too_deep(max_depth: int) -> SignatureError:
    return SignatureError(
        f"arguments nest deeper than the limit of {max_depth} levels of objects and arrays"
    )


def _nul() -> SignatureError:
    return SignatureError(
        "arguments cannot contain the character U+0000: PostgreSQL's jsonb cannot store it"
    )


def _scan(value: Any, max_depth: int, *, refuse_nul: bool) -> bool:
    """Walk ``value`` without recursion (so depth cannot exhaust Python's stack): raise
    SignatureError past ``max_depth`` levels, or at U+0000 in a string if asked. Return
    whether ``value`` is plain, i.e. the json module writes it exactly as RFC 8785 does:
    only dict, list, tuple, str, int within +/-(2**53 - 1), bool and None, of exactly
    those types, and str keys without characters above U+FFFF (see _JSON)."""
    plain = True
    # Containers still to walk, with their level; the root sits in a 1-tuple at level 0,
    # so that one loop checks every value, the root included.
    stack: list[tuple[Any, int]] = [((value,), 0)]
    while stack:
        container, depth = stack.pop()
        if isinstance(container, dict):
            for key in container:
                if type(key) is str:
                    if refuse_nul and "\x00" in key:
                        raise _nul()
                    if not key.isascii() and max(key) > "\uffff":
                        plain = False
                else:  # a tuple, say: walked at the dict's own level, as it always was
                    plain = False
                    stack.append(((key,), depth - 1))
            members: Any = container.values()
        else:
            members = container
        for member in members:
            kind = type(member)
            if kind is str:
                if refuse_nul and "\x00" in member:
                    raise _nul()
            elif kind is int:
                if not -_MAX_SAFE_INT <= member <= _MAX_SAFE_INT:
                    plain = False
            elif isinstance(member, _CONTAINERS):
                if depth >= max_depth:
                    raise _too_deep(max_depth)
                stack.append((member, depth + 1))
                if kind is not dict and kind is not list and kind is not tuple:
                    plain = False
            elif member is not None and kind is not bool:
                plain = False  # floats, subclasses and whatever else: rfc8785 decides
                if refuse_nul and isinstance(member, str) and "\x00" in member:
                    raise _nul()
    return plain


def check_storable(value: Any, what: str = "arguments") -> None:
    """Refuse, before anything is written, what the journal cannot store although it can
    be signed: U+0000 in a string (jsonb refuses it) and nesting past the limit."""
    try:
        _scan(value, MAX_NESTING_DEPTH, refuse_nul=True)
    except SignatureError as exc:
        raise SignatureError(str(exc).replace("arguments", what, 1)) from None


class NotAsTyped(ValueError):
    """JSON text whose parsed value is not the one the text shows (loads_as_typed)."""


class KeyTwice(NotAsTyped):
    """A JSON object that names a key twice (unique_keys)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object_pairs_hook for text a person reads: an object whose every
    key is named once, or KeyTwice naming the first key named again (json.loads keeps
    the last of two, silently, where another reader of the text may show the first)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for twice, _ in pairs:
            if twice in seen:
                break
            seen.add(twice)
        raise KeyTwice(
            f"an object names {json.dumps(twice, ensure_ascii=False)} twice "
            "(only the last would count)"
        )
    return out


def loads_as_typed(text: str) -> Any:
    """``text`` parsed as JSON, refusing (NotAsTyped, a ValueError) what would parse into
    another value than the one typed: an object naming a key twice (json.loads keeps the
    last, silently), a number no finite double holds as written (12345678901234567.5 is
    read 12345678901234568.0; 1e400 infinity), an integer beyond +/-(2**53 - 1) (which
    the arguments' canonical form refuses, and a double does not hold exactly), and NaN
    or Infinity, which are not JSON. For what a person types and is then approved
    (``undolog approvals approve --args``, the dashboard's Edit, then approve): what they
    typed is what is decided, or nothing."""

    def integer(token: str) -> int:
        # int() of more than 4,300 digits raises its own error: a bound on the digits first
        value = int(token) if len(token.lstrip("-")) <= 16 else None
        if value is None or not -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            raise NotAsTyped(
                f"the integer {token[:40]}{'…' if len(token) > 40 else ''} is beyond "
                f"+/-{_MAX_SAFE_INT} (2**53 - 1), what a double holds exactly; send it as a "
                "string"
            )
        return value

    def number(token: str) -> float:
        value = float(token)
        if not math.isfinite(value):
            raise NotAsTyped(f"the number {token} is beyond what a double holds")
        if Decimal(repr(value)) != Decimal(token):
            raise NotAsTyped(
                f"the number {token} is not one a double holds: it would be {value!r}; "
                "write that, or send the value as a string"
            )
        return value

    def constant(token: str) -> Any:
        raise NotAsTyped(f"{token} is not JSON (no number is NaN or infinite)")

    return json.loads(
        text,
        object_pairs_hook=unique_keys,
        parse_float=number,
        parse_int=integer,
        parse_constant=constant,
    )


def canonical_json(value: Any, *, max_depth: int = MAX_NESTING_DEPTH) -> bytes:
    """RFC 8785 canonical JSON of ``value``, as UTF-8 bytes (at most ``max_depth``
    levels of objects and arrays)."""
    return _canonical(value, plain=_scan(value, max_depth, refuse_nul=False))


def _canonical(value: Any, *, plain: bool) -> bytes:
    if plain:
        try:
            return _JSON.encode(value).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 raises the usual error
    try:
        out: bytes = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise SignatureError(f"arguments cannot be signed exactly as JSON: {exc}") from exc
    return out


def call_signature(
    session_id: uuid.UUID | str, step_index: int, tool_name: str, args: Mapping[str, Any]
) -> str:
    """The 64-hex-digit BLAKE3 signature of one tool call."""
    return signed_call(session_id, step_index, tool_name, args)[0]


def signed_call(
    session_id: uuid.UUID | str, step_index: int, tool_name: str, args: Mapping[str, Any]
) -> tuple[str, str]:
    """The call's signature, and the canonical JSON of its args cut from the very bytes
    that were signed (the binding sends it as the args: no second serialisation)."""
    # lowercase, hyphenated: what str() of a UUID always is, so skip parsing it again
    session = str(session_id if type(session_id) is uuid.UUID else uuid.UUID(str(session_id)))
    if isinstance(step_index, bool) or not isinstance(step_index, int) or step_index < 0:
        raise SignatureError(f"step_index must be an integer >= 0, not {step_index!r}")
    if not isinstance(tool_name, str) or not tool_name:
        raise SignatureError("tool_name must be a non-empty string")
    if not isinstance(args, Mapping):
        raise SignatureError(f"args must be a mapping, not {type(args).__name__}")
    # The limit applies to args; the preimage's array adds one level around them.
    plain = dict(args)
    fast = _scan(plain, MAX_NESTING_DEPTH, refuse_nul=False)
    head_fast = type(step_index) is int and step_index <= _MAX_SAFE_INT
    head_fast = head_fast and type(tool_name) is str
    preimage = _canonical([session, step_index, tool_name, plain], plain=fast and head_fast)
    # preimage is head without its "]", a comma, the args' canonical JSON, and "]".
    head = _canonical([session, step_index, tool_name], plain=head_fast)
    if preimage.startswith(head[:-1] + b","):
        args_json = preimage[len(head) : -1].decode()
    else:  # not reached for any input rfc8785 and json agree on; kept exact all the same
        args_json = _canonical(plain, plain=fast).decode()
    return blake3.blake3(preimage).hexdigest(), args_json
