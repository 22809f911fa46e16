-- undolog.expect_session: an operator's decision, made on a session as it was read, is
-- applied to that state of it or to none. Called first in the transaction of the action
-- (resume_session, retry_compensation, abandon_session), with p_seen = the session's
-- updated_at as the person read it: it locks the session as every function that moves it
-- does (lock_session: the row FOR UPDATE, then its advisory lock, the order of
-- docs/design/state-machines.md), so nobody can move it between this check and the action
-- that follows in the same transaction (the action's own lock_session takes the same locks
-- again, which its transaction already holds). Every change of a session's row sets its
-- updated_at (sessions_guard), so an equal one is the state the person read.
-- Answers the session's state. UL001 when updated_at differs from p_seen (another operator
-- acted, or the walk moved on, since it was read): nothing was changed, and the caller
-- rolls its transaction back, the action with it; UL008 a NULL p_seen; UL002 unknown
-- session; UL030 when another transaction holds the session past lock_session's wait.
CREATE OR REPLACE FUNCTION undolog.expect_session(p_session_id uuid, p_seen timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions;
BEGIN
    IF p_seen IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_seen must be the session''s updated_at as it was read: not NULL',
            HINT = 'Read the session (undolog sessions show ID prints its updated_at) and '
                   'pass that value as p_seen.';
    END IF;
    v_session := undolog.lock_session(p_session_id);
    IF v_session.updated_at IS DISTINCT FROM p_seen THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('session %s changed since it was read: it is %s, '
                                        'updated at %s, not at %s', p_session_id,
                                        v_session.state, v_session.updated_at, p_seen),
            DETAIL = 'Another operator acted on it, or its walk moved on, after the state you '
                     'decided on was read. Nothing was changed.',
            HINT = 'Read the session again (undolog sessions show ID prints its updated_at; '
                   'the dashboard shows its page again), decide again, and pass that '
                   'updated_at as the one seen (--seen).';
    END IF;
    RETURN v_session.state;
END
$$;

REVOKE ALL ON FUNCTION undolog.expect_session(uuid, timestamptz) FROM public;
