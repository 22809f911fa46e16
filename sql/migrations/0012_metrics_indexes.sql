-- The indexes the metrics views (sql/views/metrics_*.sql) read through, so that a scrape
-- costs what the recent or the rare rows cost, never a pass over a table that keeps
-- years of calls. Neither touches a compensable call's path (intercept, commit, fail):
-- an index on the effect log or its history would cost every call (a partial index on
-- the history's late events measured ~10 us per history row, its predicate prepared for
-- every statement), so late results are found from the undo history instead
-- (metrics_late_results). The decided-approvals index tests its predicate when an
-- irreversible call's request is inserted: a call that then waits for a person.

-- Decisions of the last hour (metrics_approval_decisions). Only decide_approval and
-- expire_approvals write a decided_at; a pending request is not indexed.
CREATE INDEX undolog_approval_requests_decided_idx
ON undolog.undolog_approval_requests (decided_at)
WHERE state <> 'pending';

-- Compensation attempts and failures of the last minutes (metrics_compensations). The
-- undo history is written by the walk only.
CREATE INDEX undolog_undo_history_at_idx
ON undolog.undolog_undo_history (at);
