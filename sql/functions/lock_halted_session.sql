-- undolog.lock_halted_session: the session an operator function acts on, locked. UL002
-- when unknown; UL001 when it is not halted, or was already abandoned (resolved): only a
-- halted, unresolved session can be moved on by a human.
CREATE OR REPLACE FUNCTION undolog.lock_halted_session(p_session_id uuid)
RETURNS undolog.undolog_sessions
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions := undolog.lock_session(p_session_id);
BEGIN
    IF v_session.state <> 'halted' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('session %s is %s, not halted', p_session_id,
                                        v_session.state),
            HINT = 'Operators act only on halted sessions.';
    END IF;
    IF v_session.resolved_at IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('session %s was abandoned by %s at %s', p_session_id,
                                        v_session.resolved_by, v_session.resolved_at),
            DETAIL = pg_catalog.format('resolution: %s', v_session.resolution),
            HINT = 'An abandoned session is final.';
    END IF;
    RETURN v_session;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_halted_session(uuid) FROM public;
