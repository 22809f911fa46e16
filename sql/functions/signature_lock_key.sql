-- undolog.signature_lock_key: the advisory-lock key of a call signature.
-- Callers validate the signature first: a short string would be silently zero-padded.
-- The first 64 bits of the signature are enough: a signature is a BLAKE3 hash, uniform in
-- every bit, so two calls share a key only by chance (unlike a version 1 UUID's halves,
-- see session_lock_key). Only the engine's owner may take advisory locks (migration
-- 0004_locks), so no agent can hold a call's key to keep it in_progress.
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
