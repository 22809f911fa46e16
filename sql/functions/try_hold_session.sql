-- undolog.try_hold_session: whether the caller now holds, without having waited, what a
-- sweep needs of a session whose row it locked (SKIP LOCKED): the session's advisory lock
-- (session_lock_key) and its chain head's row when it has one. An agent's commit or fail
-- of a call in a transaction it leaves open holds the chain head without the advisory
-- lock, and the sweeps waited for it, every login's with them (the SQL API's fuzz, round
-- 9). False: another transaction holds one of them; the caller skips the session, and
-- raising rolls back the subtransaction that took the others (a transaction-level
-- advisory lock is released only so). One rule for fail_expired_sessions and
-- expire_approvals.
CREATE OR REPLACE FUNCTION undolog.try_hold_session(p_session_id uuid, p_owner_role text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(
           undolog.session_lock_key(p_session_id, p_owner_role)) THEN
        RETURN FALSE;
    END IF;
    PERFORM FROM undolog.undolog_chain_heads AS h
    WHERE h.session_id = p_session_id
    FOR UPDATE SKIP LOCKED;
    RETURN FOUND OR NOT EXISTS (SELECT FROM undolog.undolog_chain_heads AS h
                                WHERE h.session_id = p_session_id);
END
$$;

REVOKE ALL ON FUNCTION undolog.try_hold_session(uuid, text) FROM public;
