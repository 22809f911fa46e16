-- TRUNCATE on undolog_sessions is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_sessions_no_truncate
BEFORE TRUNCATE ON undolog.undolog_sessions
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
