-- undolog.metrics_late_results: one row: how many results arrived after the undo walk
-- had taken their call (late_commit and late_fail events of the effect history, as long
-- as retention keeps their month), and when the last one did. Each flags a session for a
-- person (sessions_overview.needs_attention). Read through the partial index
-- undolog_effect_history_late_idx (migration 0012), which holds those events alone.
-- Owner's rights, granted to approver and operator only.
CREATE OR REPLACE VIEW undolog.metrics_late_results AS
SELECT
    count(*) AS late_results,
    max(h.at) AS last_at
FROM undolog.undolog_effect_history AS h
WHERE h.event IN ('late_commit', 'late_fail');

COMMENT ON VIEW undolog.metrics_late_results IS
'Results that arrived after their call was taken by the undo walk: how many, the last one.';

REVOKE ALL ON undolog.metrics_late_results FROM public;
