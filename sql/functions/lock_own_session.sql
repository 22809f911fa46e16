-- undolog.lock_own_session: lock_session for a function that only the session's owner
-- may call (heartbeat, complete_session, an irreversible intercept, an agent's own
-- rollback_to): the caller is checked first (42501, check_session_caller), from the
-- session's owner_role, which never changes and needs no lock to read. Checked after the
-- lock, a login naming another's session would hold that session's row, in a refused
-- call its open transaction keeps, against the owner's heartbeats and decisions.
-- A session not found by that read is unknown (UL002) here and now: locked anyway, one
-- its owner began in between would be found by lock_session's own read, and taken by a
-- caller never checked (sessions are never deleted, so a session found is still there).
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
    IF NOT FOUND THEN
        PERFORM undolog.unknown_session(p_session_id);
    END IF;
    PERFORM undolog.check_session_caller(p_session_id, v_owner_role);
    RETURN undolog.lock_session(p_session_id);
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_own_session(uuid) FROM public;
