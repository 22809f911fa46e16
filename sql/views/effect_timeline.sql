-- undolog.effect_timeline: every event of every journaled call, in order: what a person
-- reads to learn what a session did, was replayed, failed, or undone.
-- security_invoker: filtered by the reader's row-level security, like the tables.
CREATE OR REPLACE VIEW undolog.effect_timeline
WITH (security_invoker = TRUE) AS
SELECT
    h.session_id,
    h.history_id,
    h.at,
    e.step_index,
    e.tool_name,
    e.tier,
    h.event,
    h.from_state,
    h.to_state,
    h.actor,
    h.detail,
    h.effect_id
FROM undolog.undolog_effect_history AS h
INNER JOIN undolog.undolog_effect_log AS e
    ON
        h.session_id = e.session_id
        AND h.effect_id = e.effect_id
        AND h.executed_at = e.executed_at;

COMMENT ON VIEW undolog.effect_timeline IS
'Every state change and replay of every call (ORDER BY session_id, history_id).';

REVOKE ALL ON undolog.effect_timeline FROM public;
