-- undolog.metrics_late_results: one row: how many results arrived after the undo walk had
-- taken their call (late_commit and late_fail events of the effect history), for the
-- calls whose compensation the walk claimed in the last 24 hours (window_seconds), and
-- when the last of them arrived. Each flags a session for a person
-- (sessions_overview.needs_attention).
-- Why through the walk: a result can only be late for a call the walk has claimed, and
-- each claim is an undo-history row (read through undolog_undo_history_at_idx, migration
-- 0012); its undo entry names the call (session, effect, executed_at: the history's
-- partition), whose history rows are then one primary-key lookup in one partition. An
-- index on the effect history itself would cost every journaled call. A result arriving
-- more than a day after its call's last claim is not counted here (sessions_overview
-- still flags its session).
-- Owner's rights, granted to approver and operator only.
CREATE OR REPLACE VIEW undolog.metrics_late_results AS
WITH walked AS (
    SELECT DISTINCT
        u.session_id,
        u.effect_id,
        u.executed_at
    FROM undolog.undolog_undo_history AS uh
    INNER JOIN undolog.undolog_undo_stack AS u
        ON uh.undo_id = u.undo_id AND uh.session_id = u.session_id
    WHERE uh.at > now() - interval '24 hours' AND uh.to_state = 'compensating'
)

-- An aggregate per call, so that each is one lookup: joined flat, the planner reckons
-- the rare late events cheaper to find by reading the whole history once.
SELECT
    coalesce(sum(l.late), 0)::bigint AS late_results,
    max(l.last_at) AS last_at,
    86400::double precision AS window_seconds
FROM walked AS w
CROSS JOIN LATERAL (
    SELECT
        count(*) AS late,
        max(h.at) AS last_at
    FROM undolog.undolog_effect_history AS h
    WHERE
        h.session_id = w.session_id
        AND h.executed_at = w.executed_at
        AND h.effect_id = w.effect_id
        AND h.event IN ('late_commit', 'late_fail')
) AS l;

COMMENT ON VIEW undolog.metrics_late_results IS
'Late results (after the undo walk took their call) for the calls walked in the last 24 '
'hours: how many, the last one.';

REVOKE ALL ON undolog.metrics_late_results FROM public;
