"""UndoLog: a PostgreSQL-backed safety net for AI agents' tool calls."""

from undolog.errors import (
    AppendOnlyViolation,
    InvalidArgument,
    InvalidCompensation,
    InvalidStateTransition,
    InvalidTier,
    MalformedSignature,
    PayloadTooLarge,
    PermissionDenied,
    SessionNotActive,
    SignatureError,
    SignatureMismatch,
    UndoLogError,
    UnknownEffect,
    UnknownSession,
)
from undolog.migrations import migrate
from undolog.signature import call_signature, canonical_json

__all__ = [
    "AppendOnlyViolation",
    "InvalidArgument",
    "InvalidCompensation",
    "InvalidStateTransition",
    "InvalidTier",
    "MalformedSignature",
    "PayloadTooLarge",
    "PermissionDenied",
    "SessionNotActive",
    "SignatureError",
    "SignatureMismatch",
    "UndoLogError",
    "UnknownEffect",
    "UnknownSession",
    "call_signature",
    "canonical_json",
    "migrate",
]

__version__ = "0.1.0"
