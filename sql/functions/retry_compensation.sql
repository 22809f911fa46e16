-- undolog.retry_compensation: an operator gives a compensation that failed for good one
-- more attempt (e.g. after fixing what made it fail). The entry goes compensation_failed
-- -> pending, due now; its effect compensation_failed -> compensating (the operator-only
-- transition added in 010; the effect history keeps the failed attempt); the halted
-- session goes back to compensating. The attempt counter is not reset: the next failure
-- gives up again at once, so each retry_compensation grants exactly one attempt.
-- Any compensation_failed entry of the halted session may be retried, also one the walk
-- was resumed past earlier: it is above the walk's position, so LIFO takes it next.
-- Answers the session's new state. UL008 empty p_by; UL012 unknown undo id; UL001 when
-- the entry is not compensation_failed or its session is not halted (or abandoned); UL030
-- when another transaction holds the session past lock_session's wait.
CREATE OR REPLACE FUNCTION undolog.retry_compensation(
    p_undo_id uuid, p_by text, p_reason text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_entry undolog.undolog_undo_stack;
    v_bound record;
    v_state text;
BEGIN
    PERFORM undolog.check_operator(p_by);
    v_entry := undolog.lock_undo_entry(p_undo_id);
    PERFORM undolog.lock_halted_session(v_entry.session_id);
    IF v_entry.state <> 'compensation_failed' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('undo entry %s is %s, not compensation_failed',
                                        p_undo_id, v_entry.state),
            HINT = 'Only a compensation that failed for good can be retried.';
    END IF;
    -- The writes, their waits bounded as lock_session's: the agent may still report a
    -- call of the halted session (a late result of one the walk took: finish_execution)
    -- in a transaction it keeps open, which then holds the call's row that this move
    -- updates and the session's chain head that its rows link to, for as long as it
    -- stays open. Past the wait, UL030 and nothing written; no lock is taken in another
    -- order than before.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        UPDATE undolog.undolog_effect_log AS e
        SET state = 'compensating'
        WHERE e.session_id = v_entry.session_id AND e.effect_id = v_entry.effect_id
          AND e.executed_at = v_entry.executed_at;
        UPDATE undolog.undolog_undo_stack AS u
        SET state = 'pending', next_attempt_at = now()
        WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id;
        INSERT INTO undolog.undolog_operator_actions
            (session_id, action, undo_id, performed_by, reason)
        VALUES (v_entry.session_id, 'retry', v_entry.undo_id, p_by, left(p_reason, 8192));
        UPDATE undolog.undolog_sessions AS s
        SET halt_undo_id = NULL
        WHERE s.session_id = v_entry.session_id;
        v_state := undolog.transition_session(v_entry.session_id, 'compensating');
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): PostgreSQL ends one of the two
    -- after deadlock_timeout, this one most often; UL030 all the same, nothing written.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(v_entry.session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(v_entry.session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN v_state;
END
$$;

REVOKE ALL ON FUNCTION undolog.retry_compensation(uuid, text, text) FROM public;
