-- undolog.halt_walk: compensating -> halted, remembering the entry the walk stopped at
-- (resume_session reads it) and why (the session's error, also in its history).
-- Callers hold the session row.
CREATE OR REPLACE FUNCTION undolog.halt_walk(p_session_id uuid, p_undo_id uuid, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM undolog.transition_session(p_session_id, 'halted', p_error);
    UPDATE undolog.undolog_sessions AS s
    SET halt_undo_id = p_undo_id
    WHERE s.session_id = p_session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.halt_walk(uuid, uuid, text) FROM public;
