-- AFTER INSERT OR UPDATE OF state on undolog_approval_requests, FOR EACH ROW:
-- undolog.approval_requests_notify() (see sql/functions/approval_requests_notify.sql).
CREATE OR REPLACE TRIGGER undolog_approval_requests_notify
AFTER INSERT OR UPDATE OF state ON undolog.undolog_approval_requests
FOR EACH ROW EXECUTE FUNCTION undolog.approval_requests_notify();
