-- undolog.check_call: everything intercept refuses before it touches a table: the call's
-- own part (check_call_args) and its tool's (check_tool), in one expression when all is
-- well. Each problem has its own SQLSTATE (README, "Errors") and a message that names it.
CREATE OR REPLACE FUNCTION undolog.check_call(
    p_session_id uuid,
    p_step_index integer,
    p_tool_name text,
    p_tier text,
    p_args jsonb,
    p_call_signature text,
    p_compensation jsonb
)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    -- A well-formed call passes in one expression (each PL/pgSQL expression costs a few
    -- microseconds even when it passes); otherwise the checks below name the problem.
    IF coalesce(
           undolog.call_args_ok(p_session_id, p_step_index, p_args, p_call_signature)
           AND NOT undolog.is_blank(p_tool_name) AND length(p_tool_name) <= 200
           AND CASE p_tier
               WHEN 'irreversible' THEN p_compensation IS NULL
               WHEN 'compensable' THEN
                   jsonb_typeof(p_compensation) = 'object'
                   AND p_compensation - ARRAY['name', 'args', 'max_attempts'] = '{}'::jsonb
                   AND NOT undolog.is_blank(p_compensation ->> 'name')
                   AND length(p_compensation ->> 'name') <= 200
                   AND jsonb_typeof(p_compensation -> 'name') = 'string'
                   AND coalesce(jsonb_typeof(p_compensation -> 'args'), 'object') = 'object'
                   AND NOT p_compensation ? 'max_attempts'
                   AND undolog.payload_fits(p_compensation)
               ELSE false
           END, false) THEN
        RETURN;
    END IF;
    -- Otherwise the call's own part first, then its tool's: check_call_args and
    -- check_tool name the problem (intercept_tool checks the first only, register_tool
    -- the second).
    PERFORM undolog.check_call_args(p_session_id, p_step_index, p_args, p_call_signature);
    PERFORM undolog.check_tool(p_tool_name, p_tier, p_compensation);
END
$$;

REVOKE ALL ON FUNCTION undolog.check_call(uuid, integer, text, text, jsonb, text, jsonb)
FROM public;
