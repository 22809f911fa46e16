-- undolog.recover: what a recovery worker calls on startup and then periodically.
-- 1. Every active session whose lease ran out (its agent stopped heartbeating: it died)
--    becomes failed, error 'lease expired' (undolog.fail_expired_sessions, all of them
--    in this transaction; a worker that may find hundreds fails them in batches with
--    that function first, a transaction each, and recover() then finds few or none).
--    Sessions another transaction holds right now are skipped: the next run sees them.
--    p_limit: at most this many are failed, the oldest expired first (those left are
--    failed by the next run); NULL, every one due. A worker whose sweep stopped at its
--    bound (an agent login beginning short-lease sessions faster than they are failed)
--    passes one, so that this transaction stays as small as a batch and the walks below
--    are answered all the same. UL008 a limit below 1 (fail_expired_sessions's).
-- 2. Answers every session whose undo walk must run now (the rule is the view
--    undolog.due_sessions): failed sessions, and compensating ones where
--    claim_compensation would hand out an entry or finish the walk.
-- Oldest first (by their last change).
CREATE OR REPLACE FUNCTION undolog.recover(p_limit integer DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM undolog.fail_expired_sessions(p_limit => p_limit);

    -- undolog.due_sessions states which sessions are due; its active rows are the ones
    -- skipped above (held by a live transaction), or left by p_limit: not for the walk yet.
    RETURN QUERY
    SELECT d.session_id
    FROM undolog.due_sessions AS d
    WHERE d.state IN ('failed', 'compensating')
    ORDER BY d.updated_at, d.session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.recover(integer) FROM public;
