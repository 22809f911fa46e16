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
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.start_partial_walk(p_session_id, p_step_index, NULL, p_reason, p_by)
$$;

REVOKE ALL ON FUNCTION undolog.rollback_to(uuid, integer, text, text) FROM public;
