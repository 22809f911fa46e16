"""UndoLog's exceptions, one per SQLSTATE of the engine (README, "Errors").

Every SQL function raises with a SQLSTATE of the project's class ``UL``; ``translate``
turns the psycopg error into the matching ``UndoLogError`` subclass, keeping the
database's message and the original exception as ``__cause__``.

Each class also says what the faces answer for it, in one table (docs/reference/errors.md):
``exit_code``, the ``undolog`` command's exit status, and ``http_status``, the dashboard's
response status. ``exit_code_of`` and ``http_status_of`` read it for any exception,
translating a psycopg error first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import psycopg

from undolog._version import __version__

# The faces' answers for an error: the command's exit codes (0 is success) ...
EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3
# ... the history's verdict, apart from every error, so that a script tells a tampered
# history from a verification that could not finish (a timeout on a large journal) ...
EXIT_MISMATCH = 4
# ... and the dashboard's HTTP statuses
HTTP_FORBIDDEN, HTTP_NOT_FOUND, HTTP_CONFLICT = 403, 404, 409
HTTP_UNPROCESSABLE, HTTP_TOO_MANY, HTTP_ERROR = 422, 429, 500


class UndoLogError(Exception):
    """Base of every UndoLog error."""

    sqlstate: ClassVar[str | None] = None
    # a database or engine error, unless the class says what else it is
    exit_code: ClassVar[int] = EXIT_ERROR
    http_status: ClassVar[int] = HTTP_ERROR
    # what to do next: the engine's HINT, for an error translated from the database's
    hint: str | None = None


class InvalidStateTransition(UndoLogError):
    sqlstate = "UL001"
    http_status = HTTP_CONFLICT


class UnknownSession(UndoLogError):
    sqlstate = "UL002"
    exit_code = EXIT_NOT_FOUND
    http_status = HTTP_NOT_FOUND


class UnknownEffect(UndoLogError):
    sqlstate = "UL003"
    exit_code = EXIT_NOT_FOUND
    http_status = HTTP_NOT_FOUND


class MalformedSignature(UndoLogError):
    sqlstate = "UL004"


class SignatureMismatch(UndoLogError):
    sqlstate = "UL005"


class InvalidTier(UndoLogError):
    sqlstate = "UL006"
    http_status = HTTP_UNPROCESSABLE


class InvalidCompensation(UndoLogError):
    sqlstate = "UL007"
    http_status = HTTP_UNPROCESSABLE


class InvalidArgument(UndoLogError):
    sqlstate = "UL008"
    exit_code = EXIT_USAGE
    http_status = HTTP_UNPROCESSABLE


class PayloadTooLarge(UndoLogError):
    sqlstate = "UL009"
    http_status = HTTP_UNPROCESSABLE


class SessionNotActive(UndoLogError):
    sqlstate = "UL010"
    http_status = HTTP_CONFLICT


class AppendOnlyViolation(UndoLogError):
    sqlstate = "UL011"


class UnknownUndoEntry(UndoLogError):
    sqlstate = "UL012"
    exit_code = EXIT_NOT_FOUND
    http_status = HTTP_NOT_FOUND


class UnknownApproval(UndoLogError):
    sqlstate = "UL013"
    exit_code = EXIT_NOT_FOUND
    http_status = HTTP_NOT_FOUND


class ApprovalAlreadyDecided(UndoLogError):
    sqlstate = "UL014"
    http_status = HTTP_CONFLICT


class ApprovalExpired(UndoLogError):
    sqlstate = "UL015"
    http_status = HTTP_CONFLICT


class PartitionInUse(UndoLogError):
    sqlstate = "UL016"


class UnknownTool(UndoLogError):
    """The call names no live registered tool of its session's owner: register it with
    ``undolog.register_tool`` (the decorator does so on a tool's first call)."""

    sqlstate = "UL017"


class ToolRegistrationMismatch(UndoLogError):
    """The tier or compensation differs from the tool's live registration: an operator
    replaces it (``undolog.replace_tool``: retired and registered again in one
    transaction)."""

    sqlstate = "UL018"
    http_status = HTTP_CONFLICT


class UnknownNotification(UndoLogError):
    """No live notification channel of that name, or no delivery of that id."""

    sqlstate = "UL025"
    exit_code = EXIT_NOT_FOUND
    http_status = HTTP_NOT_FOUND


class InvalidNotificationChannel(UndoLogError):
    """A notification channel that cannot work (its kind, name, URL, an address, its SMTP
    settings, a missing webhook secret), or a name already live."""

    sqlstate = "UL026"
    exit_code = EXIT_USAGE
    http_status = HTTP_UNPROCESSABLE


class NothingToUndo(UndoLogError):
    """rollback_to found nothing to undo at or after the step (calls already undone,
    SAFE calls and steps not made yet have nothing to undo)."""

    sqlstate = "UL021"
    http_status = HTTP_CONFLICT


class StepUndone(UndoLogError):
    """A call made again (replay or retry) whose step a rollback_to undid, in a session
    that went on: make it as a new step, at a later step index."""

    sqlstate = "UL022"
    http_status = HTTP_CONFLICT


class ApprovalNotEditable(ApprovalAlreadyDecided):
    """An edit of an approval request that was already decided (or expired): the edit is
    not recorded. A subclass of ApprovalAlreadyDecided: whoever catches that catches this."""

    sqlstate = "UL023"


class EditChangesArguments(InvalidArgument):
    """Edited args that name other arguments than the call's: an edit changes values,
    never which parameters the tool's body gets (reject the call instead)."""

    sqlstate = "UL024"


class ChainMismatch(UndoLogError):
    """The history does not match its hash chain: a row was changed, deleted or moved
    with the append-only triggers disabled (``undolog.assert_chain``; ``undolog verify``
    exits with this code when it finds any such row)."""

    sqlstate = "UL027"
    exit_code = EXIT_MISMATCH


class ExportInvalid(UndoLogError):
    """A file given to ``undolog verify --file`` or ``--anchor`` is not a chain export or
    an anchor at all (no header, a line that is not JSON)."""

    sqlstate = "UL028"
    exit_code = EXIT_USAGE


class TooManyPendingApprovals(UndoLogError):
    """A new IRREVERSIBLE call would open one approval request more than its login's
    sessions may have pending at once (``undolog.max_pending_approvals``, 100 unless an
    operator set it): nothing was journaled; decide or expire some, then call again."""

    sqlstate = "UL029"
    http_status = HTTP_TOO_MANY


class SessionBusy(UndoLogError):
    """A session another transaction holds and does not let go of (its agent's, or a
    person's decision, left open), waited for ``undolog.session_lock_wait()`` (5 s):
    nothing was changed. Try again; if it stays held, end that transaction."""

    sqlstate = "UL030"
    http_status = HTTP_CONFLICT


class TooManyLiveSessions(UndoLogError):
    """A new session would be one more than its login may have unfinished at once
    (``undolog.max_live_sessions``, 100,000 unless an operator set it): it was not begun;
    complete or fail some, let the worker undo the failed ones, then begin again."""

    sqlstate = "UL031"
    http_status = HTTP_TOO_MANY


class PermissionDenied(UndoLogError):
    """The database role may not call this function or touch this table (42501)."""

    sqlstate = "42501"
    http_status = HTTP_FORBIDDEN


class EngineNotInstalled(UndoLogError):
    """The database has no UndoLog engine (schema undolog): run ``undolog migrate``.
    The database's own error (schema or relation undolog.* does not exist) is the
    ``__cause__``; ``sqlstate`` stays None, as it is PostgreSQL's, not the engine's.
    Its subclass EngineVersionMismatch: an engine is there, but not one this package
    works with."""


class EngineVersionMismatch(EngineNotInstalled):
    """The engine in the database is not one this package works with, found by the check
    UndoLog and AsyncUndoLog run the first time they use a connection (before a session
    begins: nothing was journaled). ``installed`` is the engine's ``undolog.version()``
    (None when it could not be read: the engine has no such function, or its grants are
    older than the check's and this login may not read undolog_migrations), ``package``
    this package's version.

    An engine older than the package (a patch release too), or without
    ``undolog.version()``: run ``undolog migrate`` with this package. One newer in its
    major or minor version: upgrade the package. A newer patch release of the same
    major.minor is accepted (undolog.engine_check has the rule, which ``migrate`` shares).
    A subclass of EngineNotInstalled: the engine this package needs is not installed."""

    def __init__(
        self, message: str, installed: str | None = None, package: str | None = None
    ) -> None:
        super().__init__(message)
        self.installed = installed
        self.package = package or __version__


class SignatureError(UndoLogError, ValueError):
    """Arguments that JSON cannot carry exactly; raised before anything is written."""


class NotInSession(UndoLogError):
    """A journaled tool was called outside ``with ul.session()``."""


class ResultNotJSON(UndoLogError, TypeError):
    """The tool's body ran but returned something JSON cannot carry exactly.

    The effect is left executing (its outcome unknown to the journal), so that the undo
    walk compensates it if the session fails.
    """


class LeaseLapsed(SessionNotActive):
    """The session's lease may have run out before a journaled body was to run (the
    agent was paused, or its heartbeats were late), and renewing it failed: recovery may
    already have failed the session and compensated the call, so the body is not run.
    Raised by the binding; the call stays in the journal for the undo walk."""


class SessionHalted(SessionNotActive):
    """The session's block ended while its undo walk was halted: an ``undo_to`` or
    ``undo_last`` met a compensation that failed for good (or an irreversible call that
    may have acted) and stopped there, and no operator has moved it on since. Raised by
    the binding at the block's exit, instead of completing the session; the session stays
    halted for an operator (resume, retry or abandon it). ``error`` is why the walk
    halted, ``halt_undo_id`` the undo entry it stopped at."""

    def __init__(
        self,
        message: str,
        session_id: Any = None,
        halt_undo_id: Any = None,
        error: str | None = None,
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.halt_undo_id = halt_undo_id
        self.error = error


class LateResult(InvalidStateTransition):
    """A commit or fail arrived for an effect that the undo walk had already taken
    (compensating, compensated, compensation_failed): its agent was paused past its
    lease. The engine recorded what arrived in the effect's history, which flags the
    session for an operator (``sessions_overview.needs_attention``): the effect may
    stand although the journal says it was undone."""


class CallInProgress(UndoLogError):
    """The same call is journaled as executing (an earlier run of this session started it
    and never reported its outcome: a crashed agent, or the same call still running
    elsewhere) and did not finish within the session's ``in_progress_wait``.

    Leaving the session with it fails the session, so that the undo walk compensates
    that call (its outcome is unknown: it may have acted).
    """

    def __init__(
        self,
        message: str,
        session_id: Any = None,
        effect_id: Any = None,
        tool_name: str | None = None,
        step_index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.effect_id = effect_id
        self.tool_name = tool_name
        self.step_index = step_index


class AwaitingApprovalError(UndoLogError):
    """An IRREVERSIBLE call needs a human's approval before it runs.

    Leaving ``with ul.session()`` with this error suspends the session (awaiting_approval)
    and runs no compensation. The round trip: ``ul.wait_for_decision(err.approval_id,
    timeout=...)``; once approved, open ``ul.session(err.session_id)`` again and make the
    same calls: what already ran replays, and the approved call executes, once.
    """

    def __init__(
        self, message: str, approval_id: Any, effect_id: Any, session_id: Any = None
    ) -> None:
        super().__init__(message)
        self.approval_id = approval_id
        self.effect_id = effect_id
        self.session_id = session_id


class ApprovalRejectedError(UndoLogError):
    """A human rejected this IRREVERSIBLE call (or its deadline passed); it will never run.

    ``reason``, ``decided_by`` and ``decided_at`` are the person's decision (``decided_by``
    is None for the engine's own expiry; ``decision`` is 'rejected' or 'expired').
    ``session_continues`` is True when the tool was registered ``on_reject="continue"``:
    the session is still active, and a caller that catches this error may go on calling
    tools in it; uncaught, it leaves the session block and fails the session like any
    exception. False (the default rule): the session is being undone. Also raised when the
    session is run again after such a rejection, by any of its calls the undo walk took:
    ``approval_id`` is then the rejected call's, ``effect_id`` the call made.
    """

    def __init__(
        self,
        message: str,
        approval_id: Any,
        effect_id: Any,
        session_id: Any = None,
        *,
        reason: str | None = None,
        decided_by: str | None = None,
        decided_at: datetime | None = None,
        session_continues: bool = False,
        decision: str | None = None,
    ) -> None:
        super().__init__(message)
        self.approval_id = approval_id
        self.effect_id = effect_id
        self.session_id = session_id
        self.reason = reason
        self.decided_by = decided_by
        self.decided_at = decided_at
        self.session_continues = session_continues
        self.decision = decision


class ResumedInAnotherSession(UndoLogError, LookupError, ValueError):
    """A framework's saved state (a LangGraph thread, an OpenAI Agents RunState, a
    pydantic-ai message history) resumed under an UndoLog session id other than the one
    of the run that stopped: nothing was run, and no session was opened. Resumed there,
    its calls would be asked or run again in a session whose journal does not hold what
    the run did, while the run's own session waited for ever. Resume it with the session
    id of the run that stopped (the message names it where the saved state recorded it).
    Raised by the framework adapters (undolog.integrations, which re-export it); a
    LookupError and a ValueError too, as the adapters raised before."""

    http_status = HTTP_CONFLICT


# PostgreSQL's own refusals of input, raised before an engine function runs: bad input all
# the same (README, "Errors"). 22P02 not JSON / not a uuid, 22P05 U+0000 in jsonb, 22007
# a malformed interval or timestamp ('soon'), 22008 / 22015 a date or interval out of
# range, 22003 a number out of range for its type, 22021 bytes that are not UTF-8, 42883
# no function for these argument types (a step of 2**31 arrives as a bigint).
_INPUT_SQLSTATES = ("22P02", "22P05", "22007", "22008", "22015", "22003", "22021", "42883")
# 54001: JSON nested too deep for PostgreSQL's parser (stack depth), far past the engine's
# own nesting limit: a payload too large, like any other past the limits.
_TOO_LARGE_SQLSTATES = ("54001",)

BY_SQLSTATE: dict[str, type[UndoLogError]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidStateTransition,
        UnknownSession,
        UnknownEffect,
        MalformedSignature,
        SignatureMismatch,
        InvalidTier,
        InvalidCompensation,
        InvalidArgument,
        PayloadTooLarge,
        SessionNotActive,
        AppendOnlyViolation,
        UnknownUndoEntry,
        UnknownApproval,
        ApprovalAlreadyDecided,
        ApprovalExpired,
        PartitionInUse,
        UnknownTool,
        ToolRegistrationMismatch,
        UnknownNotification,
        InvalidNotificationChannel,
        NothingToUndo,
        StepUndone,
        ApprovalNotEditable,
        EditChangesArguments,
        ChainMismatch,
        ExportInvalid,
        TooManyPendingApprovals,
        SessionBusy,
        TooManyLiveSessions,
        PermissionDenied,
    )
    if cls.sqlstate is not None
}


BY_SQLSTATE.update({code: InvalidArgument for code in _INPUT_SQLSTATES})
BY_SQLSTATE.update({code: PayloadTooLarge for code in _TOO_LARGE_SQLSTATES})


# A missing schema undolog (3F000) or one of its tables (42P01): no engine installed.
_NO_ENGINE_SQLSTATES = ("3F000", "42P01")
ENGINE_MISSING = "the UndoLog engine is not installed in this database: run `undolog migrate`"


# 42883 on one of the engine's functions: an argument of a type it does not take, or the
# function missing from an engine older than the package. Which of the two, only the
# database's catalog says; the note names both.
ENGINE_OLDER = (
    "if no argument is of a wrong type, the engine in this database is older than this"
    " package (undolog {version}): run `undolog migrate` with it (`undolog status` says)"
)


def translate(exc: psycopg.Error) -> Exception:
    """The UndoLogError for a database error, or the error itself if it is not ours."""
    if exc.sqlstate in _NO_ENGINE_SQLSTATES and "undolog" in (exc.diag.message_primary or ""):
        missing = EngineNotInstalled(f"{ENGINE_MISSING} ({exc.diag.message_primary})")
        missing.__cause__ = exc
        return missing
    cls = BY_SQLSTATE.get(exc.sqlstate or "")
    if cls is None:
        return exc
    diag = exc.diag
    message = diag.message_primary or str(exc)
    if diag.message_detail:
        message += f" ({diag.message_detail})"
    err = cls(message)
    err.__cause__ = exc
    if diag.message_hint:
        # Every engine error says what to do next; a note shows it under the traceback.
        err.hint = diag.message_hint
        err.add_note(f"hint: {diag.message_hint}")
    if exc.sqlstate == "42883" and "undolog." in message:
        err.add_note(ENGINE_OLDER.format(version=__version__))
    return err


def classify(exc: BaseException) -> type[UndoLogError] | None:
    """The UndoLogError class an exception is, or is translated to; None for one that is
    not ours (then it is a database or engine error: exit 1, HTTP 500)."""
    if isinstance(exc, psycopg.Error):
        exc = translate(exc)
    return type(exc) if isinstance(exc, UndoLogError) else None


def exit_code_of(exc: BaseException) -> int:
    """The ``undolog`` command's exit status for an error."""
    cls = classify(exc)
    return EXIT_ERROR if cls is None else cls.exit_code


def http_status_of(exc: BaseException) -> int:
    """The dashboard's response status for an error."""
    cls = classify(exc)
    return HTTP_ERROR if cls is None else cls.http_status


# what to do about a permission denied when nothing more particular is known
ROLES_HINT = "grant the login one of undolog_agent, undolog_approver, undolog_operator"


def permission_hint(message: str) -> str:
    """What to do about a permission denied (42501), from its message: installing the
    engine needs more than using it."""
    lowered = message.lower()
    if "create role" in lowered:
        return (
            "installing the engine creates its roles (undolog_agent, undolog_approver, "
            "undolog_operator): run `undolog migrate` as a login with CREATEROLE (or a "
            "superuser), or have such a login create those three roles first"
        )
    if "for database" in lowered or "for schema public" in lowered:
        return (
            "installing the engine needs a login that may create a schema in this database"
            " (its owner, or GRANT CREATE ON DATABASE)"
        )
    return ROLES_HINT
