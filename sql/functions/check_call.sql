-- undolog.check_call: everything intercept refuses before it touches a table.
-- Each problem has its own SQLSTATE (README, "Errors") and a message that names it.
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
           p_call_signature ~ '^[0-9a-f]{64}$'
           AND p_session_id IS NOT NULL AND p_step_index >= 0
           AND NOT undolog.is_blank(p_tool_name) AND length(p_tool_name) <= 200
           AND jsonb_typeof(p_args) = 'object'
           AND undolog.payload_fits(p_args)
           AND CASE p_tier
               WHEN 'irreversible' THEN p_compensation IS NULL
               WHEN 'compensable' THEN
                   jsonb_typeof(p_compensation) = 'object'
                   AND p_compensation - ARRAY['name', 'args', 'max_attempts'] = '{}'::jsonb
                   AND NOT undolog.is_blank(p_compensation ->> 'name')
                   AND jsonb_typeof(p_compensation -> 'name') = 'string'
                   AND coalesce(jsonb_typeof(p_compensation -> 'args'), 'object') = 'object'
                   AND NOT p_compensation ? 'max_attempts'
                   AND undolog.payload_fits(p_compensation)
               ELSE false
           END, false) THEN
        RETURN;
    END IF;
    IF p_call_signature IS NULL OR p_call_signature !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL004',
            MESSAGE = 'call_signature must be 64 lowercase hex characters (BLAKE3-256)',
            DETAIL = pg_catalog.format('got %s', coalesce(pg_catalog.quote_literal(
                left(p_call_signature, 80)), 'NULL'));
    END IF;
    IF p_tier IS NULL OR p_tier NOT IN ('compensable', 'irreversible') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL006',
            MESSAGE = pg_catalog.format('tier must be compensable or irreversible, not %s',
                                        coalesce(pg_catalog.quote_literal(p_tier), 'NULL')),
            HINT = CASE WHEN lower(p_tier) = 'safe'
                THEN 'SAFE tools are not journaled: call them directly.'
                ELSE 'A tool''s author declares its tier: compensable or irreversible.' END;
    END IF;
    IF p_session_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'session_id is required';
    END IF;
    IF p_step_index IS NULL OR p_step_index < 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('step_index must be an integer >= 0, not %s',
                                        coalesce(p_step_index::text, 'NULL'));
    END IF;
    IF undolog.is_blank(p_tool_name) OR length(p_tool_name) > 200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'tool_name must be non-blank text of at most 200 characters';
    END IF;
    IF p_args IS NULL OR jsonb_typeof(p_args) <> 'object' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('args must be a JSON object, not %s',
                                        coalesce(jsonb_typeof(p_args), 'NULL'));
    END IF;
    PERFORM undolog.check_payload('args', p_args);
    IF p_tier = 'compensable' AND p_compensation IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL007',
            MESSAGE = 'a compensable call needs a compensation descriptor';
    END IF;
    IF p_tier = 'irreversible' AND p_compensation IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL007',
            MESSAGE = 'an irreversible call cannot carry a compensation: nothing can undo it';
    END IF;
    IF p_compensation IS NOT NULL THEN
        PERFORM undolog.check_compensation(p_compensation);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_call(uuid, integer, text, text, jsonb, text, jsonb)
FROM public;
