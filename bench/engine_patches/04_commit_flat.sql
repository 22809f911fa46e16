-- Proposal 4: commit() without nested helper calls on its success path.
--
-- commit called check_payload, then finish_execution, which calls locate_effect in its
-- DECLARE: three nested PL/pgSQL calls, two of them through a SET search_path (a GUC save
-- and restore each). The success path is now inline: size check, registry lookup, one
-- UPDATE. Anything unusual (unknown effect, effect not executing, oversized result) still
-- goes through the original functions, so errors are unchanged. The UPDATE uses a generic
-- plan for the reason given in 01_generic_plans.sql.
CREATE OR REPLACE FUNCTION undolog.commit(p_effect_id uuid, p_result jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_key undolog.undolog_signature_registry;
BEGIN
    IF pg_catalog.pg_column_size(p_result) > undolog.max_payload_bytes() THEN
        PERFORM undolog.check_payload('result', p_result);
    END IF;
    SELECT r.* INTO v_key
    FROM undolog.undolog_signature_registry AS r
    WHERE r.effect_id = p_effect_id;
    IF FOUND THEN
        UPDATE undolog.undolog_effect_log AS e
        SET state = 'committed', result_snapshot = coalesce(p_result, 'null'::jsonb), error = NULL
        WHERE e.session_id = v_key.session_id AND e.effect_id = v_key.effect_id
          AND e.executed_at = v_key.executed_at AND e.state = 'executing';
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- Unknown effect (UL003) or not executing (UL001): the general path raises.
    PERFORM undolog.finish_execution(p_effect_id, 'committed',
                                     coalesce(p_result, 'null'::jsonb), NULL);
END
$$;
