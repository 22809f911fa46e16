-- undolog.lock_session: a session's row, locked FOR UPDATE; UL002 when there is none.
-- Every function that moves a session on starts here, so they serialise on the row.
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
    RETURN v_session;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_session(uuid) FROM public;
