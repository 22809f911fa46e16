-- expire_approvals scans the pending requests whose deadline has passed; the views list
-- the pending ones. Both stay cheap however many decided requests accumulate.
CREATE INDEX undolog_approval_requests_pending_idx
ON undolog.undolog_approval_requests (expires_at)
WHERE state = 'pending';
