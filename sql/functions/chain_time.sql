-- undolog.chain_time: a time as the history chain's canonical records write it: UTC,
-- ISO 8601 with microseconds and a Z (2026-12-02T05:27:46.123456Z), whatever the
-- session's TimeZone or DateStyle, so that the same row always hashes the same.
CREATE OR REPLACE FUNCTION undolog.chain_time(p_at timestamptz)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

REVOKE ALL ON FUNCTION undolog.chain_time(timestamptz) FROM public;
