-- undolog.sessions_overview: one row per session, for people and dashboards: its state,
-- lease, and how many of its journaled calls are where.
--   undone_calls counts only calls whose compensation succeeded (compensated); calls
--     still being undone or whose compensation failed for good are not undone, and are
--     counted apart (compensating_calls, compensation_failed_calls);
--   resolved_by / resolved_at / resolution tell a halted session an operator abandoned
--     (resolved) from one still waiting for an operator (resolved_at IS NULL);
--   needs_attention / attention_reason flag a session an operator must look at although
--     its state machine is done with it: a commit or fail arrived after the undo walk took
--     its call (its effect history holds a late_commit or late_fail event, the first of
--     which is described): its agent was paused past its lease.
-- New columns go at the end: CREATE OR REPLACE VIEW keeps the existing ones in place.
-- security_invoker: the reader's row-level security applies, so an agent sees only its
-- own sessions and approver/operator see every one.
CREATE OR REPLACE VIEW undolog.sessions_overview
WITH (security_invoker = TRUE) AS
SELECT
    s.session_id,
    s.agent,
    s.owner_role,
    s.state,
    s.created_at,
    s.updated_at,
    s.lease_expires_at,
    s.error,
    count(e.effect_id) AS calls,
    count(e.effect_id) FILTER (WHERE e.state = 'committed') AS committed_calls,
    count(e.effect_id) FILTER (WHERE e.state = 'compensated') AS undone_calls,
    count(e.effect_id) FILTER (WHERE e.tier = 'irreversible' AND e.state = 'pending')
        AS awaiting_approval_calls,
    coalesce(sum(e.replay_count), 0) AS replays,
    count(e.effect_id) FILTER (WHERE e.state = 'compensating') AS compensating_calls,
    count(e.effect_id) FILTER (WHERE e.state = 'compensation_failed')
        AS compensation_failed_calls,
    s.resolved_by,
    s.resolved_at,
    s.resolution,
    -- Derived from the effects' history, the record of what arrived: no flag to keep in
    -- step with it, and the session row is not written when a late result arrives.
    late.at IS NOT NULL AS needs_attention,
    CASE WHEN late.at IS NOT NULL THEN pg_catalog.format(
        '%s arrived at %s for effect %s after the undo walk took it (%s): its agent was '
        'paused past its lease; the effect may stand although the journal says it was '
        'undone',
        CASE late.event WHEN 'late_commit' THEN 'a commit' ELSE 'a fail' END,
        late.at, late.effect_id, late.from_state
    ) END AS attention_reason
FROM undolog.undolog_sessions AS s
LEFT JOIN undolog.undolog_effect_log AS e ON s.session_id = e.session_id
LEFT JOIN LATERAL (
    SELECT
        h.event,
        h.at,
        h.effect_id,
        h.from_state
    FROM undolog.undolog_effect_history AS h
    WHERE h.session_id = s.session_id AND h.event IN ('late_commit', 'late_fail')
    ORDER BY h.history_id
    LIMIT 1
) AS late ON TRUE
GROUP BY s.session_id, late.event, late.at, late.effect_id, late.from_state;

COMMENT ON VIEW undolog.sessions_overview IS
'One row per session with counts of its calls by state (undone = compensated) and, for a '
'halted session, whether an operator abandoned it; filtered by the reader''s RLS.';

REVOKE ALL ON undolog.sessions_overview FROM public;
