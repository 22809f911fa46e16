-- undolog.rollback_to: undo a live session's work from the top of its undo stack down to
-- and including step p_step_index, last first, and let the session go on.
-- active -> compensating, with the session's undo_floor set to the lowest stack position
-- of a call at p_step_index or later (rollback_to_plan says what lies above it). The walk
-- is the one of a failed session (claim_compensation, complete/fail_compensation,
-- retries, barriers, recover and `undolog worker`); it does not go below the floor, and
-- the claim that finds nothing left above it sends the session back to active, its lease
-- renewed: new calls then continue at later step indexes, and a replay of an undone step
-- is refused (UL022). An irreversible call in the range that may have acted halts the
-- walk there, as in any walk; resume_session moves it on down to the floor. While the
-- walk runs new calls are refused (UL010).
-- Who: an operator or approver (p_by names the person, default the login; recorded in
-- undolog_operator_actions as 'rollback_to'), or the session's own login when the
-- database allows it (undolog.agent_rollback_to_allowed; off by default: 42501). Who,
-- when and why are kept in the session (undo_to) and its history.
-- Answers the session's new state ('compensating').
-- UL008 blank reason, a step < 0 or NULL, an agent naming another p_by; UL002 unknown
-- session; 42501 not allowed; UL001 a session that is not active; UL021 nothing to undo
-- at or after that step.
CREATE OR REPLACE FUNCTION undolog.rollback_to(
    p_session_id uuid, p_step_index integer, p_reason text, p_by text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_staff boolean := pg_catalog.pg_has_role(session_user, 'undolog_operator', 'MEMBER')
                       OR pg_catalog.pg_has_role(session_user, 'undolog_approver', 'MEMBER');
    v_by text := coalesce(p_by, session_user::text);
    v_session undolog.undolog_sessions;
    v_floor bigint;
    v_undo_to jsonb;
BEGIN
    IF undolog.is_blank(p_reason) OR length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say why the session is undone to a step: '
                      'non-blank text of at most 8192 characters';
    END IF;
    IF p_step_index IS NULL OR p_step_index < 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_step_index must be a step index >= 0, not %s',
                                        coalesce(p_step_index::text, 'NULL'));
    END IF;
    PERFORM undolog.check_operator(v_by);
    IF NOT v_staff AND v_by <> session_user THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'an agent undoes its session as its own login: leave p_by out';
    END IF;

    v_session := undolog.lock_session(p_session_id);
    IF NOT v_staff THEN
        PERFORM undolog.check_session_caller(p_session_id, v_session.owner_role);
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
    SELECT p.floor INTO v_floor
    FROM undolog.rollback_to_plan(p_session_id, p_step_index) AS p
    LIMIT 1;
    IF v_floor IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL021',
            MESSAGE = pg_catalog.format('session %s has nothing to undo at or after step %s',
                                        p_session_id, p_step_index),
            HINT = 'undolog.rollback_to_plan lists what would be undone; calls already '
                   'undone, SAFE calls and steps not made yet have nothing to undo.';
    END IF;

    v_undo_to := pg_catalog.jsonb_build_object(
        'step', p_step_index, 'floor', v_floor, 'by', v_by, 'login', session_user::text,
        'reason', p_reason, 'at', now());
    -- One UPDATE: the guard checks active -> compensating against the floor it sets, and
    -- writes the history row with undo_to as its detail.
    UPDATE undolog.undolog_sessions AS s
    SET state = 'compensating', undo_floor = v_floor, undo_to = v_undo_to
    WHERE s.session_id = p_session_id;
    IF v_staff THEN
        INSERT INTO undolog.undolog_operator_actions
            (session_id, action, undo_id, performed_by, reason)
        VALUES (p_session_id, 'rollback_to', NULL, v_by,
                pg_catalog.format('step %s: %s', p_step_index, p_reason));
    END IF;
    RETURN 'compensating';
END
$$;

REVOKE ALL ON FUNCTION undolog.rollback_to(uuid, integer, text, text) FROM public;
