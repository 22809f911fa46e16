-- undolog.partition_lock_key: the advisory-lock key that serialises partition
-- maintenance (ensure/drop). A constant, in one place.
CREATE OR REPLACE FUNCTION undolog.partition_lock_key()
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT 7557806069434771457::bigint  -- arbitrary, fixed; documented in the README
$$;

REVOKE ALL ON FUNCTION undolog.partition_lock_key() FROM public;
