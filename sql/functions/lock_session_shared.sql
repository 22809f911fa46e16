-- undolog.lock_session_shared: the session's advisory lock (session_lock_key, with the
-- caller's login), held shared until the transaction ends, for a journaled call whose
-- try of it failed (journal_call tries first: a call waits here only while a transaction
-- that moves the session on holds it exclusive, lock_session's). That transaction may be
-- a person's decision, a rollback or a walk left open, and the agent's call must not wait
-- on it for as long as it likes: the wait is bounded as lock_session's (bound_lock_wait:
-- 5 s, or the caller's own shorter lock_timeout), then UL030, and nothing was changed.
-- A deadlock ends the wait sooner when that transaction waits in turn for this one (a
-- call of the session reported in this transaction, still open, holds the session's chain
-- head, which that one's history row needs): UL030 too, not a raw 40P01, saying that this
-- transaction is the one to end (session_deadlocked). The block was there already: the
-- hot path (journal_call's try of the lock) never enters this function.
CREATE OR REPLACE FUNCTION undolog.lock_session_shared(p_session_id uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_bound record := undolog.bound_lock_wait();
BEGIN
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(
            undolog.session_lock_key(p_session_id, session_user));
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL030',
            MESSAGE = pg_catalog.format('session %s is held by a transaction that has not '
                                        'ended', p_session_id),
            DETAIL = pg_catalog.format('Waited %s for it: a transaction that moves the '
                                       'session on (a decision, a rollback, the undo walk, '
                                       'an IRREVERSIBLE call of this login) holds it and has '
                                       'not ended. Nothing was changed.', v_bound.p_wait),
            HINT = 'Try again. If it stays held, end that transaction: its backend is in '
                   'pg_stat_activity, idle in transaction (pg_terminate_backend).';
    WHEN deadlock_detected THEN  -- the holder waits for this transaction: end this one
        PERFORM undolog.session_deadlocked(p_session_id);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_session_shared(uuid) FROM public;
