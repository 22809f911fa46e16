-- undolog.enqueue_notifications: the delivery worker's first step. Every pending approval
-- request gets one delivery per live channel (ON CONFLICT: two workers at once add each
-- once), and the deliveries not sent of a request decided meanwhile are cancelled (nobody
-- needs to be asked any more). The agent's transaction writes none of this: a request
-- pending when a worker runs is announced, and intercept pays nothing for it. Answers how
-- many deliveries were added. max_attempts is the setting undolog.notification_max_attempts
-- (default 8) at that time.
CREATE OR REPLACE FUNCTION undolog.enqueue_notifications()
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_added integer;
    v_max integer := undolog.setting_integer('undolog.notification_max_attempts', 8, 1, 100);
BEGIN
    INSERT INTO undolog.undolog_notification_deliveries AS d (
        session_id, approval_id, channel_id, channel_name, channel_kind, max_attempts
    )
    SELECT a.session_id, a.approval_id, c.channel_id, c.channel_name, c.kind, v_max
    FROM undolog.undolog_approval_requests AS a
    CROSS JOIN undolog.undolog_notification_channels AS c
    WHERE a.state = 'pending' AND c.removed_at IS NULL
      AND NOT EXISTS (
          SELECT FROM undolog.undolog_notification_deliveries AS x
          WHERE x.approval_id = a.approval_id AND x.session_id = a.session_id
            AND x.channel_id = c.channel_id
      )
    ORDER BY a.requested_at
    ON CONFLICT (approval_id, session_id, channel_id) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    UPDATE undolog.undolog_notification_deliveries AS d
    SET state = 'cancelled', last_error = 'the request was decided before it was sent'
    FROM undolog.undolog_approval_requests AS a
    WHERE d.state = 'pending' AND a.approval_id = d.approval_id
      AND a.session_id = d.session_id AND a.state <> 'pending';
    RETURN v_added;
END
$$;

REVOKE ALL ON FUNCTION undolog.enqueue_notifications() FROM public;
