-- undolog.call_args_ok: whether a call's own part is well formed, in one expression: the
-- session and step it names, its args (an object within the payload limits) and its
-- signature's form (64 lowercase hex). False, never NULL, when anything is wrong;
-- undolog.check_call_args then names the problem with its SQLSTATE. A SQL function, so
-- that it is inlined where it is used (journal_call, check_call, check_call_args): the
-- hot path pays for the expression, not for a PL/pgSQL call.
CREATE OR REPLACE FUNCTION undolog.call_args_ok(
    p_session_id uuid,
    p_step_index integer,
    p_args jsonb,
    p_call_signature text
)
RETURNS boolean
LANGUAGE sql
STABLE  -- as payload_fits is
PARALLEL SAFE
AS $$
    SELECT coalesce(
        undolog.signature_well_formed(p_call_signature)
        AND p_session_id IS NOT NULL AND p_step_index >= 0
        AND pg_catalog.jsonb_typeof(p_args) = 'object'
        AND undolog.payload_fits(p_args),
        FALSE)
$$;

REVOKE ALL ON FUNCTION undolog.call_args_ok(uuid, integer, jsonb, text) FROM public;
