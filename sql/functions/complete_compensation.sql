-- undolog.complete_compensation: the compensation of an in-flight entry succeeded: the
-- effect and the entry become compensated. The session stays compensating: the walker's
-- next claim_compensation goes on down the stack, and the claim that finds nothing left
-- marks the session compensated (one place ends the walk; see claim_compensation).
-- A completion after the claim expired is still accepted while the entry is in flight:
-- the work was done, and the idempotency key made any overlap harmless.
-- p_attempt (optional, the attempt the claim answered) refuses a stale walker: if the
-- entry was handed out again since, its completion belongs to the newer attempt.
-- UL012 unknown undo id; UL001 when the entry is not in flight (completed twice, failed,
-- skipped, never claimed) or p_attempt is stale; UL030 when another transaction holds the
-- session past lock_session's wait: nothing was changed, report again.
CREATE OR REPLACE FUNCTION undolog.complete_compensation(
    p_undo_id uuid, p_attempt integer DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_entry undolog.undolog_undo_stack :=
        undolog.lock_claimed_entry(p_undo_id, p_attempt, 'compensated');
BEGIN
    UPDATE undolog.undolog_effect_log AS e
    SET state = 'compensated'
    WHERE e.session_id = v_entry.session_id AND e.effect_id = v_entry.effect_id
      AND e.executed_at = v_entry.executed_at;
    UPDATE undolog.undolog_undo_stack AS u
    SET state = 'compensated', last_error = NULL
    WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.complete_compensation(uuid, integer) FROM public;
