-- undolog.fail_session: active -> failed, recording why. The undo walk then runs
-- (claim_compensation). Answers the new state. Only the session's owner (42501 for
-- anyone else, check_session_caller): a person stops a session with rollback_session,
-- which records who and why. The caller is checked by lock_own_session, before any lock
-- and in one read with the session's existence (UL002): a check skipped for a session
-- not yet begun would let a login that is also an approver fail one begun meanwhile.
CREATE OR REPLACE FUNCTION undolog.fail_session(p_session_id uuid, p_error text)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT FROM undolog.lock_own_session(p_session_id);
    SELECT undolog.transition_session(p_session_id, 'failed', coalesce(p_error, 'failed'))
$$;

REVOKE ALL ON FUNCTION undolog.fail_session(uuid, text) FROM public;
