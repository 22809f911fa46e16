-- undolog.expire_approvals: for the operator's cron (next to recover()). Every pending
-- request whose deadline has passed is expired through the same path as a rejection:
-- request 'expired', effect rejected, session compensating. Answers the ids expired.
-- Requests are taken in session order, so that two sweeps running at once lock sessions
-- in the same order (one waits, then finds the requests decided and skips them) rather
-- than deadlocking.
CREATE OR REPLACE FUNCTION undolog.expire_approvals()
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_approval_id uuid;
BEGIN
    FOR v_approval_id IN
        SELECT a.approval_id
        FROM undolog.undolog_approval_requests AS a
        WHERE a.state = 'pending' AND a.expires_at <= now()
        ORDER BY a.session_id, a.approval_id
    LOOP
        IF undolog.decide_approval(v_approval_id, 'expired', NULL, NULL, NULL) IS NOT NULL THEN
            RETURN NEXT v_approval_id;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.expire_approvals() FROM public;
