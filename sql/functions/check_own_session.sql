-- undolog.check_own_session: the owner of a session only its owner may act on, the caller
-- checked (42501, check_session_caller), from the session's owner_role, which never
-- changes and needs no lock to read; a session not found is unknown (UL002). What
-- lock_own_session checks before it locks, and journal_call before an IRREVERSIBLE call's
-- locks (between the two it tries the call's own key, which only the owner's login may
-- hold). Answers the owner's role.
CREATE OR REPLACE FUNCTION undolog.check_own_session(p_session_id uuid)
RETURNS text
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
    RETURN v_owner_role;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_own_session(uuid) FROM public;
