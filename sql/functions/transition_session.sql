-- undolog.transition_session: move a session to p_to, or raise: UL002 when the session
-- does not exist, 42501 when the caller may not act on it (check_session_actor), UL001
-- when the move is not in the state machine (including a move to the state it is already
-- in, e.g. failing a session twice). Answers the new state.
CREATE OR REPLACE FUNCTION undolog.transition_session(
    p_session_id uuid, p_to text, p_error text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_from text;
    v_owner_role text;
BEGIN
    SELECT s.state, s.owner_role INTO v_from, v_owner_role
    FROM undolog.lock_session(p_session_id) AS s;
    PERFORM undolog.check_session_actor(p_session_id, v_owner_role);
    IF NOT undolog.session_transition_allowed(v_from, p_to) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('invalid session transition %s -> %s', v_from, p_to),
            DETAIL = pg_catalog.format('session %s', p_session_id),
            HINT = 'Read the session''s state with undolog sessions show ID; '
                   'docs/design/state-machines.md lists the moves each state allows.';
    END IF;
    UPDATE undolog.undolog_sessions AS s
    SET state = p_to, error = coalesce(left(p_error, 8192), s.error)
    WHERE s.session_id = p_session_id;
    RETURN p_to;
END
$$;

REVOKE ALL ON FUNCTION undolog.transition_session(uuid, text, text) FROM public;
