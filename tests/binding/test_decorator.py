"""@undolog_tool and ul.session(), sync and async, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationDescriptor,
    NotInSession,
    PayloadTooLarge,
    ResultNotJSON,
    SessionNotActive,
    SignatureError,
    ToolTier,
    UndoLog,
    undolog_tool,
)
from undolog.decorator import tool_spec
from undolog.signature import MAX_NESTING_DEPTH

Conn = psycopg.Connection[Any]
DELETE_USER = CompensationDescriptor.new("delete_user", args={"soft": True})
calls: list[str] = []


@undolog_tool(tier=ToolTier.SAFE)
def search_web(query: str) -> str:
    """Look something up."""
    return f"results for {query}"


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=DELETE_USER)
def create_user(email: str, name: str, admin: bool = False) -> dict[str, Any]:
    """Create a user account."""
    calls.append(f"create_user {email}")
    return {"user_id": len(calls), "email": email, "admin": admin}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("retract"))
def send_email(to: str) -> dict[str, Any]:
    calls.append(f"send_email {to}")
    if to.endswith("@invalid"):
        raise ConnectionError("no such domain")
    return {"sent": to}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
def process_payout(user_id: int, cents: int) -> dict[str, Any]:
    calls.append(f"payout {user_id}")
    return {"paid": cents}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))
def returns_a_set() -> set[int]:
    return {1, 2}


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=DELETE_USER)
async def acreate_user(email: str, name: str) -> dict[str, Any]:
    calls.append(f"acreate_user {email}")
    await asyncio.sleep(0)
    return {"user_id": 7, "email": email}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def adelete_database(name: str) -> dict[str, Any]:
    calls.append(f"adelete_database {name}")
    return {"dropped": name}


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


def _effects(conn: Conn, session_id: uuid.UUID) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT step_index, tool_name, state, args, result_snapshot FROM "
        "undolog.undolog_effect_log WHERE session_id = %s ORDER BY step_index",
        (session_id,),
    ).fetchall()


def _session_state(conn: Conn, session_id: uuid.UUID) -> str:
    row = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_safe_tool_is_the_function_itself_and_needs_no_session() -> None:
    assert search_web("pg") == "results for pg"
    assert tool_spec(search_web) is None
    assert search_web.__doc__ == "Look something up."


def test_journaled_tool_keeps_its_signature_and_docstring() -> None:
    assert create_user.__doc__ == "Create a user account."
    assert list(inspect.signature(create_user).parameters) == ["email", "name", "admin"]
    spec = tool_spec(create_user)
    assert spec is not None and spec.tier is ToolTier.COMPENSABLE


def test_outside_a_session_a_journaled_tool_refuses() -> None:
    with pytest.raises(NotInSession):
        create_user("ada@example.com", "Ada")
    assert calls == []


def test_session_completes_and_a_restart_replays_from_cache(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    with ul.session(agent="test") as session:
        first = create_user("ada@example.com", name="Ada")
        sent = send_email("ada@example.com")
    assert _session_state(conn, session.session_id) == "completed"
    assert calls == ["create_user ada@example.com", "send_email ada@example.com"]
    rows = _effects(conn, session.session_id)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (0, "create_user", "committed"),
        (1, "send_email", "committed"),
    ]
    assert rows[0][3] == {"email": "ada@example.com", "name": "Ada", "admin": False}

    # the agent crashed and starts the same session again: nothing runs twice
    with ul.session(session.session_id):
        assert create_user("ada@example.com", name="Ada") == first
        assert send_email("ada@example.com") == sent
    assert calls == ["create_user ada@example.com", "send_email ada@example.com"]


def test_an_exception_fails_the_call_and_the_session(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    ul.compensation("delete_user")(lambda call: calls.append(f"undo {call.call_args['email']}"))
    with pytest.raises(ConnectionError), ul.session() as session:
        create_user("ada@example.com", "Ada")
        send_email("ada@invalid")
    rows = _effects(conn, session.session_id)
    # the failed send never took effect (pending, skipped); the user was undone
    assert [r[2] for r in rows] == ["compensated", "pending"]
    assert calls[-1] == "undo ada@example.com"
    assert _session_state(conn, session.session_id) == "compensated"


def test_irreversible_call_suspends_the_session(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    with pytest.raises(AwaitingApprovalError) as raised, ul.session() as session:
        create_user("ada@example.com", "Ada")
        process_payout(1, 5000)
    assert raised.value.approval_id is not None
    assert calls == ["create_user ada@example.com"]  # the payout body never ran
    assert _session_state(conn, session.session_id) == "awaiting_approval"
    assert [r[2] for r in _effects(conn, session.session_id)] == ["committed", "pending"]


def test_a_result_json_cannot_carry_is_a_clear_error(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn)
    ul.compensation("noop")(lambda call: calls.append(f"undo {call.tool_name} {call.result}"))
    with pytest.raises(ResultNotJSON), ul.session() as session:
        returns_a_set()
    # outcome unknown to the journal: left executing, so the walk compensated it anyway
    assert [r[2] for r in _effects(conn, session.session_id)] == ["compensated"]
    assert calls == ["undo returns_a_set None"]


def test_a_pool_works_and_keeps_its_connections_settings(dsn: str, conn: Conn) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        ul = UndoLog(pool=pool)
        with ul.session() as session:
            create_user("bob@example.com", "Bob")
        with pool.connection() as c:
            assert c.autocommit is False
    assert _session_state(conn, session.session_id) == "completed"


def test_heartbeat_keeps_the_lease_while_the_agent_works(dsn: str, conn: Conn) -> None:
    ul = UndoLog(dsn, lease=timedelta(seconds=1))
    with ul.session() as session:
        time.sleep(2.5)
        row = conn.execute(
            "SELECT lease_expires_at > now() FROM undolog.undolog_sessions WHERE session_id = %s",
            (session.session_id,),
        ).fetchone()
    assert row == (True,)


def test_async_session_executes_replays_and_waits_for_approval(dsn: str, conn: Conn) -> None:
    ul = AsyncUndoLog(dsn)

    async def agent(session_id: uuid.UUID | None) -> uuid.UUID:
        async with ul.session(session_id) as session:
            await acreate_user("ada@example.com", "Ada")
            await adelete_database("prod")
        return session.session_id

    with pytest.raises(AwaitingApprovalError):
        asyncio.run(agent(None))
    row = conn.execute("SELECT session_id FROM undolog.undolog_sessions").fetchone()
    assert row is not None
    sid = row[0]
    assert calls == ["acreate_user ada@example.com"]
    assert _session_state(conn, sid) == "awaiting_approval"
    with pytest.raises(AwaitingApprovalError):  # asked again: replay, then the same request
        asyncio.run(agent(sid))
    assert calls == ["acreate_user ada@example.com"]


def test_sync_tool_in_async_session_is_refused(dsn: str) -> None:
    ul = AsyncUndoLog(dsn)

    async def agent() -> None:
        async with ul.session():
            create_user("ada@example.com", "Ada")

    with pytest.raises(Exception, match="sync journaled tool inside an async session"):
        asyncio.run(agent())
    assert calls == []


def test_declaration_errors_are_caught_at_decoration() -> None:
    with pytest.raises(ValueError):
        undolog_tool(tier=ToolTier.COMPENSABLE)
    with pytest.raises(ValueError):
        undolog_tool(tier=ToolTier.IRREVERSIBLE, compensation=DELETE_USER)
    with pytest.raises(TypeError):
        undolog_tool(tier="compensable")  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        CompensationDescriptor.new("", args={})
    with pytest.raises(ValueError):
        CompensationDescriptor.new("x", args={"n": float("nan")})


def test_compensation_args_the_journal_cannot_store_are_refused_at_declaration() -> None:
    """U+0000 can be signed but jsonb cannot store it: refused when the tool is declared,
    not when its first call is journaled."""
    with pytest.raises(ValueError, match="compensation args cannot contain the character U"):
        CompensationDescriptor.new("x", args={"path": "/tmp/a\x00b"})
    with pytest.raises(ValueError, match="U\\+0000"):
        CompensationDescriptor.new("x", args={"a\x00b": 1})


def _nested(levels: int) -> dict[str, Any]:
    """``levels`` levels of objects."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


def _declared_and_called(dsn: str, name: str, comp: CompensationDescriptor) -> list[str]:
    """A COMPENSABLE tool ``name`` of ``comp``, called once: its registration holds it."""

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=comp, name=name)
    def act(x: int) -> int:
        return x

    ul = UndoLog(dsn)
    with ul.session(agent="t"):
        act(1)
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT state FROM undolog.undolog_effect_log WHERE tool_name = %s", (name,)
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_compensation_descriptors_the_engine_refuses_are_refused_at_declaration(
    dsn: str,
) -> None:
    """The engine checks the whole descriptor, {"name", "args"}, one level above its
    args: args of 64 levels are refused when the tool is declared (not at its first
    call, by register_tool), 63 are journaled; and so is a descriptor over the journal's
    1 MiB of JSON, measured as the engine measures it (one at the limit is journaled)."""
    with pytest.raises(SignatureError, match="limit of 63 levels"):
        CompensationDescriptor.new("undo", _nested(MAX_NESTING_DEPTH))
    assert _declared_and_called(dsn, "deep", CompensationDescriptor.new("undo", _nested(63))) == [
        "committed"
    ]
    shell = len('{"name": "big", "args": {"blob": ""}}')
    with pytest.raises(ValueError, match="over the journal's limit of 1048576 bytes"):
        CompensationDescriptor.new("big", {"blob": "x" * (1024 * 1024 - shell + 1)})
    at_limit = CompensationDescriptor.new("big", {"blob": "x" * (1024 * 1024 - shell)})
    assert _declared_and_called(dsn, "big", at_limit) == ["committed"]
    # the same measure as the engine's: one byte more, built past new(), it refuses
    over = CompensationDescriptor("big", {"blob": "x" * (1024 * 1024 - shell + 1)})
    with pytest.raises(PayloadTooLarge, match="compensation is 1048577 bytes"):
        _declared_and_called(dsn, "over", over)
    with pytest.raises(ValueError, match="name cannot contain the character U"):
        CompensationDescriptor.new("un\x00do")


@undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))
def label(cls: str, item: str) -> str:
    """A plain function whose first parameter is a class label, named ``cls``."""
    calls.append(f"label {item} {cls}")
    return f"{item} labelled {cls}"


class Labeller:
    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))
    def label(self, item: str) -> str:
        return item

    @classmethod
    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))
    def label_all(cls, item: str) -> str:
        return item


def _made(what: str) -> Any:
    """A method made by a factory, outside any class body."""

    def run(self: Any, item: str) -> str:
        calls.append(f"{what} {item}")
        return f"{what} {item}"

    return run


def _relabel(self: Any, item: str) -> str:
    return f"relabelled {item}"


def _tag(cls: str, item: str) -> str:
    return f"{item} tagged {cls}"


class Assembled:
    """Methods not defined in the class body, but declared there (inferred), or said."""

    go = undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))(
        _made("go")
    )
    relabel = undolog_tool(_relabel, tier=ToolTier.IRREVERSIBLE)
    tag = staticmethod(undolog_tool(_tag, tier=ToolTier.IRREVERSIBLE, method=False))


Assembled.later = undolog_tool(  # type: ignore[attr-defined]
    tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"), method=True
)(_made("later"))
_unsaid = undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))(
    _made("unsaid")
)


def test_a_method_declared_in_a_class_body_or_said_leaves_its_instance_out() -> None:
    """A function made elsewhere (a factory's, a module's) and declared in a class body
    is a method; one made a method after the class, method=True; a staticmethod whose
    first parameter is named cls, method=False."""
    for fn, args, want in [
        (Assembled.go, (Assembled(), "x"), {"item": "x"}),
        (Assembled.relabel, (Assembled(), "x"), {"item": "x"}),
        (Assembled.later, (Assembled(), "x"), {"item": "x"}),  # type: ignore[attr-defined]
        (Assembled.tag, ("cat", "x"), {"cls": "cat", "item": "x"}),
        (_unsaid, ("me", "x"), {"self": "me", "item": "x"}),
    ]:
        spec = tool_spec(fn)
        assert spec is not None
        assert spec.bind(args, {}) == want, fn
    with pytest.raises(ValueError, match="no first positional parameter"):
        undolog_tool(tier=ToolTier.IRREVERSIBLE, method=True)(lambda: None)
    with pytest.raises(TypeError, match="method must be"):
        undolog_tool(tier=ToolTier.IRREVERSIBLE, method="yes")  # type: ignore[call-overload]


def test_methods_not_defined_in_the_class_body_run_journaled(dsn: str, conn: Conn) -> None:
    """Called on an instance, they are journaled without it; a method the inference
    cannot see, its instance unsignable, says to declare it with method=True."""
    ul = UndoLog(dsn)
    with ul.session(agent="test") as session:
        assert Assembled().go("a") == "go a"
        assert Assembled().later("b") == "later b"  # type: ignore[attr-defined]
        Assembled.unsaid = _unsaid  # type: ignore[attr-defined]
        with pytest.raises(SignatureError, match=r"method=True"):
            Assembled().unsaid("c")  # type: ignore[attr-defined]
    assert calls == ["go a", "later b"]
    assert [row[3] for row in _effects(conn, session.session_id)] == [
        {"item": "a"},
        {"item": "b"},
    ]


def test_a_plain_functions_first_parameter_named_self_or_cls_is_part_of_the_call() -> None:
    """Only a method's instance (or a classmethod's class) is left out of the journaled
    args; a plain function's first parameter is an argument, whatever its name."""

    @undolog_tool(tier=ToolTier.COMPENSABLE, compensation=CompensationDescriptor.new("noop"))
    def local(self: str, n: int) -> str:
        return self

    for fn, args, want in [
        (label, ("cat", "img1"), {"cls": "cat", "item": "img1"}),
        (local, ("me", 1), {"self": "me", "n": 1}),
        (Labeller.__dict__["label"], (Labeller(), "img1"), {"item": "img1"}),
        (Labeller.__dict__["label_all"].__func__, (Labeller, "img1"), {"item": "img1"}),
    ]:
        spec = tool_spec(fn)
        assert spec is not None
        assert spec.bind(args, {}) == want, fn


def test_calls_of_a_plain_function_that_differ_in_cls_are_different_calls(
    dsn: str, conn: Conn
) -> None:
    """Made again with the same label, the call replays; with another label at the same
    step it is not answered with the first label's result: it is a new call, which the
    completed session refuses. A method's instance and a classmethod's class are still
    left out of the journaled args."""
    ul = UndoLog(dsn)
    with ul.session(agent="test") as session:
        assert label("cat", "img1") == "img1 labelled cat"
        assert Labeller().label("a") == "a"
        assert Labeller.label_all("b") == "b"
    with ul.session(session.session_id):
        assert label("cat", "img1") == "img1 labelled cat"  # replayed
    with (
        pytest.raises(SessionNotActive, match="new calls are refused"),
        ul.session(session.session_id),
    ):
        label("dog", "img1")
    assert calls == ["label img1 cat"]
    assert [row[3] for row in _effects(conn, session.session_id)] == [
        {"cls": "cat", "item": "img1"},
        {"item": "a"},
        {"item": "b"},
    ]
