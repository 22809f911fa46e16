-- undolog.session_held: UL030 for a session another transaction holds past the bounded
-- wait (bound_lock_wait: 5 s, or the caller's own shorter lock_timeout), naming the
-- session's agent login, whose open transaction it most likely is. Raised by lock_session
-- (the session's row and lock) and by the person's moves that write its history after it
-- (decide_approval, rollback_session, rollback_to/rollback_last, resume_session,
-- retry_compensation, abandon_session: an agent's call committed, or reported late, in a
-- transaction it keeps open holds the session's chain head). One message for both.
-- p_wait is the bound the wait reached (lock_not_available), or NULL when a deadlock
-- ended it sooner (deadlock_detected: that transaction then waited in turn for the
-- session, which the move held, and PostgreSQL ended the move): the DETAIL says which.
CREATE OR REPLACE FUNCTION undolog.session_held(p_session_id uuid, p_wait interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_agent text := (SELECT s.owner_role FROM undolog.undolog_sessions AS s
                     WHERE s.session_id = p_session_id);
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'UL030',
        MESSAGE = pg_catalog.format('session %s is held by a transaction that has not ended',
                                    p_session_id),
        DETAIL = CASE
            WHEN p_wait IS NULL
            THEN pg_catalog.format('A deadlock ended the wait for it, sooner: another '
                                   'transaction holds it and has not ended, and waited in '
                                   'turn for this session, which this move held (the '
                                   'session''s agent is login %s). Nothing was changed.',
                                   v_agent)
            ELSE pg_catalog.format('Waited %s for it: another transaction holds it and has '
                                   'not ended (the session''s agent is login %s). Nothing was '
                                   'changed.', p_wait, v_agent)
        END,
        HINT = 'Try again. If it stays held, end that transaction: its backend is in '
               'pg_stat_activity, idle in transaction, most likely under the agent''s login '
               '(pg_terminate_backend).';
END
$$;

REVOKE ALL ON FUNCTION undolog.session_held(uuid, interval) FROM public;
