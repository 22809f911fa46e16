-- undolog.metrics_calls: the calls journaled in the last five minutes (window_seconds),
-- by tier and by the state they are in now (committed, pending, compensated...). Reached
-- through the undo stack's index on executed_at (one entry per call, pushed by intercept
-- anyway) and the effect log's primary key, so that a scrape reads
-- the window's calls and adds no index to the hot path. A combination with no call in
-- the window has no row.
-- Owner's rights, granted to approver and operator only: it counts every login's calls.
CREATE OR REPLACE VIEW undolog.metrics_calls AS
SELECT
    e.tier,
    e.state,
    count(*) AS calls,
    300::double precision AS window_seconds
FROM undolog.undolog_undo_stack AS u
INNER JOIN undolog.undolog_effect_log AS e
    ON
        u.session_id = e.session_id
        AND u.effect_id = e.effect_id
        AND u.executed_at = e.executed_at
WHERE
    u.executed_at > now() - interval '5 minutes'
    AND e.executed_at > now() - interval '5 minutes'
GROUP BY e.tier, e.state;

COMMENT ON VIEW undolog.metrics_calls IS
'Calls journaled in the last five minutes, by tier and current state.';

REVOKE ALL ON undolog.metrics_calls FROM public;
