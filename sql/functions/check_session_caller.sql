-- undolog.check_session_caller: only the login that began a session (its owner_role) may
-- make its calls and report their outcomes: intercept, commit, fail, heartbeat,
-- complete_session, fail_session. Raises 42501 for anyone else, approvers and operators
-- included: a login that also holds the approver or operator role could otherwise forge
-- another agent's outcome (commit a call that never ran, fail one that did). Approvers
-- act through approve/reject, operators through the recorded operator functions
-- (rollback_session, resume_session, retry_compensation, abandon_session), which check
-- with check_session_actor instead.
-- session_user, not current_user: the API is SECURITY DEFINER, where current_user is
-- the engine's owner; SET ROLE does not change session_user either.
CREATE OR REPLACE FUNCTION undolog.check_session_caller(p_session_id uuid, p_owner_role text)
RETURNS void
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF p_owner_role IS DISTINCT FROM session_user THEN
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = pg_catalog.format('session %s belongs to another role', p_session_id),
            HINT = CASE
                WHEN undolog.caller_is_staff()
                THEN 'Only the login that began a session reports its calls; a person acts '
                     'through approve/reject or rollback_session, resume_session, '
                     'retry_compensation, abandon_session.'
                ELSE 'An agent acts only on the sessions its own login began.'
            END;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_session_caller(uuid, text) FROM public;
