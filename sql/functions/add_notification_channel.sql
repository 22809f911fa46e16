-- undolog.add_notification_channel: an operator adds a channel that approval requests are
-- announced through, recording who (p_by, the human) and which login. Answers its id.
--   p_kind 'webhook': p_target the http(s) URL; p_config {"format": "json" | "slack"};
--                     p_secret the HMAC-SHA256 key the bodies are signed with (required).
--   p_kind 'email':   p_target the recipients, comma-separated; p_config {"smtp_host",
--                     "smtp_port", "smtp_from", optional "smtp_user", "starttls", "ssl"};
--                     p_secret the SMTP password, or NULL.
--   p_dashboard_url   the dashboard's base URL, for the link to the request (or NULL).
-- Neither URL may carry user info (https://user:TOKEN@host/...), a credential: the worker
-- sends none (urllib fails on it, and its error quoted it), approvers read a channel's
-- host (undolog.notification_channels), and the link goes into every message. A receiver
-- authenticates a POST by its signature (the secret's HMAC), and a token it needs besides
-- goes in the URL's path or query, which no role reads. Nor may either hold a control
-- character (U+0001, ESC, DEL; white space is refused as well): Python's http.client
-- refuses such a URL quoting its path escaped, which the recorded error (last_error, read
-- by the agent whose request was announced) would then show.
-- UL026 a definition that cannot work (kind, name, URL, address, config) or a name
-- already live; UL008 a blank p_by.
CREATE OR REPLACE FUNCTION undolog.add_notification_channel(
    p_name text,
    p_kind text,
    p_target text,
    p_config jsonb,
    p_secret text,
    p_dashboard_url text,
    p_by text
)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_config jsonb := coalesce(p_config, '{}'::jsonb);
    v_problem text;
    v_hint text := 'Fix the channel''s settings and add it again: undolog notifications '
                   'add-webhook --help (or add-email --help) lists what each needs.';
    v_address text;
    v_id uuid;
    -- An address without display name, spaces, commas or angle brackets: what goes into
    -- a To: header as is (no header injection through a CR/LF either).
    c_address constant text := '^[^@\s,<>"]+@[^@\s,<>"]+$';
    -- An http(s) URL: a host, then a path or query, no white space (either URL).
    c_http_url constant text := '^https?://[^\s/?#]+[^\s]*$';
    -- A URL whose authority holds user info (user:password@host): a credential.
    c_userinfo constant text := '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@';
    -- A control character (U+0001, ESC, DEL) in a URL: no HTTP client sends it, and
    -- Python's refuses the URL quoting its path escaped (\x7f), past what the error's
    -- text cuts out of it.
    c_cntrl_hint constant text := 'Percent-encode the character (%7F for DEL, %1B for ESC) '
                                  'or remove it: a URL holds no control character.';
BEGIN
    PERFORM undolog.check_operator(p_by);
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$' THEN
        v_problem := 'a name of letters, digits, "_", "." and "-" (at most 100)';
    ELSIF p_kind IS NULL OR p_kind NOT IN ('webhook', 'email') THEN
        v_problem := 'kind webhook or email';
    ELSIF jsonb_typeof(v_config) <> 'object' THEN
        v_problem := 'a config that is a JSON object';
    ELSIF p_dashboard_url IS NOT NULL AND p_dashboard_url !~ c_http_url THEN
        v_problem := 'a dashboard URL of http(s)://host[/path]';
    ELSIF p_dashboard_url ~ '[[:cntrl:]]' THEN
        v_problem := 'a dashboard URL without control characters';
        v_hint := c_cntrl_hint;
    ELSIF p_dashboard_url ~ c_userinfo THEN
        v_problem := 'a dashboard URL without user info (user:password@ before the host)';
        v_hint := 'Remove the user:password@ part: the link goes into every message, and '
                  'the dashboard asks whoever opens it to log in.';
    ELSIF p_kind = 'webhook' THEN
        IF p_target IS NULL OR p_target !~ c_http_url THEN
            v_problem := 'a webhook URL of http(s)://host[/path]';
        ELSIF p_target ~ '[[:cntrl:]]' THEN
            v_problem := 'a webhook URL without control characters';
            v_hint := c_cntrl_hint;
        ELSIF p_target ~ c_userinfo THEN
            v_problem := 'a webhook URL without user info (user:password@ before the host)';
            v_hint := 'Remove the user:password@ part (the worker sends no user info, and '
                      'approvers read a channel''s host): the receiver authenticates each POST '
                      'by its X-UndoLog-Signature header, HMAC-SHA256 keyed with the '
                      'channel''s secret (--secret-env); a token it needs besides goes in the '
                      'URL''s path or query, which no role reads.';
        ELSIF coalesce(v_config ->> 'format', 'json') NOT IN ('json', 'slack')
            OR (v_config - 'format') <> '{}'::jsonb THEN
            v_problem := 'a webhook config of {"format": "json" | "slack"} only';
        ELSIF undolog.is_blank(p_secret) OR length(p_secret) < 16 THEN
            v_problem := 'a webhook secret (the HMAC key) of at least 16 characters';
        END IF;
    ELSE
        IF p_target IS NULL OR btrim(p_target) = '' THEN
            v_problem := 'at least one recipient';
        ELSIF jsonb_typeof(v_config -> 'smtp_host') IS DISTINCT FROM 'string'
            OR v_config ->> 'smtp_host' !~ '^[A-Za-z0-9.:\[\]-]+$' THEN
            v_problem := 'an smtp_host';
        ELSIF jsonb_typeof(v_config -> 'smtp_port') IS DISTINCT FROM 'number'
            OR (v_config ->> 'smtp_port') !~ '^[0-9]{1,5}$'
            OR (v_config ->> 'smtp_port')::integer NOT BETWEEN 1 AND 65535 THEN
            v_problem := 'an smtp_port from 1 to 65535';
        ELSIF jsonb_typeof(v_config -> 'smtp_from') IS DISTINCT FROM 'string'
            OR v_config ->> 'smtp_from' !~ c_address THEN
            v_problem := 'an smtp_from address';
        ELSIF (v_config - ARRAY['smtp_host', 'smtp_port', 'smtp_from', 'smtp_user', 'starttls',
                                'ssl']) <> '{}'::jsonb
            OR jsonb_typeof(coalesce(v_config -> 'starttls', 'false')) <> 'boolean'
            OR jsonb_typeof(coalesce(v_config -> 'ssl', 'false')) <> 'boolean'
            OR jsonb_typeof(coalesce(v_config -> 'smtp_user', '""')) <> 'string' THEN
            v_problem := 'an email config of smtp_host, smtp_port, smtp_from, and optionally '
                         'smtp_user (text), starttls and ssl (booleans)';
        ELSE
            FOREACH v_address IN ARRAY pg_catalog.string_to_array(p_target, ',') LOOP
                IF btrim(v_address) !~ c_address THEN
                    v_problem := pg_catalog.format('recipients that are addresses, not %L',
                                                   btrim(v_address));
                END IF;
            END LOOP;
        END IF;
    END IF;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL026',
            MESSAGE = 'invalid notification channel: it needs ' || v_problem,
            HINT = v_hint;
    END IF;
    INSERT INTO undolog.undolog_notification_channels AS c (
        channel_name, kind, destination, config, secret, dashboard_url, created_by, created_role
    )
    VALUES (
        p_name, p_kind,
        CASE WHEN p_kind = 'email'
            THEN (SELECT pg_catalog.string_agg(btrim(a.x), ', ')
                  FROM pg_catalog.unnest(pg_catalog.string_to_array(p_target, ',')) AS a (x))
            ELSE p_target
        END,
        v_config, nullif(p_secret, ''), p_dashboard_url, p_by, session_user
    )
    ON CONFLICT (channel_name) WHERE removed_at IS NULL DO NOTHING
    RETURNING c.channel_id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL026',
            MESSAGE = pg_catalog.format('a notification channel named %s exists: remove it first',
                                        p_name),
            HINT = 'Choose another name, or remove the existing channel first: undolog '
                   'notifications remove NAME.';
    END IF;
    -- the delivery workers LISTENing wake (at commit) and announce the pending requests
    -- through the new channel at once
    PERFORM undolog.wake_listeners('undolog_notifications');
    RETURN v_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.add_notification_channel(
    text, text, text, jsonb, text, text, text
) FROM public;
