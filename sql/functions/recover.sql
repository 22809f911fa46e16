-- undolog.recover: what a recovery worker calls on startup and then periodically.
-- 1. Every active session whose lease ran out (its agent stopped heartbeating: it died)
--    becomes failed, error 'lease expired'. Sessions another transaction holds right now
--    are skipped (SKIP LOCKED, and a session whose advisory lock an intercept holds):
--    their agent is evidently alive; the next run sees them.
--    awaiting_approval sessions are left alone: they wait for a human, not for an agent.
-- 2. Answers every session whose undo walk must run now (the rule is the view
--    undolog.due_sessions): failed sessions, and compensating ones where
--    claim_compensation would hand out an entry or finish the walk.
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
          -- A call of the session being journaled right now (intercept holds the
          -- session's advisory lock shared): skipped like a locked row, the next run
          -- sees it.
          AND pg_catalog.pg_try_advisory_xact_lock(
              undolog.session_lock_key(x.session_id, x.owner_role))
        FOR UPDATE SKIP LOCKED
    )
    AND s.state = 'active';

    -- undolog.due_sessions states which sessions are due; its active rows are the ones
    -- skipped above (held by a live transaction): not for the walk yet.
    RETURN QUERY
    SELECT d.session_id
    FROM undolog.due_sessions AS d
    WHERE d.state IN ('failed', 'compensating')
    ORDER BY d.updated_at, d.session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.recover() FROM public;
