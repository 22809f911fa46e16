-- undolog.metrics_worker: one row: how many sessions a recovery worker must act on now
-- and how long the oldest has waited (seconds), by the one rule of undolog.due_sessions
-- (which `undolog health --max-lag` also measures). A running worker keeps both near 0.
-- Read one state at a time: due_sessions' OR of three rules is planned as one pass over
-- every session, while each state alone reaches its partial index (failed and
-- compensating: undolog_sessions_walk_idx; active: undolog_sessions_lease_idx), so the
-- cost is the live sessions', not the journal's. The states are the only ones
-- due_sessions can answer, so the union is the view's rows, each once.
-- Owner's rights, granted to approver and operator only (as due_sessions).
CREATE OR REPLACE VIEW undolog.metrics_worker AS
WITH due AS (
    SELECT d.due_since FROM undolog.due_sessions AS d
    WHERE d.state = 'failed'
    UNION ALL
    SELECT d.due_since FROM undolog.due_sessions AS d
    WHERE d.state = 'active'
    UNION ALL
    SELECT d.due_since FROM undolog.due_sessions AS d
    WHERE d.state = 'compensating'
)

SELECT
    count(*) AS due_sessions,
    coalesce(extract(EPOCH FROM now() - min(due.due_since)), 0)::double precision
        AS oldest_due_age_seconds
FROM due;

COMMENT ON VIEW undolog.metrics_worker IS
'Sessions due for the recovery worker and the age of the oldest (the worker''s lag).';

REVOKE ALL ON undolog.metrics_worker FROM public;
