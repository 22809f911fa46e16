-- undolog.metrics_sessions_estimated: every session state with an estimate of its
-- sessions from the planner's statistics (undolog.session_state_estimates, which says
-- how and why), for the volume of finished sessions without counting them; what someone
-- must act on is counted exactly in metrics_sessions.
-- Owner's rights, granted to approver and operator only (as metrics_sessions); they
-- also hold EXECUTE on the function, which a view's reader needs.
CREATE OR REPLACE VIEW undolog.metrics_sessions_estimated AS
SELECT
    e.state,
    e.sessions
FROM undolog.session_state_estimates() AS e;

COMMENT ON VIEW undolog.metrics_sessions_estimated IS
'Sessions by state, estimated from the planner''s statistics (ANALYZE): the volume of '
'finished sessions without counting them.';

REVOKE ALL ON undolog.metrics_sessions_estimated FROM public;
