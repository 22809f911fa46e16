-- undolog.commit: the body succeeded; executing -> committed, result cached for replays.
-- A NULL result is stored as JSON null. Answers 'committed', or 'late' when the undo walk
-- had already taken the effect (recorded and flagged: see finish_execution).
-- p_async => true commits this transaction asynchronously (synchronous_commit off, for
-- this transaction only): a result lost in a server crash leaves the effect executing,
-- which the undo walk already treats as "outcome unknown: compensate". Only when commit
-- is the first write of its transaction (no transaction id assigned before it): a
-- transaction that wrote anything earlier (an intercept's intent, the caller's own rows)
-- keeps the client's setting, so an intent journaled in the same transaction is never
-- made non-durable by the commit that follows it. The check is on the server's own
-- record of the transaction, which no client can forge.
-- The two-argument form stays: p_async defaults to false. commit_effect is the same
-- call with the session id first (routable on a distributed database).
-- The success path is inline (one lookup joining the undo entry to the session's owner,
-- one UPDATE): commit runs once per journaled call, and nested PL/pgSQL calls through
-- SET search_path cost ~10 us. Anything unusual (oversized result, unknown effect,
-- another role's session, an effect that is not executing) goes through check_payload
-- and finish_execution, which raise the documented errors.

CREATE OR REPLACE FUNCTION undolog.commit(
    p_effect_id uuid, p_result jsonb, p_async boolean DEFAULT FALSE
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
SET plan_cache_mode = force_generic_plan  -- see intercept: run-time partition pruning
AS $$
DECLARE
    v_session_id uuid;
    v_executed_at timestamptz;
BEGIN
    IF p_async AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
        -- In the body, not a SET clause: a SET clause is undone when the function
        -- returns, before the transaction commits.
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    IF NOT undolog.payload_fits(p_result) THEN  -- uncompressed size, and depth
        PERFORM undolog.check_payload('result', p_result);
    END IF;
    SELECT u.session_id, u.executed_at INTO v_session_id, v_executed_at
    FROM undolog.undolog_undo_stack AS u
    JOIN undolog.undolog_sessions AS s ON s.session_id = u.session_id
    WHERE u.effect_id = p_effect_id AND s.owner_role = session_user;
    IF FOUND THEN
        UPDATE undolog.undolog_effect_log AS e
        SET state = 'committed', result_snapshot = coalesce(p_result, 'null'::jsonb), error = NULL
        WHERE e.session_id = v_session_id AND e.effect_id = p_effect_id
          AND e.executed_at = v_executed_at AND e.state = 'executing';
        IF FOUND THEN
            RETURN 'committed';
        END IF;
    END IF;
    RETURN undolog.finish_execution(p_effect_id, 'committed',
                                    coalesce(p_result, 'null'::jsonb), NULL);
END
$$;

REVOKE ALL ON FUNCTION undolog.commit(uuid, jsonb, boolean) FROM public;
