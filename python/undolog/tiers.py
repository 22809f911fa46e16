"""What a tool's author declares: its tier and, for COMPENSABLE tools, its compensation."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from undolog.errors import SignatureError
from undolog.signature import MAX_NESTING_DEPTH, canonical_json, check_storable

# The journal's limit on a payload (args, a result, a compensation descriptor) as JSON
# text, the engine's undolog.max_payload_bytes(): 1 MiB.
MAX_PAYLOAD_BYTES = 1024 * 1024


class ToolTier(enum.Enum):
    """SAFE runs directly; COMPENSABLE is journaled with an undo entry; IRREVERSIBLE waits
    for a human's approval. The value is the engine's tier text."""

    SAFE = "safe"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"


# What a human's rejection of an IRREVERSIBLE tool's call does to its session:
# "fail_session" (the default, the documented rule) fails the session and its undo walk
# runs; "continue" records the rejection, keeps the session active and raises
# ApprovalRejectedError (with the person's reason) for the caller to handle.
OnReject = Literal["fail_session", "continue"]
ON_REJECT_CHOICES: tuple[OnReject, ...] = ("fail_session", "continue")


def check_on_reject(value: object, tier: ToolTier) -> OnReject:
    """``value`` as an OnReject, or ValueError saying the allowed values."""
    if not isinstance(value, str) or value not in ON_REJECT_CHOICES:
        raise ValueError(
            f"on_reject must be 'fail_session' (a rejection fails the session) or 'continue' "
            f"(the session goes on and the caller gets the reason), not {value!r}"
        )
    if value == "continue" and tier is not ToolTier.IRREVERSIBLE:
        raise ValueError(
            f"on_reject='continue' is for an IRREVERSIBLE tool (only its calls are approved or "
            f"rejected by a human), not a {tier.name} one: leave on_reject out"
        )
    return value


@dataclass(frozen=True)
class CompensationDescriptor:
    """Which registered compensation undoes a call, with which fixed arguments.

    It is written to the undo stack before the call's body runs, so it survives a crash.
    The compensation also receives the original call's arguments and its result.
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int | None = None

    @classmethod
    def new(
        cls, name: str, args: Mapping[str, Any] | None = None, max_attempts: int | None = None
    ) -> CompensationDescriptor:
        """The descriptor of the compensation ``name`` with the fixed ``args``. A
        ValueError when the tool is declared, not at its first call: an empty name,
        ``max_attempts`` outside 1..100, or a descriptor the journal could not hold:
        ``SignatureError`` for args not exactly JSON, a U+0000 in a string (which jsonb
        cannot store) or a descriptor nested deeper than 64 levels (the descriptor,
        ``{"name": ..., "args": ...}``, is one level deeper than its args: args of at
        most 63 levels), and a plain ValueError for a descriptor over the journal's
        limit of 1 MiB of JSON."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a compensation needs a non-empty name")
        if max_attempts is not None and not (
            isinstance(max_attempts, int)
            and not isinstance(max_attempts, bool)
            and 1 <= max_attempts <= 100
        ):
            raise ValueError("max_attempts must be an integer from 1 to 100")
        fixed = dict(args or {})
        # Refuse now what could not be journaled later: what cannot be signed, and what
        # can be but jsonb cannot store (U+0000, which canonical_json signs like any
        # other character). The engine checks the whole descriptor, as to_json() builds
        # it, when the tool is registered (undolog.check_payload): so is it here.
        if "\x00" in name:
            raise ValueError("a compensation's name cannot contain the character U+0000")
        canonical_json(fixed)
        check_storable(fixed, "compensation args")
        made = cls(name=name, args=fixed, max_attempts=max_attempts)
        stored = made.to_json()
        try:
            check_storable(stored, "compensation descriptor")
        except SignatureError as exc:  # only its depth is left to refuse
            raise SignatureError(
                f"compensation args nest deeper than the limit of {MAX_NESTING_DEPTH - 1} "
                "levels of objects and arrays: the descriptor the journal holds, "
                "{'name': ..., 'args': ...}, is one level above them, and it may nest "
                f"{MAX_NESTING_DEPTH} ({exc})"
            ) from exc
        size = len(json.dumps(stored, ensure_ascii=False).encode("utf-8"))
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"compensation descriptor {name!r} is {size} bytes of JSON, over the "
                f"journal's limit of {MAX_PAYLOAD_BYTES} bytes: give the compensation a "
                "reference (an id) rather than the data"
            )
        return made

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "args": dict(self.args)}
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        return out
