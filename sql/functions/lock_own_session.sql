-- undolog.lock_own_session: lock_session for a function that only the session's owner
-- may call (heartbeat, complete_session, an irreversible intercept, an agent's own
-- rollback_to): the caller is checked first (42501, check_session_caller), from the
-- session's owner_role, which never changes and needs no lock to read. Checked after the
-- lock, a login naming another's session would hold that session's row, in a refused
-- call its open transaction keeps, against the owner's heartbeats and decisions.
CREATE OR REPLACE FUNCTION undolog.lock_own_session(p_session_id uuid)
RETURNS undolog.undolog_sessions
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_owner_role text;
BEGIN
    SELECT s.owner_role INTO v_owner_role
    FROM undolog.undolog_sessions AS s
    WHERE s.session_id = p_session_id;
    IF FOUND THEN  -- else lock_session says UL002
        PERFORM undolog.check_session_caller(p_session_id, v_owner_role);
    END IF;
    RETURN undolog.lock_session(p_session_id);
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_own_session(uuid) FROM public;
