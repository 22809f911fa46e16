-- undolog.lock_session: a session's row, locked FOR UPDATE, and its advisory lock
-- (session_lock_key) held exclusive, so that journaled calls in flight (intercept holds
-- it shared) finish first; UL002 when there is none. Every function that moves a session
-- on starts here, so they serialise on the row. Row first, then the advisory lock: the
-- order every path takes, so that none waits for the other in reverse.
CREATE OR REPLACE FUNCTION undolog.lock_session(p_session_id uuid)
RETURNS undolog.undolog_sessions
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions;
BEGIN
    SELECT s.* INTO v_session
    FROM undolog.undolog_sessions AS s
    WHERE s.session_id = p_session_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL002',
            MESSAGE = pg_catalog.format('unknown session %s', coalesce(p_session_id::text, 'NULL'));
    END IF;
    -- intercept never writes the session row, so the row read above stays current.
    PERFORM pg_catalog.pg_advisory_xact_lock(undolog.session_lock_key(p_session_id));
    RETURN v_session;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_session(uuid) FROM public;
