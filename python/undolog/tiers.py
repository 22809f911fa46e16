"""What a tool's author declares: its tier and, for COMPENSABLE tools, its compensation."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from undolog.signature import canonical_json


class ToolTier(enum.Enum):
    """SAFE runs directly; COMPENSABLE is journaled with an undo entry; IRREVERSIBLE waits
    for a human's approval. The value is the engine's tier text."""

    SAFE = "safe"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"


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
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a compensation needs a non-empty name")
        if max_attempts is not None and not (
            isinstance(max_attempts, int)
            and not isinstance(max_attempts, bool)
            and 1 <= max_attempts <= 100
        ):
            raise ValueError("max_attempts must be an integer from 1 to 100")
        fixed = dict(args or {})
        canonical_json(fixed)  # refuse now what could not be journaled later
        return cls(name=name, args=fixed, max_attempts=max_attempts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "args": dict(self.args)}
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        return out
