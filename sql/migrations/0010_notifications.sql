-- Notifications of approval requests: the channels people are told through (a webhook,
-- an e-mail over SMTP) and one delivery per request and channel, with its attempts.
--
-- Nothing here is written by the agent's transaction: intercept and its triggers are
-- untouched. The delivery worker (`undolog worker`, `undolog notify`) fills the
-- deliveries from the pending requests (undolog.enqueue_notifications, woken by the
-- existing NOTIFY on channel 'undolog_approvals', with a slow poll), so a request that is
-- still pending when a worker runs is never missed, and intercept pays nothing for it.

------------------------------------------------------------------------------------------
-- undolog_notification_channels
------------------------------------------------------------------------------------------

-- Where approval requests are announced. Configuration, not journal: no session_id (like
-- undolog_tools). A channel is never deleted, only removed (removed_at), so that the
-- deliveries made through it keep its name. secret is the webhook's HMAC key or the SMTP
-- password: no role but the owner reads this table; staff read the view
-- notification_channels, which leaves the secret out, and the delivery worker receives
-- it from claim_notification.
--   destination  webhook: the URL; email: the recipients, comma-separated
--   config       webhook: {"format": "json" | "slack"};
--                email: {"smtp_host", "smtp_port", "smtp_from", "smtp_user", "starttls",
--                        "ssl"}
CREATE TABLE undolog.undolog_notification_channels (
    channel_id uuid NOT NULL DEFAULT gen_random_uuid(),
    channel_name text NOT NULL,
    kind text NOT NULL,
    destination text NOT NULL,
    config jsonb NOT NULL DEFAULT '{}',
    secret text,
    dashboard_url text,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    created_role text NOT NULL,
    removed_at timestamptz,
    removed_by text,
    removed_role text,
    PRIMARY KEY (channel_id),
    CONSTRAINT undolog_notification_channels_kind_check CHECK (kind IN ('webhook', 'email')),
    CONSTRAINT undolog_notification_channels_removal_check CHECK (
        (removed_at IS NULL) = (removed_by IS NULL)
        AND (removed_at IS NULL) = (removed_role IS NULL)
    )
);

-- One live channel per name: the CLI names channels (`undolog notifications remove NAME`).
CREATE UNIQUE INDEX undolog_notification_channels_live_name_key
ON undolog.undolog_notification_channels (channel_name)
WHERE removed_at IS NULL;

ALTER TABLE undolog.undolog_notification_channels ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_notification_channels FROM public;

------------------------------------------------------------------------------------------
-- undolog_notification_deliveries
------------------------------------------------------------------------------------------

-- One row per approval request and channel: whether it was sent, how many attempts, the
-- last error, when the next attempt is due. channel_name and channel_kind are copied
-- from the channel, so that an agent reading its own sessions' deliveries (row-level
-- security) needs no access to the channels.
--   pending    due at next_attempt_at (a claimed one: claimed_until and next_attempt_at
--              are its claim's end, so a worker that died is replaced when that passes)
--   sent       delivered (the webhook answered 2xx, the SMTP server accepted the mail)
--   failed     max_attempts attempts failed: `undolog notifications retry` sends it again
--   cancelled  the request was decided, or the channel removed, before it was sent
CREATE TABLE undolog.undolog_notification_deliveries (
    delivery_id uuid NOT NULL DEFAULT gen_random_uuid(),
    session_id uuid NOT NULL,
    approval_id uuid NOT NULL,
    channel_id uuid NOT NULL,
    channel_name text NOT NULL,
    channel_kind text NOT NULL,
    state text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    claimed_until timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz,
    PRIMARY KEY (session_id, delivery_id),
    -- Retention deletes a dropped month's requests: their deliveries go with them.
    CONSTRAINT undolog_notification_deliveries_request_fkey
    FOREIGN KEY (approval_id, session_id)
    REFERENCES undolog.undolog_approval_requests (approval_id, session_id)
    ON DELETE CASCADE,
    CONSTRAINT undolog_notification_deliveries_state_check CHECK (state IN (
        'pending', 'sent', 'failed', 'cancelled'
    )),
    CONSTRAINT undolog_notification_deliveries_attempts_check CHECK (
        attempts >= 0 AND max_attempts >= 1
    ),
    CONSTRAINT undolog_notification_deliveries_sent_check CHECK (
        (state = 'sent') = (sent_at IS NOT NULL)
    )
);

-- A request is delivered once per channel, however many workers enqueue it.
CREATE UNIQUE INDEX undolog_notification_deliveries_request_channel_key
ON undolog.undolog_notification_deliveries (approval_id, session_id, channel_id);

-- finish_notification and retry_notification find a delivery by its id.
CREATE UNIQUE INDEX undolog_notification_deliveries_delivery_key
ON undolog.undolog_notification_deliveries (delivery_id, session_id);

-- claim_notification takes the oldest due one: cheap however many were sent.
CREATE INDEX undolog_notification_deliveries_due_idx
ON undolog.undolog_notification_deliveries (next_attempt_at)
WHERE state = 'pending';

ALTER TABLE undolog.undolog_notification_deliveries ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_notification_deliveries FROM public;
