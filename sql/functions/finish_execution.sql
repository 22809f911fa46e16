-- undolog.finish_execution: move an executing effect to its outcome, committed (with its
-- result) or pending (with the error, so that it may be retried); answers p_to.
-- UL003 for an unknown effect, UL001 when the effect is not executing (e.g. committed
-- twice), UL030 when a transaction that moved the call holds its row past lock_session's
-- wait. Shared by commit() and fail().
-- A result that arrives for an effect the undo walk has already taken (compensating,
-- compensated, compensation_failed) is not refused and forgotten: its agent was paused
-- past its lease, so the body may have acted after (or while) its compensation ran. What
-- arrived, when and from whom is appended to the effect's history ('late_commit' or
-- 'late_fail'), which flags the session for an operator (sessions_overview's
-- needs_attention reads it), this record commits durably whatever the caller asked, and
-- the answer is 'late'.

CREATE OR REPLACE FUNCTION undolog.finish_execution(
    p_effect_id uuid, p_to text, p_result jsonb, p_error text
)
RETURNS text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
SET plan_cache_mode = force_generic_plan  -- see intercept: run-time partition pruning
AS $$
DECLARE
    v_key undolog.undolog_undo_stack := undolog.locate_effect(p_effect_id);
    v_state text;
    v_event text := CASE p_to WHEN 'committed' THEN 'late_commit' ELSE 'late_fail' END;
    v_bound record;
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
        RETURN p_to;
    END IF;
    -- The call's row, locked for what follows: a decision, a rollback or a claim of the
    -- walk that changed it in a transaction left open holds it. Waited for as long as
    -- lock_session waits at most (undolog.bound_lock_wait), then UL030: an agent's report
    -- of a call it may not report (pending, approved, rejected) or a late one waited for
    -- that transaction to end, for as long as it stayed open (red team, round 9).
    v_bound := undolog.bound_lock_wait();
    BEGIN
        SELECT e.state INTO v_state
        FROM undolog.undolog_effect_log AS e
        WHERE e.session_id = v_key.session_id AND e.effect_id = v_key.effect_id
          AND e.executed_at = v_key.executed_at
        FOR SHARE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL030',
            MESSAGE = pg_catalog.format('call %s is held by a transaction that has not '
                                        'ended', p_effect_id),
            DETAIL = pg_catalog.format('Waited %s for it: a transaction that moved the call '
                                       '(a decision, a rollback, the undo walk) holds it and '
                                       'has not ended. Nothing was changed.', v_bound.p_wait),
            HINT = 'Report the outcome again. If it stays held, end that transaction: its '
                   'backend is in pg_stat_activity, idle in transaction '
                   '(pg_terminate_backend).';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    IF v_state IN ('compensating', 'compensated', 'compensation_failed') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state, detail)
        VALUES (
            v_key.session_id, v_key.effect_id, v_key.executed_at, v_event, v_state, v_state,
            -- Only the keys that have a value, each value as it arrived: not
            -- jsonb_strip_nulls, which strips the null members of the result too, at any
            -- depth (the compensation handed it would miss {"parent_id": null}'s key).
            pg_catalog.jsonb_build_object('arrived', p_to,
                                          'arrived_at', pg_catalog.clock_timestamp())
            || CASE WHEN p_to = 'committed'
                    THEN pg_catalog.jsonb_build_object('result', p_result)
                    ELSE '{}'::jsonb END
            || CASE WHEN p_error IS NOT NULL
                    THEN pg_catalog.jsonb_build_object('error', p_error)
                    ELSE '{}'::jsonb END
        );
        RETURN 'late';
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'UL001',
        MESSAGE = pg_catalog.format('invalid effect transition %s -> %s', v_state, p_to),
        DETAIL = pg_catalog.format('effect %s is %s, not executing', p_effect_id, v_state),
        HINT = 'Only an executing call takes a result: read the call''s state with undolog '
               'sessions show ID. A late result of a call the walk took is answered ''late'' '
               'instead.';
END
$$;

REVOKE ALL ON FUNCTION undolog.finish_execution(uuid, text, jsonb, text) FROM public;
