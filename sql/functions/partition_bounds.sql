-- undolog.partition_bounds: the range partitions of p_parent (the default partition
-- excluded) with their bounds, oldest first. Read from the catalog rather than guessed
-- from names, so that retention drops exactly what is older than its cut-off.
-- The bound is printed by pg_get_expr, in the session's DateStyle and TimeZone: both are
-- pinned here so that the text parses back to the same instant.
CREATE OR REPLACE FUNCTION undolog.partition_bounds(p_parent regclass)
RETURNS TABLE (partition_oid regclass, lower_bound timestamptz, upper_bound timestamptz)
LANGUAGE sql
STABLE
SET datestyle = 'ISO, YMD'
SET timezone = 'UTC'
AS $$
    SELECT b.partition_oid, b.bounds[1]::timestamptz, b.bounds[2]::timestamptz
    FROM (
        SELECT
            i.inhrelid::regclass AS partition_oid,
            pg_catalog.regexp_match(
                pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$'
            ) AS bounds
        FROM pg_catalog.pg_inherits AS i
        INNER JOIN pg_catalog.pg_class AS c ON i.inhrelid = c.oid
        WHERE i.inhparent = p_parent AND NOT i.inhdetachpending
    ) AS b
    WHERE b.bounds IS NOT NULL
    ORDER BY 2, 1
$$;

REVOKE ALL ON FUNCTION undolog.partition_bounds(regclass) FROM public;
