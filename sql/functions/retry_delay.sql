-- undolog.retry_delay: how long a compensation waits after its p_attempt-th failure:
-- p_base * 2^(p_attempt - 1), capped at p_cap. Computed in seconds (double precision)
-- so that a large attempt number saturates at the cap instead of overflowing an interval.
CREATE OR REPLACE FUNCTION undolog.retry_delay(p_attempt integer, p_base interval, p_cap interval)
RETURNS interval
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT pg_catalog.make_interval(secs => least(
        extract(EPOCH FROM p_cap)::double precision,
        extract(EPOCH FROM p_base)::double precision
        * power(2::double precision, least(greatest(p_attempt - 1, 0), 62))
    ))
$$;

REVOKE ALL ON FUNCTION undolog.retry_delay(integer, interval, interval) FROM public;
