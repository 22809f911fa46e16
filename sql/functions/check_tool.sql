-- undolog.check_tool: what a tool's definition must be, checked where it is fixed
-- (register_tool) and by intercept for the call that names its tool: the name, the tier,
-- and for a compensable tool its compensation descriptor. intercept_tool does not check
-- it again: the registration it names passed it.
-- Each problem has its own SQLSTATE (README, "Errors") and a message that names it.
CREATE OR REPLACE FUNCTION undolog.check_tool(
    p_tool_name text,
    p_tier text,
    p_compensation jsonb
)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    IF p_tier IS NULL OR p_tier NOT IN ('compensable', 'irreversible') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL006',
            MESSAGE = pg_catalog.format('tier must be compensable or irreversible, not %s',
                                        coalesce(pg_catalog.quote_literal(p_tier), 'NULL')),
            HINT = CASE WHEN lower(p_tier) = 'safe'
                THEN 'SAFE tools are not journaled: call them directly.'
                ELSE 'A tool''s author declares its tier: compensable or irreversible.' END;
    END IF;
    IF undolog.is_blank(p_tool_name) OR length(p_tool_name) > 200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'tool_name must be non-blank text of at most 200 characters',
            HINT = 'Name the tool in 1 to 200 characters, as the agent calls it.';
    END IF;
    IF p_tier = 'compensable' AND p_compensation IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL007',
            MESSAGE = 'a compensable call needs a compensation descriptor',
            HINT = 'Give the tool its undo, e.g. {"name": "delete_user", "args": {}}, or declare '
                   'it irreversible if nothing can undo it.';
    END IF;
    IF p_tier = 'irreversible' AND p_compensation IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL007',
            MESSAGE = 'an irreversible call cannot carry a compensation: nothing can undo it',
            HINT = 'Leave the compensation out: an irreversible call waits for a person''s '
                   'approval instead.';
    END IF;
    IF p_compensation IS NOT NULL THEN
        PERFORM undolog.check_compensation(p_compensation);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_tool(text, text, jsonb) FROM public;
