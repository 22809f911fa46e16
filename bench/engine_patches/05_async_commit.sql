-- Proposal 5: commit() does not wait for its WAL flush (synchronous_commit off for the
-- commit transaction only; intercept stays synchronous).
--
-- Why it is safe: losing this transaction in a crash leaves the effect executing, which is
-- exactly the state after a crash just before commit() was called; the design already
-- handles that (recovery takes executing -> compensating, the outcome being unknown). The
-- window is short and closes early: WAL is sequential, so the next intercept's synchronous
-- commit flushes this record too, and the WAL writer flushes it within 3 x wal_writer_delay.
-- An effect whose commit was lost is never replayed with a wrong result: a retry of the
-- same call finds it executing and answers in_progress.
-- This file includes proposal 4's commit (apply it after 04, or alone).
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
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
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
