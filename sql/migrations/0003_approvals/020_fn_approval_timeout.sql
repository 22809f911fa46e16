-- undolog.approval_timeout: how long a new approval request stays open, from the GUC
-- undolog.approval_timeout (any interval literal, e.g. '4 hours'); NULL, the default,
-- means no deadline. Set it per database (ALTER DATABASE d SET undolog.approval_timeout =
-- '4 hours'), per login role, or per connection.
-- A value that is not a positive interval raises UL008 rather than being ignored: a typo
-- must not silently mean "no deadline". The error reaches intercept, which then writes
-- nothing, so the call stays unexecuted (the safe side) until the setting is fixed.
CREATE OR REPLACE FUNCTION undolog.approval_timeout()
RETURNS interval
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_setting text := pg_catalog.current_setting('undolog.approval_timeout', true);
    v_timeout interval;
BEGIN
    -- Unset (NULL) or reset ('' once the placeholder exists): no deadline.
    IF v_setting IS NULL OR btrim(v_setting) = '' THEN
        RETURN NULL;
    END IF;
    BEGIN
        v_timeout := v_setting::interval;
    EXCEPTION WHEN data_exception THEN
        v_timeout := NULL;
    END;
    IF v_timeout IS NULL OR v_timeout <= interval '0' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format(
                'undolog.approval_timeout must be a positive interval, not %s',
                pg_catalog.quote_literal(v_setting)),
            HINT = 'e.g. SET undolog.approval_timeout = ''4 hours''; '
                   'empty or unset means no deadline.';
    END IF;
    RETURN v_timeout;
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_timeout() FROM public;
