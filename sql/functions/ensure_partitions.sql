-- undolog.ensure_partitions: create the month partitions of the effect
-- log and its history from the current UTC month through p_months_ahead months later;
-- answers the names created. Idempotent, and serialised by the partition-maintenance
-- lock (undolog.lock_partition_maintenance) so that two maintainers never race on the
-- same DDL: the second waits, then finds the months there.
-- It first drains the default partitions (undolog.
-- drain_default_partitions): rows written while their month had no partition get their
-- month (even a past one) and move into it, instead of making the month's creation fail.
-- And months are now attached rather than created as partitions, so intercepts are not
-- stalled meanwhile (see create_month_partitions).
CREATE OR REPLACE FUNCTION undolog.ensure_partitions(p_months_ahead integer DEFAULT 3)
RETURNS SETOF text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF p_months_ahead IS NULL OR p_months_ahead NOT BETWEEN 0 AND 120 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_months_ahead must be between 0 and 120, not %s',
                                        coalesce(p_months_ahead::text, 'NULL')),
            HINT = 'Pass how many months ahead to create, from 0 to 120 (the default is 3).';
    END IF;
    PERFORM undolog.lock_partition_maintenance();
    RETURN QUERY SELECT undolog.drain_default_partitions();
    RETURN QUERY
    SELECT undolog.create_month_partitions(undolog.utc_month(now(), m))
    FROM pg_catalog.generate_series(0, p_months_ahead) AS m;
END
$$;

REVOKE ALL ON FUNCTION undolog.ensure_partitions(integer) FROM public;
