-- undolog.intercept_tool: intercept for a tool named by its registration's id (the tool_id
-- register_tool answered), the binding's hot path. What does not change between calls of
-- a tool (its name, tier and compensation) was checked once, when it was registered; a
-- call checks only what varies: its session and step, its args (an object, in size and
-- depth) and its signature's form. The answer row, every refusal and the durability rules
-- are intercept's (journal_call holds the body of both), but for the registration:
-- p_tool_id must name a live registration of the caller's login, who must own the
-- session; otherwise UL017, for any call (a replay too: the binding registers again and
-- retries). There is no tier to get wrong: the registration's is the call's.
-- session_id first: a distributed database routes the call by it.
CREATE OR REPLACE FUNCTION undolog.intercept_tool(
    p_session_id uuid,
    p_tool_id uuid,
    p_step_index integer,
    p_args jsonb,
    p_call_signature text
)
RETURNS TABLE (
    effect_id uuid, action text, state text, result_snapshot jsonb, approval_id uuid
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF p_tool_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'tool_id is required',
            HINT = 'Pass the tool_id that undolog.register_tool answered (the binding does so for '
                   'you).';
    END IF;
    RETURN QUERY SELECT * FROM undolog.journal_call(p_session_id, p_tool_id, p_step_index,
                                                    NULL, NULL, p_args, p_call_signature, NULL);
END
$$;

REVOKE ALL ON FUNCTION undolog.intercept_tool(uuid, uuid, integer, jsonb, text) FROM public;
