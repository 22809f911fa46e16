-- undolog.interval_setting_value: setting p_name's text p_value read as a positive interval
-- (at most p_max, when given), or p_default when it is unset (NULL) or empty; UL008
-- otherwise, naming the setting, before the caller writes anything: a typo must not
-- silently mean the default. The one reading of an interval setting, wherever its text
-- comes from: the session's (setting_interval) or the database's (approval_timeout).
CREATE OR REPLACE FUNCTION undolog.interval_setting_value(
    p_name text, p_value text, p_default interval, p_max interval
)
RETURNS interval
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_text text := nullif(btrim(p_value), '');
    v_value interval;
BEGIN
    IF v_text IS NULL THEN
        RETURN p_default;
    END IF;
    -- The exception block (a subtransaction) is entered only when the setting is set.
    BEGIN
        v_value := v_text::interval;
    EXCEPTION WHEN data_exception THEN
        v_value := NULL;
    END;
    IF v_value IS NULL OR v_value <= interval '0' OR v_value > p_max THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('%s must be a positive interval%s, not %s', p_name,
                                        ' up to ' || p_max::text,
                                        pg_catalog.quote_literal(v_text)),
            HINT = pg_catalog.format('Set it to one, e.g. ALTER DATABASE <db> SET %s = '
                                     '''5 minutes'', or RESET it: unset, it is %s.', p_name,
                                     coalesce(p_default::text, 'none'));
    END IF;
    RETURN v_value;
END
$$;

REVOKE ALL ON FUNCTION undolog.interval_setting_value(text, text, interval, interval)
FROM public;
