-- undolog.approval_timeout: how long a new approval request stays open, from the
-- database's setting undolog.approval_timeout (ALTER DATABASE d SET
-- undolog.approval_timeout = '4 hours'); NULL, the default, means no deadline.
-- Only the database-wide value counts (undolog.database_setting): this runs inside the
-- agent's intercept, and a session-level SET (which any role may do on a placeholder
-- setting) would let an agent choose its own deadline.
-- A value that is not a positive interval up to 10 years raises UL008 rather than
-- being ignored (undolog.interval_setting_value): a typo must not silently mean "no
-- deadline". The error reaches intercept, which then writes nothing, so the call stays
-- unexecuted (the safe side) until the setting is fixed.
-- PL/pgSQL, not SQL, as undolog.database_setting: a SQL function with a SET clause is
-- never inlined and is planned again in every transaction that calls it.
CREATE OR REPLACE FUNCTION undolog.approval_timeout()
RETURNS interval
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN undolog.interval_setting_value(
        'undolog.approval_timeout', undolog.database_setting('undolog.approval_timeout'),
        NULL, interval '10 years');
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_timeout() FROM public;
