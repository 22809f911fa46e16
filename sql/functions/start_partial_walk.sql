-- undolog.start_partial_walk: what rollback_to and rollback_last do (see them), with the
-- floor taken from a step (p_count NULL) or from a count, from the top, of the calls the
-- walk would undo or stop at (rollback_to_plan's action other than skip): checks,
-- who may, the floor, then active -> compensating with the session's undo_floor and
-- undo_to, and the operator action. Callers are SECURITY DEFINER; session_user is the
-- login that asked.
CREATE OR REPLACE FUNCTION undolog.start_partial_walk(
    p_session_id uuid, p_step_index integer, p_count integer, p_reason text, p_by text
)
RETURNS text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_staff boolean := undolog.caller_is_staff();
    v_by text := coalesce(p_by, session_user::text);
    v_session undolog.undolog_sessions;
    v_floor bigint;
    v_undo_to jsonb;
    v_bound record;
BEGIN
    IF undolog.is_blank(p_reason) OR length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say why the session is undone to a step: '
                      'non-blank text of at most 8192 characters',
            HINT = 'Say why, e.g. ''wrong address from step 3 on'': undolog sessions undo-to ID '
                   'STEP --reason TEXT.';
    END IF;
    IF (p_count IS NULL AND (p_step_index IS NULL OR p_step_index < 0))
       OR (p_count IS NOT NULL AND p_count < 1) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = CASE WHEN p_count IS NULL
                THEN pg_catalog.format('p_step_index must be a step index >= 0, not %s',
                                       coalesce(p_step_index::text, 'NULL'))
                ELSE pg_catalog.format('p_count must be 1 or more, not %s', p_count)
            END,
            HINT = 'Name the step to undo down to (0 is the first call), or the number of calls to '
                   'undo (1 or more).';
    END IF;
    PERFORM undolog.check_operator(v_by);
    IF NOT v_staff AND v_by <> session_user THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'an agent undoes its session as its own login: leave p_by out',
            HINT = 'Call it without p_by: the session''s own login is recorded as who undid it.';
    END IF;

    -- It plans the walk from what it reads after the lock (check_read_committed).
    PERFORM undolog.check_read_committed('rollback_to');
    IF v_staff THEN
        v_session := undolog.lock_session(p_session_id);
    ELSE
        v_session := undolog.lock_own_session(p_session_id);
        IF NOT undolog.agent_rollback_to_allowed() THEN
            RAISE EXCEPTION USING
                ERRCODE = '42501',
                MESSAGE = pg_catalog.format('an agent may not undo its own session %s here',
                                            p_session_id),
                HINT = 'An operator undoes it (undolog sessions undo-to), or allows agents '
                       'to: ALTER DATABASE ... SET undolog.agent_rollback_to = on.';
        END IF;
    END IF;
    IF v_session.state <> 'active' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('session %s is %s: only an active session can be '
                                        'undone to a step', p_session_id, v_session.state),
            HINT = CASE v_session.state
                WHEN 'awaiting_approval' THEN 'Decide its pending approval requests first.'
                WHEN 'compensating' THEN 'Its undo walk is running; let it finish.'
                ELSE 'A session that ended has nothing left to undo to a step.'
            END;
    END IF;

    -- After lock_session: a call journaled while we waited is on the stack, and undone.
    IF p_count IS NULL THEN
        SELECT p.floor INTO v_floor
        FROM undolog.rollback_to_plan(p_session_id, p_step_index) AS p
        LIMIT 1;
    ELSE
        -- The p_count-th call from the top that the walk would undo (or stop at), in
        -- the walk's order. A call that never took effect (the plan's 'skip') is no
        -- call to undo: counted, it would become the floor of a walk that undoes
        -- nothing, and pass (and so forbid the retry of) a failed call at the top. The
        -- plan's action is the one definition of what would be undone.
        SELECT p.stack_position INTO v_floor
        FROM undolog.rollback_to_plan(p_session_id, 0) AS p
        WHERE p.action <> 'skip'
        ORDER BY p.stack_position DESC
        OFFSET p_count - 1 LIMIT 1;
    END IF;
    IF v_floor IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL021',
            MESSAGE = CASE WHEN p_count IS NULL
                THEN pg_catalog.format('session %s has nothing to undo at or after step %s',
                                       p_session_id, p_step_index)
                ELSE pg_catalog.format('session %s has fewer than %s calls left to undo',
                                       p_session_id, p_count)
            END,
            HINT = 'undolog sessions undo-to SESSION STEP --plan (undolog.rollback_to_plan) '
                   'lists what would be undone; calls already undone, SAFE calls and steps '
                   'not made yet have nothing to undo.';
    END IF;

    v_undo_to := pg_catalog.jsonb_build_object(
        'step', p_step_index, 'count', p_count, 'floor', v_floor, 'by', v_by, 'login', session_user::text,
        'reason', p_reason, 'at', now());
    -- The writes, their waits bounded as lock_session's (rollback_session's reason: an
    -- agent's call committed in a transaction it keeps open holds the session's chain
    -- head, which the move's history row links to, and the undo waited for it as long as
    -- that stayed open). Past the wait, UL030 and nothing written; no lock is taken in
    -- another order than before, only not waited for ever. The plan above locks nothing.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        -- One UPDATE: the guard checks active -> compensating against the floor it sets,
        -- and writes the history row with undo_to as its detail.
        UPDATE undolog.undolog_sessions AS s
        SET state = 'compensating', undo_floor = v_floor, undo_to = v_undo_to
        WHERE s.session_id = p_session_id;
        IF v_staff THEN
            INSERT INTO undolog.undolog_operator_actions
                (session_id, action, undo_id, performed_by, reason)
            VALUES (p_session_id, 'rollback_to', NULL, v_by,
                    CASE WHEN p_count IS NULL
                        THEN pg_catalog.format('step %s: %s', p_step_index, p_reason)
                        ELSE pg_catalog.format('last %s: %s', p_count, p_reason)
                    END);
        END IF;
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): PostgreSQL ends one of the two
    -- after deadlock_timeout, this one most often; UL030 all the same, nothing written.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(p_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(p_session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN 'compensating';
END
$$;

REVOKE ALL ON FUNCTION undolog.start_partial_walk(uuid, integer, integer, text, text)
FROM public;
