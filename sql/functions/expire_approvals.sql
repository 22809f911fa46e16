-- undolog.expire_approvals: for the operator's cron (next to recover()). Every pending
-- request whose deadline has passed is expired through the same path as a rejection:
-- request 'expired', effect rejected, session compensating. Answers the ids expired.
-- Requests are taken in session order. A session another transaction holds (an agent's
-- left open, another sweep) is skipped, never waited for: the next sweep expires it.
-- p_limit: expire at most this many requests (those skipped do not count), then stop;
-- NULL, every one due. Each expiry is a subtransaction that writes, and so takes a
-- subtransaction XID: past 64 of them in one transaction, the backend's cache of them
-- overflows until the transaction ends, and every other backend's snapshot then looks
-- them up in pg_subtrans (slow, for the whole cluster), while this one holds its locks
-- until it is done. A sweep that may find many calls it with a limit below 64, each
-- call its own transaction, until one answers fewer ids than its limit (the Python
-- binding's approvals.expire_approvals does, 50 at a time). UL008 a limit below 1.
CREATE OR REPLACE FUNCTION undolog.expire_approvals(p_limit integer DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_approval_id uuid;
    v_session_id uuid;
    v_owner_role text;
    v_expired integer := 0;
BEGIN
    IF p_limit < 1 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_limit must be at least 1, not %s', p_limit),
            HINT = 'Pass how many requests to expire at most (below 64 keeps each sweep '
                   'within the subtransaction cache), or NULL for every one due.';
    END IF;
    FOR v_approval_id, v_session_id IN
        SELECT a.approval_id, a.session_id
        FROM undolog.undolog_approval_requests AS a
        WHERE a.state = 'pending' AND a.expires_at <= now()
        ORDER BY a.session_id, a.approval_id
    LOOP
        -- A session its agent holds in an open transaction is skipped, not waited for:
        -- the next sweep expires its requests, and nobody else's wait on it. Its locks are
        -- taken in the order of docs/design/state-machines.md (the row SKIP LOCKED, then
        -- the advisory lock, tried), in a subtransaction rolled back when the session is
        -- skipped, so that a skipped session keeps none of them (a transaction-level
        -- advisory lock is released only so): neither its agent nor its walker waits for
        -- the rest of this sweep. A request decided since it was read (a decision holds
        -- the session's row, which is held now) is passed over the same way.
        BEGIN
            SELECT s.owner_role INTO v_owner_role
            FROM undolog.undolog_sessions AS s
            WHERE s.session_id = v_session_id
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF NOT EXISTS (
                SELECT FROM undolog.undolog_approval_requests AS a
                WHERE a.approval_id = v_approval_id AND a.session_id = v_session_id
                  AND a.state = 'pending') THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'UL030',
                    MESSAGE = pg_catalog.format('approval %s was decided since the sweep '
                                                'read it', v_approval_id),
                    HINT = 'Skipped by this sweep (caught below, never raised to the '
                           'caller): the decision stands.';
            END IF;
            -- Its advisory lock and its chain head, tried (undolog.try_hold_session).
            IF NOT undolog.try_hold_session(v_session_id, v_owner_role) THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'UL030',
                    MESSAGE = pg_catalog.format('session %s is held by a transaction that '
                                                'has not ended', v_session_id),
                    HINT = 'Skipped by this sweep (caught below, never raised to the '
                           'caller): the next sweep expires its requests.';
            END IF;
            -- Decided by the subtransaction that locked the session's row (one locking
            -- and another updating would need a multixact). Its locks are held now, so its
            -- own bounded waits (UL030) cannot fire; if one did, the request would be
            -- skipped like a held session, and expired by the next sweep.
            IF undolog.decide_approval(v_approval_id, 'expired', NULL, NULL, NULL)
               IS NOT NULL THEN
                RETURN NEXT v_approval_id;
                v_expired := v_expired + 1;
            END IF;
        EXCEPTION WHEN SQLSTATE 'UL030' THEN
            CONTINUE;  -- skipped: the session is held, or the request decided meanwhile
        END;
        EXIT WHEN v_expired >= p_limit;  -- never, when p_limit is NULL
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.expire_approvals(integer) FROM public;
