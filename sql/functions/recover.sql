-- undolog.recover: what a recovery worker calls on startup and then periodically.
-- 1. Every active session whose lease ran out (its agent stopped heartbeating: it died)
--    becomes failed, error 'lease expired'. Sessions another transaction holds right now
--    are skipped (SKIP LOCKED, and a session whose advisory lock an intercept holds):
--    their agent is evidently alive; the next run sees them.
--    awaiting_approval sessions are left alone: they wait for a human, not for an agent.
-- 2. Answers every session whose undo walk must run now (the rule is the view
--    undolog.due_sessions): failed sessions, and compensating ones where
--    claim_compensation would hand out an entry or finish the walk.
-- Oldest first (by their last change).
CREATE OR REPLACE FUNCTION undolog.recover()
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session_id uuid;
    v_owner_role text;
BEGIN
    -- One session at a time, in the order of docs/design/state-machines.md: its row
    -- (SKIP LOCKED), then its advisory lock, tried. Neither is waited for: a session
    -- another transaction holds is skipped (a call of it being journaled right now holds
    -- its advisory lock shared), and the next run sees it. A skipped session keeps none
    -- of its locks here: both are taken in a subtransaction that is rolled back when the
    -- advisory lock is not to be had (a transaction-level advisory lock is released only
    -- so), and a row locked by someone else, or no longer an expired active one when
    -- locked (its agent heartbeated meanwhile), is passed over before its advisory lock
    -- is tried. (Tried in the scan's WHERE, the advisory lock of a row then skipped for
    -- its row lock stayed held until this transaction ended.)
    FOR v_session_id IN
        SELECT x.session_id
        FROM undolog.undolog_sessions AS x
        WHERE x.state = 'active' AND x.lease_expires_at <= now()
        ORDER BY x.session_id
    LOOP
        BEGIN
            SELECT x.owner_role INTO v_owner_role
            FROM undolog.undolog_sessions AS x
            WHERE x.session_id = v_session_id
              AND x.state = 'active' AND x.lease_expires_at <= now()
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(
                   undolog.session_lock_key(v_session_id, v_owner_role)) THEN
                -- Rolls the block back: the row lock taken above goes with it.
                RAISE EXCEPTION USING
                    ERRCODE = 'UL030',
                    MESSAGE = pg_catalog.format('session %s is held by a transaction that '
                                                'has not ended', v_session_id),
                    HINT = 'Skipped by this run (caught below, never raised to the '
                           'caller): the next run of recover() sees it.';
            END IF;
            -- The guard trigger validates active -> failed and writes the history row.
            -- Updated by the subtransaction that locked it: a row locked by one
            -- (sub)transaction and updated by another would need a multixact.
            UPDATE undolog.undolog_sessions AS s
            SET state = 'failed', error = 'lease expired'
            WHERE s.session_id = v_session_id AND s.state = 'active';
        EXCEPTION WHEN SQLSTATE 'UL030' THEN
            CONTINUE;  -- skipped: raised above only (the update raises no UL030)
        END;
    END LOOP;

    -- undolog.due_sessions states which sessions are due; its active rows are the ones
    -- skipped above (held by a live transaction): not for the walk yet.
    RETURN QUERY
    SELECT d.session_id
    FROM undolog.due_sessions AS d
    WHERE d.state IN ('failed', 'compensating')
    ORDER BY d.updated_at, d.session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.recover() FROM public;
