-- undolog.fail_compensation: the compensation of an in-flight entry raised. Answers
--   'retry'                the entry is pending again, due at now() + backoff, where the
--                          backoff after attempt n is undolog.retry_base * 2^(n-1), capped
--                          at undolog.retry_cap (GUCs; defaults 1 second and 5 minutes);
--                          the effect stays compensating;
--   'compensation_failed'  it was the entry's last attempt (its compensation's
--                          max_attempts, else the GUC undolog.default_max_attempts,
--                          default 5): the entry and the effect become
--                          compensation_failed and the session halts for an operator.
-- Each attempt's error is kept in the undo history. p_attempt as in complete_compensation.
-- UL012 unknown undo id; UL001 when the entry is not in flight or p_attempt is stale;
-- UL030 when another transaction holds the session past lock_session's wait: nothing was
-- changed; the walker reports again, or the claim expires and the entry is handed out
-- again (given up, if that was its last attempt).
CREATE OR REPLACE FUNCTION undolog.fail_compensation(
    p_undo_id uuid, p_error text, p_attempt integer DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_error text := coalesce(left(p_error, 8192), 'compensation failed');
    v_base interval := undolog.setting_interval('undolog.retry_base', interval '1 second');
    v_cap interval := undolog.setting_interval('undolog.retry_cap', interval '5 minutes');
    v_max_default integer := undolog.setting_integer('undolog.default_max_attempts', 5, 1, 100);
    v_entry undolog.undolog_undo_stack :=
        undolog.lock_claimed_entry(p_undo_id, p_attempt, 'pending');
BEGIN
    IF v_entry.attempts >= coalesce(v_entry.max_attempts, v_max_default) THEN
        -- Giving up writes the entry, the effect and the session, each with its history
        -- on the session's chain head. The effect is locked before anything is written,
        -- as the session and its advisory lock were (lock_claimed_entry): a late result
        -- of this call holds the effect FOR SHARE (finish_execution) and then needs the
        -- chain head, and a call of the session being journaled holds the advisory lock
        -- shared and then needs it too. Either taken after the entry's history, each
        -- waited for the other (40P01).
        PERFORM FROM undolog.undolog_effect_log AS e
        WHERE e.session_id = v_entry.session_id AND e.effect_id = v_entry.effect_id
          AND e.executed_at = v_entry.executed_at
        FOR UPDATE;
        PERFORM undolog.give_up_compensation(v_entry, v_error);
        RETURN 'compensation_failed';
    END IF;
    UPDATE undolog.undolog_undo_stack AS u
    SET state = 'pending',
        last_error = v_error,
        next_attempt_at = undolog.utc_after(now(), undolog.retry_delay(u.attempts, v_base, v_cap))
    WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id;
    RETURN 'retry';
END
$$;

REVOKE ALL ON FUNCTION undolog.fail_compensation(uuid, text, integer) FROM public;
