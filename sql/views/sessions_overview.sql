-- undolog.sessions_overview: one row per session, for people and dashboards: its state,
-- lease, and how many of its journaled calls are where.
--   undone_calls counts only calls whose compensation succeeded (compensated); calls
--     still being undone or whose compensation failed for good are not undone, and are
--     counted apart (compensating_calls, compensation_failed_calls);
--   resolved_by / resolved_at / resolution tell a halted session an operator abandoned
--     (resolved) from one still waiting for an operator (resolved_at IS NULL).
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
    s.resolution
FROM undolog.undolog_sessions AS s
LEFT JOIN undolog.undolog_effect_log AS e ON s.session_id = e.session_id
GROUP BY s.session_id;

COMMENT ON VIEW undolog.sessions_overview IS
'One row per session with counts of its calls by state (undone = compensated) and, for a '
'halted session, whether an operator abandoned it; filtered by the reader''s RLS.';

REVOKE ALL ON undolog.sessions_overview FROM public;
