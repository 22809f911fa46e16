-- undolog.ensure_partitions: create the month partitions from the current UTC month
-- through p_months_ahead months later; answers the names created. Idempotent, and
-- serialised by an advisory lock so two maintainers never race on the same DDL.
CREATE OR REPLACE FUNCTION undolog.ensure_partitions(p_months_ahead integer DEFAULT 3)
RETURNS SETOF text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_this_month date := date_trunc('month', now() AT TIME ZONE 'UTC')::date;
BEGIN
    IF p_months_ahead IS NULL OR p_months_ahead NOT BETWEEN 0 AND 120 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_months_ahead must be between 0 and 120, not %s',
                                        coalesce(p_months_ahead::text, 'NULL'));
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(undolog.partition_lock_key());
    RETURN QUERY
    SELECT undolog.create_month_partitions((v_this_month + make_interval(months => m))::date)
    FROM generate_series(0, p_months_ahead) AS m;
END
$$;

REVOKE ALL ON FUNCTION undolog.ensure_partitions(integer) FROM public;
GRANT EXECUTE ON FUNCTION undolog.ensure_partitions(integer) TO undolog_operator;
