-- undolog.signature_lock_key: the advisory-lock key of a call signature
-- (undolog.advisory_key 'signature'). The signature is the client's: the key is hashed
-- from it, never read from its digits, so that no agent can send a signature whose key is
-- another lock's (advisory_key says why). Two calls share a key only by chance. Only the
-- engine's owner may take advisory locks (migration 0004_locks), so no agent can hold a
-- call's key to keep it in_progress.
CREATE OR REPLACE FUNCTION undolog.signature_lock_key(p_call_signature text)
RETURNS bigint
LANGUAGE sql
STABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT undolog.advisory_key('signature', p_call_signature)
$$;

REVOKE ALL ON FUNCTION undolog.signature_lock_key(text) FROM public;
