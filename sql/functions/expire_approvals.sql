-- undolog.expire_approvals: for the operator's cron (next to recover()). Every pending
-- request whose deadline has passed is expired through the same path as a rejection:
-- request 'expired', effect rejected, session compensating. Answers the ids expired.
-- Requests are taken in session order. A session another transaction holds (an agent's
-- left open, another sweep) is skipped, never waited for: the next sweep expires it.
CREATE OR REPLACE FUNCTION undolog.expire_approvals()
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_approval_id uuid;
    v_session_id uuid;
BEGIN
    FOR v_approval_id, v_session_id IN
        SELECT a.approval_id, a.session_id
        FROM undolog.undolog_approval_requests AS a
        WHERE a.state = 'pending' AND a.expires_at <= now()
        ORDER BY a.session_id, a.approval_id
    LOOP
        -- A session its agent holds in an open transaction is skipped, not waited for:
        -- the next sweep expires its requests, and nobody else's wait on it.
        CONTINUE WHEN NOT EXISTS (
            SELECT FROM undolog.undolog_sessions AS s
            WHERE s.session_id = v_session_id
              AND pg_catalog.pg_try_advisory_xact_lock(
                  undolog.session_lock_key(s.session_id, s.owner_role))
            FOR UPDATE SKIP LOCKED);
        IF undolog.decide_approval(v_approval_id, 'expired', NULL, NULL, NULL) IS NOT NULL THEN
            RETURN NEXT v_approval_id;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.expire_approvals() FROM public;
