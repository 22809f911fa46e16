-- TRUNCATE on undolog_approval_requests is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_approval_requests_no_truncate
BEFORE TRUNCATE ON undolog.undolog_approval_requests
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
