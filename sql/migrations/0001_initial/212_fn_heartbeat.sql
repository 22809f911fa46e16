-- undolog.heartbeat: renew the lease of a live (active or awaiting_approval) session by
-- its lease duration; answers the new expiry.
CREATE OR REPLACE FUNCTION undolog.heartbeat(p_session_id uuid)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_expires timestamptz;
    v_state text;
    v_owner_role text;
BEGIN
    UPDATE undolog.undolog_sessions AS s
    SET lease_expires_at = now() + s.lease_duration
    WHERE s.session_id = p_session_id AND s.state IN ('active', 'awaiting_approval')
      AND s.owner_role = session_user
    RETURNING s.lease_expires_at INTO v_expires;
    IF FOUND THEN
        RETURN v_expires;
    END IF;
    SELECT s.state, s.owner_role INTO v_state, v_owner_role FROM undolog.undolog_sessions AS s
    WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL002',
            MESSAGE = pg_catalog.format('unknown session %s', coalesce(p_session_id::text, 'NULL'));
    END IF;
    PERFORM undolog.check_session_caller(p_session_id, v_owner_role);
    IF v_state IN ('active', 'awaiting_approval') THEN  -- staff renewing another's lease
        UPDATE undolog.undolog_sessions AS s
        SET lease_expires_at = now() + s.lease_duration
        WHERE s.session_id = p_session_id
        RETURNING s.lease_expires_at INTO v_expires;
        RETURN v_expires;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'UL010',
        MESSAGE = pg_catalog.format('session %s is %s: its lease cannot be renewed',
                                    p_session_id, v_state);
END
$$;

REVOKE ALL ON FUNCTION undolog.heartbeat(uuid) FROM public;
GRANT EXECUTE ON FUNCTION undolog.heartbeat(uuid) TO undolog_agent;
