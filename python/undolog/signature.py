"""The call signature, a fixed contract shared by every client (DESIGN.md):

    call_signature = hex(BLAKE3-256(JCS([session_id, step_index, tool_name, args])))

JCS is RFC 8785 canonical JSON, done by the maintained ``rfc8785`` package. Arguments
JSON cannot carry exactly (NaN, infinities, integers beyond 2**53 - 1, bytes, sets,
non-string keys, lone surrogates) raise SignatureError before anything is written, and
so does U+0000 in a string, which PostgreSQL's jsonb cannot store.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

import blake3
import rfc8785

from undolog.errors import SignatureError

_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value``, as UTF-8 bytes."""
    try:
        out: bytes = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise SignatureError(f"arguments cannot be signed exactly as JSON: {exc}") from exc
    # JSON allows U+0000 (escaped \u0000); PostgreSQL's jsonb refuses it (22P05). An even
    # run of backslashes before "u0000" is an escaped backslash followed by text instead.
    if b"u0000" in out and _NUL_ESCAPE.search(out):
        raise SignatureError("arguments cannot contain the character U+0000")
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
    preimage = canonical_json([session, step_index, tool_name, dict(args)])
    return blake3.blake3(preimage).hexdigest()
