-- undolog.complete_session: active -> completed. Answers the new state.
-- Refused (UL001) while a call of the session is still executing: its outcome is unknown
-- (the body may have acted, then crashed, been cancelled, or returned what JSON cannot
-- carry), so the session must fail instead and let the undo walk compensate it. At READ
-- COMMITTED only (check_read_committed): it must see a call journaled while it waited.
CREATE OR REPLACE FUNCTION undolog.complete_session(p_session_id uuid)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_unknown record;
BEGIN
    PERFORM undolog.check_read_committed('complete_session');
    PERFORM undolog.lock_own_session(p_session_id);
    SELECT e.effect_id, e.step_index, e.tool_name INTO v_unknown
    FROM undolog.undolog_effect_log AS e
    WHERE e.session_id = p_session_id AND e.state = 'executing'
    ORDER BY e.step_index
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format(
                'session %s cannot complete: step %s (%s) is still executing',
                p_session_id, v_unknown.step_index, v_unknown.tool_name),
            DETAIL = pg_catalog.format('effect %s has no outcome: it may have acted',
                                       v_unknown.effect_id),
            HINT = 'Commit or fail the call, or fail the session so that the walk undoes it.';
    END IF;
    RETURN undolog.transition_session(p_session_id, 'completed');
END
$$;

REVOKE ALL ON FUNCTION undolog.complete_session(uuid) FROM public;
