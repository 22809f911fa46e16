-- BEFORE INSERT OR UPDATE on undolog_approval_requests, FOR EACH ROW: links the request,
-- and later its decision, into its session's history chain (undolog.chain_approval_requests,
-- sql/functions/chain_approval_requests.sql). Named to fire after
-- undolog_approval_requests_guard (triggers fire in name order), which fills in the
-- deadline the link covers and refuses an UPDATE of the links.
CREATE OR REPLACE TRIGGER undolog_approval_requests_history_chain
BEFORE INSERT OR UPDATE ON undolog.undolog_approval_requests
FOR EACH ROW EXECUTE FUNCTION undolog.chain_approval_requests();
