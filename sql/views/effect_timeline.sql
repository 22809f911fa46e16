-- undolog.effect_timeline: every event of every journaled call, in order (ORDER BY seq,
-- at: seq is the event's place in its session's history chain): what a person reads to
-- learn what a session did, was replayed, failed, or undone. A call's creation and its
-- commit are recorded in its own row (migration 0013: no history row, so history_id is
-- NULL for them); every other event is a history row. A COMPENSABLE call that committed
-- before any other change has one link for both (the creation shows the commit's seq,
-- and comes first by its time); one still executing since its intercept has no seq yet
-- (it sorts last). Calls journaled before 0013 have history rows for their events then.
-- security_invoker: filtered by the reader's row-level security, like the tables.
CREATE OR REPLACE VIEW undolog.effect_timeline
WITH (security_invoker = TRUE) AS
SELECT
    h.session_id,
    h.history_id,
    h.at,
    e.step_index,
    e.tool_name,
    e.tier,
    h.event,
    h.from_state,
    h.to_state,
    h.actor,
    h.detail,
    h.effect_id,
    h.chain_seq AS seq
FROM undolog.undolog_effect_history AS h
INNER JOIN undolog.undolog_effect_log AS e
    ON
        h.session_id = e.session_id
        AND h.effect_id = e.effect_id
        AND h.executed_at = e.executed_at
UNION ALL
SELECT
    e.session_id,
    NULL::bigint AS history_id,
    e.executed_at AS at,
    e.step_index,
    e.tool_name,
    e.tier,
    'transition' AS event,
    NULL::text AS from_state,
    CASE e.tier WHEN 'compensable' THEN 'executing' ELSE 'pending' END AS to_state,
    e.intercepted_by AS actor,
    NULL::jsonb AS detail,
    e.effect_id,
    coalesce(e.chain_seq, e.commit_seq) AS seq
FROM undolog.undolog_effect_log AS e
WHERE e.events_in_row
UNION ALL
SELECT
    e.session_id,
    NULL::bigint AS history_id,
    e.committed_at AS at,
    e.step_index,
    e.tool_name,
    e.tier,
    'transition' AS event,
    'executing' AS from_state,
    'committed' AS to_state,
    e.committed_by AS actor,
    NULL::jsonb AS detail,
    e.effect_id,
    e.commit_seq AS seq
FROM undolog.undolog_effect_log AS e
WHERE e.committed_at IS NOT NULL;

COMMENT ON VIEW undolog.effect_timeline IS
'Every state change and replay of every call (ORDER BY session_id, seq, at).';

REVOKE ALL ON undolog.effect_timeline FROM public;
