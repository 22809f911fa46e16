-- undolog.claim_notification: the delivery worker takes the oldest due delivery of a
-- still pending request, with what it needs to send it: the channel (secret included:
-- operators only) and the request. FOR UPDATE SKIP LOCKED, then the claim is recorded in
-- the row (attempts + 1, next_attempt_at = the claim's end), so two workers never take
-- the same one, and one that dies holding it is replaced when p_lease has passed.
-- The worker sends outside any transaction, then reports with finish_notification,
-- giving back the attempt number it was handed (a claim that outlived its lease and was
-- taken again is then not reported twice). A delivery whose last attempt (max_attempts)
-- was claimed and never reported within its lease (its worker died, or the send hung) is
-- not taken again: it fails here, saying so, as a reported failure of its last attempt
-- would (finish_notification), and the next due one is taken. A delivery of a channel
-- removed meanwhile (an enqueue_notifications that committed after the removal, which
-- could not cancel what it did not see yet) is cancelled here, as the removal would have,
-- and the next due one is taken. A request past its deadline (expires_at) is not
-- announced, though the worker has not marked it expired yet: nobody can approve it
-- any more, and enqueue_notifications cancels its deliveries once it is. No row when
-- nothing is due.
CREATE OR REPLACE FUNCTION undolog.claim_notification(p_lease interval DEFAULT interval '5 minutes')
RETURNS TABLE (
    delivery_id uuid,
    session_id uuid,
    approval_id uuid,
    attempt integer,
    max_attempts integer,
    channel_name text,
    channel_kind text,
    target text,
    config jsonb,
    secret text,
    dashboard_url text,
    step_index integer,
    tool_name text,
    args jsonb,
    agent text,
    owner_role text,
    requested_at timestamptz,
    expires_at timestamptz
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_session uuid;
    v_delivery uuid;
    v_exhausted boolean;
    v_removed boolean;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008', MESSAGE = 'p_lease must be a positive interval of at most a day',
            HINT = 'Pass a lease from ''1 second'' to ''1 day'', e.g. ''30 seconds'', or leave it '
                   'out.';
    END IF;
    LOOP
        SELECT d.session_id, d.delivery_id, d.attempts >= d.max_attempts,
               c.removed_at IS NOT NULL
        INTO v_session, v_delivery, v_exhausted, v_removed
        FROM undolog.undolog_notification_deliveries AS d
        INNER JOIN undolog.undolog_approval_requests AS a
            ON a.approval_id = d.approval_id AND a.session_id = d.session_id
        INNER JOIN undolog.undolog_notification_channels AS c ON c.channel_id = d.channel_id
        WHERE d.state = 'pending' AND d.next_attempt_at <= v_now AND a.state = 'pending'
            AND (a.expires_at IS NULL OR a.expires_at > v_now)
        ORDER BY d.next_attempt_at
        LIMIT 1
        FOR UPDATE OF d SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF v_removed THEN
            UPDATE undolog.undolog_notification_deliveries AS d
            SET state = 'cancelled', claimed_until = NULL, last_error = 'the channel was removed'
            WHERE d.session_id = v_session AND d.delivery_id = v_delivery;
            CONTINUE;
        END IF;
        EXIT WHEN NOT v_exhausted;
        UPDATE undolog.undolog_notification_deliveries AS d
        SET state = 'failed', claimed_until = NULL,
            last_error = pg_catalog.format(
                'attempt %s of %s was claimed and not reported within its lease (the '
                'worker stopped, or the send hung); not sent again', d.attempts,
                d.max_attempts)
        WHERE d.session_id = v_session AND d.delivery_id = v_delivery;
    END LOOP;
    UPDATE undolog.undolog_notification_deliveries AS d
    SET attempts = d.attempts + 1, last_attempt_at = v_now,
        next_attempt_at = undolog.utc_after(v_now, p_lease),
        claimed_until = undolog.utc_after(v_now, p_lease)
    WHERE d.session_id = v_session AND d.delivery_id = v_delivery;
    RETURN QUERY
    SELECT d.delivery_id, d.session_id, d.approval_id, d.attempts, d.max_attempts,
           d.channel_name, d.channel_kind, c.destination, c.config, c.secret, c.dashboard_url,
           e.step_index, e.tool_name, e.args, s.agent, s.owner_role, a.requested_at,
           a.expires_at
    FROM undolog.undolog_notification_deliveries AS d
    INNER JOIN undolog.undolog_notification_channels AS c ON c.channel_id = d.channel_id
    INNER JOIN undolog.undolog_approval_requests AS a
        ON a.approval_id = d.approval_id AND a.session_id = d.session_id
    INNER JOIN undolog.undolog_sessions AS s ON s.session_id = d.session_id
    -- LEFT: a request outlives its effect's month if that partition was dropped.
    LEFT JOIN undolog.undolog_effect_log AS e
        ON e.session_id = a.session_id AND e.effect_id = a.effect_id
           AND e.executed_at = a.executed_at
    WHERE d.session_id = v_session AND d.delivery_id = v_delivery;
END
$$;

REVOKE ALL ON FUNCTION undolog.claim_notification(interval) FROM public;
