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
BEGIN
    PERFORM undolog.check_operator(p_by);
    v_session := undolog.lock_halted_session(p_session_id);
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
    RETURN undolog.transition_session(p_session_id, 'compensating');
END
$$;

REVOKE ALL ON FUNCTION undolog.resume_session(uuid, text, text) FROM public;
