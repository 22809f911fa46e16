-- undolog.finish_execution: move an executing effect to its outcome, committed (with its
-- result) or pending (with the error, so that it may be retried). UL003 for an unknown
-- effect, UL001 when the effect is not executing (e.g. committed twice, or the undo walk
-- already took it). Shared by commit() and fail().
CREATE OR REPLACE FUNCTION undolog.finish_execution(
    p_effect_id uuid, p_to text, p_result jsonb, p_error text
)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
SET plan_cache_mode = force_generic_plan  -- see intercept: run-time partition pruning
AS $$
DECLARE
    v_key undolog.undolog_signature_registry := undolog.locate_effect(p_effect_id);
    v_state text;
BEGIN
    PERFORM undolog.check_session_caller(
        v_key.session_id,
        (SELECT s.owner_role FROM undolog.undolog_sessions AS s
         WHERE s.session_id = v_key.session_id));
    UPDATE undolog.undolog_effect_log AS e
    SET state = p_to,
        result_snapshot = CASE WHEN p_to = 'committed' THEN p_result END,
        error = CASE WHEN p_to = 'pending' THEN p_error END
    WHERE e.session_id = v_key.session_id AND e.effect_id = v_key.effect_id
      AND e.executed_at = v_key.executed_at AND e.state = 'executing';
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT e.state INTO v_state
    FROM undolog.undolog_effect_log AS e
    WHERE e.session_id = v_key.session_id AND e.effect_id = v_key.effect_id
      AND e.executed_at = v_key.executed_at;
    RAISE EXCEPTION USING
        ERRCODE = 'UL001',
        MESSAGE = pg_catalog.format('invalid effect transition %s -> %s', v_state, p_to),
        DETAIL = pg_catalog.format('effect %s is %s, not executing', p_effect_id, v_state);
END
$$;

REVOKE ALL ON FUNCTION undolog.finish_execution(uuid, text, jsonb, text) FROM public;
