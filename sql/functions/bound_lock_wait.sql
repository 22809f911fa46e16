-- undolog.bound_lock_wait: the wait of a lock another transaction may hold and keep open
-- (a session, its login's pending-approvals lock), bounded for the rest of the caller's
-- transaction: lock_timeout becomes session_lock_wait() (5 s), unless the caller's own is
-- shorter. Answers the wait in force (for the UL030 that says how long it waited) and the
-- caller's lock_timeout, which the caller sets back (set_config(..., true)) once it holds
-- the lock. One definition for lock_session and lock_pending_approvals.
CREATE OR REPLACE FUNCTION undolog.bound_lock_wait(OUT p_wait interval, OUT p_caller_timeout text)
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    p_caller_timeout := pg_catalog.current_setting('lock_timeout');
    p_wait := undolog.session_lock_wait();
    IF p_caller_timeout <> '0' AND p_caller_timeout::interval < p_wait THEN
        p_wait := p_caller_timeout::interval;  -- the caller's own, shorter
    ELSE
        PERFORM pg_catalog.set_config(
            'lock_timeout', (pg_catalog.date_part('epoch', p_wait) * 1000)::bigint::text, true);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.bound_lock_wait() FROM public;
