"""An upgrade keeps the data: a database on the last release's engine, with sessions in
every state, migrated to the current release, gives the same answers afterwards.

The old engine is driven with plain SQL of its own API (today's binding need not speak
to it), as its binding did: the call signatures are computed as that binding computed
them (BLAKE3 of the RFC 8785 JSON of [session, step, tool, args]), so a replay by
today's binding, which signs the call itself, proves that a call journaled before the
upgrade is still the same call. The tools are registered with the old engine's
register_tool and nothing re-registers them (unregistered_tools): a new call after the
upgrade runs on the old registration.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import psycopg
import pytest
import rfc8785
from psycopg.types.json import Jsonb

from undolog import approvals, chain, engine, walk
from undolog.errors import ApprovalAlreadyDecided
from undolog.migrations import available_migrations, migrate

Conn = psycopg.Connection[Any]

UNDO = {"name": "delete_user", "args": {"soft": True}}
DECIDER = "ada@example.com"

# What the last release's views answered, to be answered the same after the upgrade: the
# columns the old view had (a release may add columns, never change the old ones).
VIEWS = ["session_state_history", "effect_timeline", "decided_approvals", "pending_approvals"]
VIEWS_ORDER = {"session_state_history": "session_id, history_id"}
NOW_DEPENDENT = {"age"}  # pending_approvals: now() - requested_at

# History rows without their link: none, once the chains' migration has run.
UNLINKED = """
SELECT (SELECT count(*) FROM undolog.undolog_session_history WHERE chain_hash IS NULL)
     + (SELECT count(*) FROM undolog.undolog_effect_history WHERE chain_hash IS NULL)
     + (SELECT count(*) FROM undolog.undolog_undo_history WHERE chain_hash IS NULL)
     + (SELECT count(*) FROM undolog.undolog_approval_requests
        WHERE chain_hash IS NULL OR (state <> 'pending' AND decision_hash IS NULL))
"""


def old_signature(session_id: uuid.UUID, step: int, tool: str, args: dict[str, Any]) -> str:
    """The last release's binding's call signature (python/undolog/signature.py then)."""
    return blake3.blake3(rfc8785.dumps([str(session_id), step, tool, args])).hexdigest()


class OldEngine:
    """The last release's SQL API, called as its binding called it."""

    def __init__(self, c: Conn) -> None:
        self.c = c

    def one(self, query: str, *params: Any) -> Any:
        row = self.c.execute(query, params).fetchone()
        assert row is not None
        return row[0] if len(row) == 1 else row

    def begin(self) -> uuid.UUID:
        sid: uuid.UUID = self.one("SELECT undolog.begin_session(p_agent => 'old-release')")
        return sid

    def call(self, sid: uuid.UUID, step: int, tool: str, tier: str, args: dict[str, Any]) -> Any:
        """intercept: (effect_id, action, state, result_snapshot, approval_id)."""
        return self.one(
            "SELECT * FROM undolog.intercept(%s, %s, %s, %s, %s, %s, %s)",
            sid,
            step,
            tool,
            tier,
            Jsonb(args),
            old_signature(sid, step, tool, args),
            Jsonb(UNDO) if tier == "compensable" else None,
        )

    def committed_call(self, sid: uuid.UUID, step: int, args: dict[str, Any], result: Any) -> Any:
        effect_id, action, *_ = self.call(sid, step, "create_user", "compensable", args)
        assert action == "execute"
        assert self.one("SELECT undolog.commit(%s, %s)", effect_id, Jsonb(result)) == "committed"
        return effect_id

    def walk(self, sid: uuid.UUID) -> None:
        """The old worker's loop: claim, run (nothing here), report, until it is done."""
        while self.one("SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", sid) in (
            "failed",
            "compensating",
        ):
            claim = self.c.execute(
                "SELECT undo_id, attempt FROM undolog.claim_compensation(%s)", (sid,)
            ).fetchone()
            if claim is not None:
                self.c.execute("SELECT undolog.complete_compensation(%s, %s)", claim)


def old_journal(c: Conn) -> dict[str, Any]:
    """Sessions in every state, written by the last release's engine."""
    old = OldEngine(c)
    old.one("SELECT undolog.register_tool('create_user', 'compensable', %s)", Jsonb(UNDO))
    for tool in ("send_email", "drop_table"):
        old.one("SELECT undolog.register_tool(%s, 'irreversible')", tool)
    got: dict[str, Any] = {}

    got["active"] = old.begin()
    got["active_effect"] = old.committed_call(got["active"], 0, {"u": 1}, {"id": 1})

    got["completed"] = old.begin()
    got["completed_effect"] = old.committed_call(got["completed"], 0, {"u": 2}, {"id": 2})
    assert old.one("SELECT undolog.complete_session(%s)", got["completed"]) == "completed"

    got["failed"] = old.begin()
    old.committed_call(got["failed"], 0, {"u": 3}, {"id": 3})
    assert old.one("SELECT undolog.fail_session(%s, 'the agent crashed')", got["failed"]) == (
        "failed"
    )

    got["compensated"] = old.begin()
    old.committed_call(got["compensated"], 0, {"u": 4}, {"id": 4})
    old.one("SELECT undolog.fail_session(%s, 'the agent gave up')", got["compensated"])
    old.walk(got["compensated"])

    got["awaiting"] = old.begin()
    _, action, _, _, got["awaiting_approval"] = old.call(
        got["awaiting"], 0, "send_email", "irreversible", {"to": "ada"}
    )
    assert action == "await_approval"

    got["approved"] = old.begin()
    _, action, _, _, got["approved_approval"] = old.call(
        got["approved"], 0, "send_email", "irreversible", {"to": "bob"}
    )
    assert action == "await_approval"
    assert old.one("SELECT undolog.approve(%s, %s, 'ok')", got["approved_approval"], DECIDER) == (
        "approved"
    )

    got["rejected"] = old.begin()
    _, action, _, _, got["rejected_approval"] = old.call(
        got["rejected"], 0, "drop_table", "irreversible", {"t": "users"}
    )
    assert action == "await_approval"
    assert old.one("SELECT undolog.reject(%s, %s, 'no')", got["rejected_approval"], DECIDER) == (
        "rejected"
    )
    old.walk(got["rejected"])

    # calls still running when the upgrade comes: their ids carry no executed_at (0014)
    got["running"] = old.begin()
    for step in (0, 1):
        effect_id, action, *_ = old.call(
            got["running"], step, "create_user", "compensable", {"r": step}
        )
        assert action == "execute"
        got[f"running_{step}"] = effect_id
    return got


Answers = dict[str, tuple[list[str], list[tuple[Any, ...]]]]


def answers(c: Conn, columns: dict[str, list[str]] | None = None) -> Answers:
    """Each view's columns (all, or those named) and rows; and the sessions' states."""
    got: Answers = {}
    for view in VIEWS:
        names = "*" if columns is None else ", ".join(columns[view])
        order = VIEWS_ORDER.get(view, "1, 2")
        cur = c.execute(f"SELECT {names} FROM undolog.{view} ORDER BY {order}")
        assert cur.description is not None
        names_got = [d.name for d in cur.description]
        keep = [i for i, name in enumerate(names_got) if name not in NOW_DEPENDENT]
        rows = [tuple(row[i] for i in keep) for row in cur.fetchall()]
        got[view] = ([names_got[i] for i in keep], rows)
    cur = c.execute("SELECT session_id, state, error FROM undolog.undolog_sessions ORDER BY 1")
    got["sessions"] = (["session_id", "state", "error"], cur.fetchall())
    return got


def states(c: Conn, sid: uuid.UUID) -> list[tuple[str | None, str]]:
    rows = c.execute(
        "SELECT from_state, to_state FROM undolog.session_state_history WHERE session_id = %s"
        " ORDER BY history_id",
        (sid,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


@pytest.mark.unregistered_tools  # the old engine's registrations must serve on their own
def test_an_upgrade_keeps_sessions_in_every_state(
    fresh_db: Callable[..., str],
    engine_last_release: Path,
    migrate_as: Callable[..., list[str]],
) -> None:
    dsn = fresh_db("upgrade_with_data")
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate_as(c, engine_last_release)
        old = old_journal(c)
        before = answers(c)
        history_rows = c.execute("SELECT count(*) FROM undolog.undolog_session_history").fetchone()
        keys = c.execute(
            "SELECT session_id, call_signature, effect_id, executed_at"
            " FROM undolog.undolog_signature_registry ORDER BY 1, 2"
        ).fetchall()

        applied = migrate(c)
        current = [m.name for m in available_migrations()]
        last = [m.name for m in available_migrations(engine_last_release)]
        assert [name for name in applied if name in current] == current[len(last) :]

        # the same answers, straight after the upgrade
        assert answers(c, {view: names for view, (names, _) in before.items()}) == before
        assert {name: engine.session_state(c, old[name]) for name in STATES} == STATES

        # every call's exactly-once key moved into its undo entry (0014), the registry went
        assert (
            c.execute(
                "SELECT session_id, call_signature, effect_id, executed_at"
                " FROM undolog.undolog_undo_stack ORDER BY 1, 2"
            ).fetchall()
            == keys
        )
        assert c.execute("SELECT to_regclass('undolog.undolog_signature_registry')").fetchone() == (
            None,
        )
        # a call running across the upgrade is committed, or failed, by the hot path's
        # functions, although its id carries no executed_at; then it replays
        running = old["running"]
        committed = c.execute(
            "SELECT undolog.commit_effect(%s, %s, %s)", (running, old["running_0"], Jsonb({"r": 0}))
        ).fetchone()
        failed = c.execute(
            "SELECT undolog.fail_effect(%s, %s, 'boom')", (running, old["running_1"])
        ).fetchone()
        assert (committed, failed) == (("committed",), ("pending",))
        again = engine.intercept(c, running, 0, "create_user", "compensable", {"r": 0}, UNDO)
        assert (again.action, again.effect_id, again.result_snapshot) == (
            "replay",
            old["running_0"],
            {"r": 0},
        )

        # the history chains: the migration that added them linked the rows written
        # before it (0011_hash_chain), so verify finds nothing to report
        unlinked = c.execute(UNLINKED).fetchone()
        assert unlinked == (0,)
        linked = chain.verify(c)
        assert linked.ok, [f.describe() for f in linked.findings]
        assert history_rows is not None and linked.rows > history_rows[0]

        # a committed call made again replays its result, as today's binding signs it
        for name, args, result in (
            ("active", {"u": 1}, {"id": 1}),
            ("completed", {"u": 2}, {"id": 2}),
        ):
            again = engine.intercept(c, old[name], 0, "create_user", "compensable", args, UNDO)
            assert (again.action, again.effect_id, again.result_snapshot) == (
                "replay",
                old[f"{name}_effect"],
                result,
            )
        # and a new call of the active session runs on the old release's registration
        new = engine.intercept(c, old["active"], 1, "create_user", "compensable", {"u": 5}, UNDO)
        assert new.action == "execute" and new.effect_id is not None
        engine.commit(c, new.effect_id, {"id": 5})
        assert engine.complete_session(c, old["active"]) == "completed"

        # the failed session's walk, as the worker runs it: its compensation, with the
        # recorded call's args and result
        undone: list[walk.CompensationCall] = []
        assert walk.work(c, {"delete_user": undone.append}) == {old["failed"]: "compensated"}
        assert [(u.tool_name, u.args, u.call_args, u.result, u.attempt) for u in undone] == [
            ("create_user", {"soft": True}, {"u": 3}, {"id": 3}, 1)
        ]

        # the pending approval is approved now, and its call then runs once
        assert approvals.approve(c, old["awaiting_approval"], DECIDER, "fine") == "approved"
        for name, to in (("awaiting", {"to": "ada"}), ("approved", {"to": "bob"})):
            sid = old[name]
            assert engine.session_state(c, sid) == "active"
            run = engine.intercept(c, sid, 0, "send_email", "irreversible", to)
            assert run.action == "execute" and run.effect_id is not None
            engine.commit(c, run.effect_id, {"sent": name})
            again = engine.intercept(c, sid, 0, "send_email", "irreversible", to)
            assert (again.action, again.result_snapshot) == ("replay", {"sent": name})
            attempts = c.execute(
                "SELECT attempts, state FROM undolog.undolog_effect_log WHERE effect_id = %s",
                (run.effect_id,),
            ).fetchone()
            assert attempts == (1, "committed")

        # a call journaled before the upgrade keeps its creation as a history row; what it
        # did since is recorded as today's engine records it: its commit in its own row
        life = c.execute(
            "SELECT from_state, to_state, history_id IS NULL FROM undolog.effect_timeline"
            " WHERE session_id = %s AND event = 'transition' ORDER BY seq, at",
            (old["awaiting"],),
        ).fetchall()
        assert life == [
            (None, "pending", False),
            ("pending", "approved", False),
            ("approved", "executing", False),
            ("executing", "committed", True),
        ]
        # a call journaled after it: its creation and its commit, both in its own row, one
        # link (its commit's record is the whole call)
        assert c.execute(
            "SELECT chain_seq IS NULL, commit_seq IS NOT NULL, committed_by = session_user,"
            " (SELECT count(*) FROM undolog.undolog_effect_history AS h"
            "  WHERE h.effect_id = e.effect_id)"
            " FROM undolog.undolog_effect_log AS e WHERE e.effect_id = %s",
            (new.effect_id,),
        ).fetchone() == (True, True, True, 0)

        # the rejected call stays rejected
        assert approvals.approval_state(c, old["rejected_approval"]) == "rejected"
        refused = engine.intercept(
            c, old["rejected"], 0, "drop_table", "irreversible", {"t": "users"}
        )
        assert (refused.action, refused.approval_id) == ("rejected", old["rejected_approval"])
        with pytest.raises(ApprovalAlreadyDecided):
            approvals.approve(c, old["rejected_approval"], DECIDER)
        assert engine.session_state(c, old["rejected"]) == "compensated"

        # the history: what the old release recorded, then what happened since
        walked = [("failed", "compensating"), ("compensating", "compensated")]
        assert states(c, old["failed"]) == [(None, "active"), ("active", "failed"), *walked]
        assert states(c, old["compensated"]) == [(None, "active"), ("active", "failed"), *walked]
        asked = [(None, "active"), ("active", "awaiting_approval"), ("awaiting_approval", "active")]
        assert states(c, old["approved"]) == asked
        assert states(c, old["awaiting"]) == asked
        assert states(c, old["rejected"]) == [
            (None, "active"),
            ("active", "awaiting_approval"),
            ("awaiting_approval", "compensating"),
            ("compensating", "compensated"),
        ]
        assert states(c, old["active"]) == [(None, "active"), ("active", "completed")]

        # and the chains still hold, with the rows written since
        after = chain.verify(c)
        assert after.ok and after.rows > linked.rows, [f.describe() for f in after.findings]


# What each session is straight after the upgrade.
STATES = {
    "active": "active",
    "completed": "completed",
    "failed": "failed",
    "compensated": "compensated",
    "awaiting": "awaiting_approval",
    "approved": "active",
    "rejected": "compensated",
    "running": "active",
}
