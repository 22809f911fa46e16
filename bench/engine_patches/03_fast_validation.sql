-- Proposal 3: validate a well-formed call with one expression.
--
-- check_call runs a dozen IF statements, two nested check_payload calls and
-- check_compensation, whose CASE holds an EXISTS (SELECT ... jsonb_object_keys(...)) that
-- PL/pgSQL must run as a full query. In a new transaction each PL/pgSQL expression is set up
-- again, so each one costs even when it passes. check_call now first tests the common case
-- (every rule at once) and returns; only a call that fails it goes through the checks that
-- name the problem, so the errors are unchanged. check_compensation tests its keys with
-- jsonb key subtraction instead of a subquery.

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
    -- The common case in one expression; the checks below name the problem otherwise.
    IF coalesce(
           p_call_signature ~ '^[0-9a-f]{64}$'
           AND p_session_id IS NOT NULL AND p_step_index >= 0
           AND btrim(p_tool_name) <> '' AND length(p_tool_name) <= 200
           AND jsonb_typeof(p_args) = 'object'
           AND pg_catalog.pg_column_size(p_args) <= undolog.max_payload_bytes()
           AND CASE p_tier
               WHEN 'irreversible' THEN p_compensation IS NULL
               WHEN 'compensable' THEN
                   jsonb_typeof(p_compensation) = 'object'
                   AND p_compensation - ARRAY['name', 'args', 'max_attempts'] = '{}'::jsonb
                   AND jsonb_typeof(p_compensation -> 'name') = 'string'
                   AND btrim(p_compensation ->> 'name') <> ''
                   AND coalesce(jsonb_typeof(p_compensation -> 'args'), 'object') = 'object'
                   AND NOT p_compensation ? 'max_attempts'
                   AND pg_catalog.pg_column_size(p_compensation) <= undolog.max_payload_bytes()
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
                THEN 'SAFE tools are not journaled: call them directly.' END;
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
    IF p_tool_name IS NULL OR btrim(p_tool_name) = '' OR length(p_tool_name) > 200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'tool_name must be non-empty text of at most 200 characters';
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

-- undolog.check_compensation: a compensation descriptor is
--   {"name": "<non-empty text>", "args": {<object>}, "max_attempts": <1..100>}
-- with args and max_attempts optional and no other keys. Refuses anything else (UL007).
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
             OR btrim(p_compensation ->> 'name') = ''
            THEN 'needs "name", a non-empty string'
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
            MESSAGE = 'invalid compensation descriptor: ' || v_problem;
    END IF;
    PERFORM undolog.check_payload('compensation', p_compensation);
END
$$;

REVOKE ALL ON FUNCTION undolog.check_compensation(jsonb) FROM public;
