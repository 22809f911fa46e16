"""What the three framework adapters share.

**Step indexes.** The binding numbers a session's journaled calls 0, 1, 2, ... in call
order, which replays a restarted agent that makes the same calls in the same order. A
framework that resumes a run does not make the same calls in the same order: LangGraph
re-runs only the interrupted node, a resumed OpenAI Agents or pydantic-ai run makes only
the calls still outstanding. So a call made by a framework takes its step index from its
*call key* instead: ``step_for(key)`` is 31 bits of BLAKE3 of the key, where the key is

- the tool call id the model gave the call (OpenAI Agents ``call_id``, pydantic-ai
  ``tool_call_id``, LangChain ``ToolCall["id"]``): every framework keeps it in the state
  it resumes from, so the resumed call has the same signature as the interrupted one;
- for a tool a LangGraph node calls directly (no model, no call id): the node task's
  checkpoint namespace and the call's position within that run of the node, since
  LangGraph re-runs an interrupted node from its start.

Same session id + same key + same tool + same arguments = same signature: the call
replays from the journal (or, IRREVERSIBLE, finds its approval) instead of running again.
A call with no key (a tool called by hand inside the run) falls back to the binding's
counter. Two keys whose hashes collide are still told apart by tool name and arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import json
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import blake3
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from undolog.client import AsyncUndoLog, UndoLog
from undolog.context import ActiveSession, current_session, enter, leave
from undolog.decorator import ToolSpec, _async_wrapper, _sync_wrapper, last_edit, tool_spec
from undolog.errors import (
    ApprovalRejectedError,
    AwaitingApprovalError,
    SessionNotActive,
    SignatureError,
    UndoLogError,
)
from undolog.errors import ResumedInAnotherSession as ResumedInAnotherSession  # the adapters'
from undolog.signature import call_signature
from undolog.tiers import ToolTier

T = TypeVar("T")

# Who records a human's decision in UndoLog: a client logged in as the approver (never the
# agent's login: the engine refuses a login approving its own call, 42501), or a callable
# (approval_id, approved, decided_by, reason) that records it however the app does; an
# approval with edited arguments calls it with them as the keyword ``args`` too.
DecisionRecorder = Callable[[uuid.UUID, bool, str, str | None], Awaitable[object] | object]
Approver = UndoLog | AsyncUndoLog | DecisionRecorder
Client = UndoLog | AsyncUndoLog
R = TypeVar("R")


def unchecked_decision() -> ValueError:
    """The refusal of a decision through a decision recorder when nothing may read the
    call decided on (``approvals_reader``)."""
    return ValueError(
        "the call decided on cannot be checked against the call the person was shown: the "
        "approver is a callable, handed the approval id only, and no client was given to "
        "read the call from the journal; nothing was recorded. Pass ul=, a client that may "
        "read the session's approval requests (the agent's, or an approver's)"
    )


def approvals_reader(approver: Approver, ul: R | None) -> Client | R:
    """What reads the call of the approval a person decides on, to compare it with the
    call they were shown before anything is recorded: the approver when it is a client
    (its own login), else ``ul``. Every adapter's decision helper makes that check, with
    either kind of approver: the request the person is shown comes from the agent's run,
    and a decision recorder is the app's, handed the approval id only, so it cannot
    compare. Without ``ul`` nothing can read the call: ValueError, nothing recorded."""
    if isinstance(approver, UndoLog | AsyncUndoLog):
        return approver
    if ul is None:
        raise unchecked_decision()
    return ul


def json_form(value: Any) -> Any:
    """``value`` as the journal holds it: its JSON form. A framework validates the model's
    JSON into the tool's types (a pydantic BaseModel, a date, a Decimal ...) before it
    calls the tool; the signature covers JSON only, so a typed argument is journaled and
    signed as JSON again (``pydantic_core.to_jsonable_python``: a model as its fields, by
    alias when it serializes by alias, a date as ISO text, a Decimal as its text). A
    plain JSON value is itself, so its signature is the one it always had. A set is
    written sorted, in a plain container or in a model: in iteration order its JSON, and
    the signature, would change from process to process (str hashes are salted), and a
    replay would miss. What has no JSON form is left as it is, for the signature to refuse
    with its own words. Whether the JSON form reads back into the value is the tool's to
    check (``ToolInfo.journal_form``: it knows the parameter's type)."""
    try:
        form = to_jsonable_python(_sets_sorted(value))
    except (ValueError, TypeError, RecursionError):  # ValueError: PydanticSerializationError
        return value
    return _object_sets_sorted(value, form)


def _set_form(value: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's JSON form: its items' JSON forms, in the order of their JSON text."""
    items = [json_form(item) for item in value]
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=repr))


def _sets_sorted(value: Any) -> Any:
    """``value`` with each set in it (in plain containers) a list in a fixed order."""
    if isinstance(value, set | frozenset):
        return _set_form(value)
    if isinstance(value, dict):
        return {key: _sets_sorted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_sets_sorted(item) for item in value]
    return value


def _object_sets_sorted(value: Any, form: Any) -> Any:
    """``form`` (the JSON form of ``value``) with each set inside a model or a dataclass
    written in a fixed order, as ``_sets_sorted`` writes those of plain containers: the
    serializer writes a model's set in iteration order. Walks the value and its form side
    by side (a model's field by the key it is written under); what the walk cannot place
    (a field written by a custom serializer under another key) is left as written, and a
    journaled tool's check that the form reads back into the value still holds."""
    if isinstance(value, set | frozenset):
        return _set_form(value) if isinstance(form, list) and len(form) == len(value) else form
    if isinstance(value, BaseModel) and isinstance(form, dict):
        for name, field in type(value).model_fields.items():
            for key in (field.serialization_alias, field.alias, name):
                if key is not None and key in form:
                    form[key] = _object_sets_sorted(getattr(value, name, None), form[key])
                    break
        for name, item in (value.model_extra or {}).items():
            if name in form:
                form[name] = _object_sets_sorted(item, form[name])
        return form
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and isinstance(form, dict):
        for member in dataclasses.fields(value):
            if member.name in form:
                form[member.name] = _object_sets_sorted(
                    getattr(value, member.name), form[member.name]
                )
        return form
    if isinstance(value, dict) and isinstance(form, dict):
        for key, item in value.items():
            if isinstance(key, str) and key in form:
                form[key] = _object_sets_sorted(item, form[key])
        return form
    if isinstance(value, list | tuple) and isinstance(form, list) and len(form) == len(value):
        return [
            _object_sets_sorted(item, written) for item, written in zip(value, form, strict=True)
        ]
    return form


_JSON_SCALARS = (str, int, float, bool, type(None))


def _is_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON already (its own JSON form)."""
    if type(value) in _JSON_SCALARS:
        return True
    if type(value) is list:
        return all(_is_json(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and _is_json(item) for key, item in value.items())
    return False


def _json_text(value: Any) -> str | None:
    """The canonical JSON text of a JSON value (None: it has none)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


@dataclasses.dataclass(frozen=True)
class ToolInfo:
    """A tool as a framework needs to see it: the decorated callable, its name, its
    description (the docstring), its signature, its tier."""

    fn: Callable[..., Any]
    name: str
    description: str
    signature: inspect.Signature
    tier: ToolTier
    spec: ToolSpec | None

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def bind(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments as the journal holds them (defaults applied, each in its
        JSON form): what the journaled call of these arguments signs, so that an approval
        looked up or requested with them is that call's."""
        call = _Arguments(self, (), kwargs)
        if self.spec is None:
            return dict(call.plain)
        args, journal_kwargs = call.journaled()
        return self.spec.bind(args, journal_kwargs)

    def fit(self, named: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """How far this tool takes a call that names ``named`` (the model's JSON) when it
        cannot take the call whole (its parameters refuse the arguments): the arguments
        it would journal (each named one it takes, as it is; each other parameter's
        default, in its journal form), and the parameters it requires (no default) that
        the call does not name. What ``tool_differences`` says of a tool changed since
        the call was journaled."""
        args: dict[str, Any] = {}
        required: list[str] = []
        for name, parameter in self.signature.parameters.items():
            if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if name in named:
                args[name] = named[name]
            elif parameter.default is not inspect.Parameter.empty:
                args[name] = self.journal_form(name, parameter.default)
            else:
                required.append(name)
        return args, tuple(required)

    @functools.cached_property
    def _readers(self) -> dict[str, TypeAdapter[Any]]:
        """A validator of each annotated parameter's type, by name (built on the first
        edit that needs one: a call run as the framework validated it needs none)."""
        body = getattr(self.fn, "__wrapped__", self.fn)
        try:
            hints = typing.get_type_hints(body, include_extras=True)
        except Exception:  # an annotation that cannot be resolved here: taken as written
            hints = {}
        readers: dict[str, TypeAdapter[Any]] = {}
        for name, parameter in self.signature.parameters.items():
            hint = hints.get(name, parameter.annotation)
            if hint is inspect.Parameter.empty or isinstance(hint, str):
                continue  # no type to read the value into: it goes as it is
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                hint = tuple[hint, ...]  # type: ignore[valid-type]
            elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
                hint = dict[str, hint]  # type: ignore[valid-type]
            try:
                readers[name] = TypeAdapter(hint)
            except Exception:  # a type pydantic cannot validate: the value goes as it is
                continue
        return readers

    def journal_form(self, name: str, value: Any) -> Any:
        """Argument ``name``'s ``value`` as the journal holds it (``json_form``), refused
        (SignatureError) when that JSON form does not read back, through the parameter's
        type, into an equal value: a SecretStr is '**********' in it, a field excluded
        from serialization is not there, a custom serializer may write something else.
        Journaled so, two calls told apart by that alone would share a signature (a
        replay would answer one with the other's result), and a person's edit of another
        argument would hand the body what the JSON form reads back to."""
        plain = json_form(value)
        if plain is value or _is_json(value):
            return plain  # plain JSON, or no JSON form: the signature judges it
        reader = self._readers.get(name)
        if reader is None:
            return plain  # no type to read it back into: taken as it is written
        try:
            back = reader.validate_json(json.dumps(plain))
            same = bool(back == value)
        except Exception:  # whatever fails, the form does not read back
            same = False
        if not same:
            raise SignatureError(
                f"{self.name}: argument {name!r} ({type(value).__name__}) cannot be "
                "journaled: its JSON form does not read back into an equal value (a "
                "secret such as SecretStr is masked in it, a field with exclude=True is "
                "left out, a custom serializer may write something else), so two calls "
                "told apart by it alone would share a signature and a person's edit would "
                "hand the body what the JSON form reads back to. Give a journaled tool "
                "arguments of plain types, or models without secret or excluded fields"
            )
        return plain

    def read(self, name: str, value: Any) -> Any:
        """A journal value of parameter ``name`` (JSON: a person's edit) read into the
        parameter's type, as the framework reads the model's JSON (JSON mode: "2025-03-04"
        is a date, an object a BaseModel). ValueError when it does not fit."""
        reader = self._readers.get(name)
        if reader is None:
            return value
        try:
            return reader.validate_json(json.dumps(value))
        except (ValidationError, TypeError, ValueError) as error:
            raise ValueError(
                f"{self.name}: the approved {name!r} does not fit the tool's parameter: {error}"
            ) from error


def describe(fn: Callable[..., Any]) -> ToolInfo:
    spec = tool_spec(fn)
    return ToolInfo(
        fn=fn,
        name=spec.name if spec is not None else fn.__name__,
        description=inspect.getdoc(fn) or "",
        signature=inspect.signature(fn),
        tier=spec.tier if spec is not None else ToolTier.SAFE,
        spec=spec,
    )


class _Arguments:
    """One call's arguments as the framework gave them (validated into the tool's types,
    defaults applied) and as the journal holds them (``plain``: their JSON form)."""

    def __init__(self, tool: ToolInfo, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        bound = tool.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        self.tool = tool
        self.given = dict(bound.arguments)
        self.plain = {name: tool.journal_form(name, value) for name, value in self.given.items()}

    def journaled(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What the journaled wrapper is called with: the JSON form, which it signs (the
        instance first, for a tool that is a bound method: the wrapper's signature is the
        function's)."""
        plain = inspect.BoundArguments(self.tool.signature, self.plain)
        lead = (self.tool.fn.__self__,) if inspect.ismethod(self.tool.fn) else ()
        return (*lead, *plain.args), plain.kwargs

    def for_body(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The body's arguments from those the journaled wrapper hands it: each value
        that is still the one it was given (the very object, or a person's edit that
        left it as it was: the same JSON) is the framework's typed object again; a value
        a person changed, put in its place by the wrapper, is read into the parameter's
        type, as the framework read the model's."""
        assert self.tool.spec is not None
        bound = self.tool.spec.signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if name not in self.plain:
                continue  # a method's instance
            plain = self.plain[name]
            if value is plain or (
                (text := _json_text(value)) is not None and text == _json_text(plain)
            ):
                bound.arguments[name] = self.given[name]
            else:
                bound.arguments[name] = self.tool.read(name, value)
        return bound.args, bound.kwargs


def awaitable_body(tool: ToolInfo) -> Callable[..., Awaitable[Any]]:
    """The tool as an ``async def`` for a framework whose run is async, called with the
    arguments the framework validated. A journaled tool's call is journaled (and signed)
    with their JSON form, and its body gets the typed objects (a person's edit read
    into the parameters' types). A sync journaled tool gets its own body run in a worker
    thread, journaled by the async session (the binding refuses a sync journaled call
    inside an async session); a sync SAFE tool runs in a worker thread too, so it does
    not block the event loop."""
    if tool.spec is None:
        if tool.is_async:
            return cast(Callable[..., Awaitable[Any]], tool.fn)
        safe: Callable[..., Any] = tool.fn

        @functools.wraps(safe)
        async def threaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(safe, *args, **kwargs)

        return threaded
    spec = tool.spec
    # the decorator's functools.wraps keeps the undecorated body as __wrapped__
    body: Callable[..., Any] = tool.fn.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(body)
    async def journaled(*args: Any, **kwargs: Any) -> Any:
        call = _Arguments(tool, args, kwargs)

        async def typed(*given: Any, **named: Any) -> Any:
            given, named = call.for_body(given, named)
            if tool.is_async:
                return await body(*given, **named)
            return await asyncio.to_thread(body, *given, **named)

        journal_args, journal_kwargs = call.journaled()
        return await _async_wrapper(spec, typed)(*journal_args, **journal_kwargs)

    return journaled


def callable_body(tool: ToolInfo) -> Callable[..., Any]:
    """A sync tool for a framework whose run is sync, called with the arguments the
    framework validated: a journaled one is journaled with their JSON form, and its body
    gets the typed objects (as ``awaitable_body``)."""
    if tool.spec is None:
        return tool.fn
    spec = tool.spec
    body: Callable[..., Any] = tool.fn.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(body)
    def journaled(*args: Any, **kwargs: Any) -> Any:
        call = _Arguments(tool, args, kwargs)

        def typed(*given: Any, **named: Any) -> Any:
            given, named = call.for_body(given, named)
            return body(*given, **named)

        journal_args, journal_kwargs = call.journaled()
        return _sync_wrapper(spec, typed)(*journal_args, **journal_kwargs)

    return journaled


def step_for(call_key: str) -> int:
    """The step index of the call whose framework key is ``call_key`` (0 .. 2^31-1)."""
    digest = blake3.blake3(b"undolog-step\x00" + call_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


class _Pinned:
    """What the session of one framework tool call adds to the run's: the call sees a
    copy of the run's session (its class too: a client's session knows its client) whose
    step counter starts at its key's step; but whether the block was left is the run's
    to say (``left``, read at each check). A copy that kept its own ``left`` would stay in
    the block for ever: a call still running once the run's block was left would go on
    sending on a connection that is closed or (a pool's) already serves another session."""

    _run: ActiveSession
    _left: bool

    @property
    def left(self) -> bool:
        return self._left or self._run.left

    @left.setter
    def left(self, value: bool) -> None:  # the dataclass __init__ sets it
        self._left = value


# The pinned kind of each session class (ActiveSession, a client's ClientSession ...).
_pinned_classes: dict[type[ActiveSession], type[ActiveSession]] = {}


def _pinned_class(cls: type[ActiveSession]) -> type[ActiveSession]:
    if issubclass(cls, _Pinned):  # a call pinned inside a pinned call: the same kind
        return cls
    made = _pinned_classes.get(cls)
    if made is None:
        made = cast(type[ActiveSession], type(f"Pinned{cls.__name__}", (_Pinned, cls), {}))
        _pinned_classes[cls] = made  # a race makes two equal classes: either will do
    return made


def _pinned(run: ActiveSession, first_step: int) -> ActiveSession:
    copied = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.init}
    call = _pinned_class(type(run))(**{**copied, "_steps": itertools.count(first_step)})
    cast(_Pinned, call)._run = run
    return call


@contextlib.contextmanager
def pinned_step(call_key: str | None) -> Iterator[None]:
    """Run one tool call with the step index of its key. The decorator takes the next
    step from the current session, so the call sees the run's session with a step
    counter that starts at that step; an unknown outcome it records is copied back to
    the run."""
    if call_key is None:
        yield
        return
    run = current_session()
    call = _pinned(run, step_for(call_key))
    token = enter(call)
    try:
        yield
    finally:
        leave(token)
        if call.unknown_outcome is not None:
            run.unknown_outcome = call.unknown_outcome


def _signature(session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]) -> str:
    return call_signature(session.session_id, step_for(call_key), tool.name, args)


def _intercept_params(
    session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]
) -> tuple[Any, ...]:
    return (
        session.session_id,
        step_for(call_key),
        tool.name,
        tool.tier.value,
        args,
        None,
        _signature(session, tool, call_key, args),
    )


def _registration(tool: ToolInfo) -> tuple[str, str, dict[str, Any] | None, str]:
    """What the engine's registry must hold before a deferred call of ``tool`` is
    intercepted (intercept refuses unregistered tools), as the decorator registers it."""
    compensation = tool.spec.compensation if tool.spec is not None else None
    on_reject = tool.spec.on_reject if tool.spec is not None else "fail_session"
    return (tool.name, tool.tier.value, compensation.to_json() if compensation else None, on_reject)


# --- a run's saved state belongs to its session ------------------------------------------

SESSION_KEY = "undolog_session_id"
"""The key under which an adapter records, in the state a framework saves when a run
stops (a LangGraph interrupt and checkpoint, a pydantic-ai ModelResponse's metadata),
the UndoLog session of the run that stopped."""


def refuse_recorded_session(
    recorded: object, session_id: uuid.UUID, what: str, otherwise: str = ""
) -> None:
    """Refuse a resume under ``session_id`` of a saved state that recorded the session
    ``recorded`` (None: it recorded none, nothing to refuse). ``what`` names the state
    ("this thread waits on an UndoLog interrupt"), ``otherwise`` what else the caller may
    do (" (or run in a new thread)")."""
    if recorded is None or str(recorded) == str(session_id):
        return
    raise ResumedInAnotherSession(
        f"{what} of session {recorded}, not {session_id}: resume it with "
        f"session_id={recorded}{otherwise}. Nothing was run: resumed in another session, "
        "its calls would be asked or made again in a session whose journal does not hold "
        "what the run did, and its own session would wait for ever"
    )


def ran_with(requested: Mapping[str, Any], edit: Any) -> dict[str, Any]:
    """The arguments an edited call ran with: the requested ones, with the person's
    approved ones in their place (``edit`` is an undolog.last_edit())."""
    return {**requested, **edit.approved_args}


# --- a person's edit that the agent hears -------------------------------------------------


def edited_reply(tool: ToolInfo, result: Any) -> Any:
    """The model's answer to an IRREVERSIBLE call a person approved with edited
    arguments: the edit first, in words (who, why, what changed), then the result as the
    JSON the journal holds; ``result`` itself for any other call."""
    edit = last_edit() if tool.tier is ToolTier.IRREVERSIBLE else None
    if edit is None:
        return result
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return f"{edit.note}\nResult: {text}"


# --- a person's "no" that the agent hears -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A person's rejection of a call of a tool declared ``on_reject="continue"`` (or
    the expiry of its approval): the session goes on, and the framework hands the model
    ``message`` as the call's answer, with who refused it and why."""

    tool: str
    approval_id: uuid.UUID | None
    decision: str  # rejected | expired
    decided_by: str | None  # None for the engine's own expiry
    reason: str | None

    @property
    def message(self) -> str:
        if self.decision == "expired":
            head = f"The {self.tool} call was not approved in time (its approval expired)"
        else:
            head = f"{self.decided_by or 'A person'} rejected the {self.tool} call"
        why = f": {self.reason}" if self.reason else " (no reason given)"
        return f"{head}{why}. It did not run."

    def as_dict(self) -> dict[str, Any]:
        """What a framework may carry beside the message (a LangGraph artifact)."""
        return {
            "tool": self.tool,
            "approval_id": None if self.approval_id is None else str(self.approval_id),
            "decision": self.decision,
            "decided_by": self.decided_by,
            "reason": self.reason,
        }


def refusal(tool: ToolInfo, error: ApprovalRejectedError) -> Refusal | None:
    """The Refusal behind an ApprovalRejectedError of a call of ``tool`` that leaves the
    session going on (None: the rejection ends the session, the default rule, and the
    error must go on). A session already completed is made again call by call: its
    refused call of an on_reject="continue" tool is a Refusal again, though the session
    takes no new calls."""
    on_reject = tool.spec.on_reject if tool.spec is not None else "fail_session"
    if not error.session_continues and on_reject != "continue":
        return None
    approval = error.approval_id
    return Refusal(
        tool=tool.name,
        approval_id=None if approval is None else uuid.UUID(str(approval)),
        decision=error.decision or "rejected",
        decided_by=error.decided_by,
        reason=error.reason,
    )


@dataclasses.dataclass(frozen=True)
class _Deferred:
    tool: ToolInfo
    call_key: str
    args: dict[str, Any]


# The IRREVERSIBLE calls a run asked a human about before UndoLog had a request for them.
_deferred: contextvars.ContextVar[list[_Deferred] | None] = contextvars.ContextVar(
    "undolog_deferred_approvals", default=None
)


@dataclasses.dataclass(frozen=True)
class Waiting:
    """An IRREVERSIBLE call that waits for a human; ``approval_id`` is None until the
    run has stopped and its request is written."""

    approval_id: uuid.UUID | None


def _call_of(
    session: ActiveSession, tool: ToolInfo, call_key: str, args: dict[str, Any]
) -> dict[str, Any]:
    """The parameters of approval_of_call: the call's session and signature."""
    return {
        "session_id": session.session_id,
        "call_signature": _signature(session, tool, call_key, args),
    }


def _answer(tool: ToolInfo, call_key: str, args: dict[str, Any], row: Any) -> Waiting | None:
    if row is None:
        deferred = _deferred.get()
        if deferred is None:
            raise UndoLogError(f"{tool.name} is IRREVERSIBLE: run it through the adapter's run")
        if all(noted.call_key != call_key for noted in deferred):  # asked again on a resume
            deferred.append(_Deferred(tool, call_key, args))
        return Waiting(None)
    approval_id, state = row
    return Waiting(uuid.UUID(str(approval_id))) if state == "pending" else None


def _shown_calls(deferred: list[_Deferred], shown: Sequence[str]) -> list[_Deferred]:
    """The noted calls the framework shows the person as waiting, in its order. Only
    they get a request: a call the framework stopped at but does not show (a LangGraph
    node that runs several tool calls surfaces only its first interrupt) stays unasked
    until the resumed run shows it, so that a person is never asked about a call they
    cannot see."""
    rank = {key: i for i, key in enumerate(shown)}
    return sorted(
        (call for call in deferred if call.call_key in rank), key=lambda call: rank[call.call_key]
    )


def _step_of(session_id: uuid.UUID, tool_name: str, call_key: str) -> dict[str, Any]:
    """The parameters of approval_of_step: the call's session, step and tool."""
    return {"session_id": session_id, "step_index": step_for(call_key), "tool_name": tool_name}


@dataclasses.dataclass(frozen=True)
class ShownCall:
    """The call a person was shown and decides on, as the framework's request carries it:
    its session, tool, call key (its step: ``step_for``) and arguments (the journal's JSON
    form)."""

    session_id: uuid.UUID
    tool_name: str
    call_key: str
    args: Any
    # The arguments the call names, as the model sent them, when ``args`` are those
    # completed by the tool's defaults as the tool is now (OpenAI Agents: an item of a
    # RunState, bound again by the tool the resumed process built); None when ``args`` are
    # the journal's form as the run wrote it (a LangGraph interrupt).
    named: Mapping[str, Any] | None = None
    # With ``named``, the tool as it is now: its tier (None: the run has no journaled tool
    # of that name); whether its parameters take the named arguments (``fits``) and, when
    # they do not, those it requires that the call does not name (``ToolInfo.fit``: then
    # ``args`` are as far as it takes them).
    tier: ToolTier | None = ToolTier.IRREVERSIBLE
    fits: bool = True
    required: tuple[str, ...] = ()


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same: a number equals a number of the same value
    (the journal may write 5.0 back as 5), never a boolean; an object has the same keys."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def refuse_other_call(
    approval_id: uuid.UUID, shown: ShownCall, row: tuple[Any, ...] | None
) -> None:
    """Refuse (ValueError: nothing is recorded) a decision on approval ``approval_id``
    unless its call (``row``: session, step, tool, arguments, as the approver's login
    reads them: the ``approval_call`` query) is the call the person was shown. The request
    a framework hands the approver comes from the agent's run (its thread, its state),
    which the agent's login may have written: the approval id in it must not make a yes
    to one call approve another. A request no longer pending is the engine's to refuse,
    with its own error; one the reader cannot read (``row`` None: unknown, or of a session
    its login may not see, as an agent's ``ul`` for a decision recorder) is refused here:
    its call cannot be compared, and a decision recorder records with the app's login."""
    if row is None:
        raise ValueError(
            f"approval {approval_id} cannot be read by the login that checks it against the "
            "call the person was shown (unknown, or of a session it may not see): nothing "
            "was recorded. Decide on the request the run stopped at, with an approver (or "
            "ul=) that may read its session's approval requests"
        )
    changed = tool_differences(shown, row)
    if changed is not None:
        raise ValueError(
            f"approval {approval_id}: " + tool_changed(shown, changed, "nothing was recorded")
        )
    differs = call_differences(shown, row)
    if differs:
        raise ValueError(
            f"approval {approval_id} is not the call the person was shown ("
            + "; ".join(differs)
            + "): nothing was recorded. Decide on the request the run stopped at (its "
            "interrupt as the run answered it), or on the call itself in the dashboard or "
            "with `undolog approvals`"
        )


MIXED_RUN = (
    "an UndoLog tool was called sync inside an async session, or async inside a sync one: "
    "call it as the run is made (in arun or astream, with ainvoke from an async node; in run "
    "or stream, with invoke)"
)
"""The error (UndoLogError) of an IRREVERSIBLE tool asked about on the other kind of run's
connection, as the decorator's own (``decorator_common._wrong_session``) for a call it
journals."""


def resumed_elsewhere(
    session_id: uuid.UUID, asked: Sequence[tuple[str, str]], what: str, recorded: object = None
) -> ResumedInAnotherSession:
    """The refusal of a run resumed in session ``session_id``, in which none of ``asked``
    (its waiting IRREVERSIBLE calls: tool, call key) has an approval request
    (``_arun.refuse_another_session`` says when)."""
    with_which = (
        "the session id of the run that stopped"
        if recorded is None
        else f"session_id={recorded}, the session the stopped run recorded"
    )
    return ResumedInAnotherSession(
        f"{what} ({', '.join(c for _, c in asked)}) have no approval request in session "
        f"{session_id}: resume it with {with_which}, and nothing was run (a state whose "
        "calls no session asked about, stale or edited, cannot be resumed: take the "
        "stopped run's own state)"
    )


def call_differences(shown: ShownCall, row: tuple[Any, ...]) -> list[str]:
    """How the journal's call (``row``: session, step, tool, arguments, the
    ``approval_call`` query) differs from ``shown``, in words (none: it is that call)."""
    session_id, step_index, tool_name, args = row
    differs = []
    if str(session_id) != str(shown.session_id):
        differs.append(f"its session is {session_id}, not {shown.session_id}")
    if tool_name != shown.tool_name:
        differs.append(f"its tool is {tool_name!r}, not {shown.tool_name!r}")
    if step_index != step_for(shown.call_key):
        differs.append(f"its step is {step_index}, not the step of call {shown.call_key!r}")
    if not same_json(args, shown.args):
        shown_text = _json_text(shown.args) or repr(shown.args)
        differs.append(f"its arguments are {_json_text(args)}, not the {shown_text} shown")
    return differs


def tool_differences(shown: ShownCall, row: tuple[Any, ...]) -> list[str] | None:
    """How ``shown``'s tool changed since its call was journaled, in words, when that
    alone tells the journal's call (``row``, as for ``call_differences``) from ``shown``:
    the same session, tool and step, every argument the call names (``shown.named``) the
    journal's (as the tool now reads it, or as the model sent it), and the tool not as it
    was: a parameter added with a default or without one, one removed (also one the call
    names), a default or a type changed (also one that journals what the call names in
    another form), another tier, or no journaled tool of that name at all. None
    otherwise: the call itself is not the journal's, or nothing differs, or ``shown`` has
    its arguments as the journal wrote them (``named`` None). A call is journaled and
    signed with its tool's defaults applied, and asked about because its tool is
    IRREVERSIBLE, so such a tool would make another call, or none (``tool_changed``)."""
    session_id, step_index, tool_name, journaled = row
    args, named = shown.args, shown.named
    if (
        named is None
        or str(session_id) != str(shown.session_id)
        or tool_name != shown.tool_name
        or step_index != step_for(shown.call_key)
        or not isinstance(args, Mapping)
        or not isinstance(journaled, Mapping)
        or any(
            # an argument the tool takes in its journal form, one it no longer takes as
            # sent; or one the model sent as the journal holds it, which the tool's type
            # now journals in another form (int to Decimal: 500 to "500")
            name not in journaled
            or not (
                same_json(args.get(name, named[name]), journaled[name])
                or same_json(named[name], journaled[name])
            )
            for name in named
        )
    ):
        return None
    differs = []
    if shown.tier is None:
        differs.append(
            f"the agent has no journaled {shown.tool_name} tool now (removed, made SAFE, or "
            "not an @undolog_tool), and the journaled call is IRREVERSIBLE"
        )
    elif shown.tier is not ToolTier.IRREVERSIBLE:
        differs.append(f"it is {shown.tier.name} now, and the journaled call is IRREVERSIBLE")
    added = [name for name in args if name not in journaled]
    removed = [name for name in journaled if name not in args and name not in shown.required]
    changed = [
        name
        for name in args
        if name in journaled and name not in named and not same_json(args[name], journaled[name])
    ]
    retyped = [
        name for name in named if name in args and not same_json(args[name], journaled[name])
    ]
    if added:
        differs.append(
            "it now takes "
            + ", ".join(f"{name} (default {_json_text(args[name])})" for name in added)
            + ", which the journaled call does not have"
        )
    if shown.required:
        differs.append(
            f"it now requires {', '.join(shown.required)}, with no default, which the call "
            "does not name"
        )
    if removed:
        differs.append(
            "it no longer takes "
            + ", ".join(f"{name} (journaled {_json_text(journaled[name])})" for name in removed)
        )
    if changed:
        differs.append(
            "its default "
            + ", ".join(
                f"{name} is {_json_text(args[name])}, the journaled call's "
                f"{_json_text(journaled[name])}"
                for name in changed
            )
        )
    if retyped:
        differs.append(
            "it now journals "
            + ", ".join(
                f"{name} as {_json_text(args[name])}, the journaled call's "
                f"{_json_text(journaled[name])}"
                for name in retyped
            )
            + " (a parameter's type changed)"
        )
    if not shown.fits and not shown.required and not removed:
        # nor a parameter it lacks, nor one it no longer takes (which a framework that
        # forbids unknown arguments refuses too) says why its parameters refuse the call
        differs.append(
            "its parameters no longer take the arguments the call names (a parameter's type "
            "changed)"
        )
    return differs or None


def tool_changed(shown: ShownCall, differs: Sequence[str], nothing: str) -> str:
    """The refusal's words for a call told from the journal's by its tool alone
    (``differs``: ``tool_differences``): what differs, why that is another call, and
    what to do. ``nothing`` says what was not done ("nothing was run")."""
    return (
        f"the {shown.tool_name} call {shown.call_key} names the arguments of the call UndoLog "
        f"asked about, but the {shown.tool_name} tool is not as it was when the call was "
        f"journaled: {'; '.join(differs)}. The tool changed since the run stopped (or the "
        "call lost an argument it named). A call is journaled, signed and approved as its "
        "tool made it (its tier, its parameters, their defaults applied), so this tool "
        "would make not the call asked about but another one (which the engine would ask "
        f"about anew at the same step), or none: {nothing}. Decide on it and resume with "
        "the tool as it was when the run stopped (change a tool's parameters or tier once "
        "the runs waiting on it have ended); or, to make the call with this tool, roll the "
        f"session back (`undolog sessions rollback {shown.session_id} --by WHO --reason "
        "TEXT`: what it did is undone) and run the agent again in a new session, where the "
        "call is asked about anew"
    )


def _recorded_by(
    approver: DecisionRecorder,
    approval_id: uuid.UUID,
    approved: bool,
    by: str,
    reason: str | None,
    args: Mapping[str, Any] | None,
) -> object:
    if args is None:
        return approver(approval_id, approved, by, reason)
    return cast(Callable[..., object], approver)(approval_id, approved, by, reason, args=args)


# --- the UndoLog session of a framework run ---------------------------------------------

# The decision that ended a session (a rejection, or an expiry, of a call whose tool
# follows the default rule) is the first (undolog.ending_decision): requests closed with it
# (asked at the same time) were decided a moment later.


# A session a run may go on in: active; waiting for a human (its committed calls replay,
# the waiting call asks again); completed (run again, every call replays; a new one is
# refused, UL010).
_RUNNABLE = frozenset({"active", "awaiting_approval", "completed"})


class _Suspended(AwaitingApprovalError):
    """Raised inside the session block when the framework stopped for a human, so that
    the session is left awaiting approval (no completion, no compensation)."""


def _ended(session_id: uuid.UUID, state: str, row: tuple[Any, ...] | None) -> UndoLogError:
    if row is not None:
        return ApprovalRejectedError(
            f"session {session_id} ended: approval {row[0]} was {row[1]}; "
            "what the run did before it has been undone",
            uuid.UUID(str(row[0])),
            None,
        )
    return SessionNotActive(f"session {session_id} is {state}: the run cannot go on")


@dataclasses.dataclass
class RunBox(Generic[T]):
    """What a framework run inside an UndoLog session answered: the block that runs it
    sets ``result`` (a streamed run sets it before it is consumed)."""

    result: T | None = None


def _shown(box: RunBox[T], stopped_for_human: Callable[[T], Sequence[str] | None]) -> Any:
    if box.result is None:
        raise UndoLogError("the framework run answered nothing: set the run's result")
    return stopped_for_human(box.result)
