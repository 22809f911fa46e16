-- undolog.lock_pending_approvals: the login's pending-approvals lock (advisory_key
-- ('pending_approvals', login)), held until the transaction ends, under which a new
-- IRREVERSIBLE call counts its login's pending requests (check_pending_approvals). Taken
-- before the call's session's locks (journal_call), so that no transaction holds a session
-- while it waits for it: taken after, it closed a cycle between two transactions asking in
-- two sessions of one login, each then in the other's (40P01). The wait is bounded as
-- lock_session's (bound_lock_wait): past it, UL030, nothing changed.
CREATE OR REPLACE FUNCTION undolog.lock_pending_approvals(p_owner_role text)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_bound record := undolog.bound_lock_wait();
BEGIN
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock(
            undolog.advisory_key('pending_approvals', p_owner_role));
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL030',
            MESSAGE = pg_catalog.format('the approval requests of %s are being asked by a '
                                        'transaction that has not ended', p_owner_role),
            DETAIL = pg_catalog.format('Waited %s for it: another transaction of this login '
                                       'asked for an approval and has not ended. Nothing was '
                                       'changed.', v_bound.p_wait),
            HINT = 'Try again. If it stays held, end that transaction: its backend is in '
                   'pg_stat_activity, idle in transaction, under this login '
                   '(pg_terminate_backend).';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_pending_approvals(text) FROM public;
