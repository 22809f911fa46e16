-- undolog.check_pending_approvals: refuses a new approval request (UL029) when the
-- sessions of p_owner_role already have undolog.max_pending_approvals() requests pending.
-- Called by journal_call for a new IRREVERSIBLE call, which holds its session's locks.
-- The login's own advisory lock, held until the transaction ends, makes the count exact
-- between two of its sessions asking at once. journal_call takes it before the session's
-- locks (a bounded wait: UL030), so here it is only re-entered, at once. Nothing waits
-- for it here, after a session's locks: waiting there closed a cycle with a transaction
-- holding that session and waiting for this one's session (40P01). A caller that did not
-- take it first (the entry of a call made again was deleted by retention meanwhile)
-- finds it free, or is refused (UL030) rather than wait. Counting stops at the bound: the
-- check reads at most that many rows. At READ COMMITTED only (check_read_committed): the
-- count must see the requests asked while it waited for the lock.
CREATE OR REPLACE FUNCTION undolog.check_pending_approvals(p_owner_role text)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_max integer := undolog.max_pending_approvals();
    v_pending integer;
BEGIN
    PERFORM undolog.check_read_committed('a new irreversible call');
    IF NOT pg_catalog.pg_try_advisory_xact_lock(
        undolog.advisory_key('pending_approvals', p_owner_role)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL030',
            MESSAGE = pg_catalog.format('the approval requests of %s are being asked by a '
                                        'transaction that has not ended', p_owner_role),
            DETAIL = 'Another transaction of this login asked for an approval and has not '
                     'ended. Nothing was changed.',
            HINT = 'Try again.';
    END IF;
    SELECT pg_catalog.count(*) INTO v_pending
    FROM (SELECT
          FROM undolog.undolog_approval_requests AS a
          JOIN undolog.undolog_sessions AS s ON s.session_id = a.session_id
          WHERE a.state = 'pending' AND s.owner_role = p_owner_role
          LIMIT v_max) AS p;
    IF v_pending >= v_max THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL029',
            MESSAGE = pg_catalog.format('%s already has %s approval requests pending',
                                        p_owner_role, v_pending),
            DETAIL = pg_catalog.format('A login''s sessions may have at most %s requests '
                                       'pending at once (undolog.max_pending_approvals); '
                                       'this call was not journaled.', v_max),
            HINT = 'Decide or expire some (undolog approvals list, or the dashboard''s inbox), '
                   'then make the call again; an operator may raise the bound: ALTER DATABASE '
                   '<db> SET undolog.max_pending_approvals = <n>.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_pending_approvals(text) FROM public;
