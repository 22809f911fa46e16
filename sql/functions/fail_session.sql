-- undolog.fail_session: active -> failed, recording why. The undo walk then runs
-- (claim_compensation). Answers the new state.
CREATE OR REPLACE FUNCTION undolog.fail_session(p_session_id uuid, p_error text)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.transition_session(p_session_id, 'failed', coalesce(p_error, 'failed'))
$$;

REVOKE ALL ON FUNCTION undolog.fail_session(uuid, text) FROM public;
