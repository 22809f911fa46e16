-- undolog.session_lock_wait: how long lock_session waits for a session another
-- transaction holds before it answers UL030. A journaled call holds its session for
-- milliseconds; only a transaction left open holds it longer.
CREATE OR REPLACE FUNCTION undolog.session_lock_wait()
RETURNS interval
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT interval '5 seconds'
$$;

REVOKE ALL ON FUNCTION undolog.session_lock_wait() FROM public;
