-- undolog.notification_deliveries: each announcement of an approval request to a channel,
-- as people read it: its state (pending, sent, failed, cancelled), attempts, the next try
-- of a pending one, the last error and when it was sent. Never a channel's secret or
-- address (notification_channels shows those): an agent reads last_error with its
-- addresses, URLs and the channel's host masked (undolog.delivery_last_error).
-- security_invoker: the deliveries' row-level security applies, so an agent reads only
-- its own sessions' deliveries.
CREATE OR REPLACE VIEW undolog.notification_deliveries
WITH (security_invoker = TRUE) AS
SELECT
    d.delivery_id,
    d.session_id,
    d.approval_id,
    d.channel_id,
    d.channel_name,
    d.channel_kind,
    d.state,
    d.attempts,
    d.max_attempts,
    d.next_attempt_at,
    d.last_attempt_at,
    d.claimed_until,
    undolog.delivery_last_error(d.session_id, d.delivery_id) AS last_error,
    d.created_at,
    d.sent_at
FROM undolog.undolog_notification_deliveries AS d;

COMMENT ON VIEW undolog.notification_deliveries IS
'Every delivery of an approval request to a notification channel, filtered by the reader''s RLS.';

REVOKE ALL ON undolog.notification_deliveries FROM public;
