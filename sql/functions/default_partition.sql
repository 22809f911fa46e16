-- undolog.default_partition: the default partition of p_parent (NULL if it has none),
-- from the catalog rather than by name.
CREATE OR REPLACE FUNCTION undolog.default_partition(p_parent regclass)
RETURNS regclass
LANGUAGE sql
STABLE
AS $$
    SELECT nullif(p.partdefid, 0)::regclass
    FROM pg_catalog.pg_partitioned_table AS p
    WHERE p.partrelid = p_parent
$$;

REVOKE ALL ON FUNCTION undolog.default_partition(regclass) FROM public;
