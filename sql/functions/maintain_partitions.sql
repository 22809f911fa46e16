-- undolog.maintain_partitions: the one entry point to schedule (e.g. daily, from cron):
--   1. write an anchor of the history chains (undolog.write_anchor);
--   2. drain the default partitions into their months (normally nothing to do);
--   3. retention: drop the months wholly older than the start of the UTC month
--      p_retention_months before the current one, so every row younger than that many
--      months is kept. p_retention_months NULL: the setting undolog.retention_months,
--      else 12. A month holding effects of an unfinished session is kept, with a WARNING
--      naming the sessions, and answered as 'skipped': a cron job must not fail, and so
--      stop creating months, because one agent is still running;
--   4. create the months from the current one through p_months_ahead months later: a
--      future month is built ahead as a table and attached with short lock waits; one
--      whose locks stayed busy (an open read of the effect log holds the default
--      partition) is left for the next run and answered as 'pending'
--      (create_month_partitions). Maintenance never queues for long behind an agent.
-- Answers one row per partition touched: (action, partition), action 'created',
-- 'dropped', 'skipped' or 'pending'. One transaction; serialised with ensure_partitions and
-- drop_partitions by the partition-maintenance lock. The order keeps every
-- strong lock at the end: the anchor first (it writes rows, and takes as long as the
-- heads that moved since the last one, which any agent login moves at will: 2.2 million
-- new sessions took 48 s), the retention's row deletes next, its DDL and the new months'
-- DDL last (see undolog.drop_old_partitions). Catching up a missed month is the
-- exception: draining takes both parents ACCESS EXCLUSIVE first (create_month_partitions),
-- so agents' calls wait for the drain and the drop instead of deadlocking with them.
CREATE OR REPLACE FUNCTION undolog.maintain_partitions(
    p_months_ahead integer DEFAULT 3,
    p_retention_months integer DEFAULT NULL
)
RETURNS TABLE (action text, partition text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_retention integer := undolog.retention_months(p_retention_months);
BEGIN
    IF p_months_ahead IS NULL OR p_months_ahead NOT BETWEEN 0 AND 120 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_months_ahead must be between 0 and 120, not %s',
                                        coalesce(p_months_ahead::text, 'NULL')),
            HINT = 'Pass how many months ahead to create, from 0 to 120 (the default is 3).';
    END IF;
    PERFORM undolog.lock_partition_maintenance();
    -- The scheduled run also anchors the history chains, before any strong lock is taken.
    PERFORM undolog.write_anchor();

    RETURN QUERY SELECT 'created'::text, d.name
                 FROM undolog.drain_default_partitions() AS d (name);
    RETURN QUERY
    SELECT d.action, d.partition_name
    FROM undolog.drop_old_partitions(
        undolog.month_start(undolog.utc_month(now(), -v_retention)), false, 'skip') AS d;
    RETURN QUERY
    SELECT 'created'::text, c.name
    FROM pg_catalog.generate_series(0, p_months_ahead) AS m,
         LATERAL undolog.create_month_partitions(undolog.utc_month(now(), m)) AS c (name);
    RETURN QUERY SELECT 'pending'::text, p.name FROM undolog.pending_partitions() AS p (name);
END
$$;

REVOKE ALL ON FUNCTION undolog.maintain_partitions(integer, integer) FROM public;
