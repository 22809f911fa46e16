-- undolog.fail_expired_sessions: every active session whose lease ran out (its agent
-- stopped heartbeating: it died) becomes failed, error 'lease expired'; answers their
-- ids, the oldest expired lease first (then in session order). Part 1 of
-- undolog.recover, which passes its own p_limit (NULL: all of them).
-- Sessions another transaction holds right now are skipped (SKIP LOCKED, and a session
-- whose advisory lock an intercept holds): their agent is evidently alive; the next run
-- sees them. awaiting_approval sessions are left alone: they wait for a human, not for
-- an agent.
-- p_limit: fail at most this many sessions (those skipped do not count), then stop;
-- NULL, every one due. Each failure is a subtransaction that writes, and so takes a
-- subtransaction XID: past 64 of them in one transaction, the backend's cache of them
-- overflows until the transaction ends, and every other backend's snapshot then looks
-- them up in pg_subtrans (slow, for the whole cluster), while this one holds every
-- session it failed until it is done. After a fleet of agents died, a worker calls it
-- with a limit below 64, each call its own transaction, until one answers fewer ids than
-- its limit, then recover() (the Python binding's walk.recover_due does, 50 at a time).
-- Oldest first: an agent login that begins short-lease sessions faster than they are
-- failed makes the sweep endless, and a worker then sweeps a bounded number a pass
-- (walk.recover_due's most); a lease that ran out before the flood is failed within
-- the passes that sweep what expired before it, not whenever its id comes up. The
-- partial index undolog_sessions_lease_idx (lease_expires_at, session_id) hands them out
-- in this order with no sort (on lease_expires_at alone, each call sorted every expired
-- lease before failing its first).
-- UL008 a limit below 1.
CREATE OR REPLACE FUNCTION undolog.fail_expired_sessions(p_limit integer DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session_id uuid;
    v_owner_role text;
    v_failed integer := 0;
BEGIN
    IF p_limit < 1 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_limit must be at least 1, not %s', p_limit),
            HINT = 'Pass how many sessions to fail at most (below 64 keeps each call '
                   'within the subtransaction cache), or NULL for every one due.';
    END IF;
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
        ORDER BY x.lease_expires_at, x.session_id
    LOOP
        BEGIN
            SELECT x.owner_role INTO v_owner_role
            FROM undolog.undolog_sessions AS x
            WHERE x.session_id = v_session_id
              AND x.state = 'active' AND x.lease_expires_at <= now()
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            -- Its advisory lock and its chain head, tried (undolog.try_hold_session).
            IF NOT undolog.try_hold_session(v_session_id, v_owner_role) THEN
                -- Rolls the block back: the row lock taken above goes with it.
                RAISE EXCEPTION USING
                    ERRCODE = 'UL030',
                    MESSAGE = pg_catalog.format('session %s is held by a transaction that '
                                                'has not ended', v_session_id),
                    HINT = 'Skipped by this run (caught below, never raised to the '
                           'caller): the next run of fail_expired_sessions() sees it.';
            END IF;
            -- The guard trigger validates active -> failed and writes the history row.
            -- Updated by the subtransaction that locked it: a row locked by one
            -- (sub)transaction and updated by another would need a multixact.
            UPDATE undolog.undolog_sessions AS s
            SET state = 'failed', error = 'lease expired'
            WHERE s.session_id = v_session_id AND s.state = 'active';
            IF FOUND THEN
                RETURN NEXT v_session_id;
                v_failed := v_failed + 1;
            END IF;
        EXCEPTION WHEN SQLSTATE 'UL030' THEN
            CONTINUE;  -- skipped: raised above only (the update raises no UL030)
        END;
        EXIT WHEN v_failed >= p_limit;  -- never, when p_limit is NULL
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.fail_expired_sessions(integer) FROM public;
