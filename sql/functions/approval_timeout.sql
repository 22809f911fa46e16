-- undolog.approval_timeout: how long a new approval request stays open, from the
-- database's setting undolog.approval_timeout (ALTER DATABASE d SET
-- undolog.approval_timeout = '4 hours'); NULL, the default, means no deadline.
-- Only the database-wide value counts (undolog.database_setting): this runs inside the
-- agent's intercept, and a session-level SET (which any role may do on a placeholder
-- setting) would let an agent choose its own deadline.
-- A value that is not a positive interval up to 10 years raises UL008 rather than
-- being ignored: a typo must not silently mean "no deadline". The error reaches
-- intercept, which then writes nothing, so the call stays unexecuted (the safe side)
-- until the setting is fixed.
CREATE OR REPLACE FUNCTION undolog.approval_timeout()
RETURNS interval
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_setting text := undolog.database_setting('undolog.approval_timeout');
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
    IF v_timeout IS NULL OR v_timeout <= interval '0' OR v_timeout > interval '10 years' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format(
                'undolog.approval_timeout must be a positive interval up to 10 years, not %s',
                pg_catalog.quote_literal(v_setting)),
            HINT = 'e.g. ALTER DATABASE app SET undolog.approval_timeout = ''4 hours''; '
                   'empty or unset means no deadline.';
    END IF;
    RETURN v_timeout;
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_timeout() FROM public;
