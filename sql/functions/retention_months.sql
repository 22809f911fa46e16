-- undolog.retention_months: how many months of journal maintenance keeps. The argument if
-- given, else the setting undolog.retention_months (e.g. ALTER DATABASE ... SET
-- undolog.retention_months = 24; read by undolog.setting_integer), else 12. UL008 for
-- anything but a whole number of months from 1 to 1200: keeping 0 months would drop last
-- month's calls a day after they were made, which is never what an undo journal wants.
CREATE OR REPLACE FUNCTION undolog.retention_months(p_months integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF p_months IS NULL THEN
        RETURN undolog.setting_integer('undolog.retention_months', 12, 1, 1200);
    END IF;
    IF p_months NOT BETWEEN 1 AND 1200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('retention must be between 1 and 1200 months, not %s',
                                        p_months),
            HINT = 'Pass a number of months from 1 to 1200.';
    END IF;
    RETURN p_months;
END
$$;

REVOKE ALL ON FUNCTION undolog.retention_months(integer) FROM public;
