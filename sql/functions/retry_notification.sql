-- undolog.retry_notification: an operator sends a delivery again now (a failed one, a
-- cancelled one, or one already sent that its recipient lost): it becomes pending, due at
-- once, with undolog.notification_max_attempts (default 8) more attempts. p_by names the
-- human (UL008 when blank). Answers the new max_attempts. UL025 no such delivery; UL001
-- the request is no longer pending (nobody is to be asked any more) or its channel was
-- removed, or a worker is sending it now. It wakes the delivery workers LISTENing on
-- 'undolog_notifications' (at commit, empty payload: each re-reads what is due).
CREATE OR REPLACE FUNCTION undolog.retry_notification(p_delivery_id uuid, p_by text)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    -- a record, not the table's row type (see finish_notification.sql)
    v_row record;
    v_request_state text;
    v_removed timestamptz;
    v_max integer := undolog.setting_integer('undolog.notification_max_attempts', 8, 1, 100);
BEGIN
    PERFORM undolog.check_operator(p_by);
    SELECT d.* INTO v_row
    FROM undolog.undolog_notification_deliveries AS d
    WHERE d.delivery_id = p_delivery_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL025', MESSAGE = pg_catalog.format('no delivery %s', p_delivery_id),
            HINT = 'Check the id: undolog notifications deliveries shows them.';
    END IF;
    SELECT a.state INTO v_request_state
    FROM undolog.undolog_approval_requests AS a
    WHERE a.approval_id = v_row.approval_id AND a.session_id = v_row.session_id;
    SELECT c.removed_at INTO v_removed
    FROM undolog.undolog_notification_channels AS c
    WHERE c.channel_id = v_row.channel_id;
    IF v_row.claimed_until > clock_timestamp() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('delivery %s is being sent (claimed until %s)',
                                        p_delivery_id, v_row.claimed_until),
            HINT = 'Wait until the claim ends; if it was sent meanwhile, there is nothing to '
                   'retry.';
    END IF;
    IF v_request_state <> 'pending' OR v_removed IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format(
                'delivery %s cannot be sent again: %s', p_delivery_id,
                CASE WHEN v_removed IS NOT NULL THEN 'its channel was removed'
                     ELSE 'its request is ' || v_request_state END
            ),
            HINT = 'Nothing is waiting for it: a decided or expired request needs no announcement, '
                   'and a removed channel sends nothing.';
    END IF;
    UPDATE undolog.undolog_notification_deliveries AS d
    SET state = 'pending', sent_at = NULL, next_attempt_at = clock_timestamp(),
        max_attempts = d.attempts + v_max
    WHERE d.session_id = v_row.session_id AND d.delivery_id = v_row.delivery_id
    RETURNING d.max_attempts INTO v_max;
    PERFORM undolog.wake_listeners('undolog_notifications');
    RETURN v_max;
END
$$;

REVOKE ALL ON FUNCTION undolog.retry_notification(uuid, text) FROM public;
