-- undolog.rollback_to_plan: what rollback_to(p_session_id, p_step_index) would undo, in
-- the order the walk takes it (last first): every unfinished entry of the undo stack from
-- the top down to the lowest entry of a call at step p_step_index or later. Read only.
-- action says what the walk does with each entry when it reaches it:
--   undo  run the compensation (the call committed, or its outcome is unknown)
--   skip  nothing to undo (the call never took effect)
--   stop  an irreversible call that may have acted: the walk halts there for a person,
--         and the entries below it wait (as in any walk)
-- floor is the stack position rollback_to would stop at (the same on every row).
-- UL002 unknown session; 42501 a session the caller may not act on (check_session_actor).
CREATE OR REPLACE FUNCTION undolog.rollback_to_plan(p_session_id uuid, p_step_index integer)
RETURNS TABLE (
    stack_position bigint,
    undo_id uuid,
    effect_id uuid,
    step_index integer,
    tool_name text,
    tier text,
    effect_state text,
    action text,
    floor bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_owner text;
BEGIN
    SELECT s.owner_role INTO v_owner
    FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        PERFORM undolog.unknown_session(p_session_id);
    END IF;
    PERFORM undolog.check_session_actor(p_session_id, v_owner);
    RETURN QUERY
    WITH bottom AS (
        SELECT pg_catalog.min(u.stack_position) AS floor
        FROM undolog.undolog_undo_stack AS u
        JOIN undolog.undolog_effect_log AS e
            ON e.session_id = u.session_id AND e.effect_id = u.effect_id
           AND e.executed_at = u.executed_at
        WHERE u.session_id = p_session_id AND e.step_index >= p_step_index
    )
    SELECT u.stack_position, u.undo_id, e.effect_id, e.step_index, e.tool_name, e.tier,
           e.state,
           CASE
               WHEN e.state = 'pending' THEN 'skip'
               WHEN u.compensation IS NULL AND e.state IN ('approved', 'rejected') THEN 'skip'
               WHEN u.compensation IS NULL THEN 'stop'
               ELSE 'undo'
           END,
           b.floor
    FROM bottom AS b
    JOIN undolog.undolog_undo_stack AS u
        ON u.session_id = p_session_id AND u.stack_position >= b.floor
       AND u.state IN ('pending', 'compensating')
    JOIN undolog.undolog_effect_log AS e
        ON e.session_id = u.session_id AND e.effect_id = u.effect_id
       AND e.executed_at = u.executed_at
    ORDER BY u.stack_position DESC;
END
$$;

REVOKE ALL ON FUNCTION undolog.rollback_to_plan(uuid, integer) FROM public;
