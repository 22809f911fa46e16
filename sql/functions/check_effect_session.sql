-- undolog.check_effect_session: UL003 when the effect is another session's, found by
-- the effect id's own index in its undo entry (every journaled call has one). An unknown
-- effect passes with a NULL session, and finish_execution's locate_effect refuses it.
-- Shared by commit_effect and fail_effect, whose session comes first so that a
-- distributed database routes them; finish_execution then finds the same entry again
-- (a slow path: late, not executing, or journaled before 0014).
CREATE OR REPLACE FUNCTION undolog.check_effect_session(p_session_id uuid, p_effect_id uuid)
RETURNS void
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_session_id uuid;
BEGIN
    -- By effect_id alone, so that only the effect index can serve it (a session-leading
    -- index could tie with it in a generic plan made while the stack was small).
    SELECT u.session_id INTO v_session_id
    FROM undolog.undolog_undo_stack AS u
    WHERE u.effect_id = p_effect_id;
    IF v_session_id IS DISTINCT FROM p_session_id THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL003',
            MESSAGE = pg_catalog.format('unknown effect %s in session %s', p_effect_id,
                                        p_session_id),
            HINT = 'Pass the effect_id that intercept answered for this session''s call, with that '
                   'session''s id.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_effect_session(uuid, uuid) FROM public;
