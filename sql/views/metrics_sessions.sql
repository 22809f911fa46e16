-- undolog.metrics_sessions: the sessions still in the engine's or a person's hands, by
-- state, exactly, with the oldest one's last change (for `undolog metrics`, the
-- dashboard's /metrics). One row for each such state, 0 when there is none.
-- Bounded: the WHERE (undolog.session_unfinished, once inlined) is the predicate of
-- undolog_sessions_unfinished_idx, so the count reads that partial index (the live
-- sessions) and never the finished ones, however many years of them are kept. A halted
-- session an operator abandoned (resolved) stays halted for ever and is not counted
-- here: nobody has to act on it any more. Finished sessions are estimated apart
-- (metrics_sessions_estimated).
-- Owner's rights (not security_invoker): a count over every login's sessions; the
-- grant (approver and operator only) is the access rule, as for pending_approvals.
CREATE OR REPLACE VIEW undolog.metrics_sessions AS
WITH live AS (
    SELECT
        s.state,
        count(*) AS sessions,
        min(s.updated_at) AS oldest_updated_at
    FROM undolog.undolog_sessions AS s
    WHERE undolog.session_unfinished(s.state, s.resolved_at)
    GROUP BY s.state
)

SELECT
    st.state,
    coalesce(c.sessions, 0) AS sessions,
    coalesce(extract(EPOCH FROM now() - c.oldest_updated_at), 0)::double precision
        AS oldest_age_seconds
FROM (
    VALUES ('active'), ('awaiting_approval'), ('failed'), ('compensating'), ('halted')
) AS st (state)
LEFT JOIN live AS c ON st.state = c.state;

COMMENT ON VIEW undolog.metrics_sessions IS
'Live sessions by state (exact; abandoned halted ones excluded) and the age of the '
'oldest one''s last change, read through the unfinished-sessions index.';

REVOKE ALL ON undolog.metrics_sessions FROM public;
