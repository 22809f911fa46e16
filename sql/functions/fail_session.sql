-- undolog.fail_session: active -> failed, recording why. The undo walk then runs
-- (claim_compensation). Answers the new state. Only the session's owner (42501 for
-- anyone else, check_session_caller): a person stops a session with rollback_session,
-- which records who and why.
CREATE OR REPLACE FUNCTION undolog.fail_session(p_session_id uuid, p_error text)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.check_session_caller(
        p_session_id,
        (SELECT s.owner_role FROM undolog.undolog_sessions AS s
         WHERE s.session_id = p_session_id))
    WHERE EXISTS (SELECT FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session_id);
    SELECT undolog.transition_session(p_session_id, 'failed', coalesce(p_error, 'failed'))
$$;

REVOKE ALL ON FUNCTION undolog.fail_session(uuid, text) FROM public;
