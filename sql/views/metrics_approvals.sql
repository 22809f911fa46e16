-- undolog.metrics_approvals: one row: the approval requests waiting for a person, how
-- many of them are past their deadline (the next expire_approvals() closes them), and
-- the age of the oldest. Reads the partial index undolog_approval_requests_pending_idx
-- (state = 'pending'): the pending requests only.
-- Owner's rights, granted to approver and operator only (as pending_approvals).
CREATE OR REPLACE VIEW undolog.metrics_approvals AS
SELECT
    count(*) AS pending,
    count(*) FILTER (WHERE a.expires_at <= now()) AS past_deadline,
    coalesce(extract(EPOCH FROM now() - min(a.requested_at)), 0)::double precision
        AS oldest_age_seconds
FROM undolog.undolog_approval_requests AS a
WHERE a.state = 'pending';

COMMENT ON VIEW undolog.metrics_approvals IS
'Pending approval requests: how many, how many past their deadline, the oldest one''s age.';

REVOKE ALL ON undolog.metrics_approvals FROM public;
