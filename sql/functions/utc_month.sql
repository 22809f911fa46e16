-- undolog.utc_month: the first day of the UTC month holding p_at, moved p_offset months.
-- Months are UTC's whatever the session's TimeZone: the arithmetic is done on the UTC
-- wall clock (timestamp without time zone), because timestamptz +/- '1 month' is done in
-- the session's zone and lands on the wrong day or hour across DST or at a month's end.
CREATE OR REPLACE FUNCTION undolog.utc_month(p_at timestamptz, p_offset integer DEFAULT 0)
RETURNS date
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT (pg_catalog.date_trunc('month', p_at AT TIME ZONE 'UTC')
            + pg_catalog.make_interval(months => p_offset))::date
$$;

REVOKE ALL ON FUNCTION undolog.utc_month(timestamptz, integer) FROM public;
