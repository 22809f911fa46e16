-- undolog.rollback_session: a person stops a live session and has its work undone.
-- active            -> failed (its undo walk then runs, as after an agent's own failure);
-- awaiting_approval -> every pending approval request of it is rejected by p_by, which
--                      sends the session to compensating (decide_approval's rule); if
--                      that sent it back to active instead (on_reject 'continue'), it is
--                      failed, as an active one;
-- compensating or halted in the partial walk of a rollback_to -> the walk goes on to the
--                      bottom of the stack (the session ends compensated, not active).
-- Recorded in undolog_operator_actions as 'rollback', with who and why; the worker (or
-- any walker) then walks the undo stack LIFO. Answers the session's new state.
-- UL008 blank p_by or p_reason; UL002 unknown session; UL001 any other state (a session
-- that already ended or is already being undone has nothing left to roll back).
CREATE OR REPLACE FUNCTION undolog.rollback_session(
    p_session_id uuid, p_by text, p_reason text
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_state text;
    v_approval_id uuid;
    v_why text;
    v_floor bigint;
    v_bound record;
BEGIN
    PERFORM undolog.check_operator(p_by);
    IF undolog.is_blank(p_reason) OR length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say why the session is rolled back: '
                      'non-blank text of at most 8192 characters',
            HINT = 'Say why, e.g. ''wrong customer'': undolog sessions rollback ID --by WHO '
                   '--reason TEXT.';
    END IF;
    SELECT s.state, s.undo_floor INTO v_state, v_floor
    FROM undolog.lock_session(p_session_id) AS s;
    v_why := pg_catalog.format('rolled back by %s: %s', p_by, p_reason);
    -- The moves, their waits bounded as lock_session's (decide_approval's reason: an
    -- agent's call committed in a transaction it keeps open holds the session's chain
    -- head, which the session's history links to). Past the wait, UL030, nothing moved.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        IF v_state = 'active' THEN
            v_state := undolog.transition_session(p_session_id, 'failed', v_why);
        ELSIF v_state = 'awaiting_approval' THEN
            FOR v_approval_id IN
                SELECT a.approval_id FROM undolog.undolog_approval_requests AS a
                WHERE a.session_id = p_session_id AND a.state = 'pending'
                -- approval_id breaks a tie: requests asked in one transaction share now()
                ORDER BY a.requested_at, a.approval_id
            LOOP
                -- A rejection that ended the session closed the others with it.
                CONTINUE WHEN (SELECT a.state FROM undolog.undolog_approval_requests AS a
                               WHERE a.session_id = p_session_id
                                 AND a.approval_id = v_approval_id) <> 'pending';
                PERFORM undolog.decide_approval(v_approval_id, 'rejected', p_by, v_why, NULL);
            END LOOP;
            SELECT s.state INTO STRICT v_state
            FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session_id;
            -- A tool registered on_reject 'continue' sent it back to active: the person asked
            -- for the session to be undone, not for it to go on.
            IF v_state = 'active' THEN
                v_state := undolog.transition_session(p_session_id, 'failed', v_why);
            END IF;
        ELSIF v_floor IS NOT NULL THEN
            -- A partial walk (rollback_to) running or halted: it becomes the whole walk, down
            -- to the bottom of the stack, and the session ends compensated, not active.
            UPDATE undolog.undolog_sessions AS s
            SET undo_floor = NULL, error = left(v_why, 8192)
            WHERE s.session_id = p_session_id;
        ELSE
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('session %s is %s: only an active or waiting session '
                                            'can be rolled back', p_session_id, v_state),
                HINT = 'A failed or compensating session is already being undone; a halted one '
                       'waits for an operator: undolog sessions resume, retry or abandon '
                       '(undolog.resume_session, retry_compensation, abandon_session).';
        END IF;
        -- In the bound too: a link of the session's chain, and the only one a partial
        -- walk made whole writes (its UPDATE above moves no state).
        INSERT INTO undolog.undolog_operator_actions
            (session_id, action, undo_id, performed_by, reason)
        VALUES (p_session_id, 'rollback', NULL, p_by, p_reason);
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): PostgreSQL ends one of the two
    -- after deadlock_timeout, this one most often; UL030 all the same, nothing written.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(p_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(p_session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN v_state;
END
$$;

REVOKE ALL ON FUNCTION undolog.rollback_session(uuid, text, text) FROM public;
