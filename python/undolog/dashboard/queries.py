"""What the pages read, always through the engine's views and as the logged-in person:
the engine's grants and row-level security decide what each person sees."""

from __future__ import annotations

import base64
import datetime
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, namedtuple_row
from psycopg.types.json import Jsonb

from undolog import health
from undolog.engine import SESSION_STATES
from undolog.queries import QUERIES
from undolog.session_filter import SessionFilter as SessionFilter
from undolog.session_filter import filter_params, sessions_query

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Any]

PAGE_SIZE = 50
INBOX_LIMIT = 200
PRIOR_CALLS = 10
# Payloads longer than this (JSON text characters) are shown as a head, with a link to
# the whole value: one huge argument must not make a page of a thousand calls unreadable.
HEAD_CHARS = 2000
MAX_CALLS_SHOWN = 5000
# "cut at" no length: a value shown whole (the largest PostgreSQL integer)
WHOLE = 2**31 - 1
MAX_UNDO_SHOWN = 5000
# A session page recomputes the session's hash chain on each view when it holds at most
# this many records (200,000 took about 3 s on the 2-core test machine); a longer one
# says how to verify it instead (undolog verify --session).
VERIFIED_ON_VIEW = 20_000
# A session's table of calls shows each payload as one line of compact JSON, cut here;
# the call's own page shows it whole and pretty.
CELL_CHARS = 300
# An approval made with edited arguments lists the top-level arguments the edit changed
# (at most CHANGES_SHOWN, by name), each name and value cut at CHANGE_CHARS: the change
# shows even where it falls past the head of the arguments (jsonb orders keys by length).
CHANGES_SHOWN = 20
CHANGE_CHARS = 120


async def rows(conn: Conn, query: str, params: Any = ()) -> list[Row]:
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(query, params)
    return await cur.fetchall()


async def records(conn: Conn, query: str, params: Any = ()) -> list[Any]:
    """Rows as named tuples: a template reads their fields as attributes directly, where a
    dict's key costs Jinja a failed getattr first (it matters over a thousand rows)."""
    cur = conn.cursor(row_factory=namedtuple_row)
    await cur.execute(query, params)
    return await cur.fetchall()


async def one(conn: Conn, query: str, params: Any = ()) -> Row | None:
    found = await rows(conn, query, params)
    return found[0] if found else None


# --- approvals inbox ----------------------------------------------------------------


def _purpose_head(found: list[Row]) -> list[Row]:
    """Each request's purpose (the agent's own words, up to the engine's payload limit of
    1 MiB) cut at HEAD_CHARS, with its whole length: an agent must not make the inbox of
    200 requests, or an approval's confirmation, hundreds of megabytes. Its session's
    page shows it whole."""
    for r in found:
        purpose = r.get("purpose")
        r["purpose_length"] = len(purpose) if isinstance(purpose, str) else 0
        if isinstance(purpose, str) and len(purpose) > HEAD_CHARS:
            r["purpose"] = purpose[:HEAD_CHARS]
    return found


async def inbox(conn: Conn) -> tuple[list[Row], int]:
    """Pending requests, oldest first, each with what its session did before it."""
    pending = _purpose_head(
        await rows(conn, QUERIES["pending_approvals"], {"head": HEAD_CHARS, "limit": INBOX_LIMIT})
    )
    notified = await rows(
        conn,
        QUERIES["dashboard_inbox_deliveries"],
        {"approval_ids": [p["approval_id"] for p in pending]},
    )
    for p in pending:
        p["deliveries"] = [d for d in notified if d["approval_id"] == p["approval_id"]]
    if pending:
        requests = {
            "approval_ids": [p["approval_id"] for p in pending],
            "session_ids": [p["session_id"] for p in pending],
            "step_indexes": [
                p["step_index"] if p["step_index"] is not None else 0 for p in pending
            ],
        }
        prior = await rows(
            conn,
            QUERIES["dashboard_inbox_prior_calls"],
            {**requests, "cell": CELL_CHARS, "prior": PRIOR_CALLS},
        )
        by_approval: dict[uuid.UUID, list[Row]] = {}
        for r in prior:
            by_approval.setdefault(r["approval_id"], []).append(r)
        counts = await rows(conn, QUERIES["dashboard_inbox_prior_counts"], requests)
        before = {r["approval_id"]: int(r["n"]) for r in counts}
        for p in pending:
            p["prior"] = by_approval.get(p["approval_id"], [])
            p["prior_total"] = before.get(p["approval_id"], 0)
    # total was counted in the same statement (one snapshot) as the rows shown
    return pending, int(pending[0]["total"]) if pending else 0


async def pending_of(conn: Conn, approval_ids: list[uuid.UUID]) -> list[Row]:
    """The pending requests among ``approval_ids``, with what a person must see before
    approving one for good: the call, its arguments whole (the engine's payload limit
    bounds them; cut, an agent could pad them so that the argument that matters falls
    past the cut), whose session and which login."""
    return _purpose_head(
        await rows(
            conn,
            QUERIES["dashboard_pending_of"],
            {"approval_ids": approval_ids, "head": WHOLE},
        )
    )


async def edit_of(conn: Conn, approval_id: uuid.UUID) -> Row | None:
    """A pending request as its edit page shows it: the call with its whole arguments
    (an approver edits all of them), whose session, which login."""
    found = await rows(conn, QUERIES["dashboard_edit_of"], {"approval_id": approval_id})
    return found[0] if found else None


async def edit_changes(
    conn: Conn, approval_id: uuid.UUID, edited: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """(argument, requested JSON, approved JSON) of each top-level argument the edit of a
    pending request changes, adds or drops ('' for absent), in name order, as the journal
    tells values apart (dashboard_edit_changes); none when it is not pending any more."""
    row = await one(
        conn,
        QUERIES["dashboard_edit_changes"],
        {"approval_id": approval_id, "edited": Jsonb(edited)},
    )
    found = row["changes"] if row else []
    return [(c["name"], c["before"] or "", c["after"] or "") for c in found]


async def inbox_fingerprint(conn: Conn) -> str:
    row = await one(conn, QUERIES["dashboard_inbox_fingerprint"])
    return str(row["f"]) if row else ""


# --- sessions list --------------------------------------------------------------------


def encode_cursor(created_at: datetime.datetime, session_id: uuid.UUID) -> str:
    raw = f"{created_at.isoformat()}|{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[datetime.datetime, uuid.UUID]:
    """Raises ValueError for anything that is not a cursor this page made."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    at, sid = raw.split("|")
    created_at = datetime.datetime.fromisoformat(at)
    if created_at.tzinfo is None:
        raise ValueError("cursor without a time zone")
    return created_at, uuid.UUID(sid)


async def sessions_page(conn: Conn, f: SessionFilter) -> tuple[list[Row], str | None]:
    """One page, newest first, by keyset: never an OFFSET, so page 1,000 costs page 1's.
    The filter is undolog.session_filter's, as `undolog sessions list` applies it."""
    params = filter_params(f)
    return await _keyset_page(
        conn, sessions_query(params), params, ("created_at", "session_id"), f.after
    )


async def _keyset_page(
    conn: Conn,
    query: str | sql.Composed,
    params: dict[str, Any],
    key: tuple[str, str],
    after: tuple[datetime.datetime, uuid.UUID] | None,
) -> tuple[list[Row], str | None]:
    """One page of ``query`` (a keyset query of the catalogue: its filters off when their
    parameters are NULL, the cursor in ``after_at``, ``after_id``), newest first by the
    keyset ``key`` (time column, id column): never an OFFSET, so page 1,000 costs page
    1's. Answers the rows and the next page's cursor.

    Sent unprepared, so that every page gets a plan of its own: the planner folds each
    NULL filter's ``%(x)s IS NULL OR ...`` away and the keyset becomes an index range. A
    prepared statement would go over to a generic plan after five runs, where neither
    happens and a page deep in the list scans every row before it."""
    at, ident = key
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(
        query,
        {
            **params,
            "after_at": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": PAGE_SIZE + 1,
            "cell": CELL_CHARS,
            "change": CHANGE_CHARS,
            "changes": CHANGES_SHOWN,
        },
        prepare=False,
    )
    found = await cur.fetchall()
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    cursor = encode_cursor(found[-1][at], found[-1][ident]) if more else None
    return found, cursor


# The sessions list counts each state up to this many sessions and says "10,000+" past
# it: counting a million completed sessions on every load of the page read all of them
# (docs/performance-log.md, "The operator's reads at scale").
COUNT_CAP = 10_000


async def state_counts(conn: Conn) -> dict[str, int]:
    """The sessions the person sees in each state, each counted up to COUNT_CAP + 1: a
    count above COUNT_CAP means "more than COUNT_CAP", not how many."""
    found = await rows(
        conn,
        QUERIES["dashboard_state_counts"],
        {"states": list(SESSION_STATES), "cap": COUNT_CAP + 1},
    )
    counts = dict.fromkeys(SESSION_STATES, 0)
    counts.update({r["state"]: int(r["n"]) for r in found})
    return counts


# --- one session ----------------------------------------------------------------------


async def session(conn: Conn, session_id: uuid.UUID, staff: bool) -> Row | None:
    """Everything the session page shows, or None when the person cannot see it."""
    sid = {"session_id": session_id}
    head = await one(conn, QUERIES["dashboard_session"], sid)
    if head is None:
        return None
    # A session of a thousand calls must render in well under 200 ms: the text of each
    # cell (pretty JSON, times, the state history) is made here, in C, rather than in
    # Python and the template, which then only escape and join it.
    calls = await records(
        conn,
        QUERIES["dashboard_session_calls"],
        {**sid, "cell": CELL_CHARS, "limit": MAX_CALLS_SHOWN + 1},
    )
    head["calls"] = calls[:MAX_CALLS_SHOWN]
    head["calls_truncated"] = len(calls) > MAX_CALLS_SHOWN
    # The undo stack has an entry per compensable call: as many as the calls, which an
    # agent may make by the hundred thousand. The top MAX_UNDO_SHOWN are shown (the walk's
    # next ones), and every entry the operator may act on (the one the walk halted at, a
    # compensation that failed) wherever it is.
    head["undo"] = await records(
        conn,
        QUERIES["dashboard_session_undo"],
        {**sid, "limit": MAX_UNDO_SHOWN, "halt_undo_id": head["halt_undo_id"]},
    )
    head["undo_total"] = head["undo"][0].total if head["undo"] else 0
    # each with the head of the arguments an edit approved it with, cut as the calls'
    head["approvals"] = await rows(
        conn,
        QUERIES["dashboard_session_approvals"],
        {**sid, "cell": CELL_CHARS, "change": CHANGE_CHARS, "changes": CHANGES_SHOWN},
    )
    # the reader's row-level security applies: an agent reads its own sessions' only
    notified = await rows(conn, QUERIES["dashboard_session_deliveries"], sid)
    for a in head["approvals"]:
        a["deliveries"] = [d for d in notified if d["approval_id"] == a["approval_id"]]
    head["states"] = await rows(conn, QUERIES["dashboard_session_states"], sid)
    head["actions"] = await rows(conn, QUERIES["dashboard_session_actions"], sid) if staff else []
    # The history's hash chain, recomputed (staff only, as undolog.verify_chain): [] is
    # verified clean, None not shown. One session's rows, read by their keys: up to
    # VERIFIED_ON_VIEW of them, since every view (and every live update) pays it.
    head["chain"] = None
    head["chain_records"] = 0
    if staff:
        length = await one(conn, QUERIES["dashboard_session_chain_length"], sid)
        head["chain_records"] = int(length["records"]) if length else 0
        if head["chain_records"] <= VERIFIED_ON_VIEW:
            head["chain"] = await rows(conn, QUERIES["dashboard_session_chain"], sid)
    purpose = (head.get("metadata") or {}).get("purpose")
    head["purpose"] = purpose if isinstance(purpose, str) else None
    head["halt_entry"] = next((u for u in head["undo"] if u.undo_id == head["halt_undo_id"]), None)
    return head


async def session_fingerprint(conn: Conn, session_id: uuid.UUID) -> str:
    row = await one(conn, QUERIES["dashboard_session_fingerprint"], {"session_id": session_id})
    return str(row["f"]) if row else ""


async def payload(
    conn: Conn, session_id: uuid.UUID, effect_id: uuid.UUID, which: str
) -> Row | None:
    """One call's payload whole: its requested ``args``, its ``result``, or the
    ``approved`` arguments an edit let it run with (None without an edit); None when the
    call is not this session's or not the reader's to see."""
    query = {
        "args": QUERIES["dashboard_call_args"],
        "result": QUERIES["dashboard_call_result"],
        "approved": QUERIES["dashboard_call_approved_args"],
    }
    return await one(conn, query[which], {"session_id": session_id, "effect_id": effect_id})


async def delivery_in_session(conn: Conn, session_id: uuid.UUID, delivery_id: uuid.UUID) -> bool:
    """Whether the notification delivery is one of this session's requests'."""
    found = await one(
        conn,
        QUERIES["dashboard_delivery_in_session"],
        {"session_id": session_id, "delivery_id": delivery_id},
    )
    return found is not None


async def undo_entry_in_session(conn: Conn, session_id: uuid.UUID, undo_id: uuid.UUID) -> bool:
    """Whether the person sees undo entry ``undo_id`` as one of session ``session_id``'s."""
    found = await one(
        conn,
        QUERIES["dashboard_undo_entry_in_session"],
        {"session_id": session_id, "undo_id": undo_id},
    )
    return found is not None


# --- past decisions -------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionFilter:
    since: datetime.datetime | None = None  # decided at or after (e.g. the day's start)
    by: str | None = None  # the login that recorded the decision
    after: tuple[datetime.datetime, uuid.UUID] | None = None


async def decisions_page(conn: Conn, f: DecisionFilter) -> tuple[list[Row], str | None]:
    """Decided requests, newest decision first, by keyset (never an OFFSET)."""
    return await _keyset_page(
        conn,
        QUERIES["dashboard_decisions_page"],
        {"since": f.since, "by": f.by or None},
        ("decided_at", "approval_id"),
        f.after,
    )


async def rollback_to_plan(conn: Conn, session_id: uuid.UUID, step: int) -> list[Row]:
    """What undoing the session down to ``step`` would undo, in the walk's order (the
    engine's undolog.rollback_to_plan: the same rule rollback_to applies)."""
    return await rows(
        conn, QUERIES["dashboard_rollback_to_plan"], {"session_id": session_id, "step": step}
    )


# --- the tool registry, the notification channels ------------------------------------

# The most registrations and channels a page lists: the rest are said to be left off
# (`undolog tools list --owner`, `undolog notifications list` show every one).
TOOLS_LIMIT = 500
CHANNELS_LIMIT = 200


async def tools(conn: Conn, owner: str | None, everything: bool) -> tuple[list[Row], bool]:
    """The registrations the person may read (an agent: its own login's), live ones or
    every one, at most TOOLS_LIMIT; and whether more were left off."""
    found = await rows(
        conn,
        QUERIES["dashboard_tools"],
        {"owner": owner, "all": everything, "limit": TOOLS_LIMIT + 1},
    )
    return found[:TOOLS_LIMIT], len(found) > TOOLS_LIMIT


async def tool_of(conn: Conn, tool_id: uuid.UUID) -> Row | None:
    return await one(conn, QUERIES["dashboard_tool_of"], {"tool_id": tool_id})


async def live_tool(conn: Conn, owner: str, tool_name: str) -> Row | None:
    return await one(conn, QUERIES["dashboard_live_tool"], {"owner": owner, "tool_name": tool_name})


async def channels(conn: Conn, everything: bool) -> tuple[list[Row], bool]:
    """The notification channels (never their secrets), live ones or every one, at most
    CHANNELS_LIMIT; and whether more were left off."""
    found = await rows(
        conn, QUERIES["dashboard_channels"], {"all": everything, "limit": CHANNELS_LIMIT + 1}
    )
    return found[:CHANNELS_LIMIT], len(found) > CHANNELS_LIMIT


# The deliveries the Notifications page lists: the latest, as `undolog notifications
# deliveries` does by default; and the states it filters by, as its --state.
DELIVERIES_LIMIT = 50
DELIVERY_STATES = ("pending", "sent", "failed", "cancelled")


async def deliveries(conn: Conn, state: str | None) -> list[Row]:
    """The latest deliveries of every request (one state's, when given), newest first,
    with the query of `undolog notifications deliveries`; next_attempt only for one still
    due."""
    return await rows(
        conn,
        QUERIES["notification_deliveries"],
        {"approval_id": None, "state": state, "limit": DELIVERIES_LIMIT},
    )


async def worker_health(conn: Conn) -> dict[str, Any]:
    """`undolog health`'s worker and operator lines, from its queries: how many sessions
    are due for an undo walk and how long the oldest has waited for a worker (seconds),
    and how many halted sessions wait for an operator."""
    lag = await one(conn, QUERIES["worker_lag"], {})
    halted = await one(conn, QUERIES["halted_sessions_unresolved"], {})
    assert lag is not None and halted is not None
    return {
        "due": int(lag["due"]),
        "lag": max(float(lag["lag_seconds"]), 0.0),
        "halted": int(halted["halted"]),
    }


async def security_health(conn: Conn) -> list[dict[str, Any]]:
    """`undolog health`'s locks, schemas and logins checks, from its queries and its
    judgements (undolog.health): whether PUBLIC may still call the advisory-lock
    functions, whether an agent login may create objects where other logins' names
    resolve, and whether one person may hold both sides of a call; each
    as the command's --json prints it (name, ok, detail: what is wrong, what to do)."""
    locks = await one(conn, QUERIES["public_advisory_functions"])
    schemas = await one(conn, QUERIES["schemas_open_to_agents"])
    logins = await one(conn, QUERIES["logins_that_may_become_another"])
    assert locks is not None and schemas is not None and logins is not None  # one row each
    return [health.locks(locks), health.schemas(schemas), health.logins(logins)]


async def live_channel(conn: Conn, name: str) -> Row | None:
    return await one(conn, QUERIES["dashboard_live_channel"], {"name": name})


# --- maintenance: the month partitions and the audit anchors -------------------------

# The most partitions and anchors the Maintenance page lists (two tables' months over
# the retention, and the latest anchors: far fewer, normally).
PARTITIONS_LIMIT = 200
PG_INT_MAX = 2**31 - 1  # the queries' LIMIT is an integer
ANCHORS_LIMIT = 20
# How long the page's actions wait for a lock before giving up with nothing done.
MAINTENANCE_LOCK_TIMEOUT = "5s"


async def partitions(conn: Conn) -> tuple[list[Row], bool]:
    """The journal's partitions (newest month first, the DEFAULT ones last) with their
    estimated rows and size, at most PARTITIONS_LIMIT; and whether more were left off."""
    found = await rows(conn, QUERIES["dashboard_partitions"], {"limit": PARTITIONS_LIMIT + 1})
    return found[:PARTITIONS_LIMIT], len(found) > PARTITIONS_LIMIT


async def every_partition(conn: Conn) -> list[Row]:
    """Every partition of the journal, in the same order, with no limit (as `undolog
    partitions list` and `plan` read them): what the page's plan is made from, which a
    list cut at PARTITIONS_LIMIT (newest first, the DEFAULTs last) would get wrong."""
    return await rows(conn, QUERIES["dashboard_partitions"], {"limit": PG_INT_MAX})


async def pending_partitions(conn: Conn) -> list[str]:
    """The months created ahead whose attachment waits for the next maintenance run."""
    return [str(r["name"]) for r in await rows(conn, QUERIES["pending_partitions"])]


async def retention(conn: Conn) -> Row:
    found = await one(conn, QUERIES["dashboard_retention"])
    assert found is not None
    return found


async def engine_version(conn: Conn) -> str | None:
    """The engine installed in the database (undolog.version(), as `undolog status`), or
    None when it has no undolog.version() (42883: an engine older than that function, or
    incomplete, as engine_check.failed reads it), which the page says. In a savepoint
    (a transaction of its own in autocommit): the failure leaves the caller's usable."""
    try:
        async with conn.transaction():
            found = await records(conn, QUERIES["engine_version"])
    except psycopg.errors.UndefinedFunction:  # 42883
        return None
    return None if not found or found[0][0] is None else str(found[0][0])


async def anchors(conn: Conn, limit: int | None = None) -> tuple[list[Row], bool]:
    """The latest anchors, newest first, at most ANCHORS_LIMIT (or ``limit``); and whether
    older ones were left off."""
    shown = ANCHORS_LIMIT if limit is None else limit
    found = await rows(conn, QUERIES["dashboard_anchors"], {"limit": shown + 1})
    return found[:shown], len(found) > shown


async def bound_lock_waits(conn: Conn) -> None:
    """Within the caller's transaction: wait at most MAINTENANCE_LOCK_TIMEOUT for a lock."""
    await conn.execute(QUERIES["local_lock_timeout"], {"lock_timeout": MAINTENANCE_LOCK_TIMEOUT})
