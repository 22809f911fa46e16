-- undolog.recover: what a recovery worker calls on startup and then periodically.
-- 1. Every active session whose lease ran out (its agent stopped heartbeating: it died)
--    becomes failed, error 'lease expired'. Sessions another transaction holds right now
--    are skipped (SKIP LOCKED): their agent is evidently alive; the next run sees them.
--    awaiting_approval sessions are left alone: they wait for a human, not for an agent.
-- 2. Answers every session whose undo walk must run now, i.e. where claim_compensation
--    would hand out an entry or finish the walk: failed sessions, and compensating ones
--    whose top unfinished entry is due (pending with next_attempt_at <= now(), or in
--    flight with an expired claim) or that have no unfinished entry left.
-- Oldest first (by their last change).
CREATE OR REPLACE FUNCTION undolog.recover()
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    -- The guard trigger validates active -> failed and writes the history row.
    UPDATE undolog.undolog_sessions AS s
    SET state = 'failed', error = 'lease expired'
    WHERE s.session_id IN (
        SELECT x.session_id
        FROM undolog.undolog_sessions AS x
        WHERE x.state = 'active' AND x.lease_expires_at <= now()
        FOR UPDATE SKIP LOCKED
    )
    AND s.state = 'active';

    RETURN QUERY
    SELECT s.session_id
    FROM undolog.undolog_sessions AS s
    LEFT JOIN LATERAL (
        SELECT u.state, u.next_attempt_at, u.claimed_until
        FROM undolog.undolog_undo_stack AS u
        WHERE u.session_id = s.session_id AND u.state IN ('pending', 'compensating')
        ORDER BY u.stack_position DESC
        LIMIT 1
    ) AS top ON true
    WHERE s.state = 'failed'
       OR (s.state = 'compensating'
           AND (top.state IS NULL
                OR (top.state = 'pending' AND top.next_attempt_at <= now())
                OR (top.state = 'compensating' AND top.claimed_until <= now())))
    ORDER BY s.updated_at, s.session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.recover() FROM public;
