-- undolog.chain_events: every link of the history chains, of one session (p_session_id)
-- or all, from p_since on (the row's own time; NULL: from the start), of the sessions in
-- a range of ids (p_after_session < session_id <= p_through_session; a NULL bound: none
-- on that side), which `undolog verify` reads one batch at a time: where the row
-- lives (table_name, row_key), its stored link (seq, prev, hash) and its canonical
-- record as computed now from its columns (undolog.chain_record_*). A row that was not
-- changed hashes to its stored hash: hash = undolog.chain_hash(prev, canonical).
-- The same rows are what `undolog export` writes and `undolog verify` checks. With
-- p_records false, canonical is NULL and no record is built (the planner drops them): the
-- same rows, for what only counts them (`undolog verify`'s counts, assert_chain), at a
-- small part of the cost, without a second definition of which rows they are.
-- Staff only (grants.sql): an agent reads its own sessions' links in the history tables
-- themselves, under their row-level security.
CREATE OR REPLACE FUNCTION undolog.chain_events(
    p_session_id uuid DEFAULT NULL,
    p_since timestamptz DEFAULT NULL,
    p_after_session uuid DEFAULT NULL,
    p_through_session uuid DEFAULT NULL,
    p_records boolean DEFAULT TRUE
)
RETURNS TABLE (
    session_id uuid, seq bigint, prev bytea, hash bytea, table_name text, row_key text,
    at timestamptz, canonical text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
-- Planned for the arguments given: one session's rows, or a range's, are then read by
-- their keys (a generic plan would scan every history for `p_session_id IS NULL OR ...`).
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT e.session_id, e.seq, e.prev, e.hash, e.table_name, e.row_key, e.at,
           CASE WHEN p_records THEN e.canonical END
    FROM (
        SELECT h.session_id, h.chain_seq AS seq, h.chain_prev AS prev, h.chain_hash AS hash,
               'undolog_session_history' AS table_name,
               'history_id=' || h.history_id AS row_key, h.at,
               undolog.chain_record_session_history(
                   h.session_id, h.history_id, h.from_state, h.to_state, h.at, h.actor,
                   h.detail) AS canonical
        FROM undolog.undolog_session_history AS h
        UNION ALL
        SELECT h.session_id, h.chain_seq, h.chain_prev, h.chain_hash,
               'undolog_effect_history', 'history_id=' || h.history_id, h.at,
               undolog.chain_record_effect_history(
                   h.session_id, h.effect_id, h.executed_at, h.history_id, h.event,
                   h.from_state, h.to_state, h.at, h.actor, h.detail)
        FROM undolog.undolog_effect_history AS h
        UNION ALL
        -- A call's creation and its commit, recorded in its own row (migration 0013;
        -- a call journaled before it has history rows for the events it had then). The
        -- commit's record is the whole call: a COMPENSABLE call that committed before
        -- any other change has that one link. A creation that should be linked and is
        -- not (events_in_row, past its first change) is reported unchained, as is a
        -- commit without its link; a COMPENSABLE call still executing since its
        -- intercept is not linked yet.
        SELECT e.session_id, e.chain_seq, e.chain_prev, e.chain_hash,
               'undolog_effect_log', 'effect_id=' || e.effect_id || ' created', e.executed_at,
               undolog.chain_record_effect(
                   'created', e.session_id, e.effect_id, e.executed_at, e.call_signature,
                   e.step_index, e.tool_name, e.tier, e.args, e.intercepted_by, e.tool_id,
                   NULL, NULL, NULL)
        FROM undolog.undolog_effect_log AS e
        WHERE e.chain_seq IS NOT NULL
           OR (e.events_in_row AND e.committed_at IS NULL
               AND NOT (e.tier = 'compensable' AND e.state = 'executing'))
        UNION ALL
        SELECT e.session_id, e.commit_seq, e.commit_prev, e.commit_hash,
               'undolog_effect_log', 'effect_id=' || e.effect_id || ' committed',
               e.committed_at,
               undolog.chain_record_effect(
                   'committed', e.session_id, e.effect_id, e.executed_at, e.call_signature,
                   e.step_index, e.tool_name, e.tier, e.args, e.intercepted_by, e.tool_id,
                   e.committed_at, e.committed_by, e.result_snapshot)
        FROM undolog.undolog_effect_log AS e
        WHERE e.committed_at IS NOT NULL OR e.commit_seq IS NOT NULL
        UNION ALL
        SELECT h.session_id, h.chain_seq, h.chain_prev, h.chain_hash,
               'undolog_undo_history', 'history_id=' || h.history_id, h.at,
               undolog.chain_record_undo_history(
                   h.session_id, h.history_id, h.undo_id, h.event, h.from_state,
                   h.to_state, h.attempt, h.at, h.actor, h.detail)
        FROM undolog.undolog_undo_history AS h
        UNION ALL
        SELECT a.session_id, a.chain_seq, a.chain_prev, a.chain_hash,
               'undolog_operator_actions', 'action_id=' || a.action_id, a.at,
               undolog.chain_record_operator_action(
                   a.session_id, a.action_id, a.action, a.undo_id, a.performed_by,
                   a.reason, a.at, a.actor)
        FROM undolog.undolog_operator_actions AS a
        UNION ALL
        SELECT a.session_id, a.chain_seq, a.chain_prev, a.chain_hash,
               'undolog_approval_requests', 'approval_id=' || a.approval_id || ' request',
               a.requested_at,
               undolog.chain_record_approval_request(
                   a.session_id, a.approval_id, a.effect_id, a.executed_at,
                   a.requested_at, a.expires_at)
        FROM undolog.undolog_approval_requests AS a
        UNION ALL
        SELECT a.session_id, a.decision_seq, a.decision_prev, a.decision_hash,
               'undolog_approval_requests', 'approval_id=' || a.approval_id || ' decision',
               a.decided_at,
               undolog.chain_record_approval_decision(
                   a.session_id, a.approval_id, a.state, a.decided_at, a.decided_by,
                   a.reason, a.decided_role)
        FROM undolog.undolog_approval_requests AS a
        WHERE a.state <> 'pending' OR a.decision_seq IS NOT NULL
    ) AS e
    WHERE (p_session_id IS NULL OR e.session_id = p_session_id)
      AND (p_since IS NULL OR e.at >= p_since)
      AND (p_after_session IS NULL OR e.session_id > p_after_session)
      AND (p_through_session IS NULL OR e.session_id <= p_through_session);
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_events(uuid, timestamptz, uuid, uuid, boolean) FROM public;
