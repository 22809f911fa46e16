"""UndoLog: a PostgreSQL-backed safety net for AI agents' tool calls."""

from undolog.client import AsyncUndoLog, SessionContext, UndoLog
from undolog.context import ActiveSession
from undolog.decorator import undolog_tool
from undolog.errors import (
    AppendOnlyViolation,
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalRejectedError,
    AwaitingApprovalError,
    CallInProgress,
    EngineNotInstalled,
    InvalidArgument,
    InvalidCompensation,
    InvalidStateTransition,
    InvalidTier,
    LateResult,
    LeaseLapsed,
    MalformedSignature,
    NotInSession,
    PartitionInUse,
    PayloadTooLarge,
    PermissionDenied,
    ResultNotJSON,
    SessionNotActive,
    SignatureError,
    SignatureMismatch,
    UndoLogError,
    UnknownApproval,
    UnknownEffect,
    UnknownSession,
    UnknownUndoEntry,
)
from undolog.migrations import migrate
from undolog.signature import call_signature, canonical_json
from undolog.tiers import CompensationDescriptor, OnReject, ToolTier
from undolog.walk import CompensationCall

__all__ = [
    "ActiveSession",
    "AppendOnlyViolation",
    "ApprovalAlreadyDecided",
    "ApprovalExpired",
    "ApprovalRejectedError",
    "AsyncUndoLog",
    "AwaitingApprovalError",
    "CallInProgress",
    "CompensationCall",
    "CompensationDescriptor",
    "EngineNotInstalled",
    "InvalidArgument",
    "InvalidCompensation",
    "InvalidStateTransition",
    "InvalidTier",
    "LateResult",
    "LeaseLapsed",
    "MalformedSignature",
    "NotInSession",
    "OnReject",
    "PartitionInUse",
    "PayloadTooLarge",
    "PermissionDenied",
    "ResultNotJSON",
    "SessionContext",
    "SessionNotActive",
    "SignatureError",
    "SignatureMismatch",
    "ToolTier",
    "UndoLog",
    "UndoLogError",
    "UnknownApproval",
    "UnknownEffect",
    "UnknownSession",
    "UnknownUndoEntry",
    "call_signature",
    "canonical_json",
    "migrate",
    "undolog_tool",
]

__version__ = "0.1.0"
