"""The fault suite: randomized trials of real processes against a real
PostgreSQL, and the promises checked after each.

Each trial gets a database of its own, cloned from a template the engine is installed
in, and starts agent processes (`faults.py agent`) that journal COMPENSABLE calls through
`@undolog_tool`. Then one fault, chosen at random:

  agent_kill   agents SIGKILLed at random points of their journaled calls (some started
               again with the same session id: their committed steps must replay)
  walker_kill  walker processes (`faults.py walker`, `ul.work()` in a loop, two at once)
               SIGKILLed in the middle of undo walks
  pause        an agent SIGSTOPped for 2.5 leases while a walker recovers its session,
               then SIGCONTed
  crash        the server stopped with `pg_ctl stop -m immediate` while agents run, then
               restarted
  crash_walk   the same while walkers walk
  month        partition maintenance racing agents across a month boundary: the current
               month's partitions are dropped first (so agents' rows land in the DEFAULT
               partition, as after a missed month) and a month past retention is created;
               `maintain_partitions(3, 12)` then drains, drops and creates while agents
               run. No clock is moved: partitions are made and dropped around now.
  pause_body   (only with --late-acts) an agent paused inside a body that acts at its end:
               the body acts after recovery compensated its call

With --hostile every trial also runs a second agent login (`faults.py hostile`, holding
undolog_agent and undolog_approver) beside the victims (who run as another agent login),
trying what a hostile login would (docs/how-to/roles.md, the trust model): a call whose
compensation descriptor names a compensation its tool's registration does not
(`fault_payout`, which records a payout in the ledger), a tool of its own registered with
that compensation, commit() and fail() of a victim's executing call, a call journaled into
a victim's session, a victim's session lock taken (pg_advisory_lock on the keys pg_locks
shows, and on the key formula), and an intent followed by an asynchronous commit in one
transaction (synchronous_commit must stay on). And on the newer surfaces: commit_effect and
fail_effect of a victim's call (and a victim's effect named with its own session),
complete_session, fail_session and abandon_session of a victim's session, a tool
registered for the victims' login and their registration retired, intercept_tool naming
the victims' registration or into a victim's session, approve and approve_edited of a
request of its own session (self-approval), and the operator's worker functions
(claim/complete_compensation of a victim's, claim/finish_notification). Not probed, since
an approver may: rollback_to/rollback_last/rollback_session of a victim's session and
deciding another login's request. Walkers serve only the victims' login. The summary
counts each probe's attempts and refusals, by SQLSTATE against the documented one.

Then recovery (`undolog.recover()` and the walk, by the suite itself) until every
session has ended. Tool bodies and compensations append to a ledger outside the engine
(a JSON-lines file, O_APPEND and fsync per record); a compensation is idempotent on its
undo_id by reading the ledger first, under a lock (the contract's idempotency key: an
expired claim is handed out again, and its first holder may have been paused, not dead).
Each trial checks:

  1. no body ran twice for one call signature;
  2. no compensation acted twice for one undo_id;
  3. every session ends completed, compensated, or halted with a reason;
  4. every body that ran is in the journal;
  5. journal and ledger agree: a committed call of a completed session was not undone, a
     compensated call that acted was undone after it acted, a call the journal says never
     took effect (pending) did not act, and nothing was undone that the journal does not
     call compensated;
  6. (month trials) no agent call failed because of maintenance (deadlock, lock timeout);
  7. (--hostile) every hostile attempt was refused, and no payout was ever made.

Prints a table (trials, kills, restarts, violations) and exits 1 on any violation.

    .venv/bin/python bench/faults.py --trials 20     # the short run `make test` does
    .venv/bin/python bench/faults.py --trials 500    # the full run, by hand
    .venv/bin/python bench/faults.py --trials 500 --hostile   # with a hostile login
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from pgcluster import Cluster, crash_and_restart, throwaway_cluster
from undolog import (
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    UndoLog,
    UndoLogError,
    undolog_tool,
)
from undolog.migrations import migrate
from undolog.signature import call_signature

TOOL = "fault_write"
COMPENSATION = "fault_undo"
# A compensation the walkers' app offers that no victim's tool names: what a hostile login
# wants run. It records a payout in the ledger; any payout is a violation.
PAYOUT = "fault_payout"
# With --hostile: the victims' login, and a second agent login that is an approver too.
VICTIM_LOGIN = "faults_agent"
HOSTILE_LOGIN = "faults_hostile"
HOSTILE_TOOL = "hostile_note"
# An IRREVERSIBLE tool of its own: its call in a session of its own asks for approval, a
# request this login (an approver) must not approve, edited or not.
HOSTILE_WIRE = "hostile_wire"
# Descriptors the hostile login registers and sends: its note's own undo, and the payout.
OWN_UNDO = {"name": COMPENSATION, "args": {}}
PAYOUT_TO_MALLORY = {"name": PAYOUT, "args": {"to": "mallory"}}
LEASE = timedelta(seconds=1)
KINDS = ("agent_kill", "walker_kill", "pause", "crash", "crash_walk", "month")
TEMPLATE = "faults_template"
# Errors an agent must never see because maintenance ran beside it.
MAINTENANCE_SQLSTATES = {"40P01", "55P03", "57014", "40001", "23514"}
FINAL = ("completed", "compensated", "halted")
# Each hostile probe, by the name it is recorded under, and the SQLSTATE its refusal
# carries (docs/reference/errors.md). Only a success is a violation; a refusal with
# another code is shown per probe in the summary (e.g. UL002 for a victim's session not
# begun yet, or no code at all when a crash cut the connection).
PROBES: dict[str, str | None] = {
    "forged_descriptor": "UL018",  # a compensation its registration does not name
    "async_after_intent": None,  # refused: synchronous_commit stayed on
    "commit_victims_call": "42501",
    "fail_victims_call": "42501",
    "intercept_into_victim": "42501",
    "heartbeat_victim": "42501",
    "take_session_lock": "42501",  # EXECUTE revoked (0004_locks)
    "commit_effect_victims_call": "42501",
    "fail_effect_victims_call": "42501",
    "commit_effect_in_own_session": "UL003",  # a victim's effect named with its own session
    "complete_victim_session": "42501",
    "fail_victim_session": "42501",
    "abandon_victim_session": "42501",  # an operator's function: no EXECUTE
    "register_tool_for_victim": "42501",  # p_owner is an operator's
    "retire_victims_tool": "42501",  # an operator's function: no EXECUTE
    "intercept_victims_tool": "UL017",  # intercept_tool naming another login's tool_id
    "intercept_tool_into_victim": "42501",
    "approve_own_request": "42501",  # no login approves a call of its own session
    "approve_edited_own_request": "42501",
    "claim_victims_compensation": "42501",  # the walk is an operator's: no EXECUTE
    "complete_victims_compensation": "42501",
    "claim_notification": "42501",  # the delivery worker's (it hands out secrets)
    "finish_notification": "42501",
}


# --- the ledger: outside the engine -----------------------------------------------------


class Ledger:
    """Append-only JSON lines; each record is one write(2) on an O_APPEND descriptor,
    fsynced before the caller goes on, so the file's order is the order things acted."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps({**record, "pid": os.getpid()}) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """An exclusive lock beside the ledger (flock: released by the kernel when its
        holder dies), for a look-then-act that must be atomic."""
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            # A process killed mid-write can leave a torn last line: it never acted.
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out


def signature_of(session: str, step: int, work_ms: int, act_late: bool) -> str:
    args = {"session": session, "step": step, "work_ms": work_ms, "act_late": act_late}
    return call_signature(session, step, TOOL, args)


def build_undolog(dsn: str, ledger: Ledger) -> tuple[UndoLog, Any]:
    """The client every process uses: its tool's body and its compensation write to the
    ledger (the outside world the journal must agree with)."""
    # A crashed step's replay asks only briefly before CallInProgress.
    ul = UndoLog(dsn, lease=LEASE, walk_wait=2.0, in_progress_wait=1.0)

    @ul.compensation(COMPENSATION)
    def fault_undo(call: CompensationCall) -> None:
        undo = str(call.undo_id)
        # Idempotent on undo_id as the contract asks of a compensation, and atomically so,
        # as a real system's idempotency key is: the walk hands an entry out again when
        # its claim expires, and the walker that held it may only have been paused (an
        # agent SIGSTOPped in its own walk, between look and act), so two runs of one
        # compensation can overlap. Without the lock both would look, find nothing and
        # act; the engine cannot fence an executor that acts after its claim lapsed.
        with ledger.exclusive():
            if any(r["kind"] == "comp" and r["undo_id"] == undo for r in ledger.read()):
                return  # a retried compensation acts once
            time.sleep(random.uniform(0, 0.03))  # room for a kill between look and act
            ledger.append(
                {
                    "kind": "comp",
                    "undo_id": undo,
                    "session": call.call_args["session"],
                    "step": call.call_args["step"],
                }
            )

    @ul.compensation(PAYOUT)
    def fault_payout(call: CompensationCall) -> None:
        ledger.append({"kind": "payout", "undo_id": str(call.undo_id), "args": call.args})

    @undolog_tool(
        tier=ToolTier.COMPENSABLE,
        compensation=CompensationDescriptor.new(COMPENSATION),
        name=TOOL,
    )
    def fault_write(session: str, step: int, work_ms: int, act_late: bool) -> dict[str, int]:
        if act_late:
            time.sleep(work_ms / 1000)
        ledger.append(
            {
                "kind": "body",
                "session": session,
                "step": step,
                "sig": signature_of(session, step, work_ms, act_late),
            }
        )
        if not act_late:
            time.sleep(work_ms / 1000)
        return {"step": step}

    return ul, fault_write


# --- the processes ----------------------------------------------------------------------


def run_agent(args: argparse.Namespace) -> int:
    """One agent session: `steps` journaled calls, then complete or give up (fail, and
    walk its own undo stack). Errors are recorded in the ledger with their SQLSTATE."""
    ledger = Ledger(Path(args.ledger))
    ul, fault_write = build_undolog(args.dsn, ledger)
    sid = uuid.UUID(args.session)
    try:
        with ul.session(sid, agent="faults"):
            for step in range(args.steps):
                work_ms = (step * 7 + args.work_ms) % 41
                fault_write(str(sid), step, work_ms, args.act_late)
            if args.outcome == "raise":
                raise RuntimeError("the agent gives up")
    except RuntimeError as exc:
        if str(exc) == "the agent gives up":
            return 0
        raise
    except (UndoLogError, psycopg.Error) as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc
        sqlstate = getattr(cause, "sqlstate", None)
        ledger.append(
            {
                "kind": "agent_error",
                "session": str(sid),
                "error": f"{type(exc).__name__}: {exc}"[:300],
                "sqlstate": sqlstate,
            }
        )
        return 3
    return 0


def work(ul: UndoLog, owners: list[str] | None) -> None:
    """One pass of `undolog worker` (with --owner for each of ``owners``)."""
    ul.work(owners=owners)


def run_walker(args: argparse.Namespace) -> int:
    """`ul.work()` in a loop, as `undolog worker` does, riding out a server restart."""
    ul, _ = build_undolog(args.dsn, Ledger(Path(args.ledger)))
    owners = args.owner or None
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.Error, UndoLogError):
            work(ul, owners)
        time.sleep(0.05)
    return 0


class Hostile:
    """A second agent login (an approver too) that tries to make the safety net act for it
    against the victims' sessions. Each attempt is recorded in the ledger as refused (with
    its SQLSTATE) or succeeded; a success is a violation."""

    def __init__(self, conn: psycopg.Connection[Any], ledger: Ledger) -> None:
        self.conn = conn
        self.ledger = ledger
        self.step = 0

    def attempt(self, probe: str, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            with self.conn.transaction():
                rows = self.conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            self.ledger.append(
                {"kind": "hostile", "probe": probe, "outcome": "refused", "sqlstate": exc.sqlstate}
            )
            return []
        self.ledger.append({"kind": "hostile", "probe": probe, "outcome": "succeeded"})
        return rows

    def intercept_sql(
        self,
        session: uuid.UUID,
        tool: str,
        descriptor: dict[str, Any] | None,
        tier: str = "compensable",
    ) -> tuple[str, tuple[Any, ...]]:
        self.step += 1
        args = {"session": str(session), "step": self.step, "to": "mallory"}
        return (
            "SELECT effect_id, action, approval_id FROM undolog.intercept(%s, %s, %s, %s,"
            " %s::jsonb, %s, %s::jsonb)",
            (session, self.step, tool, tier, json.dumps(args),
             call_signature(str(session), self.step, tool, args),
             None if descriptor is None else json.dumps(descriptor)),
        )  # fmt: skip

    def intercept_tool_sql(
        self, session: uuid.UUID, tool_id: uuid.UUID, tool: str
    ) -> tuple[str, tuple[Any, ...]]:
        """The same call by a registration's id (intercept_tool, the binding's path)."""
        self.step += 1
        args = {"session": str(session), "step": self.step, "to": "mallory"}
        return (
            "SELECT effect_id, action FROM undolog.intercept_tool(%s, %s, %s, %s::jsonb, %s)",
            (session, tool_id, self.step, json.dumps(args),
             call_signature(str(session), self.step, tool, args)),
        )  # fmt: skip

    def register(
        self, tool: str, descriptor: dict[str, Any] | None, tier: str = "compensable"
    ) -> uuid.UUID | None:
        """Its own tool, registered as any agent's is (before the registry: nothing)."""
        with contextlib.suppress(psycopg.errors.UndefinedFunction), self.conn.transaction():
            row = self.conn.execute(
                "SELECT undolog.register_tool(%s, %s, %s::jsonb)",
                (tool, tier, None if descriptor is None else json.dumps(descriptor)),
            ).fetchone()
            return None if row is None else uuid.UUID(str(row[0]))
        return None

    def victims_tool(self) -> uuid.UUID | None:
        """A live registration of the victims' login: an approver reads the registry."""
        row = self.conn.execute(
            "SELECT tool_id FROM undolog.undolog_tools"
            " WHERE owner_role = %s AND retired_at IS NULL LIMIT 1",
            (VICTIM_LOGIN,),
        ).fetchone()
        return None if row is None else uuid.UUID(str(row[0]))

    def victims_effects(self, victims: list[uuid.UUID]) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """(session, effect) of two victims' calls, executing ones first: an approver reads
        every session's calls."""
        return [
            (uuid.UUID(str(sid)), uuid.UUID(str(eid)))
            for sid, eid in self.conn.execute(
                "SELECT session_id, effect_id FROM undolog.undolog_effect_log"
                " WHERE session_id = ANY(%s) ORDER BY state = 'executing' DESC, random()"
                " LIMIT 2",
                (victims,),
            ).fetchall()
        ]

    def forged_descriptor(self, own: uuid.UUID) -> None:
        """A call of its registered tool naming a compensation the registration does not."""
        self.attempt("forged_descriptor", *self.intercept_sql(own, HOSTILE_TOOL, PAYOUT_TO_MALLORY))

    def async_after_intent(self, own: uuid.UUID) -> None:
        """An intent, then an asynchronous commit, in one transaction: it must commit
        durably (synchronous_commit stays on)."""
        query, params = self.intercept_sql(own, HOSTILE_TOOL, OWN_UNDO)
        with self.conn.transaction():
            rows = self.conn.execute(query, params).fetchall()
            if not rows or rows[0][1] != "execute":
                return
            self.conn.execute(
                "SELECT undolog.commit(%s, '{}'::jsonb, p_async => true)", (rows[0][0],)
            )
            row = self.conn.execute("SHOW synchronous_commit").fetchone()
        outcome = "succeeded" if row is not None and row[0] == "off" else "refused"
        self.ledger.append({"kind": "hostile", "probe": "async_after_intent", "outcome": outcome})

    def victims_calls(self, victims: list[uuid.UUID]) -> None:
        """commit() and fail() of a victim's executing call, a call journaled into a
        victim's session, and a heartbeat that would keep a dead victim alive."""
        executing = self.conn.execute(
            "SELECT effect_id FROM undolog.undolog_effect_log"
            " WHERE session_id = ANY(%s) AND state = 'executing'",
            (victims,),
        ).fetchall()
        for (effect_id,) in executing[:2]:
            self.attempt(
                "commit_victims_call",
                "SELECT undolog.commit(%s, '{\"forged\": true}'::jsonb)",
                (effect_id,),
            )
            self.attempt("fail_victims_call", "SELECT undolog.fail(%s, 'forged')", (effect_id,))
        victim = random.choice(victims)
        self.attempt("intercept_into_victim", *self.intercept_sql(victim, TOOL, OWN_UNDO))
        self.attempt("heartbeat_victim", "SELECT undolog.heartbeat(%s)", (victim,))

    def session_locks(self, victims: list[uuid.UUID]) -> None:
        """Every advisory lock pg_locks shows, and the keys a session id suggests."""
        keys = {
            (int(hi) << 32) | int(lo)
            for hi, lo in self.conn.execute(
                "SELECT classid::bigint, objid::bigint FROM pg_catalog.pg_locks"
                " WHERE locktype = 'advisory' AND objsubid = 1"
            ).fetchall()
        }
        for victim in victims:
            keys.add(int(victim.hex[-16:], 16))  # the last 64 bits, as keys once were
        for key in list(keys)[:8]:
            signed = key - (1 << 64) if key >= 1 << 63 else key
            rows = self.attempt("take_session_lock", "SELECT pg_try_advisory_lock(%s)", (signed,))
            if rows and rows[0][0]:
                time.sleep(0.2)  # long enough to stall a victim
                with contextlib.suppress(psycopg.Error):
                    self.conn.execute("SELECT pg_advisory_unlock(%s)", (signed,))

    # --- the engine's newer surfaces, one method per probe ------------------------------
    # Not probed, since the trust model lets an approver do them (docs/design/roles.md):
    # rollback_to, rollback_last, rollback_to_plan and rollback_session of a victim's
    # session, and approve/reject of a victim's request (the victims make none); nor
    # reject of its own request (refusing runs nothing).

    def commit_effect_victims_call(self, victims: list[uuid.UUID]) -> None:
        """commit_effect (the binding's session-first commit) of a victim's call."""
        for session, effect in self.victims_effects(victims):
            self.attempt(
                "commit_effect_victims_call",
                "SELECT undolog.commit_effect(%s, %s, '{\"forged\": true}'::jsonb)",
                (session, effect),
            )

    def fail_effect_victims_call(self, victims: list[uuid.UUID]) -> None:
        """fail_effect of a victim's call: its compensation would be skipped."""
        for session, effect in self.victims_effects(victims):
            self.attempt(
                "fail_effect_victims_call",
                "SELECT undolog.fail_effect(%s, %s, 'forged')",
                (session, effect),
            )

    def commit_effect_in_own_session(self, victims: list[uuid.UUID], own: uuid.UUID) -> None:
        """A victim's effect named with its own session: the session it owns must not
        carry another's effect through."""
        for _, effect in self.victims_effects(victims)[:1]:
            self.attempt(
                "commit_effect_in_own_session",
                "SELECT undolog.commit_effect(%s, %s, '{\"forged\": true}'::jsonb)",
                (own, effect),
            )

    def complete_victim_session(self, victims: list[uuid.UUID]) -> None:
        """complete_session of a victim's live session: its calls would stand unreviewed."""
        victim = random.choice(victims)
        self.attempt("complete_victim_session", "SELECT undolog.complete_session(%s)", (victim,))

    def fail_victim_session(self, victims: list[uuid.UUID]) -> None:
        """fail_session of a victim's live session: a person stops one with rollback_session
        (recorded), never through the agent's own call."""
        victim = random.choice(victims)
        self.attempt("fail_victim_session", "SELECT undolog.fail_session(%s, 'forged')", (victim,))

    def abandon_victim_session(self, victims: list[uuid.UUID]) -> None:
        """abandon_session (an operator's): its work would be left without its undo."""
        victim = random.choice(victims)
        self.attempt(
            "abandon_victim_session",
            "SELECT undolog.abandon_session(%s, 'mallory', 'hostile')",
            (victim,),
        )

    def register_tool_for_victim(self) -> None:
        """A tool registered for the victims' login (p_owner, an operator's), naming the
        payout: an agent registers only its own tools."""
        self.attempt(
            "register_tool_for_victim",
            "SELECT undolog.register_tool('planted_tool', 'compensable', %s::jsonb, %s)",
            (json.dumps(PAYOUT_TO_MALLORY), VICTIM_LOGIN),
        )

    def retire_victims_tool(self) -> None:
        """retire_tool (an operator's) of the victims' registration: their calls would be
        refused (UL017) until registered again, perhaps differently."""
        tool_id = self.victims_tool()
        if tool_id is not None:
            self.attempt(
                "retire_victims_tool",
                "SELECT undolog.retire_tool(%s, 'mallory', 'hostile')",
                (tool_id,),
            )

    def intercept_victims_tool(self, own: uuid.UUID) -> None:
        """intercept_tool naming the victims' registration, in its own session."""
        tool_id = self.victims_tool()
        if tool_id is not None:
            self.attempt("intercept_victims_tool", *self.intercept_tool_sql(own, tool_id, TOOL))

    def intercept_tool_into_victim(self, victims: list[uuid.UUID], tool_id: uuid.UUID) -> None:
        """intercept_tool of its own registration into a victim's session."""
        self.attempt(
            "intercept_tool_into_victim",
            *self.intercept_tool_sql(random.choice(victims), tool_id, HOSTILE_TOOL),
        )

    def approve_own_request(self, approval_id: uuid.UUID) -> None:
        """approve of a request of its own session (its own call): self-approval."""
        self.attempt(
            "approve_own_request",
            "SELECT undolog.approve(%s, 'mallory', 'hostile')",
            (approval_id,),
        )

    def approve_edited_own_request(self, approval_id: uuid.UUID, asking: uuid.UUID) -> None:
        """approve_edited of a request of its own session: an edit is an approval too."""
        edited = {"session": str(asking), "step": 0, "to": "mallory's other account"}
        self.attempt(
            "approve_edited_own_request",
            "SELECT undolog.approve_edited(%s, 'mallory', %s::jsonb, 'hostile')",
            (approval_id, json.dumps(edited)),
        )

    def claim_victims_compensation(self, victims: list[uuid.UUID]) -> None:
        """claim_compensation (the walk's, an operator's) of a victim's session."""
        victim = random.choice(victims)
        self.attempt(
            "claim_victims_compensation",
            "SELECT * FROM undolog.claim_compensation(%s, interval '1 minute')",
            (victim,),
        )

    def complete_victims_compensation(self, victims: list[uuid.UUID]) -> None:
        """complete_compensation of a victim's undo entry (read from the undo stack, as an
        approver may): the call would count as undone, and nothing undid it."""
        row = self.conn.execute(
            "SELECT undo_id FROM undolog.undolog_undo_stack WHERE session_id = ANY(%s)"
            " ORDER BY state = 'compensating' DESC, random() LIMIT 1",
            (victims,),
        ).fetchone()
        if row is not None:
            self.attempt(
                "complete_victims_compensation",
                "SELECT undolog.complete_compensation(%s)",
                (row[0],),
            )

    def claim_notification(self) -> None:
        """claim_notification (the delivery worker's): it hands out the channel's secret."""
        self.attempt("claim_notification", "SELECT * FROM undolog.claim_notification()")

    def finish_notification(self) -> None:
        """finish_notification of a delivery. No delivery exists in a trial (no channel),
        so the id is made up: the refusal is the function's EXECUTE, before any lookup."""
        self.attempt(
            "finish_notification",
            "SELECT undolog.finish_notification(%s, 1, NULL)",
            (uuid.uuid4(),),
        )

    def newer_surfaces(
        self,
        victims: list[uuid.UUID],
        own: uuid.UUID,
        tool_id: uuid.UUID | None,
        asking: tuple[uuid.UUID, uuid.UUID] | None,
    ) -> None:
        """Every probe above, once each."""
        self.commit_effect_victims_call(victims)
        self.fail_effect_victims_call(victims)
        self.commit_effect_in_own_session(victims, own)
        self.complete_victim_session(victims)
        self.fail_victim_session(victims)
        self.abandon_victim_session(victims)
        self.register_tool_for_victim()
        self.retire_victims_tool()
        self.intercept_victims_tool(own)
        if tool_id is not None:
            self.intercept_tool_into_victim(victims, tool_id)
        if asking is not None:
            session, approval_id = asking
            self.approve_own_request(approval_id)
            self.approve_edited_own_request(approval_id, session)
        self.claim_victims_compensation(victims)
        self.complete_victims_compensation(victims)
        self.claim_notification()
        self.finish_notification()


def run_hostile(args: argparse.Namespace) -> int:
    ledger = Ledger(Path(args.ledger))
    victims = [uuid.UUID(v) for v in args.victims.split(",")]
    own, payout_session, asking_session = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    deadline = time.monotonic() + args.seconds
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        hostile = Hostile(conn, ledger)
        tool_id = hostile.register(HOSTILE_TOOL, OWN_UNDO)
        hostile.register("hostile_payout", PAYOUT_TO_MALLORY)
        hostile.register(HOSTILE_WIRE, None, tier="irreversible")
        for session in (own, payout_session, asking_session):
            conn.execute("SELECT undolog.begin_session(%s, 'hostile')", (session,))
        # A request of its own session's call, which it must not approve (a session of
        # its own, apart: one awaiting approval takes no compensable call).
        asking = None
        with contextlib.suppress(psycopg.Error):
            row = conn.execute(
                *hostile.intercept_sql(asking_session, HOSTILE_WIRE, None, tier="irreversible")
            ).fetchone()
            if row is not None and row[2] is not None:
                asking = (asking_session, uuid.UUID(str(row[2])))
        # A tool of its own whose registration names the payout: the engine journals it
        # (its author may), but no worker that serves only the victims walks its session.
        with contextlib.suppress(psycopg.Error):
            conn.execute(
                *hostile.intercept_sql(payout_session, "hostile_payout", PAYOUT_TO_MALLORY)
            )
        conn.execute("SELECT undolog.fail_session(%s, 'hostile')", (payout_session,))
        probes = [hostile.forged_descriptor, hostile.async_after_intent]
        while time.monotonic() < deadline:
            try:
                random.choice(probes)(own)
                hostile.victims_calls(victims)
                hostile.session_locks(victims)
                hostile.newer_surfaces(victims, own, tool_id, asking)
            except psycopg.OperationalError:  # the server restarted under it: log in again
                time.sleep(0.2)
                with contextlib.suppress(psycopg.OperationalError):
                    hostile.conn = conn = psycopg.connect(args.dsn, autocommit=True)
            time.sleep(random.uniform(0, 0.02))
        # Its own session ends cleanly: its calls committed (nothing acted), then done.
        for (effect_id,) in conn.execute(
            "SELECT effect_id FROM undolog.undolog_effect_log"
            " WHERE session_id = %s AND state = 'executing'",
            (own,),
        ).fetchall():
            conn.execute("SELECT undolog.commit(%s, '{}'::jsonb)", (effect_id,))
        conn.execute("SELECT undolog.complete_session(%s)", (own,))
    return 0


# --- the orchestrator -------------------------------------------------------------------


@dataclass
class Server:
    cluster: Cluster
    options: str
    restarts: int = 0

    def dsn(self, db: str, user: str | None = None) -> str:
        c = self.cluster
        return f"host={c.host} port={c.port} user={user or c.user} dbname={db}"

    def crash_and_restart(self) -> None:
        crash_and_restart(self.cluster, self.options)
        self.restarts += 1


@dataclass
class Trial:
    number: int
    kind: str
    kills: int = 0
    pauses: int = 0
    restarts: int = 0
    sessions: int = 0
    bodies: int = 0
    compensations: int = 0
    late_acts: int = 0  # bodies that acted after their compensation, recorded as such
    hostile_attempts: int = 0  # with --hostile: what the hostile login tried ...
    hostile_refused: int = 0  # ... and what the engine refused
    # (probe, its SQLSTATE, "succeeded", or "none": refused without one) -> attempts
    probes: Counter[tuple[str, str]] = field(default_factory=Counter)
    # ... and not recorded: the journal says "compensated" of an effect that stands.
    unrecorded_late: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def _spawn(role: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, role, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill(proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            _kill(proc)


def wait_for_bodies(ledger: Ledger, session: str | None, count: int, timeout: float = 10) -> None:
    """Until ``count`` bodies of ``session`` (of any session if None) have acted: so that
    a fault lands at a random point of the journaled calls, not before the first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        acted = [
            r for r in ledger.read()
            if r["kind"] == "body" and session in (None, r["session"])
        ]  # fmt: skip
        if len(acted) >= count:
            return
        time.sleep(0.005)


def wait_for_comps(ledger: Ledger, count: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(r["kind"] == "comp" for r in ledger.read()) >= count:
            return
        time.sleep(0.005)


def prepare_month_boundary(dsn: str) -> None:
    """As after a missed month: no partition for the current month (new rows go to the
    DEFAULT partitions) and one month past retention (14 months ago) still present."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_inherits AS i"
            " JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid"
            " JOIN pg_catalog.pg_class AS p ON p.oid = i.inhparent"
            " WHERE p.relname IN ('undolog_effect_log', 'undolog_effect_history')"
            " AND c.relname LIKE '%%' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')"
        ).fetchall()
        for (name,) in rows:
            conn.execute(f'DROP TABLE undolog."{name}"')
        conn.execute(
            "SELECT undolog.create_month_partitions("
            "((now() AT TIME ZONE 'UTC') - interval '14 months')::date)"
        )


def maintenance_loop(dsn: str, stop: threading.Event, errors: list[str]) -> None:
    """maintain_partitions(3, 12) over and over while the agents run; its own errors are
    recorded too (it must not deadlock either)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            try:
                conn.execute("SELECT * FROM undolog.maintain_partitions(3, 12)").fetchall()
            except psycopg.Error as exc:
                errors.append(f"maintain_partitions: {exc.sqlstate} {exc}")
            time.sleep(0.02)


def recover_all(dsn: str, ledger: Ledger, owners: list[str] | None, timeout: float = 40.0) -> None:
    """Recovery: recover() and the walks, until every session of ``owners`` (every
    session when None) has ended (or timeout)."""
    ul, _ = build_undolog(dsn, ledger)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.Error, UndoLogError):
            work(ul, owners)
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM undolog.undolog_sessions"
                    " WHERE state <> ALL(%s) AND owner_role <> %s",
                    (list(FINAL), HOSTILE_LOGIN),
                ).fetchone()
                if row is not None and row[0] == 0:
                    return
        time.sleep(0.2)


def check(dsn: str, records: list[dict[str, Any]], trial: Trial) -> None:
    v = trial.violations
    bodies = [(i, r) for i, r in enumerate(records) if r["kind"] == "body"]
    comps = [(i, r) for i, r in enumerate(records) if r["kind"] == "comp"]
    trial.bodies, trial.compensations = len(bodies), len(comps)
    for sig, n in Counter(r["sig"] for _, r in bodies).items():
        if n > 1:
            v.append(f"body ran {n} times for signature {sig[:12]}")
    for undo, n in Counter(r["undo_id"] for _, r in comps).items():
        if n > 1:
            pids = [r.get("pid") for _, r in comps if r["undo_id"] == undo]
            v.append(f"compensation acted {n} times for undo_id {undo} (by pids {pids})")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The hostile login's own sessions are nobody's to walk here (no worker serves
        # its login): only the victims' sessions must end.
        sessions = {
            str(sid): (state, error, halt)
            for sid, state, error, halt in conn.execute(
                "SELECT session_id, state, error, halt_undo_id FROM undolog.undolog_sessions"
                " WHERE owner_role <> %s",
                (HOSTILE_LOGIN,),
            ).fetchall()
        }
        trial.sessions = len(sessions)
        for sid, (state, error, halt) in sessions.items():
            if state not in FINAL:
                v.append(f"session {sid} ended {state}")
            elif state == "halted" and error is None and halt is None:
                v.append(f"session {sid} halted without a reason")
        # A late report recorded after the compensation (the journal must say so, and a
        # person learn of it): any history row of the effect after
        # the one that made it compensated.
        recorded_late = {
            sig
            for (sig,) in conn.execute(
                "SELECT e.call_signature FROM undolog.undolog_effect_log AS e"
                " JOIN undolog.undolog_effect_history AS c ON c.effect_id = e.effect_id"
                "  AND c.session_id = e.session_id AND c.to_state = 'compensated'"
                " WHERE EXISTS (SELECT FROM undolog.undolog_effect_history AS h"
                "  WHERE h.effect_id = e.effect_id AND h.session_id = e.session_id"
                "  AND h.history_id > c.history_id)"
            ).fetchall()
        }
        effects = {
            sig: (str(sid), step, state, str(undo) if undo else None)
            for sig, sid, step, state, undo in conn.execute(
                "SELECT e.call_signature, e.session_id, e.step_index, e.state, u.undo_id"
                " FROM undolog.undolog_effect_log AS e"
                " JOIN undolog.undolog_sessions AS s ON s.session_id = e.session_id"
                " LEFT JOIN undolog.undolog_undo_stack AS u"
                "   ON u.session_id = e.session_id AND u.effect_id = e.effect_id"
                " WHERE s.owner_role <> %s",
                (HOSTILE_LOGIN,),
            ).fetchall()
        }
    body_at = {r["sig"]: i for i, r in bodies}
    comp_at = {r["undo_id"]: i for i, r in comps}
    for sig in body_at:
        if sig not in effects:
            v.append(f"a body ran that the journal does not hold ({sig[:12]})")
    for sig, (sid, step, state, undo) in effects.items():
        acted, undone = sig in body_at, undo is not None and undo in comp_at
        where = f"session {sid} step {step} ({state})"
        if undone and state != "compensated":
            v.append(f"{where}: undone, but the journal says {state}")
        if state == "pending" and acted:
            v.append(f"{where}: acted, but the journal says it never took effect")
        if state == "committed" and sessions.get(sid, ("?",))[0] == "compensated":
            v.append(f"{where}: committed in a compensated session")
        if state == "compensated" and acted:
            if not undone:
                v.append(f"{where}: acted and the journal says compensated, but nothing undid it")
            elif comp_at[str(undo)] < body_at[sig]:
                if sig in recorded_late:
                    trial.late_acts += 1  # the journal says so: not a lie
                else:
                    trial.unrecorded_late.append(
                        f"{where}: the body acted after its compensation ran"
                    )
    hostile = [r for r in records if r["kind"] == "hostile"]
    trial.hostile_attempts = len(hostile)
    trial.hostile_refused = sum(r["outcome"] == "refused" for r in hostile)
    for r in hostile:
        code = "succeeded" if r["outcome"] != "refused" else r.get("sqlstate") or "none"
        trial.probes[(r["probe"], code)] += 1
    for probe, n in Counter(r["probe"] for r in hostile if r["outcome"] != "refused").items():
        v.append(f"a hostile login's {probe} was not refused ({n} times)")
    for r in records:
        if r["kind"] == "payout":
            v.append(f"a payout was made (undo_id {r['undo_id']}, args {r['args']})")
    if trial.kind == "month":
        for r in records:
            if r["kind"] == "agent_error" and r.get("sqlstate") in MAINTENANCE_SQLSTATES:
                v.append(f"agent call failed beside maintenance: {r['error'][:120]}")


def run_trial(
    server: Server, number: int, kind: str, rng: random.Random, workdir: Path, hostile: bool
) -> Trial:
    trial = Trial(number, kind)
    db = f"faults_{number}"
    admin = server.dsn("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}" TEMPLATE "{TEMPLATE}"')
        # Killed walkers' claims come back after a second, retries almost at once.
        conn.execute(f"ALTER DATABASE \"{db}\" SET undolog.claim_timeout = '1 second'")
        conn.execute(f"ALTER DATABASE \"{db}\" SET undolog.retry_base = '50 milliseconds'")
    dsn = server.dsn(db)
    # With a hostile login beside them, the victims run as an agent login of their own
    # (not the cluster's superuser, whom no rule binds) and the walkers serve only it.
    agent_dsn = server.dsn(db, VICTIM_LOGIN) if hostile else dsn
    owners = [VICTIM_LOGIN] if hostile else None
    ledger = Ledger(workdir / f"ledger_{number}.jsonl")
    if kind == "month":
        prepare_month_boundary(dsn)

    plans: dict[str, list[str]] = {}

    def agent(session: str, act_late: bool = False) -> subprocess.Popen[bytes]:
        # The same plan when a session is started again, so its calls replay.
        plan = plans.setdefault(session, [
            "--steps", str(rng.randint(2, 6)), "--work-ms", str(rng.randint(0, 40)),
            "--outcome", rng.choice(["complete", "complete", "raise"]),
            *(["--act-late"] if act_late else []),
        ])  # fmt: skip
        return _spawn(
            "agent", "--dsn", agent_dsn, "--ledger", str(ledger.path), "--session", session,
            *plan,
        )  # fmt: skip

    def walker(seconds: float) -> subprocess.Popen[bytes]:
        return _spawn(
            "walker", "--dsn", dsn, "--ledger", str(ledger.path), "--seconds", str(seconds),
            *(f"--owner={o}" for o in owners or ()),
        )  # fmt: skip

    agents = rng.randint(5, 7) if kind == "month" else rng.randint(2, 4)
    sessions = [str(uuid.uuid4()) for _ in range(agents)]
    procs = [agent(s, act_late=kind == "pause_body") for s in sessions]
    # Beside the victims, not one of them: the faults below pick among the victims.
    intruders = []
    if hostile:
        intruders.append(
            _spawn(
                "hostile", "--dsn", server.dsn(db, HOSTILE_LOGIN), "--ledger",
                str(ledger.path), "--victims", ",".join(sessions), "--seconds", "2",
            )
        )  # fmt: skip
    stop_maintenance = threading.Event()
    maintenance_errors: list[str] = []
    maintainer = None
    if kind == "month":
        wait_for_bodies(ledger, None, rng.randint(1, 4))  # agents are writing now
        maintainer = threading.Thread(
            target=maintenance_loop, args=(dsn, stop_maintenance, maintenance_errors)
        )
        maintainer.start()

    def steps_of(session: str) -> int:
        return int(plans[session][1])

    if kind == "agent_kill":
        for proc, session in zip(list(procs), sessions, strict=True):
            if rng.random() < 0.3:
                continue
            wait_for_bodies(ledger, session, rng.randint(0, steps_of(session)))
            time.sleep(rng.uniform(0, 0.04))  # inside a body, or between calls
            if _kill(proc):
                trial.kills += 1
                if rng.random() < 0.5:  # started again: committed steps must replay
                    procs.append(agent(session))
    elif kind in ("walker_kill", "crash_walk"):
        for proc, session in zip(list(procs), sessions, strict=True):
            wait_for_bodies(ledger, session, rng.randint(1, steps_of(session)))
            time.sleep(rng.uniform(0, 0.04))
            trial.kills += _kill(proc)  # its session is left to recovery
        time.sleep(LEASE.total_seconds())  # let the leases lapse
        walkers = [walker(6), walker(6)]
        wait_for_comps(ledger, rng.randint(0, 3))
        time.sleep(rng.uniform(0, 0.05))
        if kind == "crash_walk":
            server.crash_and_restart()
            trial.restarts += 1
        else:
            for w in walkers:
                if rng.random() < 0.8:
                    trial.kills += _kill(w)
        procs += walkers
    elif kind in ("pause", "pause_body"):
        index = rng.randrange(len(procs))
        victim, session = procs[index], sessions[index]
        wait_for_bodies(ledger, session, rng.randint(0 if kind == "pause" else 1, 2))
        time.sleep(rng.uniform(0, 0.03))
        if victim.poll() is None:
            victim.send_signal(signal.SIGSTOP)
            trial.pauses += 1
            w = walker(2.5)
            time.sleep(2.5 * LEASE.total_seconds())
            victim.send_signal(signal.SIGCONT)
            procs.append(w)
    elif kind == "crash":
        wait_for_bodies(ledger, None, rng.randint(1, 6))
        time.sleep(rng.uniform(0, 0.04))
        server.crash_and_restart()
        trial.restarts += 1

    _wait_all(procs + intruders, timeout=20)
    stop_maintenance.set()
    if maintainer is not None:
        maintainer.join()
        trial.violations += [e for e in maintenance_errors if "40P01" in e]
    recover_all(dsn, ledger, owners)
    check(dsn, ledger.read(), trial)
    trial.violations += trial.unrecorded_late
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return trial


@contextlib.contextmanager
def fault_server() -> Iterator[Server]:
    settings = ("fsync=on",)
    with throwaway_cluster(*settings) as cluster:
        options = " ".join(
            [
                f"-p {cluster.port}",
                f"-k {cluster.datadir}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=120",
                *(f"-c {s}" for s in settings),
            ]
        )
        server = Server(cluster, options)
        with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        with psycopg.connect(server.dsn(TEMPLATE), autocommit=True) as conn:
            migrate(conn)
            # Roles are the cluster's: made once, for --hostile trials.
            conn.execute(f"CREATE ROLE {VICTIM_LOGIN} LOGIN IN ROLE undolog_agent")
            conn.execute(
                f"CREATE ROLE {HOSTILE_LOGIN} LOGIN IN ROLE undolog_agent, undolog_approver"
            )
        yield server


def table(trials: list[Trial], elapsed: float) -> str:
    kinds = sorted({t.kind for t in trials})
    lines = [
        f"{'kind':<12} {'trials':>6} {'sessions':>8} {'bodies':>7} {'comps':>6} "
        f"{'kills':>6} {'pauses':>6} {'restarts':>8} {'late':>5} {'unrec':>5} "
        f"{'hostile':>7} {'refused':>7} {'violations':>10}"
    ]
    for kind in [*kinds, "total"]:
        ts = trials if kind == "total" else [t for t in trials if t.kind == kind]
        lines.append(
            f"{kind:<12} {len(ts):>6} {sum(t.sessions for t in ts):>8} "
            f"{sum(t.bodies for t in ts):>7} {sum(t.compensations for t in ts):>6} "
            f"{sum(t.kills for t in ts):>6} {sum(t.pauses for t in ts):>6} "
            f"{sum(t.restarts for t in ts):>8} "
            f"{sum(t.late_acts for t in ts):>5} {sum(len(t.unrecorded_late) for t in ts):>5} "
            f"{sum(t.hostile_attempts for t in ts):>7} {sum(t.hostile_refused for t in ts):>7} "
            f"{sum(len(t.violations) for t in ts):>10}"
        )
    lines.append(f"elapsed {elapsed:.1f} s")
    return "\n".join(lines)


def probe_table(trials: list[Trial]) -> str:
    """Per hostile probe: attempts, refusals, how many carried its documented SQLSTATE,
    and every other outcome by code (a success is a violation, reported already)."""
    seen: Counter[tuple[str, str]] = Counter()
    for t in trials:
        seen.update(t.probes)
    names = [*PROBES, *sorted({p for p, _ in seen} - set(PROBES))]
    lines = [
        f"{'hostile probe':<30} {'tried':>6} {'refused':>7} {'expected':>8} {'as such':>7}  other"
    ]
    for name in names:
        codes = {code: n for (p, code), n in seen.items() if p == name}
        expected = PROBES.get(name)
        tried = sum(codes.values())
        refused = tried - codes.get("succeeded", 0)
        as_such = codes.get(expected or "none", 0)
        other = ", ".join(
            f"{code} {n}" for code, n in sorted(codes.items()) if code != (expected or "none")
        )
        lines.append(
            f"{name:<30} {tried:>6} {refused:>7} {expected or '-':>8} {as_such:>7}  "
            f"{other or ('never tried' if not tried else '')}"
        )
    return "\n".join(lines)


def run_suite(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    kinds = [*KINDS, *(["pause_body"] if args.late_acts else [])]
    if args.kinds:
        kinds = args.kinds.split(",")
    started = time.monotonic()
    trials: list[Trial] = []
    with fault_server() as server, tempfile.TemporaryDirectory(prefix="undolog-faults-") as tmp:
        for number in range(args.trials):
            # Every kind once in each round, in random order; a round per len(kinds).
            kind = kinds[number % len(kinds)] if number < len(kinds) else rng.choice(kinds)
            trial = run_trial(server, number, kind, rng, Path(tmp), args.hostile)
            trials.append(trial)
            for violation in trial.violations:
                print(f"trial {number} ({kind}): VIOLATION {violation}", flush=True)
            if args.progress:
                print(f"trial {number} {kind}: {len(trial.violations)} violations", flush=True)
    if args.hostile:
        print(probe_table(trials), flush=True)
    print(table(trials, time.monotonic() - started), flush=True)
    return 1 if any(t.violations for t in trials) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="role")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--kinds", default=None, help="comma-separated subset of trial kinds")
    parser.add_argument("--late-acts", action="store_true", help="add pause_body trials")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--hostile", action="store_true", help="a hostile second agent login in every trial"
    )
    agent = sub.add_parser("agent")
    walker = sub.add_parser("walker")
    hostile = sub.add_parser("hostile")
    for p in (agent, walker, hostile):
        p.add_argument("--dsn", required=True)
        p.add_argument("--ledger", required=True)
    agent.add_argument("--session", required=True)
    agent.add_argument("--steps", type=int, default=3)
    agent.add_argument("--work-ms", type=int, default=10)
    agent.add_argument("--outcome", choices=["complete", "raise"], default="complete")
    agent.add_argument("--act-late", action="store_true")
    walker.add_argument("--seconds", type=float, default=5.0)
    walker.add_argument("--owner", action="append", help="serve only this login's sessions")
    hostile.add_argument("--victims", required=True, help="comma-separated session ids")
    hostile.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.role == "agent":
        return run_agent(args)
    if args.role == "hostile":
        return run_hostile(args)
    if args.role == "walker":
        return run_walker(args)
    if args.seed is None:
        args.seed = random.SystemRandom().randint(0, 2**31)
    print(f"fault suite: {args.trials} trials, seed {args.seed}", flush=True)
    return run_suite(args)


if __name__ == "__main__":
    sys.exit(main())
