-- undolog.heartbeat: renew the lease of a live session (active, awaiting_approval, or in
-- the partial walk of a rollback_to, running or halted) by its lease duration; answers
-- the new expiry.
-- UL002 unknown session; 42501 another login's session (check_session_caller); UL010 a
-- session that is no longer live.
CREATE OR REPLACE FUNCTION undolog.heartbeat(p_session_id uuid)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions := undolog.lock_own_session(p_session_id);
    v_expires timestamptz;
BEGIN
    -- A session in a partial walk (rollback_to) goes on after it, also once an operator
    -- resumes a walk that halted: its agent is alive, its session block still open.
    IF v_session.state NOT IN ('active', 'awaiting_approval')
       AND NOT (v_session.state IN ('compensating', 'halted')
                AND v_session.undo_floor IS NOT NULL) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL010',
            MESSAGE = pg_catalog.format('session %s is %s: its lease cannot be renewed',
                                        p_session_id, v_session.state),
            HINT = 'The session has ended and its lease no longer matters: begin a new session for '
                   'new work (undolog.begin_session).';
    END IF;
    UPDATE undolog.undolog_sessions AS s
    SET lease_expires_at = undolog.utc_after(now(), s.lease_duration)
    WHERE s.session_id = p_session_id
    RETURNING s.lease_expires_at INTO v_expires;
    RETURN v_expires;
END
$$;

REVOKE ALL ON FUNCTION undolog.heartbeat(uuid) FROM public;
