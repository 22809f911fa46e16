-- undolog.unknown_session: raise UL002 for an id that names no session. Sessions are never
-- deleted, so an id not found is a wrong one or one not begun yet (begin_session). The one
-- text of this refusal, and of what to do next, for every function that looks a session
-- up: it is raised, never answered, so it has no other use.
CREATE OR REPLACE FUNCTION undolog.unknown_session(p_session_id uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'UL002',
        MESSAGE = pg_catalog.format('unknown session %s', coalesce(p_session_id::text, 'NULL')),
        HINT = 'Check the id: undolog sessions list shows the sessions; an agent begins one '
               'with undolog.begin_session.';
END
$$;

REVOKE ALL ON FUNCTION undolog.unknown_session(uuid) FROM public;
