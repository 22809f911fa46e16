-- BEFORE UPDATE on undolog_sessions, FOR EACH ROW:
-- undolog.sessions_resolution_guard() (see sql/functions/sessions_resolution_guard.sql).
CREATE OR REPLACE TRIGGER undolog_sessions_resolution_guard
BEFORE UPDATE ON undolog.undolog_sessions
FOR EACH ROW EXECUTE FUNCTION undolog.sessions_resolution_guard();
