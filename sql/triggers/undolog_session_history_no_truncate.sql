-- TRUNCATE on undolog_session_history is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_session_history_no_truncate
BEFORE TRUNCATE ON undolog.undolog_session_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
