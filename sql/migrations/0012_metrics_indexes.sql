-- The indexes the metrics views (sql/views/metrics_*.sql) read through, so that a scrape
-- costs what the recent or the rare rows cost, never a pass over a table that keeps
-- years of calls. None of them is written by the hot path's inserts, apart from the
-- predicate test of the late-result index (one comparison per effect-history row: the
-- rows themselves are never indexed unless a result arrived late).

-- Decisions of the last hour (metrics_approval_decisions). Only decide_approval and
-- expire_approvals write a decided_at; a pending request is not indexed.
CREATE INDEX undolog_approval_requests_decided_idx
ON undolog.undolog_approval_requests (decided_at)
WHERE state <> 'pending';

-- Compensation attempts and failures of the last minutes (metrics_compensations). The
-- undo history is written by the walk only.
CREATE INDEX undolog_undo_history_at_idx
ON undolog.undolog_undo_history (at);

-- Late results (metrics_late_results): rare by nature, each one flags a session for a
-- person. Partial, so the index holds them alone however large the history grows.
CREATE INDEX undolog_effect_history_late_idx
ON undolog.undolog_effect_history (at)
WHERE event IN ('late_commit', 'late_fail');
