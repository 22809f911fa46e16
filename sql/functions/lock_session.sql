-- undolog.lock_session: a session's row, locked FOR UPDATE, and its advisory lock
-- (session_lock_key, with its owner) held exclusive, so that journaled calls in flight
-- (intercept holds it shared) finish first; UL002 when there is none. Every function that
-- moves a session on starts here, so they serialise on the row. Row first, then the
-- advisory lock: the order every path takes, so that none waits for the other in reverse.
-- The wait is bounded: an agent may leave its own transaction open while it holds its
-- session (an intercept, a heartbeat, a refused call), and a person's decision, a
-- rollback or a walker must not wait on it for as long as it likes. Past
-- bound_lock_wait() (5 s, or the caller's own shorter lock_timeout), UL030 says who
-- holds it, and nothing was changed. A session nobody holds is locked at once. A deadlock
-- (the holder waits in turn for what this transaction holds, such as the session's chain
-- head after a call of it reported here) is UL030 too, saying to end this transaction.
CREATE OR REPLACE FUNCTION undolog.lock_session(p_session_id uuid)
RETURNS undolog.undolog_sessions
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session undolog.undolog_sessions;
    v_bound record := undolog.bound_lock_wait();
BEGIN
    BEGIN
        SELECT s.* INTO v_session
        FROM undolog.undolog_sessions AS s
        WHERE s.session_id = p_session_id
        FOR UPDATE;
        IF NOT FOUND THEN
            PERFORM undolog.unknown_session(p_session_id);
        END IF;
        -- intercept never writes the session row, so the row read above stays current.
        PERFORM pg_catalog.pg_advisory_xact_lock(
            undolog.session_lock_key(p_session_id, v_session.owner_role));
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(p_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- the holder waits for this transaction: end this one
        PERFORM undolog.session_deadlocked(p_session_id);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN v_session;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_session(uuid) FROM public;
