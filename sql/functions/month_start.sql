-- undolog.month_start: the instant a UTC month begins (midnight UTC of its first day),
-- for the month holding the date p_month. date -> timestamp involves no time zone, so
-- the answer does not depend on the session's TimeZone either.
CREATE OR REPLACE FUNCTION undolog.month_start(p_month date)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT pg_catalog.date_trunc('month', p_month::timestamp) AT TIME ZONE 'UTC'
$$;

REVOKE ALL ON FUNCTION undolog.month_start(date) FROM public;
