-- undolog.finish_notification: the delivery worker reports the attempt p_attempt that
-- claim_notification handed it. p_error NULL: sent. p_warning, with it, says what of the
-- send did not arrive (an e-mail's recipients that the SMTP server refused while it took
-- the mail for the others): it is kept in last_error, and the delivery is sent all the
-- same, not retried, since a retry would give the recipients who have it a second copy.
-- Otherwise the error is recorded and
-- the delivery is due again after undolog.retry_delay(attempt, 10 s, 1 h) (exponential
-- backoff; settings undolog.notification_retry_base and undolog.notification_retry_cap),
-- or failed once it has had max_attempts attempts. Answers the delivery's state, or
-- 'stale' when the attempt is no longer the delivery's current claim (it was reported
-- already; its claim expired and another worker took it; an operator retried or cancelled
-- it): nothing is written.
-- UL025 no such delivery; UL008 a p_warning with a p_error (a failed attempt is retried,
-- the warning would be lost).
CREATE OR REPLACE FUNCTION undolog.finish_notification(
    p_delivery_id uuid, p_attempt integer, p_error text, p_warning text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    -- a record, not the table's row type: a database migrated to an earlier target
    -- (with these sources) has no such type yet, and a declared type is resolved when
    -- the function is created
    v_row record;
    v_state text;
    v_now timestamptz := clock_timestamp();
    v_base interval := undolog.setting_interval('undolog.notification_retry_base',
                                                interval '10 seconds');
    v_cap interval := undolog.setting_interval('undolog.notification_retry_cap',
                                               interval '1 hour');
BEGIN
    IF p_error IS NOT NULL AND p_warning IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008', MESSAGE = 'p_warning is for a sent attempt: p_error must be NULL',
            HINT = 'Report a failed attempt with p_error alone; p_warning notes what a sent '
                   'one did not reach.';
    END IF;
    SELECT d.* INTO v_row
    FROM undolog.undolog_notification_deliveries AS d
    WHERE d.delivery_id = p_delivery_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL025', MESSAGE = pg_catalog.format('no delivery %s', p_delivery_id),
            HINT = 'Pass the delivery_id that undolog.claim_notification answered.';
    END IF;
    -- claimed_until is set by the claim and cleared by its report: a report without a
    -- claim in force (a duplicate) is stale too
    IF v_row.state <> 'pending' OR v_row.attempts IS DISTINCT FROM p_attempt
        OR v_row.claimed_until IS NULL THEN
        RETURN 'stale';
    END IF;
    IF p_error IS NULL THEN
        UPDATE undolog.undolog_notification_deliveries AS d
        -- a warning (shortened as an error is) stays on the sent delivery; an earlier
        -- attempt's error does not
        SET state = 'sent', sent_at = v_now, last_error = left(p_warning, 2000),
            next_attempt_at = v_now,
            claimed_until = NULL
        WHERE d.session_id = v_row.session_id AND d.delivery_id = v_row.delivery_id;
        RETURN 'sent';
    END IF;
    UPDATE undolog.undolog_notification_deliveries AS d
    SET state = CASE WHEN d.attempts >= d.max_attempts THEN 'failed' ELSE 'pending' END,
        -- an error is short enough to read (the worker replaces U+0000, which text
        -- cannot hold)
        last_error = left(p_error, 2000),
        next_attempt_at = v_now + undolog.retry_delay(d.attempts, v_base, v_cap),
        claimed_until = NULL
    WHERE d.session_id = v_row.session_id AND d.delivery_id = v_row.delivery_id
    RETURNING d.state INTO v_state;
    RETURN v_state;
END
$$;

REVOKE ALL ON FUNCTION undolog.finish_notification(uuid, integer, text, text) FROM public;
