-- undolog.retention_months: how many months of journal maintenance keeps. The argument if
-- given, else the setting undolog.retention_months (e.g. ALTER DATABASE ... SET
-- undolog.retention_months = 24), else 12. UL008 for anything but a whole number of
-- months from 1 to 1200: keeping 0 months would drop last month's calls a day after they
-- were made, which is never what an undo journal wants.
CREATE OR REPLACE FUNCTION undolog.retention_months(p_months integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_setting text := nullif(btrim(pg_catalog.current_setting('undolog.retention_months', true)), '');
    v_months integer;
BEGIN
    IF p_months IS NOT NULL THEN
        v_months := p_months;
    ELSIF v_setting IS NULL THEN
        v_months := 12;
    ELSIF v_setting ~ '^[0-9]{1,4}$' THEN
        v_months := v_setting::integer;
    ELSE
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('undolog.retention_months must be a whole number of '
                                        'months, not %L', v_setting),
            HINT = 'Set it to a whole number of months, e.g. ALTER DATABASE ... SET '
                   'undolog.retention_months = 12, or RESET it (keep every month).';
    END IF;
    IF v_months NOT BETWEEN 1 AND 1200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('retention must be between 1 and 1200 months, not %s',
                                        v_months),
            HINT = CASE WHEN p_months IS NULL THEN 'Check the setting undolog.retention_months.'
                        ELSE 'Pass a number of months from 1 to 1200.' END;
    END IF;
    RETURN v_months;
END
$$;

REVOKE ALL ON FUNCTION undolog.retention_months(integer) FROM public;
