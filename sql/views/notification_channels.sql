-- undolog.notification_channels: the channels approval requests are announced through,
-- live and removed, WITHOUT their secrets: has_secret says whether one is set. A
-- webhook's URL is shown (destination) as its scheme and host only, since a Slack
-- incoming-webhook URL is itself a credential (its path is the token), and without any
-- user info (user:password@, which add_notification_channel refuses, but a channel
-- added before it did may hold), cut up to the authority's last "@". The view runs
-- with its owner's rights (the table is the owner's alone): only approver and operator
-- may select it.
-- New columns go at the end: CREATE OR REPLACE VIEW keeps the existing ones in place.
CREATE OR REPLACE VIEW undolog.notification_channels AS
SELECT
    c.channel_id,
    c.channel_name,
    c.kind,
    CASE
        WHEN c.kind = 'webhook'
            THEN
                regexp_replace(
                    substring(c.destination FROM '^https?://[^/?#]+'), '^(https?://).*@', '\1'
                ) || '/…'
        ELSE c.destination
    END AS destination,
    CASE
        WHEN c.kind = 'webhook' THEN coalesce(c.config ->> 'format', 'json')
        ELSE 'email'
    END AS body_format,
    c.config - 'format' AS smtp,
    c.secret IS NOT NULL AS has_secret,
    -- without user info either (a channel of before add_notification_channel refused it)
    regexp_replace(c.dashboard_url, '^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@', '\1')
        AS dashboard_url,
    c.created_at,
    c.created_by,
    c.created_role,
    c.removed_at IS NULL AS live,
    c.removed_at,
    c.removed_by
FROM undolog.undolog_notification_channels AS c;

COMMENT ON VIEW undolog.notification_channels IS
'Notification channels of approval requests, without their secrets.';

REVOKE ALL ON undolog.notification_channels FROM public;
