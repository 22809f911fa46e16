-- undolog.signature_lock_key: the advisory-lock key of a call in its session
-- (undolog.advisory_key 'signature', of the session's id and the call's signature).
-- journal_call tries it, once the caller is known to be the session's owner, so that a
-- call being journaled is not journaled again at once (the second answers in_progress).
-- The session is part of the key: a signature is unique in its session only, and any
-- login that reads a session (an approver, an agent that is one too) knows its calls'
-- signatures. Keyed by the signature alone, a call with another session's signature,
-- journaled in a session of the caller's own and left open in its transaction, held the
-- owner's key, and the owner's call answered in_progress for as long as it stayed open.
-- Now the key is the owner's session's, which only the owner's login passes the check
-- to lock. The signature is the client's: the key is hashed from it, never read from
-- its digits, so that no agent can send a signature whose key is another lock's
-- (advisory_key says why). Two calls share a key only by chance.
CREATE OR REPLACE FUNCTION undolog.signature_lock_key(p_session_id uuid, p_call_signature text)
RETURNS bigint
LANGUAGE sql
STABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT undolog.advisory_key('signature', p_session_id::text || ':' || p_call_signature)
$$;

REVOKE ALL ON FUNCTION undolog.signature_lock_key(uuid, text) FROM public;
