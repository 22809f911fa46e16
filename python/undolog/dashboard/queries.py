"""What the pages read, always through the engine's views and as the logged-in person:
the engine's grants and row-level security decide what each person sees."""

from __future__ import annotations

import base64
import datetime
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row, namedtuple_row

from undolog.engine import SESSION_STATES

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Any]

PAGE_SIZE = 50
INBOX_LIMIT = 200
PRIOR_CALLS = 10
# Payloads longer than this (JSON text characters) are shown as a head, with a link to
# the whole value: one huge argument must not make a page of a thousand calls unreadable.
HEAD_CHARS = 2000
MAX_CALLS_SHOWN = 5000
# A session's table of calls shows each payload as one line of compact JSON, cut here;
# the call's own page shows it whole and pretty.
CELL_CHARS = 300


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


async def inbox(conn: Conn) -> tuple[list[Row], int]:
    """Pending requests, oldest first, each with what its session did before it."""
    pending = await rows(
        conn,
        f"""
        SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name,
               CASE WHEN length(p.args::text) <= {HEAD_CHARS} THEN p.args END AS args,
               left(p.args::text, {HEAD_CHARS}) AS args_head,
               length(p.args::text) AS args_length,
               p.requested_at, p.expires_at, p.agent, p.session_state, p.age, p.expired,
               p.owner_role, p.requested_by, p.tier, p.purpose, now() AS server_now
        FROM undolog.pending_approvals AS p
        ORDER BY p.requested_at, p.approval_id
        LIMIT {INBOX_LIMIT}
        """,
    )
    total = await one(conn, "SELECT count(*) AS n FROM undolog.pending_approvals")
    notified = await rows(
        conn,
        "SELECT approval_id, channel_name, state, attempts, last_error"
        " FROM undolog.notification_deliveries WHERE approval_id = ANY(%s)"
        " ORDER BY channel_name",
        ([p["approval_id"] for p in pending],),
    )
    for p in pending:
        p["deliveries"] = [d for d in notified if d["approval_id"] == p["approval_id"]]
    if pending:
        prior = await rows(
            conn,
            f"""
            SELECT p.approval_id, c.step_index, c.tool_name, c.tier, c.state, c.replay_count,
                   left(c.args::text, {CELL_CHARS}) AS args_text, c.args_length
            FROM unnest(%s::uuid[], %s::uuid[], %s::int[])
                AS p (approval_id, session_id, step_index)
            CROSS JOIN LATERAL (
                SELECT c.step_index, c.tool_name, c.tier, c.state, c.replay_count, c.args,
                       c.args_length
                FROM undolog.session_calls AS c
                WHERE c.session_id = p.session_id AND c.step_index < p.step_index
                ORDER BY c.step_index DESC
                LIMIT {PRIOR_CALLS}
            ) AS c
            ORDER BY p.approval_id, c.step_index
            """,
            (
                [p["approval_id"] for p in pending],
                [p["session_id"] for p in pending],
                [p["step_index"] if p["step_index"] is not None else 0 for p in pending],
            ),
        )
        by_approval: dict[uuid.UUID, list[Row]] = {}
        for r in prior:
            by_approval.setdefault(r["approval_id"], []).append(r)
        counts = await rows(
            conn,
            """
            SELECT p.approval_id, count(c.effect_id) AS n
            FROM unnest(%s::uuid[], %s::uuid[], %s::int[])
                AS p (approval_id, session_id, step_index)
            LEFT JOIN undolog.session_calls AS c
                ON c.session_id = p.session_id AND c.step_index < p.step_index
            GROUP BY p.approval_id
            """,
            (
                [p["approval_id"] for p in pending],
                [p["session_id"] for p in pending],
                [p["step_index"] if p["step_index"] is not None else 0 for p in pending],
            ),
        )
        before = {r["approval_id"]: int(r["n"]) for r in counts}
        for p in pending:
            p["prior"] = by_approval.get(p["approval_id"], [])
            p["prior_total"] = before.get(p["approval_id"], 0)
    return pending, int(total["n"]) if total else 0


async def pending_of(conn: Conn, approval_ids: list[uuid.UUID]) -> list[Row]:
    """The pending requests among ``approval_ids``, with what a person must see before
    approving one for good: the call, its arguments, whose session and which login."""
    return await rows(
        conn,
        f"""
        SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name, p.tier,
               CASE WHEN length(p.args::text) <= {HEAD_CHARS} THEN p.args END AS args,
               left(p.args::text, {HEAD_CHARS}) AS args_head,
               length(p.args::text) AS args_length,
               p.agent, p.owner_role, p.requested_by, p.purpose, p.requested_at,
               p.expires_at, p.expired
        FROM undolog.pending_approvals AS p
        WHERE p.approval_id = ANY(%s)
        ORDER BY p.requested_at, p.approval_id
        """,
        (approval_ids,),
    )


async def edit_of(conn: Conn, approval_id: uuid.UUID) -> Row | None:
    """A pending request as its edit page shows it: the call with its whole arguments
    (an approver edits all of them), whose session, which login."""
    found = await rows(
        conn,
        """
        SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name, p.tier,
               p.args, p.agent, p.owner_role, p.requested_by, p.purpose, p.requested_at,
               p.expires_at, p.expired
        FROM undolog.pending_approvals AS p
        WHERE p.approval_id = %s
        """,
        (approval_id,),
    )
    return found[0] if found else None


async def inbox_fingerprint(conn: Conn) -> str:
    row = await one(
        conn,
        """
        SELECT coalesce(md5(string_agg(p.approval_id::text || p.expired::text, ','
                                       ORDER BY p.approval_id)), '') AS f
        FROM undolog.pending_approvals AS p
        """,
    )
    return str(row["f"]) if row else ""


# --- sessions list --------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFilter:
    state: str | None = None
    agent: str | None = None
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    search: str | None = None
    after: tuple[datetime.datetime, uuid.UUID] | None = None


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


def _uuid_prefix_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """A hex prefix of a session id (as people copy them: 'a1b2c3d4') as an id range."""
    hexpart = text.replace("-", "").lower()
    if not (4 <= len(hexpart) <= 32) or any(c not in "0123456789abcdef" for c in hexpart):
        return None
    low = uuid.UUID(hexpart.ljust(32, "0"))
    high = uuid.UUID(hexpart.ljust(32, "f"))
    return low, high


async def sessions_page(conn: Conn, f: SessionFilter) -> tuple[list[Row], str | None]:
    """One page, newest first, by keyset: never an OFFSET, so page 1,000 costs page 1's."""
    where: list[str] = []
    params: list[Any] = []
    if f.state:
        where.append("s.state = %s")
        params.append(f.state)
    if f.agent:
        where.append("s.agent = %s")
        params.append(f.agent)
    if f.since:
        where.append("s.created_at >= %s")
        params.append(f.since)
    if f.until:
        where.append("s.created_at < %s")
        params.append(f.until)
    if f.search:
        # A hex prefix (four digits or more, as people copy ids) finds sessions by id, on
        # the primary key; anything else is a tool name that one of the calls used.
        span = _uuid_prefix_range(f.search)
        if span is not None:
            where.append("s.session_id BETWEEN %s AND %s")
            params.extend(span)
        else:
            where.append(
                "EXISTS (SELECT FROM undolog.session_calls AS c "
                "WHERE c.session_id = s.session_id AND c.tool_name = %s)"
            )
            params.append(f.search)
    return await _keyset_page(
        conn,
        """
        SELECT s.session_id, s.agent, s.owner_role, s.state, s.created_at, s.updated_at,
               s.error, s.resolved_by,
               (SELECT count(*) FROM undolog.session_calls AS c
                WHERE c.session_id = s.session_id) AS calls
        FROM undolog.sessions_list AS s
        """,
        ("s", "created_at", "session_id"),
        where,
        params,
        f.after,
    )


async def _keyset_page(
    conn: Conn,
    select: str,
    key: tuple[str, str, str],
    where: list[str],
    params: list[Any],
    after: tuple[datetime.datetime, uuid.UUID] | None,
) -> tuple[list[Row], str | None]:
    """One page of `select` (filtered by the `where` conditions), newest first by the
    keyset `key` (alias, time column, id column), after the cursor's row: never an
    OFFSET, so page 1,000 costs page 1's. Answers the rows and the next page's cursor."""
    alias, at, ident = key
    if after:
        where = [*where, f"({alias}.{at}, {alias}.{ident}) < (%s, %s)"]
        params = [*params, *after]
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    found = await rows(
        conn,
        f"""
        {select}
        {clause}
        ORDER BY {alias}.{at} DESC, {alias}.{ident} DESC
        LIMIT {PAGE_SIZE + 1}
        """,
        params,
    )
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    cursor = encode_cursor(found[-1][at], found[-1][ident]) if more else None
    return found, cursor


async def state_counts(conn: Conn) -> dict[str, int]:
    found = await rows(
        conn, "SELECT s.state, count(*) AS n FROM undolog.sessions_list AS s GROUP BY s.state"
    )
    counts = dict.fromkeys(SESSION_STATES, 0)
    counts.update({r["state"]: int(r["n"]) for r in found})
    return counts


# --- one session ----------------------------------------------------------------------


async def session(conn: Conn, session_id: uuid.UUID, staff: bool) -> Row | None:
    """Everything the session page shows, or None when the person cannot see it."""
    head = await one(
        conn, "SELECT * FROM undolog.sessions_list WHERE session_id = %s", (session_id,)
    )
    if head is None:
        return None
    # A session of a thousand calls must render in well under 200 ms: the text of each
    # cell (pretty JSON, times, the state history) is made here, in C, rather than in
    # Python and the template, which then only escape and join it.
    calls = await records(
        conn,
        f"""
        -- One object (effect id -> its history as lines), built once: joined as a table,
        -- the planner guesses one row for it and loops over it for every call.
        WITH history AS MATERIALIZED (
            SELECT jsonb_object_agg(x.effect_id::text, x.lines) AS by_effect
            FROM (
                SELECT t.effect_id,
                       string_agg(
                           to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '  '
                           || coalesce(t.from_state, '∅') || ' → ' || t.to_state
                           || CASE WHEN t.event <> 'transition' THEN ' (' || t.event || ')'
                                   ELSE '' END
                           || '  ' || t.actor,
                           E'\n' ORDER BY t.history_id) AS lines
                FROM undolog.effect_timeline AS t
                WHERE t.session_id = %(sid)s
                GROUP BY t.effect_id
            ) AS x
        )
        SELECT c.effect_id, c.step_index, c.tool_name, c.tier, c.state, c.error, c.attempts,
               c.replay_count, length(j.args) AS args_length, length(j.result) AS result_length,
               c.last_replayed_at AS last_replayed,
               left(j.args, {CELL_CHARS}) AS args_text,
               left(j.result, {CELL_CHARS}) AS result_text,
               coalesce((SELECT h.by_effect FROM history AS h) ->> c.effect_id::text, '')
                   AS history
        FROM undolog.session_calls AS c
        -- each payload turned into text once (the view's lengths would do it again)
        CROSS JOIN LATERAL (SELECT c.args::text AS args, c.result_snapshot::text AS result) AS j
        WHERE c.session_id = %(sid)s
        ORDER BY c.step_index, c.executed_at
        LIMIT {MAX_CALLS_SHOWN + 1}
        """,
        {"sid": session_id},
    )
    head["calls"] = calls[:MAX_CALLS_SHOWN]
    head["calls_truncated"] = len(calls) > MAX_CALLS_SHOWN
    head["undo"] = await records(
        conn,
        """
        -- number: the entry's place in this session's stack (1 = the first pushed);
        -- stack_position counts across all sessions, so it reads 25-27 for a third entry.
        SELECT u.undo_id, u.stack_position,
               row_number() OVER (ORDER BY u.stack_position) AS number,
               u.step_index, u.tool_name, u.compensation_name,
               u.compensation IS NULL AS barrier, u.state, u.attempts, u.max_attempts,
               u.last_error,
               CASE WHEN u.state IN ('pending', 'compensating') AND u.attempts > 0
                    THEN u.next_attempt_at END AS next_retry
        FROM undolog.undo_stack_entries AS u
        WHERE u.session_id = %s
        ORDER BY u.stack_position DESC
        """,
        (session_id,),
    )
    head["approvals"] = await rows(
        conn,
        "SELECT *, coalesce(expires_at <= now(), FALSE) AS expired "
        "FROM undolog.session_approvals WHERE session_id = %s ORDER BY requested_at",
        (session_id,),
    )
    notified = await rows(
        conn,
        # the reader's row-level security applies: an agent reads its own sessions' only
        "SELECT *, CASE WHEN state = 'pending' THEN next_attempt_at END AS next_try"
        " FROM undolog.notification_deliveries WHERE session_id = %s"
        " ORDER BY created_at, channel_name",
        (session_id,),
    )
    for a in head["approvals"]:
        a["deliveries"] = [d for d in notified if d["approval_id"] == a["approval_id"]]
    head["states"] = await rows(
        conn,
        "SELECT * FROM undolog.session_state_history WHERE session_id = %s ORDER BY history_id",
        (session_id,),
    )
    head["actions"] = (
        await rows(
            conn,
            "SELECT * FROM undolog.operator_action_log WHERE session_id = %s ORDER BY action_id",
            (session_id,),
        )
        if staff
        else []
    )
    # The history's hash chain, recomputed (staff only, as undolog.verify_chain): [] is
    # verified clean, None not shown. One session's rows, read by their keys.
    head["chain"] = (
        await rows(
            conn,
            "SELECT seq, table_name, row_key, problem, expected, found"
            " FROM undolog.verify_chain(%s)",
            (session_id,),
        )
        if staff
        else None
    )
    purpose = (head.get("metadata") or {}).get("purpose")
    head["purpose"] = purpose if isinstance(purpose, str) else None
    head["halt_entry"] = next((u for u in head["undo"] if u.undo_id == head["halt_undo_id"]), None)
    return head


async def session_fingerprint(conn: Conn, session_id: uuid.UUID) -> str:
    row = await one(
        conn,
        """
        SELECT concat_ws('|',
            (SELECT s.state || s.updated_at::text FROM undolog.sessions_list AS s
             WHERE s.session_id = %(sid)s),
            (SELECT max(t.history_id) FROM undolog.effect_timeline AS t
             WHERE t.session_id = %(sid)s),
            (SELECT max(u.updated_at) FROM undolog.undo_stack_entries AS u
             WHERE u.session_id = %(sid)s),
            (SELECT max(a.decided_at) FROM undolog.session_approvals AS a
             WHERE a.session_id = %(sid)s),
            (SELECT count(*) FROM undolog.session_approvals AS a
             WHERE a.session_id = %(sid)s),
            (SELECT max(coalesce(d.last_attempt_at, d.created_at))::text || count(*)
             FROM undolog.notification_deliveries AS d
             WHERE d.session_id = %(sid)s)) AS f
        """,
        {"sid": session_id},
    )
    return str(row["f"]) if row else ""


async def payload(
    conn: Conn, session_id: uuid.UUID, effect_id: uuid.UUID, which: str
) -> Row | None:
    column = {"args": "c.args", "result": "c.result_snapshot"}[which]
    return await one(
        conn,
        f"SELECT c.step_index, c.tool_name, {column} AS value FROM undolog.session_calls AS c "
        "WHERE c.session_id = %s AND c.effect_id = %s",
        (session_id, effect_id),
    )


async def delivery_in_session(conn: Conn, session_id: uuid.UUID, delivery_id: uuid.UUID) -> bool:
    """Whether the notification delivery is one of this session's requests'."""
    found = await one(
        conn,
        "SELECT 1 AS x FROM undolog.notification_deliveries"
        " WHERE session_id = %s AND delivery_id = %s",
        (session_id, delivery_id),
    )
    return found is not None


async def undo_entry_in_session(conn: Conn, session_id: uuid.UUID, undo_id: uuid.UUID) -> bool:
    """Whether the person sees undo entry ``undo_id`` as one of session ``session_id``'s."""
    found = await one(
        conn,
        "SELECT 1 AS found FROM undolog.undo_stack_entries AS u "
        "WHERE u.undo_id = %s AND u.session_id = %s",
        (undo_id, session_id),
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
    where: list[str] = []
    params: list[Any] = []
    if f.since:
        where.append("d.decided_at >= %s")
        params.append(f.since)
    if f.by:
        where.append("d.decided_role = %s")
        params.append(f.by)
    return await _keyset_page(
        conn,
        f"""
        SELECT d.approval_id, d.session_id, d.effect_id, d.step_index, d.tool_name, d.tier,
               left(d.args::text, {CELL_CHARS}) AS args_text,
               length(d.args::text) AS args_length,
               d.decision, d.decided_by, d.decided_role, d.reason, d.decided_at,
               d.requested_at, d.waited, d.agent, d.owner_role, d.requested_by,
               d.effect_state,
               left(d.approved_args::text, {CELL_CHARS}) AS approved_args_text
        FROM undolog.decided_approvals AS d
        """,
        ("d", "decided_at", "approval_id"),
        where,
        params,
        f.after,
    )


async def rollback_to_plan(conn: Conn, session_id: uuid.UUID, step: int) -> list[Row]:
    """What undoing the session down to ``step`` would undo, in the walk's order (the
    engine's undolog.rollback_to_plan: the same rule rollback_to applies)."""
    return await rows(
        conn,
        "SELECT undo_id, step_index, tool_name, tier, effect_state, action"
        " FROM undolog.rollback_to_plan(%s, %s)",
        (session_id, step),
    )
