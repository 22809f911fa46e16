-- undolog.undo_stack_entries: a session's undo stack as people read it (ORDER BY
-- stack_position DESC is the walk's LIFO order): which call each entry undoes, with
-- which compensation (NULL: a barrier in front of an irreversible call), its state,
-- attempts, next retry and last error, and the state of the call it undoes (the walk
-- skips an entry whose call never took effect). security_invoker: the undo stack's RLS applies.
CREATE OR REPLACE VIEW undolog.undo_stack_entries
WITH (security_invoker = TRUE) AS
SELECT
    u.session_id,
    u.undo_id,
    u.stack_position,
    u.effect_id,
    e.step_index,
    e.tool_name,
    u.compensation ->> 'name' AS compensation_name,
    u.compensation,
    u.state,
    u.attempts,
    u.max_attempts,
    u.next_attempt_at,
    u.last_error,
    u.claimed_by,
    u.claimed_until,
    u.updated_at,
    e.state AS effect_state
FROM undolog.undolog_undo_stack AS u
-- LEFT: an entry outlives its effect's month if that partition was dropped.
LEFT JOIN undolog.undolog_effect_log AS e
    ON
        u.session_id = e.session_id
        AND u.effect_id = e.effect_id
        AND u.executed_at = e.executed_at;

COMMENT ON VIEW undolog.undo_stack_entries IS
'Undo-stack entries with the call each one undoes (LIFO: ORDER BY stack_position DESC).';

REVOKE ALL ON undolog.undo_stack_entries FROM public;
