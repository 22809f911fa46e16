-- undolog.session_calls: every journaled call with its arguments, result and error, as
-- the reader may see them (security_invoker: the effect log's row-level security).
-- args_length / result_length let a page show a head of a huge payload without
-- fetching all of it.
CREATE OR REPLACE VIEW undolog.session_calls
WITH (security_invoker = TRUE) AS
SELECT
    e.session_id,
    e.effect_id,
    e.executed_at,
    e.step_index,
    e.tool_name,
    e.tier,
    e.state,
    e.args,
    e.result_snapshot,
    e.error,
    e.attempts,
    e.replay_count,
    e.last_replayed_at,
    e.updated_at,
    length(e.args::text) AS args_length,
    length(e.result_snapshot::text) AS result_length
FROM undolog.undolog_effect_log AS e;

COMMENT ON VIEW undolog.session_calls IS
'Every journaled call (ORDER BY session_id, step_index), filtered by the reader''s RLS.';

REVOKE ALL ON undolog.session_calls FROM public;
