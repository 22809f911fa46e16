-- undolog.metrics_compensations: one row about the undo walks.
--   attempts, failures, gave_up: compensation attempts started, attempts that failed
--     (to be retried or not) and entries that exhausted their attempts (their session
--     halted), in the last five minutes (window_seconds), from the undo history (read
--     through undolog_undo_history_at_idx, migration 0012).
--   in_flight, retrying: entries claimed by a walker now, and entries waiting for their
--     retry after a failed attempt, in the sessions being walked. Reached from the
--     compensating sessions (undolog_sessions_walk_idx) and their unfinished entries
--     (undolog_undo_stack_unfinished_idx): a finished session's entries are never read.
-- Owner's rights, granted to approver and operator only (the undo history is staff-only).
CREATE OR REPLACE VIEW undolog.metrics_compensations AS
WITH history AS (
    SELECT
        count(*) FILTER (WHERE uh.to_state = 'compensating') AS attempts,
        count(*) FILTER (
            WHERE uh.from_state = 'compensating'
            AND uh.to_state IN ('pending', 'compensation_failed')
        ) AS failures,
        count(*) FILTER (
            WHERE uh.from_state = 'compensating' AND uh.to_state = 'compensation_failed'
        ) AS gave_up
    FROM undolog.undolog_undo_history AS uh
    WHERE uh.at > now() - interval '5 minutes'
),

walking AS (
    SELECT
        count(*) FILTER (WHERE us.state = 'compensating') AS in_flight,
        count(*) FILTER (WHERE us.state = 'pending' AND us.attempts > 0) AS retrying
    FROM undolog.undolog_sessions AS s
    INNER JOIN undolog.undolog_undo_stack AS us
        ON
            s.session_id = us.session_id
            AND us.state IN ('pending', 'compensating')
    WHERE s.state IN ('failed', 'compensating')
)

SELECT
    h.attempts,
    h.failures,
    h.gave_up,
    u.in_flight,
    u.retrying,
    300::double precision AS window_seconds
FROM history AS h
CROSS JOIN walking AS u;

COMMENT ON VIEW undolog.metrics_compensations IS
'Compensation attempts, failures and give-ups of the last five minutes; entries in '
'flight or waiting for a retry now.';

REVOKE ALL ON undolog.metrics_compensations FROM public;
