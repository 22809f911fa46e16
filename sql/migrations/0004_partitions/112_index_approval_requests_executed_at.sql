-- Retention deletes a dropped month's approval requests by range of executed_at.
CREATE INDEX IF NOT EXISTS undolog_approval_requests_executed_at_idx
ON undolog.undolog_approval_requests (executed_at);
