-- undolog.metrics_approval_decisions: how long calls waited for their decision, over the
-- decisions of the last hour (window_seconds), one row per decision (approved, rejected,
-- expired; 0 and NULL quantiles when there was none): how many, the sum of their waits,
-- and the median, 90th and 99th percentile wait, in seconds. A window and not every
-- decision ever made: the cost of a scrape is the last hour's decisions (read through
-- undolog_approval_requests_decided_idx, migration 0012), not the years of them.
-- Owner's rights, granted to approver and operator only (as decided_approvals).
CREATE OR REPLACE VIEW undolog.metrics_approval_decisions AS
WITH recent AS (
    SELECT
        a.state,
        extract(EPOCH FROM a.decided_at - a.requested_at)::double precision AS waited
    FROM undolog.undolog_approval_requests AS a
    WHERE a.state <> 'pending' AND a.decided_at > now() - interval '1 hour'
)

SELECT
    d.decision,
    count(w.waited) AS decided,
    coalesce(sum(w.waited), 0)::double precision AS waited_seconds_sum,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY w.waited) AS p50_seconds,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY w.waited) AS p90_seconds,
    percentile_cont(0.99) WITHIN GROUP (ORDER BY w.waited) AS p99_seconds,
    3600::double precision AS window_seconds
FROM (VALUES ('approved'), ('rejected'), ('expired')) AS d (decision)
LEFT JOIN recent AS w ON d.decision = w.state
GROUP BY d.decision;

COMMENT ON VIEW undolog.metrics_approval_decisions IS
'Decisions of the last hour by decision: count, total and percentiles of the wait (s).';

REVOKE ALL ON undolog.metrics_approval_decisions FROM public;
