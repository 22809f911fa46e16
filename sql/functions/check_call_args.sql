-- undolog.check_call_args: what intercept and intercept_tool refuse of a call's own part,
-- before either touches a table: the session and step it names, its args (an object, in
-- size and depth) and its signature's form. What a tool's registration fixed (its name,
-- tier and compensation) is check_tool's, checked once when it is registered.
-- Each problem has its own SQLSTATE (README, "Errors") and a message that names it.
CREATE OR REPLACE FUNCTION undolog.check_call_args(
    p_session_id uuid,
    p_step_index integer,
    p_args jsonb,
    p_call_signature text
)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    -- A well-formed call passes in one expression (each PL/pgSQL expression costs a few
    -- microseconds even when it passes); otherwise the checks below name the problem.
    IF undolog.call_args_ok(p_session_id, p_step_index, p_args, p_call_signature) THEN
        RETURN;
    END IF;
    IF NOT coalesce(undolog.signature_well_formed(p_call_signature), FALSE) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL004',
            MESSAGE = 'call_signature must be 64 lowercase hex characters (BLAKE3-256)',
            DETAIL = pg_catalog.format('got %s', coalesce(pg_catalog.quote_literal(
                left(p_call_signature, 80)), 'NULL')),
            HINT = 'Compute the signature with undolog.signature.call_signature (Python) over the '
                   'call''s session, step, tool and args: docs/reference/signature.md.';
    END IF;
    IF p_session_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'session_id is required',
            HINT = 'Pass the session_id that undolog.begin_session answered.';
    END IF;
    IF p_step_index IS NULL OR p_step_index < 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('step_index must be an integer >= 0, not %s',
                                        coalesce(p_step_index::text, 'NULL')),
            HINT = 'Number a session''s calls from 0, one step per call, as the binding does.';
    END IF;
    IF p_args IS NULL OR jsonb_typeof(p_args) <> 'object' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('args must be a JSON object, not %s',
                                        coalesce(jsonb_typeof(p_args), 'NULL')),
            HINT = 'Pass the tool''s arguments as a JSON object of named arguments, e.g. '
                   '''{"amount": 5}''.';
    END IF;
    PERFORM undolog.check_payload('args', p_args);
END
$$;

REVOKE ALL ON FUNCTION undolog.check_call_args(uuid, integer, jsonb, text) FROM public;
