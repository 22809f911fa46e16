-- undolog.signature_lock_key: the advisory-lock key of a call signature.
-- Callers validate the signature first: a short string would be silently zero-padded.
CREATE OR REPLACE FUNCTION undolog.signature_lock_key(p_call_signature text)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT ('x' || left(p_call_signature, 16))::bit(64)::bigint
$$;

REVOKE ALL ON FUNCTION undolog.signature_lock_key(text) FROM public;
