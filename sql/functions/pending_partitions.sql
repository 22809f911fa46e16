-- undolog.pending_partitions: the month tables created ahead whose attachment is still to
-- come (their locks were busy when maintenance ran: see create_month_partitions), by
-- name. The next maintenance run attaches them; `undolog health` and maintain_partitions'
-- 'pending' rows show them meanwhile.
CREATE OR REPLACE FUNCTION undolog.pending_partitions()
RETURNS SETOF text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT c.relname::text
    FROM pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_description AS d
        ON d.objoid = c.oid AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = 0
    WHERE c.relnamespace = 'undolog'::regnamespace
      AND c.relkind = 'r'
      AND NOT c.relispartition
      AND d.description = undolog.pending_partition_mark()
    ORDER BY c.relname
$$;

REVOKE ALL ON FUNCTION undolog.pending_partitions() FROM public;
