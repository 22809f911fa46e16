-- undolog.session_held: UL030 for a session another transaction holds past the bounded
-- wait (bound_lock_wait: 5 s, or the caller's own shorter lock_timeout), naming the
-- session's agent login, whose open transaction it most likely is. Raised by lock_session
-- (the session's row and lock) and by the person's moves that write its history after it
-- (decide_approval, rollback_session, rollback_to/rollback_last, resume_session,
-- retry_compensation, abandon_session: an agent's call committed, or reported late, in a
-- transaction it keeps open holds the session's chain head). One message for both.
CREATE OR REPLACE FUNCTION undolog.session_held(p_session_id uuid, p_wait interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'UL030',
        MESSAGE = pg_catalog.format('session %s is held by a transaction that has not ended',
                                    p_session_id),
        DETAIL = pg_catalog.format('Waited %s for it: another transaction holds it and has not '
                                   'ended (the session''s agent is login %s). Nothing was '
                                   'changed.', p_wait,
                                   (SELECT s.owner_role FROM undolog.undolog_sessions AS s
                                    WHERE s.session_id = p_session_id)),
        HINT = 'Try again. If it stays held, end that transaction: its backend is in '
               'pg_stat_activity, idle in transaction, most likely under the agent''s login '
               '(pg_terminate_backend).';
END
$$;

REVOKE ALL ON FUNCTION undolog.session_held(uuid, interval) FROM public;
