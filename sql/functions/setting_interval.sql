-- undolog.setting_interval: a positive interval from a custom GUC (e.g. undolog.claim_timeout),
-- or p_default when the GUC is unset or empty. A value that is not a positive interval is
-- refused with UL008 naming the setting, before the caller writes anything.
CREATE OR REPLACE FUNCTION undolog.setting_interval(p_name text, p_default interval)
RETURNS interval
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_text text := nullif(btrim(pg_catalog.current_setting(p_name, true)), '');
    v_value interval;
BEGIN
    IF v_text IS NULL THEN
        RETURN p_default;
    END IF;
    -- The exception block (a subtransaction) is entered only when the GUC is set.
    BEGIN
        v_value := v_text::interval;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                   OR interval_field_overflow THEN
        v_value := NULL;
    END;
    IF v_value IS NULL OR v_value <= interval '0' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('setting %s must be a positive interval, not %s',
                                        p_name, pg_catalog.quote_literal(v_text)),
            HINT = pg_catalog.format('Set it to a positive interval, e.g. ALTER DATABASE ... '
                                     'SET %s = ''5 minutes'', or RESET it.', p_name);
    END IF;
    RETURN v_value;
END
$$;

REVOKE ALL ON FUNCTION undolog.setting_interval(text, interval) FROM public;
