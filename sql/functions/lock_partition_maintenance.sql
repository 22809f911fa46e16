-- undolog.lock_partition_maintenance: serialise partition maintenance (ensure_partitions,
-- drop_partitions, maintain_partitions) until the transaction ends: the second
-- maintainer waits, then finds nothing to do. A row lock on the one row of
-- undolog_maintenance_lock, taken by the engine's owner inside the SECURITY DEFINER
-- maintenance functions: no other role can take it (locking a row needs UPDATE on the
-- table, which nobody else holds), so no agent can stop maintenance by holding it. It
-- replaces an advisory lock on a documented key, which any login could take.
CREATE OR REPLACE FUNCTION undolog.lock_partition_maintenance()
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM FROM undolog.undolog_maintenance_lock AS m WHERE m.singleton FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'undolog.undolog_maintenance_lock has lost its row',
            HINT = 'INSERT INTO undolog.undolog_maintenance_lock DEFAULT VALUES (as the owner).';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_partition_maintenance() FROM public;
