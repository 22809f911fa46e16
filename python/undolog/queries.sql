-- The SQL that the Python binding, the CLI and the faces send, by name (undolog.queries).
-- Named parameters, and the engine's functions called in named notation.

-- name: complete_session
-- A session's end, when its agent finished without error.
SELECT undolog.complete_session(p_session_id => %(session_id)s)

-- name: fail_session
-- A session's end, when its agent failed: the undo walk is due.
SELECT undolog.fail_session(p_session_id => %(session_id)s, p_error => %(error)s)

-- name: recover
-- Fail the sessions whose lease expired; answers every session whose undo walk must run.
SELECT * FROM undolog.recover()

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
-- The history rows (one session, or all; from since on) that do not match their chain.
SELECT session_id, seq, table_name, row_key, problem, expected, found
FROM undolog.verify_chain(p_session_id => %(session_id)s, p_since => %(since)s)

-- name: chain_events_count
-- How many sessions and history rows a verification over the same scope checked.
SELECT count(DISTINCT session_id) AS sessions, count(*) AS rows
FROM undolog.chain_events(p_session_id => %(session_id)s, p_since => %(since)s)

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
