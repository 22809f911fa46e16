-- undolog.refuse_undone_step: raise UL022 for a call made again (a replay, a retry)
-- whose step a rollback_to undid, in a session that goes on after it: the call must not
-- run again, and its old result is no longer true, so neither is answered. The message
-- says what the client does instead. intercept calls it; it always raises.
CREATE OR REPLACE FUNCTION undolog.refuse_undone_step(p_effect undolog.undolog_effect_log)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_last integer;
BEGIN
    SELECT pg_catalog.max(e.step_index) INTO v_last
    FROM undolog.undolog_effect_log AS e
    WHERE e.session_id = p_effect.session_id;
    RAISE EXCEPTION USING
        ERRCODE = 'UL022',
        MESSAGE = pg_catalog.format('step %s (%s, effect %s) was undone by rollback_to: it '
                                    'cannot run or replay again', p_effect.step_index,
                                    p_effect.tool_name, p_effect.effect_id),
        DETAIL = pg_catalog.format('session %s, effect %s', p_effect.session_id,
                                   p_effect.state),
        HINT = pg_catalog.format('The session went on after the undo: make the call as a new '
                                 'step, at a step index after %s (its last one so far). A '
                                 'client that re-runs the session from its start must not '
                                 'make the undone steps again.', v_last);
END
$$;

REVOKE ALL ON FUNCTION undolog.refuse_undone_step(undolog.undolog_effect_log) FROM public;
