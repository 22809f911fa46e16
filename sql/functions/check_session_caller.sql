-- undolog.check_session_caller: only the login that began a session (its owner_role),
-- or an approver or operator, may act on it. Raises 42501 for anyone else: an agent
-- cannot fail, heartbeat, commit into or intercept into another agent's session.
-- session_user, not current_user: the API is SECURITY DEFINER, where current_user is
-- the engine's owner; SET ROLE does not change session_user either.
CREATE OR REPLACE FUNCTION undolog.check_session_caller(p_session_id uuid, p_owner_role text)
RETURNS void
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF p_owner_role IS DISTINCT FROM session_user
       AND NOT pg_catalog.pg_has_role(session_user, 'undolog_operator', 'MEMBER')
       AND NOT pg_catalog.pg_has_role(session_user, 'undolog_approver', 'MEMBER') THEN
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = pg_catalog.format('session %s belongs to another role', p_session_id),
            HINT = 'An agent acts only on the sessions its own login began.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_session_caller(uuid, text) FROM public;
