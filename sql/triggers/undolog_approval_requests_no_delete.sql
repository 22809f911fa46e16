-- Every DELETE on undolog_approval_requests is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_approval_requests_no_delete
BEFORE DELETE ON undolog.undolog_approval_requests
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
