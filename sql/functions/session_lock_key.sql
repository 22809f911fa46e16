-- undolog.session_lock_key: the advisory lock key of a session, for its owner. intercept
-- holds it shared while it journals a call (many calls of one session at once are fine);
-- whatever moves a session (lock_session, recover) holds it exclusive, so that it waits
-- until the undo entries of the calls being journaled are visible. An advisory lock, not
-- a row lock: FOR SHARE on the session row writes the row (xmax, a WAL record) on every
-- call, and the rows of N agents' sessions share heap pages whose buffer locks they then
-- queue on.
-- The owner is part of the key: intercept takes the lock before it reads the session and
-- learns whose it is, with the caller's login (session_user), which must be the owner.
-- A login naming another's session then locks a key of its own, and its refused call,
-- left open in its transaction, holds nothing the session's owner or its walker needs.
-- A 64-bit hash of the whole id, not a part of it: version 1 UUIDs made by one process
-- share their last 64 bits (clock sequence and node), and sessions sharing a key would
-- share a lock, one stalling the other and recover skipping both. The id is the agent's
-- choice, so the hash is undolog.advisory_key's: no id it can pick has another lock's
-- key. Only the engine's owner may take advisory locks in its database (migration
-- 0004_locks), so knowing a key (pg_locks shows it) lets no agent hold a session's lock.
CREATE OR REPLACE FUNCTION undolog.session_lock_key(p_session_id uuid, p_owner_role text)
RETURNS bigint
LANGUAGE sql
STABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT undolog.advisory_key('session', p_session_id::text || ':' || p_owner_role)
$$;

REVOKE ALL ON FUNCTION undolog.session_lock_key(uuid, text) FROM public;
