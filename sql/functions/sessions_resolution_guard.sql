-- undolog.sessions_resolution_guard: BEFORE UPDATE on undolog_sessions. Once a session is
-- resolved (abandon_session), who resolved it, when and how are fixed: the resolution is
-- the record of a human's decision. (The CHECK on the table already keeps a resolved
-- session halted; undolog.sessions_guard still validates state changes.)
CREATE OR REPLACE FUNCTION undolog.sessions_resolution_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.resolved_at IS NOT NULL
       AND (NEW.resolved_by, NEW.resolved_at, NEW.resolution)
           IS DISTINCT FROM (OLD.resolved_by, OLD.resolved_at, OLD.resolution) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'a resolved session''s resolution (resolved_by, resolved_at, resolution) '
                      'cannot change',
            DETAIL = pg_catalog.format('session %s', OLD.session_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.sessions_resolution_guard() FROM public;
