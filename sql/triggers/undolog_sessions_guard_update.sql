-- BEFORE UPDATE on undolog_sessions, FOR EACH ROW:
-- undolog.sessions_guard() (see sql/functions/sessions_guard.sql).
CREATE OR REPLACE TRIGGER undolog_sessions_guard_update
BEFORE UPDATE ON undolog.undolog_sessions
FOR EACH ROW EXECUTE FUNCTION undolog.sessions_guard();
