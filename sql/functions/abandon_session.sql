-- undolog.abandon_session: an operator closes a halted session without finishing its
-- walk (they dealt with what is left by hand). The session stays halted and becomes
-- resolved: resolved_by = p_by, resolved_at = now(), resolution = p_reason, all fixed from
-- then on; recover() never offers it again, and no operator function accepts it.
-- Unfinished entries stay as they are, as the record of what was not undone.
-- p_reason is required here: it is the only account of what was done instead.
-- Answers the session's state ('halted'). UL008 empty p_by or p_reason; UL002 unknown
-- session; UL001 not halted, or already abandoned.
CREATE OR REPLACE FUNCTION undolog.abandon_session(
    p_session_id uuid, p_by text, p_reason text
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_bound record;
BEGIN
    PERFORM undolog.check_operator(p_by);
    IF undolog.is_blank(p_reason) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say how the session was resolved: non-empty text',
            HINT = 'Say how it was resolved, e.g. ''refunded by hand, ticket 123'': undolog '
                   'sessions abandon ID --by WHO --reason TEXT.';
    END IF;
    PERFORM undolog.lock_halted_session(p_session_id);
    -- The writes, their waits bounded as lock_session's: the agent may still report a
    -- call of the halted session (a late result of one the walk took: finish_execution)
    -- in a transaction it keeps open, which then holds the session's chain head that
    -- this move's rows link to, for as long as it stays open. Past the wait, UL030 and
    -- nothing written; no lock is taken in another order than before.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        UPDATE undolog.undolog_sessions AS s
        SET resolved_by = p_by, resolved_at = now(), resolution = left(p_reason, 8192)
        WHERE s.session_id = p_session_id;
        INSERT INTO undolog.undolog_operator_actions
            (session_id, action, undo_id, performed_by, reason)
        VALUES (p_session_id, 'abandon', NULL, p_by, left(p_reason, 8192));
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): PostgreSQL ends one of the two
    -- after deadlock_timeout, this one most often; UL030 all the same, nothing written.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(p_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(p_session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN 'halted';
END
$$;

REVOKE ALL ON FUNCTION undolog.abandon_session(uuid, text, text) FROM public;
