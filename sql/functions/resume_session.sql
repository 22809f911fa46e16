-- undolog.resume_session: an operator moves a halted walk on past the entry it stopped
-- at, and the session goes back to compensating (the walkers' next claim continues).
--   halted at a barrier (an irreversible call that may have acted): the operator has
--     dealt with that call by hand; the barrier entry becomes skipped.
--   halted at a compensation that failed for good: the operator accepts that it stays
--     compensation_failed (retry_compensation is the other choice); the walk goes on
--     below it.
-- The decision (who, why, which entry) is appended to undolog_operator_actions.
-- Answers the session's new state. UL008 empty p_by; UL002 unknown session; UL001 not
-- halted, or abandoned.
CREATE OR REPLACE FUNCTION undolog.resume_session(
    p_session_id uuid, p_by text, p_reason text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions;
    v_bound record;
    v_state text;
BEGIN
    PERFORM undolog.check_operator(p_by);
    v_session := undolog.lock_halted_session(p_session_id);
    -- The writes, their waits bounded as lock_session's: the agent may still report a
    -- call of the halted session (a late result of one the walk took: finish_execution)
    -- in a transaction it keeps open, which then holds the session's chain head that
    -- this move's rows link to, for as long as it stays open. Past the wait, UL030 and
    -- nothing written; no lock is taken in another order than before.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        -- Only a barrier still pending is passed; a compensation_failed entry is already
        -- finished as far as the walk goes, and stays as it is.
        UPDATE undolog.undolog_undo_stack AS u
        SET state = 'skipped'
        WHERE u.session_id = p_session_id AND u.undo_id = v_session.halt_undo_id
          AND u.compensation IS NULL AND u.state = 'pending';
        INSERT INTO undolog.undolog_operator_actions
            (session_id, action, undo_id, performed_by, reason)
        VALUES (p_session_id, 'resume', v_session.halt_undo_id, p_by, left(p_reason, 8192));
        UPDATE undolog.undolog_sessions AS s
        SET halt_undo_id = NULL
        WHERE s.session_id = p_session_id;
        v_state := undolog.transition_session(p_session_id, 'compensating');
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): PostgreSQL ends one of the two
    -- after deadlock_timeout, this one most often; UL030 all the same, nothing written.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(p_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(p_session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN v_state;
END
$$;

REVOKE ALL ON FUNCTION undolog.resume_session(uuid, text, text) FROM public;
