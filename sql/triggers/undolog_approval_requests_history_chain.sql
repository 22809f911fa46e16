-- BEFORE INSERT OR UPDATE on undolog_approval_requests, FOR EACH ROW: links the request,
-- and later its decision, into its session's history chain (undolog.history_chain,
-- sql/functions/history_chain.sql). Named to fire after undolog_approval_requests_guard
-- (triggers fire in name order), which fills in the deadline the link covers.
CREATE OR REPLACE TRIGGER undolog_approval_requests_history_chain
BEFORE INSERT OR UPDATE ON undolog.undolog_approval_requests
FOR EACH ROW EXECUTE FUNCTION undolog.history_chain('approval_requests');
