-- undolog.lock_own_session: lock_session for a function that only the session's owner
-- may call (heartbeat, complete_session, an agent's own rollback_to): the caller is
-- checked first (check_own_session: 42501 from the session's owner_role, which never
-- changes and needs no lock to read). Checked after the lock, a login naming another's
-- session would hold that session's row, in a refused call its open transaction keeps,
-- against the owner's heartbeats and decisions.
-- A session not found by that read is unknown (UL002) here and now: locked anyway, one
-- its owner began in between would be found by lock_session's own read, and taken by a
-- caller never checked (sessions are never deleted, so a session found is still there).
CREATE OR REPLACE FUNCTION undolog.lock_own_session(p_session_id uuid)
RETURNS undolog.undolog_sessions
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM undolog.check_own_session(p_session_id);
    RETURN undolog.lock_session(p_session_id);
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_own_session(uuid) FROM public;
