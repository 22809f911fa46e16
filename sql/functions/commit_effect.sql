-- undolog.commit_effect: undolog.commit with the effect's session first,
-- commit_effect(session_id, effect_id, result, async), so that a distributed database
-- routes it by its first argument to the session's node, as intercept is routed; the
-- Python binding sends it. UL003 when the effect is not of that session. Otherwise it is
-- commit (see commit.sql): executing -> committed, 'committed' or 'late', the same
-- payload check, the same p_async rule (asynchronous only as its transaction's first
-- write). Its body is inline rather than a call of commit's: a nested PL/pgSQL call
-- costs ~10 us, and this is the binding's hot path.

CREATE OR REPLACE FUNCTION undolog.commit_effect(
    p_session_id uuid, p_effect_id uuid, p_result jsonb, p_async boolean DEFAULT FALSE
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
SET plan_cache_mode = force_generic_plan  -- see intercept: run-time partition pruning
AS $$
BEGIN
    IF p_async AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
        -- In the body, not a SET clause: a SET clause is undone when the function
        -- returns, before the transaction commits.
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    IF NOT undolog.payload_fits(p_result) THEN  -- uncompressed size, and depth
        PERFORM undolog.check_payload('result', p_result);
    END IF;
    -- The effect's row by its primary key, its executed_at read from its id
    -- (undolog.effect_id_at): one statement, one partition, no lookup first. The session
    -- must be the caller's.
    UPDATE undolog.undolog_effect_log AS e
    SET state = 'committed', result_snapshot = coalesce(p_result, 'null'::jsonb), error = NULL
    WHERE e.session_id = p_session_id AND e.effect_id = p_effect_id
      AND e.executed_at = undolog.effect_time(p_effect_id) AND e.state = 'executing'
      AND EXISTS (SELECT FROM undolog.undolog_sessions AS s
                  WHERE s.session_id = p_session_id AND s.owner_role = session_user);
    IF FOUND THEN
        RETURN 'committed';
    END IF;
    -- Anything else (not executing, journaled before 0014, another login's, unknown)
    -- goes through finish_execution, which raises the documented errors, once the
    -- effect is known to be of this session.
    PERFORM undolog.check_effect_session(p_session_id, p_effect_id);
    RETURN undolog.finish_execution(p_effect_id, 'committed',
                                    coalesce(p_result, 'null'::jsonb), NULL);
END
$$;

REVOKE ALL ON FUNCTION undolog.commit_effect(uuid, uuid, jsonb, boolean) FROM public;
