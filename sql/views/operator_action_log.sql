-- undolog.operator_action_log: every decision a person took on a session (resume, retry,
-- abandon, rollback): who (performed_by; actor is the login), why, when, on which undo
-- entry and its call. Staff only, like the table (its RLS: approver and operator).
CREATE OR REPLACE VIEW undolog.operator_action_log
WITH (security_invoker = TRUE) AS
SELECT
    o.session_id,
    o.action_id,
    o.action,
    o.undo_id,
    e.tool_name,
    o.performed_by,
    o.reason,
    o.at,
    o.actor
FROM undolog.undolog_operator_actions AS o
-- The tables, not undo_stack_entries: views are applied in name order.
LEFT JOIN undolog.undolog_undo_stack AS u
    ON o.session_id = u.session_id AND o.undo_id = u.undo_id
LEFT JOIN undolog.undolog_effect_log AS e
    ON
        u.session_id = e.session_id
        AND u.effect_id = e.effect_id
        AND u.executed_at = e.executed_at;

COMMENT ON VIEW undolog.operator_action_log IS
'Operators'' decisions on sessions (ORDER BY session_id, action_id); staff only.';

REVOKE ALL ON undolog.operator_action_log FROM public;
