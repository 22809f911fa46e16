-- undolog.sessions_owner_guard: BEFORE UPDATE on undolog_sessions. owner_role decides
-- which agent may read a session (row-level security), so it is identity: it never
-- changes. 0001's sessions_guard protects the other identity columns; this is a separate
-- trigger so that 0001 stays untouched.
CREATE OR REPLACE FUNCTION undolog.sessions_owner_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.owner_role IS DISTINCT FROM OLD.owner_role THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'a session''s owner_role cannot change',
            DETAIL = pg_catalog.format('session %s', OLD.session_id);
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.sessions_owner_guard() FROM public;

CREATE TRIGGER undolog_sessions_owner_guard
BEFORE UPDATE OF owner_role ON undolog.undolog_sessions
FOR EACH ROW EXECUTE FUNCTION undolog.sessions_owner_guard();
