-- undolog.pending_approval_ids: the pending requests alone, each its id, when it was asked
-- and its deadline, for what counts them, notices a change or picks the oldest few (the
-- dashboard inbox's total and its live refresh, read every half second by each open
-- inbox; the inbox's own 200 rows and `undolog approvals list`, which join only the
-- oldest they show to their calls).
-- pending_approvals joins every request to its session and its call (the call's month
-- unknown: an index probe in each partition), 56-73 ms at 3,000 pending against 3-9 ms
-- for the requests alone (docs/performance-log.md).
-- The same rows as pending_approvals: every request has its session (a session is never
-- deleted: undolog_sessions_no_delete), and its call is a LEFT join there. expired is
-- computed as there. security_invoker (the requests' row-level security applies), and
-- granted, like pending_approvals, to approvers and operators only (sql/grants.sql), so
-- each login reads it exactly as it reads pending_approvals.
-- New columns go at the end: CREATE OR REPLACE VIEW keeps the existing ones in place.
CREATE OR REPLACE VIEW undolog.pending_approval_ids
WITH (security_invoker = TRUE) AS
SELECT
    a.approval_id,
    a.requested_at,
    a.expires_at,
    coalesce(a.expires_at <= now(), FALSE) AS expired
FROM undolog.undolog_approval_requests AS a
WHERE a.state = 'pending';

COMMENT ON VIEW undolog.pending_approval_ids IS
'The pending approval requests alone (id, asked, deadline, expired), without their joins.';

REVOKE ALL ON undolog.pending_approval_ids FROM public;
