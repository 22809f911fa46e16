-- undolog.remove_notification_channel: an operator removes the live channel p_name,
-- recording who (p_by) and which login; its deliveries not yet sent are cancelled. The
-- row stays (deliveries name it). Answers the removal's time. UL025 no live channel of
-- that name; UL008 a blank p_by.
CREATE OR REPLACE FUNCTION undolog.remove_notification_channel(p_name text, p_by text)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_id uuid;
    v_at timestamptz := clock_timestamp();
BEGIN
    PERFORM undolog.check_operator(p_by);
    UPDATE undolog.undolog_notification_channels AS c
    SET removed_at = v_at, removed_by = p_by, removed_role = session_user
    WHERE c.channel_name = p_name AND c.removed_at IS NULL
    RETURNING c.channel_id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL025',
            MESSAGE = pg_catalog.format('no notification channel named %s', p_name),
            HINT = 'Check the name: undolog notifications list shows the channels.';
    END IF;
    UPDATE undolog.undolog_notification_deliveries AS d
    SET state = 'cancelled', last_error = 'the channel was removed'
    WHERE d.channel_id = v_id AND d.state IN ('pending', 'failed');
    RETURN v_at;
END
$$;

REVOKE ALL ON FUNCTION undolog.remove_notification_channel(text, text) FROM public;
