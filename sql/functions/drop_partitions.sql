-- undolog.drop_partitions: drop every month partition of the effect log and of its
-- history that lies wholly before p_older_than (its range ends at or before it), one DDL
-- statement each, with the undo stack (each call's exactly-once key) and approval request
-- rows of those effects. Answers the names dropped (or detached).
--   p_detach_only  detach the months instead: they leave the journal (no replay finds
--                  them, their undo and approval rows go) but stay as plain tables to
--                  archive (pg_dump -t) and drop later.
--   p_force        drop even a month that holds effects of an unfinished session (active,
--                  awaiting_approval, failed, compensating, halted): their undo walk
--                  loses those entries. Without it such a month is refused: UL016, every
--                  such session in DETAIL, and nothing is dropped.
-- The current month and later ones can never be dropped (p_older_than after the start
-- of the current UTC month: UL008). Serialised with ensure_partitions by the
-- partition-maintenance lock. Intercepts on current months are blocked only for
-- the DDL at the end (see undolog.drop_old_partitions): a catalog lock, held for
-- milliseconds, whatever the months' sizes. Set lock_timeout to bound the wait for it
-- behind long transactions reading the journal.
CREATE OR REPLACE FUNCTION undolog.drop_partitions(
    p_older_than timestamptz,
    p_detach_only boolean DEFAULT FALSE,
    p_force boolean DEFAULT FALSE
)
RETURNS SETOF text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_this_month timestamptz := undolog.month_start(undolog.utc_month(now()));
BEGIN
    IF p_older_than IS NULL OR p_older_than > v_this_month THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format(
                'p_older_than must be at or before %s (the start of the current UTC month), not %s',
                v_this_month, coalesce(p_older_than::text, 'NULL')),
            HINT = 'The current month is being written: it can never be dropped.';
    END IF;
    IF p_detach_only IS NULL OR p_force IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_detach_only and p_force must be true or false, not NULL',
            HINT = 'Pass p_detach_only and p_force as true or false, or leave them out (false).';
    END IF;
    PERFORM undolog.lock_partition_maintenance();
    RETURN QUERY
    SELECT d.partition_name
    FROM undolog.drop_old_partitions(p_older_than, p_detach_only,
                                     CASE WHEN p_force THEN 'force' ELSE 'refuse' END) AS d;
END
$$;

REVOKE ALL ON FUNCTION undolog.drop_partitions(timestamptz, boolean, boolean) FROM public;
