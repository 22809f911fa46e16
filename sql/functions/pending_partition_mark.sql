-- undolog.pending_partition_mark: the comment a month's table carries between its
-- creation ahead and its attachment (create_month_partitions): it tells such a table
-- from a detached month kept as an archive, which has the same name and no comment.
CREATE OR REPLACE FUNCTION undolog.pending_partition_mark()
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT 'undolog: month partition created ahead, to be attached'::text
$$;

REVOKE ALL ON FUNCTION undolog.pending_partition_mark() FROM public;
