-- undolog.chain_time: a time as the history chain's canonical records write it: UTC,
-- ISO 8601 with microseconds and a Z (2026-12-02T05:27:46.123456Z), whatever the
-- session's TimeZone or DateStyle, so that the same row always hashes the same.
-- Times the engine never writes are spelled apart from every other, so that the table's
-- owner cannot move a row's time to one of them unseen: a year before Christ gets " BC"
-- (to_char's YYYY drops the era: 2026 BC read as 2026), and ±infinity its own name (to_char
-- answers NULL, the spelling of "no time": an approval that never expires).
CREATE OR REPLACE FUNCTION undolog.chain_time(p_at timestamptz)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT CASE
        WHEN NOT pg_catalog.isfinite(p_at) THEN p_at::text
        ELSE pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
             || CASE WHEN p_at AT TIME ZONE 'UTC' < timestamp '0001-01-01' THEN ' BC'
                     ELSE '' END
    END
$$;

REVOKE ALL ON FUNCTION undolog.chain_time(timestamptz) FROM public;
