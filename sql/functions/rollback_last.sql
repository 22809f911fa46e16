-- undolog.rollback_last: rollback_to for the last p_count calls still to undo, counted
-- down the undo stack in the walk's order (rollback_to_plan), whatever their step indexes
-- (a client whose step indexes do not follow the session's order, as the MCP proxy's,
-- undoes "the last n" with it). Only calls the plan would undo or stop at are counted;
-- a call that never took effect (action skip) is passed by the walk when it lies above
-- the floor, and not counted. Same roles, walk, records and errors as rollback_to;
-- UL008 a count < 1; UL021 fewer calls than that left to undo.
CREATE OR REPLACE FUNCTION undolog.rollback_last(
    p_session_id uuid, p_count integer, p_reason text, p_by text DEFAULT NULL
)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.start_partial_walk(p_session_id, NULL, coalesce(p_count, 0), p_reason, p_by)
$$;

REVOKE ALL ON FUNCTION undolog.rollback_last(uuid, integer, text, text) FROM public;
