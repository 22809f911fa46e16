"""The session a journaled tool call belongs to, carried in a context variable.

``with ul.session()`` (or ``async with``) sets it; the decorator reads it to learn the
session id, the next step index and the connection to journal through. Step indexes
count journaled calls in call order from 0, so an agent that restarts a session with the
same id and makes the same calls gets the same signatures, and replays.
"""

from __future__ import annotations

import contextvars
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from undolog.errors import NotInSession

# A tool's registration on a connection, the key of ActiveSession.registered_tools: the
# connection (by id) and the whole definition (name, tier, compensation as canonical
# JSON, on_reject), so that another definition under the same name is registered (and
# refused, ToolRegistrationMismatch), never served the first definition's tool_id
# (undolog.decorator_common.registration_key).
RegistrationKey = tuple[int, str, str, str | None, str]

# How long a journaled call whose earlier run is still executing (answered 'in_progress')
# is asked again before CallInProgress is raised, by default.
DEFAULT_IN_PROGRESS_WAIT = 30.0


@dataclass
class ActiveSession:
    """What ``with ul.session() as s`` (and ``async with``) yields.

    ``s.session_id`` is the session's id (pass it to ``ul.session(session_id)`` again to
    resume the same session after a crash: what it already did replays). ``s.state`` is
    the session's state as this process last learned it: ``active`` inside the block (or
    ``awaiting_approval`` when resumed while waiting), and after the block what leaving
    it did: ``completed``, ``awaiting_approval``, ``failed`` (the walk is left to the
    worker), ``compensated`` or ``halted`` (the walk ran here).
    """

    session_id: uuid.UUID
    """The session's id (a UUID)."""
    connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
    """The connection every journaled call of this session goes through."""
    state: str
    """The session's state as this process last learned it (see the class docstring)."""
    in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT
    """Seconds a call that is still executing from an earlier run is waited for before
    CallInProgress is raised (0: raise at once, which fails the session so that the
    walk compensates that call)."""
    # Set when a journaled call's body may have acted but its outcome was not recorded
    # (cancelled, interrupted, or a result JSON cannot carry): the session must then fail,
    # so that the walk compensates that call, rather than complete.
    unknown_outcome: str | None = None
    # Results (commit, fail) are recorded with a durable commit rather than an
    # asynchronous one (UndoLog(durable_results=True)).
    durable_results: bool = False
    # time.monotonic() by which the lease may have lapsed: the send time of the last
    # begin_session or heartbeat that renewed it, plus the lease (the server's own expiry
    # is later, so no clock of the two machines is compared). None: not tracked.
    lease_deadline: float | None = None
    lease_seconds: float = 0.0
    # The tools registered through this session's connection: (id(connection), tool name)
    # -> tool_id, shared by every session of one UndoLog, so that register_tool is sent
    # once per connection and tool (the decorator's first call of it there).
    registered_tools: dict[RegistrationKey, uuid.UUID] = field(default_factory=dict)
    _steps: itertools.count[int] = field(default_factory=itertools.count)
    # Set when the session's block is left (before its exit's first statement): from then
    # on no journaled statement of this session is sent on its connection, which may
    # already serve another session (a pool's), so that a call still running in a task
    # or thread the block did not wait for never reaches, or raises in, another session.
    left: bool = False
    # The error of a result sent without waiting that the journal refused (over the
    # payload limit, U+0000, a late result), once a statement of the session took it: the
    # call stays executing, so the session can no longer complete. Every later
    # IRREVERSIBLE call (and a framework run's approval requests) raises it again before
    # anything is sent, so that nobody is asked to approve a call of a doomed run, and
    # leaving the block fails the session with it, also when the agent caught it. A list
    # shared with the copies of the session a framework's tool calls run in (what one of
    # them keeps, the run's session has).
    _refused: list[Exception] = field(default_factory=list, repr=False)

    @property
    def refused(self) -> Exception | None:
        """The kept error of a refused result (None: none was refused)."""
        return self._refused[0] if self._refused else None

    def keep_refused(self, error: Exception) -> None:
        """Keep ``error``, a refused result's, unless one is kept already."""
        if not self._refused:
            self._refused.append(error)

    @property
    def is_async(self) -> bool:
        return isinstance(self.connection, psycopg.AsyncConnection)

    def next_step(self) -> int:
        return next(self._steps)

    def check_in_block(self) -> None:
        """Raise NotInSession once the session's block was left (the hot path's guard,
        called with the connection held, before anything is sent)."""
        if self.left:
            raise NotInSession(
                f"session {self.session_id}: a journaled call made after its block was "
                "left (in a task or thread the block did not wait for): nothing of it was "
                "sent. A call still executing when the block was left failed the "
                "session, and the undo walk compensates it"
            )


_current: contextvars.ContextVar[ActiveSession | None] = contextvars.ContextVar(
    "undolog_session", default=None
)


def current_session() -> ActiveSession:
    session = _current.get()
    if session is None:
        raise NotInSession(
            "a journaled tool was called outside an UndoLog session: "
            "wrap the agent's work in `with ul.session():` (or `async with`)"
        )
    return session


def enter(session: ActiveSession) -> contextvars.Token[ActiveSession | None]:
    return _current.set(session)


def leave(token: contextvars.Token[ActiveSession | None]) -> None:
    _current.reset(token)
