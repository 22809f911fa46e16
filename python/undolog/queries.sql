-- The SQL that the Python binding, the CLI and the faces send, by name (undolog.queries).
-- Named parameters, and the engine's functions called in named notation.

-- name: begin_session
-- A session's start (undolog.engine.begin_session): answers its id (the one given, or a
-- new one); its lease runs from now.
SELECT undolog.begin_session(
    p_session_id => %(session_id)s,
    p_agent => %(agent)s,
    p_metadata => %(metadata)s,
    p_lease => %(lease)s
)

-- name: heartbeat
-- A live session's lease renewed: answers when it now expires.
SELECT undolog.heartbeat(p_session_id => %(session_id)s)

-- name: session_state
-- A session's state, as the caller may see it.
SELECT state FROM undolog.sessions_list WHERE session_id = %(session_id)s

-- name: complete_session
-- A session's end, when its agent finished without error.
SELECT undolog.complete_session(p_session_id => %(session_id)s)

-- name: fail_session
-- A session's end, when its agent failed: the undo walk is due.
SELECT undolog.fail_session(p_session_id => %(session_id)s, p_error => %(error)s)

-- name: register_tool
-- A tool of this login registered (idempotent): answers its tool_id. A tool that follows
-- the default on_reject is registered without naming it, so that an engine from before
-- on_reject existed takes the same statement (register_tool_on_reject otherwise).
SELECT undolog.register_tool(
    p_tool_name => %(tool_name)s, p_tier => %(tier)s, p_compensation => %(compensation)s
)

-- name: register_tool_on_reject
-- As register_tool, for a tool whose rejected calls do not end the session the default way.
SELECT undolog.register_tool(
    p_tool_name => %(tool_name)s,
    p_tier => %(tier)s,
    p_compensation => %(compensation)s,
    p_on_reject => %(on_reject)s
)

-- name: register_tool_for
-- An operator registers (pins) a tool of an agent login, before the agent first runs it;
-- idempotent, as register_tool.
SELECT undolog.register_tool(
    p_tool_name => %(tool_name)s,
    p_tier => %(tier)s,
    p_compensation => %(compensation)s,
    p_owner => %(owner)s,
    p_on_reject => %(on_reject)s
) AS tool_id

-- name: replace_tool_for
-- An operator registers a tool of an agent login and, when its live registration differs,
-- retires that one (recorded with by and reason) and registers this one, in one
-- transaction (`tools register --replace`, the dashboard's register form): answers the
-- tool_id and the retired one (NULL when nothing was retired).
SELECT tool_id, retired FROM undolog.replace_tool(
    p_tool_name => %(tool_name)s,
    p_tier => %(tier)s,
    p_compensation => %(compensation)s,
    p_owner => %(owner)s,
    p_on_reject => %(on_reject)s,
    p_by => %(by)s,
    p_reason => %(reason)s
)

-- name: intercept
-- A journaled call named by its tool's name, tier and compensation (engine.intercept:
-- the path before the tool registry, and the tests').
SELECT effect_id, action, state, result_snapshot, approval_id
FROM undolog.intercept(
    p_session_id => %(session_id)s,
    p_step_index => %(step_index)s,
    p_tool_name => %(tool_name)s,
    p_tier => %(tier)s,
    p_args => %(args)s,
    p_call_signature => %(call_signature)s,
    p_compensation => %(compensation)s
)

-- name: intercept_tool
-- A journaled call of a registered tool, named by the tool_id register_tool answered:
-- engine.intercept_tool, and the hot path, which prepares it with these parameters in
-- this order as $1..$5 (engine_wire.HOT_INTERCEPT_PARAMS). The casts type the hot path's
-- text parameters.
SELECT effect_id, action, state, result_snapshot, approval_id
FROM undolog.intercept_tool(
    p_session_id => %(session_id)s::uuid, p_tool_id => %(tool_id)s::uuid,
    p_step_index => %(step_index)s::integer, p_args => %(args)s::jsonb,
    p_call_signature => %(call_signature)s::text)

-- name: commit
-- executing -> committed: a call's result recorded (async: without waiting for the WAL
-- flush). Answers 'late' when the undo walk had already taken the call.
SELECT undolog.commit(p_effect_id => %(effect_id)s, p_result => %(result)s, p_async => %(async)s)

-- name: fail
-- executing -> pending: the call never took effect (async as for commit); 'late' as
-- commit's.
SELECT undolog.fail(p_effect_id => %(effect_id)s, p_error => %(error)s, p_async => %(async)s)

-- name: commit_effect
-- The hot path's commit (engine.send_result), prepared with these parameters in this
-- order as $1..$4 (engine_wire.HOT_COMMIT_PARAMS); the casts type its text parameters.
SELECT undolog.commit_effect(
    p_session_id => %(session_id)s::uuid, p_effect_id => %(effect_id)s::uuid,
    p_result => %(result)s::jsonb, p_async => %(async)s::boolean)

-- name: fail_effect
-- The hot path's fail, as commit_effect (engine_wire.HOT_FAIL_PARAMS).
SELECT undolog.fail_effect(
    p_session_id => %(session_id)s::uuid, p_effect_id => %(effect_id)s::uuid,
    p_error => %(error)s::text, p_async => %(async)s::boolean)

-- name: set_async_results
-- Replay bookkeeping on this connection commits asynchronously ('on') or no longer does
-- ('off'); intercept reads the setting.
SELECT pg_catalog.set_config('undolog.async_results', %(value)s, false)

-- name: engine_check
-- The clients' engine check (undolog.engine_check): the engine's version, and the names
-- of the migrations `undolog migrate` recorded, separated by spaces (a name holds none),
-- NULL for none (the runner's own table, sql/bootstrap.sql; undolog_agent may read that
-- column). No schema: 3F000; no version(): 42883, both before the table is read.
SELECT
    undolog.version(),
    (SELECT pg_catalog.string_agg(m.name, ' ') FROM undolog.undolog_migrations AS m)

-- name: engine_check_and_async_results
-- engine_check, and undolog.async_results set on for the connection (set_async_results,
-- 'on') in the same round trip: a session's first statement. Fails as a whole.
SELECT
    undolog.version(),
    (SELECT pg_catalog.string_agg(m.name, ' ') FROM undolog.undolog_migrations AS m),
    pg_catalog.set_config('undolog.async_results', 'on', false)

-- name: approval_decision
-- What became of an approval request (engine.ApprovalDecision's fields, in order); no row
-- when it is unknown or not the caller's to see.
SELECT approval_id, session_id, effect_id, tool_name, decision, decided_by, decided_at,
    reason, on_reject, session_state, session_continues
FROM undolog.approval_decision(p_approval_id => %(approval_id)s)

-- name: approval_edit
-- The arguments a person approved a call with instead of the requested ones
-- (engine.ApprovalEdit's fields, in order); no row when the approval made no edit.
SELECT approval_id, tool_name, requested_args, approved_args, decided_by, decided_role,
    decided_at, reason
FROM undolog.approval_edit(p_session_id => %(session_id)s, p_effect_id => %(effect_id)s)

-- name: approve
-- A human allows an irreversible call (role undolog_approver): the agent's next try runs it.
SELECT undolog.approve(
    p_approval_id => %(approval_id)s, p_decided_by => %(decided_by)s, p_reason => %(reason)s
)

-- name: approve_edited
-- A human allows an irreversible call with the arguments they edited (the journal keeps both).
SELECT undolog.approve_edited(
    p_approval_id => %(approval_id)s,
    p_decided_by => %(decided_by)s,
    p_args => %(args)s,
    p_reason => %(reason)s
)

-- name: reject
-- A human refuses an irreversible call: it never runs.
SELECT undolog.reject(
    p_approval_id => %(approval_id)s, p_decided_by => %(decided_by)s, p_reason => %(reason)s
)

-- name: expire_approvals
-- The operator's periodic pass: pending requests past their deadline are expired, at
-- most %(limit)s of them in this transaction (the binding repeats it until fewer come).
SELECT * FROM undolog.expire_approvals(p_limit => %(limit)s)

-- name: approval_state
-- A request's state, as the caller may see it (an agent sees only its own sessions').
SELECT state FROM undolog.session_approvals WHERE approval_id = %(approval_id)s

-- name: client_pending_approvals
-- Before the MCP proxy intercepts an irreversible call (which asks a person the first
-- time): how many requests one client's sessions have pending, and whether this call
-- (its session and signature) was asked already, so that it finds its own request.
SELECT
    (
        SELECT count(*) FROM undolog.session_approvals
        WHERE state = 'pending' AND session_id = ANY(%(session_ids)s)
    ) AS pending,
    EXISTS (
        SELECT FROM undolog.call_approvals
        WHERE session_id = %(session_id)s AND call_signature = %(call_signature)s
    ) AS asked

-- name: approval_outcome
-- A refused request's outcome as the MCP proxy tells its client: who decided, why, and
-- whether it was rejected or expired.
SELECT decided_by, reason, state FROM undolog.session_approvals
WHERE approval_id = %(approval_id)s

-- name: session_of_handle
-- The session the MCP proxy issued a handle for (after a restart of the proxy, which
-- keeps no handle itself): the handle names its session, found by its primary key, and
-- its hash must be the one in that session's metadata.
SELECT session_id FROM undolog.sessions_list
WHERE session_id = %(session_id)s AND metadata ->> 'handle_sha256' = %(handle_sha256)s

-- name: session_of_unnamed_handle
-- The same for a handle issued before handles named their session: found by its hash
-- alone, which reads every session of the proxy's login (row-level security keeps that
-- filter from any index), so the proxy runs one such lookup at a time.
SELECT session_id FROM undolog.sessions_list
WHERE metadata ->> 'handle_sha256' = %(handle_sha256)s

-- name: is_blank
-- Whether a text is blank to the journal (white space and invisible characters only):
-- the MCP proxy asks it of an undo's reason before a person is asked to approve the undo.
SELECT undolog.is_blank(p_text => %(text)s)

-- name: session_halt
-- Where a session stands at its block's exit after an undo walk: its state, and for a
-- halted walk why it halted, the undo entry it stopped at, and whether it is the partial
-- walk of an undo_to (rollback_to, rollback_last).
SELECT s.state, s.error, s.halt_undo_id, s.undo_floor IS NOT NULL AS partial
FROM undolog.sessions_list AS s
WHERE s.session_id = %(session_id)s

-- name: fail_expired_sessions
-- The worker's first step: active sessions whose lease expired are failed, at most
-- %(limit)s of them in this transaction (the binding repeats it until fewer come).
SELECT * FROM undolog.fail_expired_sessions(p_limit => %(limit)s)

-- name: recover
-- Fail the sessions whose lease expired (at most %(limit)s of them, the oldest first; NULL:
-- every one); answers every session whose undo walk must run.
SELECT * FROM undolog.recover(p_limit => %(limit)s)

-- name: claim_compensation
-- A walker's claim on a failed session's next compensation (strictly LIFO); no row when
-- none is due.
SELECT * FROM undolog.claim_compensation(
    p_session_id => %(session_id)s, p_claim_timeout => %(claim_timeout)s
)

-- name: complete_compensation
-- A walker's report that a claimed compensation succeeded (a stale attempt is refused).
SELECT undolog.complete_compensation(p_undo_id => %(undo_id)s, p_attempt => %(attempt)s)

-- name: fail_compensation
-- A walker's report that a claimed compensation raised: answers 'retry' or
-- 'compensation_failed'.
SELECT undolog.fail_compensation(
    p_undo_id => %(undo_id)s, p_error => %(error)s, p_attempt => %(attempt)s
)

-- name: resume_session
-- An operator moves a halted walk on past the entry it stopped at.
SELECT undolog.resume_session(p_session_id => %(session_id)s, p_by => %(by)s, p_reason => %(reason)s)

-- name: retry_compensation
-- An operator gives a compensation that failed for good one more attempt.
SELECT undolog.retry_compensation(p_undo_id => %(undo_id)s, p_by => %(by)s, p_reason => %(reason)s)

-- name: abandon_session
-- An operator closes a halted session as resolved by hand.
SELECT undolog.abandon_session(
    p_session_id => %(session_id)s, p_by => %(by)s, p_reason => %(reason)s
)

-- name: expect_session
-- An operator's action on a session as it was read: first in the action's transaction,
-- the session locked, and refused (UL001) when its updated_at is not the one seen.
SELECT undolog.expect_session(p_session_id => %(session_id)s, p_seen => %(seen)s)

-- name: rollback_session
-- An operator stops an active or waiting session and has its work undone.
SELECT undolog.rollback_session(
    p_session_id => %(session_id)s, p_by => %(by)s, p_reason => %(reason)s
)

-- name: rollback_to_plan
-- What rollback_to would undo, in the walk's order (read only); its columns are
-- saga.PlannedUndo's fields, in order.
SELECT stack_position, undo_id, effect_id, step_index, tool_name, tier, effect_state, action
FROM undolog.rollback_to_plan(p_session_id => %(session_id)s, p_step_index => %(step)s)

-- name: rollback_to
-- Undo a live session's calls from the top of its stack down to a step, then go on.
SELECT undolog.rollback_to(
    p_session_id => %(session_id)s, p_step_index => %(step)s, p_reason => %(reason)s,
    p_by => %(by)s
)

-- name: rollback_last
-- Undo a live session's last calls still to undo, then go on.
SELECT undolog.rollback_last(
    p_session_id => %(session_id)s, p_count => %(count)s, p_reason => %(reason)s,
    p_by => %(by)s
)

-- name: next_compensation
-- The compensation the next claim of a session would hand out, found the way
-- claim_compensation walks down (entries with nothing to undo are skipped): NULL for a
-- barrier (the walk stops there, needing no compensation); no row when nothing is left.
-- The entry's descriptor is the registration's (intercept copies it; a claim halts the
-- walk when the two disagree), and an effect journaled before the registry has only it.
-- Read only: the walker asks it to name a compensation it lacks before claiming.
SELECT u.compensation_name
FROM undolog.undo_stack_entries AS u
WHERE u.session_id = %(session_id)s AND u.state IN ('pending', 'compensating')
  -- a partial walk (rollback_to) does not go below its floor
  AND u.stack_position >= coalesce(
      (SELECT s.undo_floor FROM undolog.sessions_list AS s WHERE s.session_id = u.session_id),
      0)
  AND NOT (u.effect_state = 'pending'
           OR (u.compensation IS NULL AND u.effect_state IN ('approved', 'rejected')))
ORDER BY u.stack_position DESC
LIMIT 1

-- name: claim_seconds_left
-- The seconds left, by the server's clock (the one claimed_until was set by), to the claim
-- of attempt `attempt` of an undo entry: a worker waits for the compensation until shortly
-- before it expires. No row once that attempt is no longer in flight.
SELECT extract(EPOCH FROM u.claimed_until - clock_timestamp())::float8 AS seconds_left
FROM undolog.undo_stack_entries AS u
WHERE u.session_id = %(session_id)s AND u.undo_id = %(undo_id)s
  AND u.state = 'compensating' AND u.attempts = %(attempt)s

-- name: sessions_owned_by
-- The sessions among session_ids begun by one of the logins owners (an empty list: the
-- worker's own login), for `undolog worker --owner`.
SELECT s.session_id FROM undolog.sessions_list AS s
WHERE s.session_id = ANY (%(session_ids)s)
  AND s.owner_role = ANY (coalesce(nullif(%(owners)s::text[], '{}'), ARRAY[session_user::text]))

-- name: ensure_partitions
-- Create the journal's missing months, from the current one through months_ahead later.
SELECT name FROM undolog.ensure_partitions(p_months_ahead => %(months_ahead)s) AS name

-- name: drop_partitions
-- Drop (or detach) the months that end at or before older_than.
SELECT name FROM undolog.drop_partitions(
    p_older_than => %(older_than)s, p_detach_only => %(detach_only)s, p_force => %(force)s
) AS name

-- name: maintain_partitions
-- The scheduled maintenance: drain the defaults, drop past retention, create ahead.
SELECT action, partition FROM undolog.maintain_partitions(
    p_months_ahead => %(months_ahead)s, p_retention_months => %(retention_months)s
)

-- name: verify_chain
-- The history rows (one session, or all, or the sessions after and through two ids; from
-- since on) that do not match their chain.
SELECT session_id, seq, table_name, row_key, problem, expected, found
FROM undolog.verify_chain(
    p_session_id => %(session_id)s, p_since => %(since)s,
    p_after_session => %(after)s, p_through_session => %(through)s
)

-- name: chain_events_count
-- How many sessions and history rows a verification over the same scope checked: the
-- rows verify_chain reads, without building their canonical records again.
SELECT count(DISTINCT session_id) AS sessions, count(*) AS rows
FROM undolog.chain_events(
    p_session_id => %(session_id)s, p_since => %(since)s,
    p_after_session => %(after)s, p_through_session => %(through)s, p_records => false
)

-- name: chain_anchored_heads
-- How many heads the anchors record, all together: each batch of a verification reads
-- them all.
SELECT count(*) AS heads
FROM undolog.chain_anchors AS a, pg_catalog.jsonb_object_keys(a.heads) AS k

-- name: chain_batches
-- Every session's chain cut, in session id order, into batches of about batch_rows rows
-- (a chain's length is its head's seq; a batch ends with the session that reaches the
-- next multiple of batch_rows): each batch's last session, how many sessions it has and
-- their rows, in order.
SELECT DISTINCT ON (b.batch) b.session_id AS through,
       count(*) OVER batch AS sessions, sum(b.seq) OVER batch AS rows
FROM (
    SELECT h.session_id, h.seq,
           pg_catalog.div(sum(h.seq) OVER (ORDER BY h.session_id) - h.seq,
                          %(batch_rows)s) AS batch
    FROM undolog.chain_heads AS h
) AS b
WINDOW batch AS (PARTITION BY b.batch)
ORDER BY b.batch, b.session_id DESC

-- name: chain_head
-- A session's chain head (its last link), for the header of its export.
SELECT seq, head FROM undolog.chain_heads WHERE session_id = %(session_id)s

-- name: session_chain_events
-- A session's history rows in chain order, each with its link and canonical record: the
-- lines of its export.
SELECT seq, prev, hash, table_name, row_key, at, canonical
FROM undolog.chain_events(p_session_id => %(session_id)s)
ORDER BY seq NULLS FIRST, table_name, row_key

-- name: write_anchor
-- Append an anchor of every session's chain head.
SELECT FROM undolog.write_anchor()

-- name: latest_anchor
-- The latest anchor, to keep outside the database.
SELECT anchor_id, written_at, prev, anchor_hash, canonical
FROM undolog.chain_anchors
ORDER BY anchor_id DESC
LIMIT 1

-- name: anchor
-- One anchor as the database holds it now, to compare with a kept copy.
SELECT anchor_hash, canonical FROM undolog.chain_anchors WHERE anchor_id = %(anchor_id)s

-- name: anchors_up_to
-- The anchors from the first through a kept one, in order: the chain that pins, through
-- the kept anchor, the heads each of them records.
SELECT anchor_id, heads, prev, canonical, anchor_hash
FROM undolog.chain_anchors
WHERE anchor_id <= %(anchor_id)s
ORDER BY anchor_id

-- name: sessions_overview_filtered
-- `undolog sessions list`: the sessions of one page of the dashboard's sessions list
-- ({page}: dashboard_sessions_page, composed with psycopg.sql, its filters and its limit:
-- one rule for both faces, undolog.session_filter), as sessions_overview shows them,
-- newest first. The ids are an array (an initplan), so the view's per-session counts
-- are made for those sessions only.
SELECT o.* FROM undolog.sessions_overview AS o
WHERE o.session_id = ANY (ARRAY(SELECT page.session_id FROM ({page}) AS page))
ORDER BY o.created_at DESC, o.session_id DESC

-- name: session_overview
-- `undolog sessions show`: one session.
SELECT * FROM undolog.sessions_overview WHERE session_id = %(session_id)s

-- name: session_timeline
-- `undolog sessions show`: the session's effect timeline, in order.
SELECT * FROM undolog.effect_timeline WHERE session_id = %(session_id)s
ORDER BY seq, at

-- name: session_ids_between
-- The session ids in a range (an id prefix padded with 0s and fs): at most 4, to tell
-- one match from an ambiguous prefix.
SELECT DISTINCT session_id AS id FROM undolog.sessions_list
WHERE session_id BETWEEN %(low)s AND %(high)s
ORDER BY session_id
LIMIT 4

-- name: approval_ids_between
-- As session_ids_between, for approval ids.
SELECT DISTINCT approval_id AS id FROM undolog.session_approvals
WHERE approval_id BETWEEN %(low)s AND %(high)s
ORDER BY approval_id
LIMIT 4

-- name: delivery_ids_between
-- As session_ids_between, for notification delivery ids.
SELECT DISTINCT delivery_id AS id FROM undolog.notification_deliveries
WHERE delivery_id BETWEEN %(low)s AND %(high)s
ORDER BY delivery_id
LIMIT 4

-- name: session_ids_ending
-- The session ids that end with some hex digits (an id's end as short_id prints it): at
-- most 4. The digits come reversed, as a LIKE prefix (%(reversed_pattern)s: '10a3f9%'
-- for an id ending in 9f3a01), so that a person's lookup is a range of the index of the
-- reversed ids (undolog_sessions_id_end_idx, migration 0022). An agent's cannot use that
-- index (its read policy comes first: the match is not leakproof); the policy itself
-- picks the agent's own sessions, by undolog_sessions_owner_idx.
SELECT DISTINCT session_id AS id FROM undolog.sessions_list
WHERE reverse(replace(session_id::text, '-', '')) LIKE %(reversed_pattern)s
ORDER BY session_id
LIMIT 4

-- name: approval_ids_ending
-- As session_ids_ending, for approval ids. Joined to the sessions the reader sees, which
-- changes no answer (every request belongs to a session, and a reader sees the requests
-- of the sessions it sees) but gives an agent's lookup a start, its own sessions
-- (undolog_sessions_owner_idx), instead of every request with its policy checked on each;
-- a person's starts from the index of the reversed ids.
SELECT DISTINCT a.approval_id AS id
FROM undolog.sessions_list AS s
INNER JOIN undolog.session_approvals AS a ON s.session_id = a.session_id
WHERE reverse(replace(a.approval_id::text, '-', '')) LIKE %(reversed_pattern)s
ORDER BY a.approval_id
LIMIT 4

-- name: delivery_ids_ending
-- As approval_ids_ending, for notification delivery ids.
SELECT DISTINCT d.delivery_id AS id
FROM undolog.sessions_list AS s
INNER JOIN undolog.notification_deliveries AS d ON s.session_id = d.session_id
WHERE reverse(replace(d.delivery_id::text, '-', '')) LIKE %(reversed_pattern)s
ORDER BY d.delivery_id
LIMIT 4

-- name: pending_approvals
-- The requests waiting for a human, oldest first, at most %(limit)s, for `undolog
-- approvals list` (%(head)s NULL: each one's arguments whole) and the dashboard's inbox
-- (the arguments whole when at most %(head)s characters, args_head their head, and
-- args_length). total is how many wait in all, so that the command can say how many it
-- did not show and the inbox how many wait: one statement, one snapshot, the rows and the
-- count agree. The oldest are picked and counted in pending_approval_ids, the requests
-- alone: only those shown are joined to their sessions and calls (a LIMIT over
-- pending_approvals sorts them after joining every pending request, and a count over it
-- joins each: some 10 times the time at 3,000 pending).
SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name,
       CASE WHEN %(head)s::int IS NULL OR length(p.args::text) <= %(head)s::int
            THEN p.args END AS args,
       left(p.args::text, %(head)s::int) AS args_head,
       length(p.args::text) AS args_length,
       p.requested_at, p.expires_at, p.agent, p.session_state, p.age, p.expired,
       p.owner_role, p.requested_by, p.tier, p.purpose, now() AS server_now,
       (SELECT count(*) FROM undolog.pending_approval_ids) AS total
FROM undolog.pending_approvals AS p
WHERE p.approval_id = ANY(ARRAY(
    SELECT i.approval_id FROM undolog.pending_approval_ids AS i
    ORDER BY i.requested_at, i.approval_id
    LIMIT %(limit)s::int
))
ORDER BY p.requested_at, p.approval_id

-- name: decided_approvals
-- `undolog approvals decided`: past decisions, newest first (the dashboard's /decisions),
-- from an instant on and of this login only when asked.
SELECT d.approval_id, d.decided_at, d.decision, d.effect_state, d.tool_name, d.args,
       d.approved_args, d.session_id, d.step_index, d.agent, d.owner_role, d.requested_by,
       d.requested_at, d.decided_by, d.decided_role, d.reason, d.waited
FROM undolog.decided_approvals AS d
WHERE (%(since)s::timestamptz IS NULL OR d.decided_at >= %(since)s::timestamptz)
  AND (NOT %(mine)s::boolean OR d.decided_role = session_user)
ORDER BY d.decided_at DESC, d.approval_id DESC
LIMIT %(limit)s::int

-- name: registered_tools
-- `undolog tools list`: the registry (one owner's, or all; live only unless all).
SELECT * FROM undolog.registered_tools
WHERE (%(owner)s::text IS NULL OR owner_role = %(owner)s)
  AND (live OR %(all)s)
ORDER BY owner_role, tool_name, registered_at

-- name: live_tool_registration
-- The live registration of a tool for a login, that `undolog tools retire` ends.
SELECT tool_id FROM undolog.registered_tools
WHERE owner_role = %(owner)s AND tool_name = %(tool_name)s AND live

-- name: retire_tool
-- An operator ends a live registration (recorded); answers when.
SELECT undolog.retire_tool(p_tool_id => %(tool_id)s, p_by => %(by)s, p_reason => %(reason)s) AS at

-- name: engine_version
-- The engine installed in a database (`undolog --version`), which may differ from the
-- package's.
SELECT undolog.version()

-- name: public_advisory_functions
-- `undolog health`: the advisory-lock functions of pg_catalog that any login of this
-- database may still call (migration 0004_locks revokes them from PUBLIC when a superuser
-- migrates).
SELECT coalesce(pg_catalog.array_agg(p.oid::regprocedure::text ORDER BY p.oid), '{}') AS open
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = 'pg_catalog'::regnamespace
  AND p.proname ~ '^pg_(try_)?advisory_'
  AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')

-- name: schemas_open_to_agents
-- `undolog health`: the schemas an agent login may create objects in, whether one may
-- create schemas in this database, and which logins may. Asked of every member of
-- undolog_agent but superusers and the engine's owner (PostgreSQL 16 makes a CREATEROLE
-- owner a member of the roles it made, with ADMIN OPTION), through every role it may
-- become (a NOINHERIT login's SET ROLE): PUBLIC's grants (public in a database made
-- before PostgreSQL 15), a grant to one of them, and what one owns (an owner may grant
-- itself CREATE again; a schema named after a person's login is first on their path). A
-- function made there for a more specific type than pg_catalog's runs as any login
-- whose search path has that schema (docs/how-to/roles.md).
WITH agents AS (
    SELECT r.oid, r.rolname::text AS login
    FROM pg_catalog.pg_roles AS r
    WHERE NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, 'undolog_agent', 'MEMBER')
      AND r.oid <> (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                    WHERE n.nspname = 'undolog')
),
becomes AS (
    SELECT a.login, m.oid
    FROM agents AS a
    JOIN pg_catalog.pg_roles AS m ON pg_catalog.pg_has_role(a.oid, m.oid, 'MEMBER')
),
open_to AS (
    SELECT b.login, n.nspname::text AS schema
    FROM becomes AS b CROSS JOIN pg_catalog.pg_namespace AS n
    WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
      AND (n.nspowner = b.oid OR pg_catalog.has_schema_privilege(b.oid, n.oid, 'CREATE'))
    UNION ALL
    SELECT b.login, NULL
    FROM becomes AS b JOIN pg_catalog.pg_database AS d
        ON d.datname = pg_catalog.current_database()
    WHERE d.datdba = b.oid OR pg_catalog.has_database_privilege(b.oid, d.oid, 'CREATE')
)
SELECT coalesce(pg_catalog.array_agg(DISTINCT o.schema ORDER BY o.schema)
                FILTER (WHERE o.schema IS NOT NULL), '{}') AS open,
       coalesce(pg_catalog.bool_or(o.schema IS NULL), false) AS database_open,
       coalesce(pg_catalog.array_agg(DISTINCT o.login ORDER BY o.login), '{}') AS logins
FROM open_to AS o

-- name: logins_that_may_become_another
-- `undolog health`: pairs of an agent login and a person's (approver or operator) login
-- where one may become the other, and the agent or person logins that hold CREATEROLE
-- on PostgreSQL 15. A member of another login may SET ROLE to it and set its password;
-- on PostgreSQL 15 a CREATEROLE login may set any non-superuser's password, as a member
-- of none (16 makes it a member of what it may alter, which the pairs show). Either way
-- one person holds both sides of a call, and decide_approval refuses such an approval
-- (42501). Superusers and the engine's owner are left out: either writes the engine's
-- tables directly, no approval needed.
WITH logins AS (
    SELECT r.oid, r.rolname::text AS login, r.rolcreaterole,
           pg_catalog.pg_has_role(r.oid, 'undolog_agent', 'MEMBER') AS agent,
           pg_catalog.pg_has_role(r.oid, 'undolog_approver', 'MEMBER')
           OR pg_catalog.pg_has_role(r.oid, 'undolog_operator', 'MEMBER') AS person
    FROM pg_catalog.pg_roles AS r
    WHERE r.rolcanlogin AND NOT r.rolsuper
      AND r.oid <> (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                    WHERE n.nspname = 'undolog')
)
SELECT
    coalesce((SELECT pg_catalog.array_agg(a.login || ' and ' || p.login
                                          ORDER BY a.login, p.login)
              FROM logins AS a JOIN logins AS p
                  ON a.agent AND p.person AND a.oid <> p.oid
                 AND (pg_catalog.pg_has_role(a.oid, p.oid, 'MEMBER')
                      OR pg_catalog.pg_has_role(p.oid, a.oid, 'MEMBER'))), '{}') AS pairs,
    coalesce((SELECT pg_catalog.array_agg(l.login ORDER BY l.login)
              FROM logins AS l
              WHERE l.rolcreaterole AND (l.agent OR l.person)
                AND pg_catalog.current_setting('server_version_num')::int < 160000),
             '{}') AS creators

-- name: may_list_pending_partitions
-- `undolog health`: whether this login may ask for the months still to attach.
SELECT pg_catalog.has_function_privilege('undolog.pending_partitions()', 'EXECUTE') AS allowed

-- name: pending_partitions
-- `undolog health`: the months maintenance created ahead but could not attach yet.
SELECT undolog.pending_partitions() AS name

-- name: worker_lag
-- `undolog health`: how many sessions are due for an undo walk, and how long the oldest
-- has waited for a worker. Read one state at a time, as undolog.metrics_worker does and
-- for its reason: due_sessions' OR of three states whole is one pass over every session
-- (1 M sessions: 1.2 s at each health check), each state alone a range of its partial
-- index (docs/performance-log.md).
-- Through due_sessions itself, so that the reader's row-level security still applies.
SELECT count(*) AS due,
    coalesce(extract(EPOCH FROM now() - min(d.due_since)), 0)::float8 AS lag_seconds
FROM (
    SELECT f.due_since FROM undolog.due_sessions AS f WHERE f.state = 'failed'
    UNION ALL
    SELECT a.due_since FROM undolog.due_sessions AS a WHERE a.state = 'active'
    UNION ALL
    SELECT c.due_since FROM undolog.due_sessions AS c WHERE c.state = 'compensating'
) AS d

-- name: halted_sessions_unresolved
-- `undolog health`: the halted sessions still waiting for an operator.
SELECT count(*) AS halted FROM undolog.sessions_list
WHERE state = 'halted' AND resolved_at IS NULL

-- name: approval_of_call
-- The approval request of a framework's call, found by its signature (undolog.call_approvals:
-- an approved call that has not run yet is held as pending while another request of its
-- session is).
SELECT approval_id, state_for_the_agent FROM undolog.call_approvals
WHERE session_id = %(session_id)s AND call_signature = %(call_signature)s

-- name: approval_of_step
-- The latest approval request of a session's call of a tool at a step (the framework's
-- call key).
SELECT approval_id, state FROM undolog.call_approvals
WHERE session_id = %(session_id)s AND step_index = %(step_index)s AND tool_name = %(tool_name)s
ORDER BY requested_at DESC
LIMIT 1

-- name: approval_at_step
-- The latest approval request at a session's step whatever its tool, with the tool's
-- journal name: for a framework call whose tool the run no longer has under the name the
-- model called (a prefixed or renamed toolset's tool is journaled under its own name).
SELECT approval_id, state, tool_name FROM undolog.call_approvals
WHERE session_id = %(session_id)s AND step_index = %(step_index)s
ORDER BY requested_at DESC
LIMIT 1

-- name: approval_call
-- The call an approval request asks about (its session, step, tool and arguments as
-- journaled), as the reader may see it (an approver every session's, an agent its own):
-- a framework adapter checks that it is the call the person was shown before it records
-- their decision.
SELECT c.session_id, c.step_index, c.tool_name, c.args
FROM undolog.session_approvals AS a
INNER JOIN undolog.session_calls AS c
    ON a.session_id = c.session_id AND a.effect_id = c.effect_id
WHERE a.approval_id = %(approval_id)s

-- name: ending_decision
-- The decision that ended a session (a rejection, or an expiry, of a call whose tool
-- follows the default rule): the first. No row when none did.
SELECT approval_id, decision FROM undolog.ending_decision(p_session_id => %(session_id)s)

-- name: role_exists
-- The demo dashboard: whether a login already exists (altered, then, not created).
SELECT FROM pg_catalog.pg_roles WHERE rolname = %(role)s

-- name: approval_session
-- The session of an approval request the reader may see (a signed link names only the
-- request): the dashboard's person, under their grants and row-level security.
SELECT session_id FROM undolog.session_approvals WHERE approval_id = %(approval_id)s

-- name: listen_approvals
-- The delivery worker's and the dashboard's wake-up: a new approval request (or a
-- decision) is NOTIFYed here.
LISTEN undolog_approvals

-- name: listen_notifications
-- The delivery worker's other wake-up: an operator's retry, or a new channel.
LISTEN undolog_notifications

-- name: enqueue_notifications
-- The delivery worker (operator): queue a delivery of each pending request on each live
-- channel not yet queued; answers how many.
SELECT undolog.enqueue_notifications()

-- name: claim_notification
-- The oldest due delivery, now this worker's for the lease; no row when none is due.
SELECT * FROM undolog.claim_notification(p_lease => %(lease)s)

-- name: finish_notification
-- One attempt's outcome (error NULL: sent); answers the delivery's state, or 'stale'.
-- Without p_warning, so that a worker of this package reports to an engine before
-- migration 0016 too (its mail would otherwise be sent again at every claim).
SELECT undolog.finish_notification(
    p_delivery_id => %(delivery_id)s, p_attempt => %(attempt)s, p_error => %(error)s
)

-- name: finish_notification_warned
-- A sent attempt that did not reach everyone: the warning says what it did not reach
-- (an e-mail's refused recipients), kept as the delivery's last_error.
SELECT undolog.finish_notification(
    p_delivery_id => %(delivery_id)s, p_attempt => %(attempt)s, p_error => NULL,
    p_warning => %(warning)s
)

-- name: add_notification_channel
-- An operator adds a channel (webhook or email) that announces approval requests.
SELECT undolog.add_notification_channel(
    p_name => %(name)s,
    p_kind => %(kind)s,
    p_target => %(target)s,
    p_config => %(config)s,
    p_secret => %(secret)s,
    p_dashboard_url => %(dashboard_url)s,
    p_by => %(by)s
)

-- name: remove_notification_channel
-- An operator removes a live channel; its deliveries not yet sent are cancelled.
SELECT undolog.remove_notification_channel(p_name => %(name)s, p_by => %(by)s)

-- name: retry_notification
-- An operator sends a delivery again now; answers its new max_attempts.
SELECT undolog.retry_notification(p_delivery_id => %(delivery_id)s, p_by => %(by)s)

-- name: notification_channels
-- `undolog notify list`: the live channels, or every channel with all.
SELECT * FROM undolog.notification_channels
WHERE live OR %(all)s
ORDER BY live DESC, channel_name, created_at

-- name: notification_deliveries
-- `undolog notify deliveries`: the latest deliveries, of one request or in one state when
-- given; next_attempt only for a delivery still due.
SELECT
    *,
    CASE WHEN state = 'pending' THEN next_attempt_at END AS next_attempt
FROM undolog.notification_deliveries
WHERE
    (%(approval_id)s::uuid IS NULL OR approval_id = %(approval_id)s)
    AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY created_at DESC, channel_name
LIMIT %(limit)s

-- name: metrics_sessions
-- The metrics scrape (undolog.metrics sends these metrics_* reads as one script): the
-- live sessions by state (exact), and the age of the oldest one's last change.
SELECT state, sessions, oldest_age_seconds FROM undolog.metrics_sessions ORDER BY state

-- name: metrics_sessions_estimated
-- The metrics scrape: sessions by state, estimated from the planner's statistics.
SELECT state, sessions FROM undolog.metrics_sessions_estimated ORDER BY state

-- name: metrics_approvals
-- The metrics scrape: the requests pending, past their deadline, and the oldest's age.
SELECT pending, past_deadline, oldest_age_seconds FROM undolog.metrics_approvals

-- name: metrics_approval_decisions
-- The metrics scrape: the last hour's decisions by decision, and how long they waited.
SELECT decision, decided, waited_seconds_sum, p50_seconds, p90_seconds, p99_seconds,
    window_seconds
FROM undolog.metrics_approval_decisions
ORDER BY decision

-- name: metrics_calls
-- The metrics scrape: the calls journaled in the last five minutes, by tier and state.
SELECT tier, state, calls, window_seconds FROM undolog.metrics_calls ORDER BY tier, state

-- name: metrics_compensations
-- The metrics scrape: the last five minutes' compensation attempts, failures, give-ups;
-- the entries in flight or waiting for a retry now.
SELECT attempts, failures, gave_up, in_flight, retrying, window_seconds
FROM undolog.metrics_compensations

-- name: metrics_worker
-- The metrics scrape: the sessions due for an undo walk, and how long the oldest waited.
SELECT due_sessions, oldest_due_age_seconds FROM undolog.metrics_worker

-- name: metrics_late_results
-- The metrics scrape: the late results (after the undo walk took their call) of the
-- last day's walks.
SELECT late_results, last_at FROM undolog.metrics_late_results

-- name: dashboard_inbox_deliveries
-- The approvals inbox: the notifications sent for the requests shown.
SELECT approval_id, channel_name, state, attempts, last_error
FROM undolog.notification_deliveries
WHERE approval_id = ANY(%(approval_ids)s)
ORDER BY channel_name

-- name: dashboard_inbox_prior_calls
-- The approvals inbox: for each request (the three arrays, one element a request), the
-- last %(prior)s calls its session made before it, oldest first.
SELECT p.approval_id, c.step_index, c.tool_name, c.tier, c.state, c.replay_count,
       left(c.args::text, %(cell)s::int) AS args_text, c.args_length
FROM unnest(%(approval_ids)s::uuid[], %(session_ids)s::uuid[], %(step_indexes)s::int[])
    AS p (approval_id, session_id, step_index)
CROSS JOIN LATERAL (
    SELECT c.step_index, c.tool_name, c.tier, c.state, c.replay_count, c.args,
           c.args_length
    FROM undolog.session_calls AS c
    WHERE c.session_id = p.session_id AND c.step_index < p.step_index
    ORDER BY c.step_index DESC
    LIMIT %(prior)s::int
) AS c
ORDER BY p.approval_id, c.step_index

-- name: dashboard_inbox_prior_counts
-- The approvals inbox: for each request (as dashboard_inbox_prior_calls), how many calls
-- its session made before it.
SELECT p.approval_id, count(c.effect_id) AS n
FROM unnest(%(approval_ids)s::uuid[], %(session_ids)s::uuid[], %(step_indexes)s::int[])
    AS p (approval_id, session_id, step_index)
LEFT JOIN undolog.session_calls AS c
    ON c.session_id = p.session_id AND c.step_index < p.step_index
GROUP BY p.approval_id

-- name: dashboard_pending_of
-- The pending requests among %(approval_ids)s, with what a person must see before
-- approving one for good: the call, its arguments (whole when short, else a head),
-- whose session and which login.
SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name, p.tier,
       CASE WHEN length(p.args::text) <= %(head)s::int THEN p.args END AS args,
       left(p.args::text, %(head)s::int) AS args_head,
       length(p.args::text) AS args_length,
       p.agent, p.owner_role, p.requested_by, p.purpose, p.requested_at,
       p.expires_at, p.expired
FROM undolog.pending_approvals AS p
WHERE p.approval_id = ANY(%(approval_ids)s)
ORDER BY p.requested_at, p.approval_id

-- name: dashboard_edit_of
-- A pending request as its edit page shows it: the call with its whole arguments.
SELECT p.approval_id, p.session_id, p.effect_id, p.step_index, p.tool_name, p.tier,
       p.args, p.agent, p.owner_role, p.requested_by, p.purpose, p.requested_at,
       p.expires_at, p.expired
FROM undolog.pending_approvals AS p
WHERE p.approval_id = %(approval_id)s

-- name: dashboard_edit_changes
-- The edit page's "What changes", before anything is approved: the journal's own
-- comparison (undolog.edit_changes, as Past decisions shows an edit once made) of the
-- request's stored arguments and the ones typed, every change whole (no cut, no bound:
-- the typed arguments are within the journal's payload limits). Against the stored
-- jsonb, not a copy read into Python: 0.10000000000000000001 is read as 0.1 there, and
-- the engine, which compares with the stored value, would record an edit the page
-- called no change. A value jsonb holds for the same (1.0 for 1) is no change; true for
-- 1 is one. No row when the request is not pending any more.
SELECT coalesce(c.changes, '[]') AS changes
FROM undolog.pending_approvals AS p,
     LATERAL undolog.edit_changes(p.args, %(edited)s::jsonb, 2147483647, 2147483647) AS c
WHERE p.approval_id = %(approval_id)s

-- name: dashboard_inbox_fingerprint
-- The approvals inbox's fingerprint: changes when a request comes, goes or expires. Read
-- every POLL_SECONDS by each open inbox, so over pending_approval_ids (the requests alone,
-- the rows and expired of pending_approvals without their joins).
SELECT coalesce(md5(string_agg(p.approval_id::text || p.expired::text, ','
                               ORDER BY p.approval_id)), '') AS f
FROM undolog.pending_approval_ids AS p

-- name: dashboard_sessions_page
-- The sessions list: one page of %(limit)s sessions, newest first, by keyset after the
-- cursor (%(after_at)s, %(after_id)s): never an OFFSET. Each filter is off when its
-- parameter is NULL. Sent unprepared (a custom plan for each page): the planner then
-- folds each NULL filter away and the keyset becomes an index range of
-- undolog_sessions_recent_idx or _state_recent_idx; a generic plan could not. A piece:
-- {tool_filter} is dashboard_sessions_by_tool when the search names a tool, else nothing
-- (composed with psycopg.sql).
SELECT s.session_id, s.agent, s.owner_role, s.state, s.created_at, s.updated_at,
       s.error, s.resolved_by,
       (SELECT count(*) FROM undolog.session_calls AS c
        WHERE c.session_id = s.session_id) AS calls
FROM undolog.sessions_list AS s
WHERE (%(state)s::text IS NULL OR s.state = %(state)s::text)
  AND (%(agent)s::text IS NULL OR s.agent = %(agent)s::text)
  AND (%(since)s::timestamptz IS NULL OR s.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR s.created_at < %(until)s::timestamptz)
  AND (%(id_low)s::uuid IS NULL
       OR s.session_id BETWEEN %(id_low)s::uuid AND %(id_high)s::uuid)
  {tool_filter}
  AND (%(after_at)s::timestamptz IS NULL
       OR (s.created_at, s.session_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY s.created_at DESC, s.session_id DESC
LIMIT %(limit)s::int

-- name: dashboard_sessions_by_tool
-- A piece of dashboard_sessions_page: the sessions one of whose calls used tool %(tool)s.
-- Spliced in only when the search names a tool, never as `%(tool)s IS NULL OR EXISTS`:
-- the planner turns an EXISTS into a semi-join (which stops at the page's last row) only
-- when it stands alone in the WHERE, before it folds away a NULL parameter's OR; inside
-- an OR it stays a subplan, run for every session or hashed over every call of the tool
-- (twice as slow for a rare tool over a million sessions).
AND EXISTS (
    SELECT FROM undolog.session_calls AS c
    WHERE c.session_id = s.session_id AND c.tool_name = %(tool)s::text
)

-- name: dashboard_state_counts
-- The sessions list: how many sessions the person sees in each of the states
-- %(states)s, each counted up to %(cap)s and no further (the page shows a count of
-- %(cap)s as more than %(cap)s - 1): one range of undolog_sessions_state_recent_idx a
-- state, at most %(cap)s index entries, where a count of them all read every session
-- (docs/performance-log.md). The ORDER BY is the index's: without it a rare state's
-- LIMIT looks cheap to reach by a sequential scan, which then reads every session.
SELECT st.state,
       (SELECT count(*) FROM (
            SELECT FROM undolog.sessions_list AS s
            WHERE s.state = st.state
            ORDER BY s.created_at DESC, s.session_id DESC
            LIMIT %(cap)s::int
        ) AS x) AS n
FROM unnest(%(states)s::text[]) AS st (state)

-- name: dashboard_session
-- One session's head, as the person may see it (none when they may not).
SELECT * FROM undolog.sessions_list WHERE session_id = %(session_id)s

-- name: dashboard_session_calls
-- One session's calls (at most %(limit)s), each payload as compact JSON text cut at
-- %(cell)s characters and its state history as lines: the text of each cell is made
-- here, in C, rather than in Python and the template (a session of a thousand calls
-- renders in well under 200 ms). The history is one object (effect id -> its lines),
-- built once: joined as a table, the planner guesses one row for it and loops over it
-- for every call.
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
                   E'\n' ORDER BY t.seq, t.at) AS lines
        FROM undolog.effect_timeline AS t
        WHERE t.session_id = %(session_id)s
        GROUP BY t.effect_id
    ) AS x
)
SELECT c.effect_id, c.step_index, c.tool_name, c.tier, c.state, c.error, c.attempts,
       c.replay_count, length(j.args) AS args_length, length(j.result) AS result_length,
       c.last_replayed_at AS last_replayed,
       left(j.args, %(cell)s::int) AS args_text,
       left(j.result, %(cell)s::int) AS result_text,
       coalesce((SELECT h.by_effect FROM history AS h) ->> c.effect_id::text, '')
           AS history
FROM undolog.session_calls AS c
-- each payload turned into text once (the view's lengths would do it again)
CROSS JOIN LATERAL (SELECT c.args::text AS args, c.result_snapshot::text AS result) AS j
WHERE c.session_id = %(session_id)s
ORDER BY c.step_index, c.executed_at
LIMIT %(limit)s::int

-- name: dashboard_session_undo
-- One session's undo stack, top first: its top %(limit)s entries (the walk's next ones),
-- and wherever they are the entry the walk halted at and every failed compensation (what
-- an operator acts on). number: the entry's place in this session's stack (1 = the first
-- pushed); stack_position counts across all sessions, so it reads 25-27 for a third
-- entry. total: the session's entries, shown or not.
SELECT e.undo_id, e.stack_position, e.number, e.step_index, e.tool_name,
       e.compensation_name, e.barrier, e.state, e.attempts, e.max_attempts, e.last_error,
       e.next_retry, e.total
FROM (
    SELECT u.undo_id, u.stack_position,
           row_number() OVER (ORDER BY u.stack_position) AS number,
           row_number() OVER (ORDER BY u.stack_position DESC) AS from_top,
           count(*) OVER () AS total,
           u.step_index, u.tool_name, u.compensation_name,
           u.compensation IS NULL AS barrier, u.state, u.attempts, u.max_attempts,
           u.last_error,
           CASE WHEN u.state IN ('pending', 'compensating') AND u.attempts > 0
                THEN u.next_attempt_at END AS next_retry
    FROM undolog.undo_stack_entries AS u
    WHERE u.session_id = %(session_id)s
) AS e
WHERE e.from_top <= %(limit)s OR e.undo_id = %(halt_undo_id)s
   OR e.state = 'compensation_failed'
ORDER BY e.stack_position DESC

-- name: dashboard_session_approvals
-- One session's approval requests, in the order they were made. An approval made with
-- edited arguments (edit, then approve) has them as compact JSON text cut at %(cell)s
-- characters, with their whole length, and the top-level arguments the edit changed
-- (approved_changes: as in dashboard_decisions_page): read through undolog.approval_edit,
-- which answers the reader only for a session of theirs (an agent its own, approvers and
-- operators every one), as session_approvals' row-level security does.
SELECT a.*, coalesce(a.expires_at <= now(), FALSE) AS expired,
       left(j.approved_args::text, %(cell)s::int) AS approved_args_text,
       length(j.approved_args::text) AS approved_args_length,
       ch.changes AS approved_changes, ch.total AS approved_changes_total
FROM undolog.session_approvals AS a
LEFT JOIN LATERAL (
    SELECT x.requested_args, x.approved_args
    FROM undolog.approval_edit(p_session_id => a.session_id, p_effect_id => a.effect_id) AS x
    -- only an approval can carry an edit: the others do not call the function (OFFSET 0
    -- keeps this subquery whole, so that the state is its one-time filter)
    WHERE a.state = 'approved' AND x.approval_id = a.approval_id
    OFFSET 0
) AS j ON TRUE
LEFT JOIN LATERAL undolog.edit_changes(j.requested_args, j.approved_args, %(change)s::int,
                                        %(changes)s::int) AS ch ON TRUE
WHERE a.session_id = %(session_id)s
ORDER BY a.requested_at

-- name: dashboard_session_deliveries
-- One session's notifications; the reader's row-level security applies (an agent reads
-- its own sessions' only).
SELECT *, CASE WHEN state = 'pending' THEN next_attempt_at END AS next_try
FROM undolog.notification_deliveries
WHERE session_id = %(session_id)s
ORDER BY created_at, channel_name

-- name: dashboard_session_states
-- One session's state history.
SELECT * FROM undolog.session_state_history WHERE session_id = %(session_id)s
ORDER BY history_id

-- name: dashboard_session_actions
-- What operators did to one session (staff only).
SELECT * FROM undolog.operator_action_log WHERE session_id = %(session_id)s
ORDER BY action_id

-- name: dashboard_session_chain_length
-- How many records one session's history chain holds (its head's seq; staff read every
-- head): the page recomputes the chain on each view only up to a bound.
SELECT coalesce(max(h.seq), 0) AS records
FROM undolog.chain_heads AS h
WHERE h.session_id = %(session_id)s

-- name: dashboard_session_chain
-- One session's history hash chain recomputed (staff only, as undolog.verify_chain): no
-- row is verified clean.
SELECT seq, table_name, row_key, problem, expected, found
FROM undolog.verify_chain(p_session_id => %(session_id)s)

-- name: dashboard_session_fingerprint
-- One session page's fingerprint: changes when anything the page shows changes.
SELECT concat_ws('|',
    (SELECT s.state || s.updated_at::text FROM undolog.sessions_list AS s
     WHERE s.session_id = %(session_id)s),
    -- a call still executing since its intercept has no seq yet: counted
    (SELECT count(*)::text || ':' || coalesce(max(t.seq), 0)::text
     FROM undolog.effect_timeline AS t
     WHERE t.session_id = %(session_id)s),
    (SELECT max(u.updated_at) FROM undolog.undo_stack_entries AS u
     WHERE u.session_id = %(session_id)s),
    (SELECT max(a.decided_at) FROM undolog.session_approvals AS a
     WHERE a.session_id = %(session_id)s),
    (SELECT count(*) FROM undolog.session_approvals AS a
     WHERE a.session_id = %(session_id)s),
    (SELECT max(coalesce(d.last_attempt_at, d.created_at))::text || count(*)
     FROM undolog.notification_deliveries AS d
     WHERE d.session_id = %(session_id)s)) AS f

-- name: dashboard_call_args
-- One call's arguments, whole (the page a payload's head links to).
SELECT c.step_index, c.tool_name, c.args AS value
FROM undolog.session_calls AS c
WHERE c.session_id = %(session_id)s AND c.effect_id = %(effect_id)s

-- name: dashboard_call_result
-- One call's result, whole (as dashboard_call_args).
SELECT c.step_index, c.tool_name, c.result_snapshot AS value
FROM undolog.session_calls AS c
WHERE c.session_id = %(session_id)s AND c.effect_id = %(effect_id)s

-- name: dashboard_call_approved_args
-- The arguments one call's approval let it run with instead of the requested ones (edit,
-- then approve), whole; no row when the approval made no edit, or the session is not the
-- reader's to see (undolog.approval_edit's rule, as dashboard_call_args').
SELECT c.step_index, c.tool_name, x.approved_args AS value
FROM undolog.session_calls AS c
CROSS JOIN LATERAL undolog.approval_edit(
    p_session_id => c.session_id, p_effect_id => c.effect_id
) AS x
WHERE c.session_id = %(session_id)s AND c.effect_id = %(effect_id)s

-- name: dashboard_delivery_in_session
-- Whether a notification delivery is one of this session's requests'.
SELECT 1 AS x FROM undolog.notification_deliveries
WHERE session_id = %(session_id)s AND delivery_id = %(delivery_id)s

-- name: dashboard_undo_entry_in_session
-- Whether the person sees an undo entry as one of this session's.
SELECT 1 AS found FROM undolog.undo_stack_entries AS u
WHERE u.undo_id = %(undo_id)s AND u.session_id = %(session_id)s

-- name: dashboard_decisions_page
-- Past decisions: one page of %(limit)s, newest decision first, by keyset after the
-- cursor (%(after_at)s, %(after_id)s), each filter off when its parameter is NULL; sent
-- unprepared, as dashboard_sessions_page. An approval made with edited arguments has
-- them cut at %(cell)s characters with their whole length, and approved_changes: the
-- top-level arguments the edit changed (undolog.edit_changes: at most %(changes)s, each
-- cut at %(change)s characters; approved_changes_total counts them all), so that the
-- changed value shows even where it falls past the head's cut.
SELECT d.approval_id, d.session_id, d.effect_id, d.step_index, d.tool_name, d.tier,
       left(d.args::text, %(cell)s::int) AS args_text,
       length(d.args::text) AS args_length,
       d.decision, d.decided_by, d.decided_role, d.reason, d.decided_at,
       d.requested_at, d.waited, d.agent, d.owner_role, d.requested_by,
       d.effect_state,
       left(d.approved_args::text, %(cell)s::int) AS approved_args_text,
       length(d.approved_args::text) AS approved_args_length,
       ch.changes AS approved_changes, ch.total AS approved_changes_total
FROM undolog.decided_approvals AS d
LEFT JOIN LATERAL undolog.edit_changes(d.args, d.approved_args, %(change)s::int,
                                        %(changes)s::int) AS ch ON TRUE
WHERE (%(since)s::timestamptz IS NULL OR d.decided_at >= %(since)s::timestamptz)
  AND (%(by)s::text IS NULL OR d.decided_role = %(by)s::text)
  AND (%(after_at)s::timestamptz IS NULL
       OR (d.decided_at, d.approval_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY d.decided_at DESC, d.approval_id DESC
LIMIT %(limit)s::int

-- name: dashboard_rollback_to_plan
-- What undoing a session down to a step would undo, in the walk's order (the engine's
-- undolog.rollback_to_plan: the same rule rollback_to applies).
SELECT undo_id, step_index, tool_name, tier, effect_state, action
FROM undolog.rollback_to_plan(p_session_id => %(session_id)s, p_step_index => %(step)s)

-- name: dashboard_login_roles
-- Who logged in to the dashboard, and which of the engine's roles (the three parameters,
-- undolog.dashboard.websessions.ROLES) the login holds.
SELECT session_user,
       pg_catalog.pg_has_role(session_user, %(agent)s::name, 'USAGE') AS agent,
       pg_catalog.pg_has_role(session_user, %(approver)s::name, 'USAGE') AS approver,
       pg_catalog.pg_has_role(session_user, %(operator)s::name, 'USAGE') AS operator

-- name: dashboard_tools
-- The Tools page: the registry as `undolog tools list` shows it (live registrations, or
-- every one with all), at most %(limit)s; the reader's row-level security applies (an
-- agent reads its own login's tools only).
SELECT t.tool_id, t.owner_role, t.tool_name, t.tier, t.compensation, t.on_reject,
       t.registered_at, t.registered_by, t.live, t.retired_at, t.retired_by, t.retire_reason
FROM undolog.registered_tools AS t
WHERE (t.live OR %(all)s::boolean)
  AND (%(owner)s::text IS NULL OR t.owner_role = %(owner)s::text)
ORDER BY t.live DESC, t.owner_role, t.tool_name, t.registered_at
LIMIT %(limit)s::int

-- name: dashboard_tool_of
-- One registration, as the Tools page's retire confirmation restates it.
SELECT t.tool_id, t.owner_role, t.tool_name, t.tier, t.compensation, t.on_reject,
       t.registered_at, t.registered_by, t.live
FROM undolog.registered_tools AS t
WHERE t.tool_id = %(tool_id)s

-- name: dashboard_live_tool
-- The live registration of a tool of a login, as the register form's replace
-- confirmation shows it beside the new one (none: nothing would be retired).
SELECT t.tool_id, t.owner_role, t.tool_name, t.tier, t.compensation, t.on_reject,
       t.registered_at, t.registered_by, t.live
FROM undolog.registered_tools AS t
WHERE t.owner_role = %(owner)s AND t.tool_name = %(tool_name)s AND t.live

-- name: dashboard_channels
-- The Notification channels page: the channels as `undolog notifications list` shows
-- them, never their secrets (the view holds none: has_secret says whether one is set);
-- live ones, or every one with all, at most %(limit)s.
SELECT c.channel_id, c.channel_name, c.kind, c.body_format, c.destination, c.smtp,
       c.has_secret, c.dashboard_url, c.created_by, c.created_role, c.created_at, c.live,
       c.removed_at, c.removed_by
FROM undolog.notification_channels AS c
WHERE c.live OR %(all)s::boolean
ORDER BY c.live DESC, c.channel_name, c.created_at
LIMIT %(limit)s::int

-- name: dashboard_live_channel
-- The live channel of a name, as the Notification channels page's remove confirmation
-- restates it.
SELECT c.channel_id, c.channel_name, c.kind, c.body_format, c.destination, c.smtp,
       c.has_secret, c.dashboard_url, c.created_by, c.created_at
FROM undolog.notification_channels AS c
WHERE c.channel_name = %(name)s AND c.live

-- name: dashboard_partitions
-- The Maintenance page: the partitions of the journal's partitioned tables (the effect
-- log and its history: their months and each one's DEFAULT), newest month first, at most
-- %(limit)s. Read from the catalog alone, so that it takes no lock on any of them and
-- never queues behind maintenance: sizes and rows are pg_class's estimates as of the
-- last VACUUM or ANALYZE (-1 rows: never counted), not pg_total_relation_size, which
-- locks the table. The bounds are constants: pg_get_expr is given no relation (0), which
-- it would otherwise open, and lock, to name columns.
SELECT p.relname AS parent, c.relname AS name, b.bounds IS NULL AS is_default,
       b.bounds[1]::timestamptz AS lower_bound, b.bounds[2]::timestamptz AS upper_bound,
       c.reltuples::bigint AS est_rows,
       (c.relpages::bigint + coalesce(t.relpages, 0)
        + coalesce((SELECT sum(ic.relpages) FROM pg_catalog.pg_index AS x
                    JOIN pg_catalog.pg_class AS ic ON ic.oid = x.indexrelid
                    WHERE x.indrelid = c.oid), 0))
       * pg_catalog.current_setting('block_size')::bigint AS est_bytes
FROM pg_catalog.pg_class AS p
JOIN pg_catalog.pg_inherits AS i ON i.inhparent = p.oid AND NOT i.inhdetachpending
JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
LEFT JOIN pg_catalog.pg_class AS t ON t.oid = c.reltoastrelid
CROSS JOIN LATERAL (
    SELECT pg_catalog.regexp_match(
        pg_catalog.pg_get_expr(c.relpartbound, 0),
        '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$'
    ) AS bounds
) AS b
WHERE p.relnamespace = 'undolog'::regnamespace AND p.relkind = 'p'
ORDER BY b.bounds IS NULL, b.bounds[1]::timestamptz DESC, p.relname
LIMIT %(limit)s::int

-- name: dashboard_retention
-- The Maintenance page: the retention setting that maintenance reads (NULL: unset, 12
-- months) and the start of the current UTC month, to say what a run would drop and create.
SELECT nullif(pg_catalog.btrim(pg_catalog.current_setting('undolog.retention_months', true)), '')
           AS setting,
       pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
           AS month_start

-- name: dashboard_anchors
-- The Maintenance page: the latest anchors of the history chains, newest first, at most
-- %(limit)s, each with how many sessions' heads it records and its hash (hex).
SELECT a.anchor_id, a.written_at,
       (SELECT count(*) FROM pg_catalog.jsonb_object_keys(a.heads)) AS sessions,
       pg_catalog.encode(a.anchor_hash, 'hex') AS hash, pg_catalog.encode(a.prev, 'hex') AS prev
FROM undolog.chain_anchors AS a
ORDER BY a.anchor_id DESC
LIMIT %(limit)s::int

-- name: dashboard_write_anchor
-- An operator writes an anchor from the Maintenance page (undolog.write_anchor, as
-- `undolog anchor write`): answers the latest, with the heads and the anchors of the
-- call (more than one when more heads moved than one anchor records).
SELECT max(anchor_id) AS anchor_id, min(anchor_id) AS first_id,
       sum(sessions)::integer AS sessions,
       (array_agg(hash ORDER BY anchor_id DESC))[1] AS hash
FROM undolog.write_anchor()

-- name: dashboard_lease_expired
-- The active sessions whose lease ran out (their agent stopped heartbeating): what
-- undolog.recover, run next on the Maintenance page after the batches, is about to fail
-- (those whose lease ran out since the batches, or that one of them skipped).
SELECT d.session_id FROM undolog.due_sessions AS d WHERE d.state = 'active'

-- name: local_lock_timeout
-- How long the rest of this transaction waits for a lock, then gives up with nothing
-- done: the Maintenance page's actions (another maintenance run, a long reader: rather
-- than queue a strong lock that every agent's call would queue behind), and the worker's
-- claims (a session another transaction holds is left for the next pass; lock_session
-- takes a shorter lock_timeout than its own).
SELECT pg_catalog.set_config('lock_timeout', %(lock_timeout)s, true)
