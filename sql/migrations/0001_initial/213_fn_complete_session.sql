-- undolog.complete_session: active -> completed. Answers the new state.
CREATE OR REPLACE FUNCTION undolog.complete_session(p_session_id uuid)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.transition_session(p_session_id, 'completed')
$$;

REVOKE ALL ON FUNCTION undolog.complete_session(uuid) FROM public;
GRANT EXECUTE ON FUNCTION undolog.complete_session(uuid) TO undolog_agent;
