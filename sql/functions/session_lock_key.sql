-- undolog.session_lock_key: the advisory lock key of a session. intercept holds it shared
-- while it journals a call (many calls of one session at once are fine); whatever moves a
-- session (lock_session, recover) holds it exclusive, so that it waits until the undo
-- entries of the calls being journaled are visible. An advisory lock, not a row lock:
-- FOR SHARE on the session row writes the row (xmax, a WAL record) on every call, and the
-- rows of N agents' sessions share heap pages whose buffer locks they then queue on.
-- The last 16 hex digits: random in a version 4 and a version 7 UUID alike.
CREATE OR REPLACE FUNCTION undolog.session_lock_key(p_session_id uuid)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT ('x' || right(pg_catalog.replace(p_session_id::text, '-', ''), 16))::bit(64)::bigint
$$;

REVOKE ALL ON FUNCTION undolog.session_lock_key(uuid) FROM public;
