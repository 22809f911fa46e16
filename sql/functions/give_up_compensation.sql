-- undolog.give_up_compensation: an in-flight entry has used its last attempt. The entry
-- and its effect become compensation_failed and the session halts for a human.
-- Callers hold the session row and the entry.
CREATE OR REPLACE FUNCTION undolog.give_up_compensation(
    p_entry undolog.undolog_undo_stack, p_error text
)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_tool text;
BEGIN
    UPDATE undolog.undolog_undo_stack AS u
    SET state = 'compensation_failed', last_error = p_error
    WHERE u.session_id = p_entry.session_id AND u.undo_id = p_entry.undo_id;
    UPDATE undolog.undolog_effect_log AS e
    SET state = 'compensation_failed', error = p_error
    WHERE e.session_id = p_entry.session_id AND e.effect_id = p_entry.effect_id
      AND e.executed_at = p_entry.executed_at
    RETURNING e.tool_name INTO v_tool;
    PERFORM undolog.halt_walk(
        p_entry.session_id, p_entry.undo_id,
        pg_catalog.format('compensation %s of %s (undo entry %s) failed after %s attempt(s): %s',
                          p_entry.compensation ->> 'name', v_tool, p_entry.undo_id,
                          p_entry.attempts, p_error)
    );
END
$$;

REVOKE ALL ON FUNCTION undolog.give_up_compensation(undolog.undolog_undo_stack, text)
FROM public;
