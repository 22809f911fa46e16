-- Every DELETE on undolog_sessions is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_sessions_no_delete
BEFORE DELETE ON undolog.undolog_sessions
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
