-- undolog.check_compensation: a compensation descriptor is
--   {"name": "<non-empty text>", "args": {<object>}, "max_attempts": <1..100>}
-- with args and max_attempts optional and no other keys. Refuses anything else (UL007).
-- The name is a tool's name (the one the worker runs), held to a tool name's 200
-- characters: an agent login registers it, and every face shows it on each undo entry of
-- its sessions (a megabyte of name was a megabyte a row).
CREATE OR REPLACE FUNCTION undolog.check_compensation(p_compensation jsonb)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
DECLARE
    v_problem text;
BEGIN
    v_problem := CASE
        WHEN jsonb_typeof(p_compensation) <> 'object'
            THEN 'must be a JSON object, not ' || jsonb_typeof(p_compensation)
        WHEN p_compensation - ARRAY['name', 'args', 'max_attempts'] <> '{}'::jsonb
            THEN 'may only have the keys name, args, max_attempts'
        WHEN jsonb_typeof(p_compensation -> 'name') IS DISTINCT FROM 'string'
             OR undolog.is_blank(p_compensation ->> 'name')
            THEN 'needs "name", a non-empty string'
        WHEN length(p_compensation ->> 'name') > 200
            THEN '"name" must be at most 200 characters, as a tool''s name'
        WHEN p_compensation ? 'args' AND jsonb_typeof(p_compensation -> 'args') <> 'object'
            THEN '"args" must be a JSON object'
        WHEN p_compensation ? 'max_attempts'
             AND (jsonb_typeof(p_compensation -> 'max_attempts') <> 'number'
                  OR (p_compensation ->> 'max_attempts') !~ '^[0-9]{1,3}$'
                  OR (p_compensation ->> 'max_attempts')::integer NOT BETWEEN 1 AND 100)
            THEN '"max_attempts" must be an integer from 1 to 100'
    END;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL007',
            MESSAGE = 'invalid compensation descriptor: ' || v_problem,
            HINT = 'A compensation is {"name": TOOL, "args": {...}, "max_attempts": N} with only '
                   'name required: docs/reference/sql.md, register_tool.';
    END IF;
    PERFORM undolog.check_payload('compensation', p_compensation);
END
$$;

REVOKE ALL ON FUNCTION undolog.check_compensation(jsonb) FROM public;
