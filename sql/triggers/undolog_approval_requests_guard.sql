-- BEFORE INSERT OR UPDATE on undolog_approval_requests, FOR EACH ROW:
-- undolog.approval_requests_guard() (see sql/functions/approval_requests_guard.sql).
CREATE OR REPLACE TRIGGER undolog_approval_requests_guard
BEFORE INSERT OR UPDATE ON undolog.undolog_approval_requests
FOR EACH ROW EXECUTE FUNCTION undolog.approval_requests_guard();
