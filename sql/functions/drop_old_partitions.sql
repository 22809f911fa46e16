-- undolog.drop_old_partitions: the work of drop_partitions and of maintain_partitions'
-- retention. Drops (or detaches, p_detach_only) every partition of the effect log and of
-- its history whose range ends at or before p_older_than, after deleting the undo
-- and approval rows of those effects. p_in_use says what to do with a month that
-- holds effects of an unfinished session (undolog.unfinished_sessions):
--   'refuse'  raise UL016 counting every such session (once, whatever the months it
--             holds) and naming the first 50 by id, drop nothing;
--   'skip'    keep that month (a WARNING counts them and names the first 50; answered
--             as 'skipped');
--   'force'   drop it anyway: those sessions lose the undo entries of that month.
-- Answers (action, partition): 'dropped' | 'detached' | 'skipped', name.
-- Locks: the pruning DELETEs take ROW EXCLUSIVE only; the DDL comes last, one statement
-- per partition, so the ACCESS EXCLUSIVE lock it needs on the parent (DROP and plain
-- DETACH both take it; DETACH ... CONCURRENTLY cannot run in a function, nor at all while
-- a default partition exists) is held only from the DDL to the commit: catalog work,
-- independent of the month's size (bench/bench_partitions.py: 1-2 ms of DDL; the worst
-- intercept meanwhile 3-17 ms, the commit's WAL flush included). Effect log before
-- history, the order in which intercept and commit lock them, so no deadlock with them.
-- Callers validate the arguments and hold the partition-maintenance lock.
CREATE OR REPLACE FUNCTION undolog.drop_old_partitions(
    p_older_than timestamptz, p_detach_only boolean, p_in_use text
)
RETURNS TABLE (action text, partition_name text)
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_month record;
    v_parents regclass[];
    v_partitions regclass[];
    v_sessions text[];
    v_count bigint;
    v_blocked_ranges tstzrange[] := '{}'::tstzrange[];
    v_blocked_months text[] := '{}'::text[];
    v_kept tstzrange[] := '{}'::tstzrange[];
    v_prune_ranges tstzrange[] := '{}'::tstzrange[];
    v_range tstzrange;
    v_pruned_rows bigint := 0;
    v_started timestamptz;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    v_tries integer := CASE WHEN p_in_use = 'skip' THEN 3 ELSE 1 END;
    v_names text[];
    v_actions text[];
BEGIN
    IF p_in_use IS NULL OR p_in_use NOT IN ('refuse', 'skip', 'force') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('p_in_use must be refuse, skip or force, not %s',
                                        coalesce(pg_catalog.quote_literal(p_in_use), 'NULL')),
            HINT = 'Pass p_in_use => ''refuse'' (stop at a month still in use), ''skip'' (keep it) '
                   'or ''force'' (drop it anyway).';
    END IF;

    FOR v_month IN
        SELECT b.partition_oid, b.lower_bound, b.upper_bound
        FROM undolog.partition_bounds('undolog.undolog_effect_log') AS b
        WHERE b.upper_bound <= p_older_than
        ORDER BY b.lower_bound
    LOOP
        v_range := pg_catalog.tstzrange(v_month.lower_bound, v_month.upper_bound);
        IF p_in_use <> 'force' THEN
            -- Counted, and only the first 50 named: a month may hold millions of
            -- unfinished sessions (an agent flood), whose every name in one array would
            -- pass the 1 GB a value may have and fail every maintenance run.
            -- One read: the count over all of them (the window), the names of the first
            -- 50, in one snapshot.
            SELECT coalesce(pg_catalog.max(f.total), 0),
                   pg_catalog.array_agg(pg_catalog.format('%s (%s)', f.session_id, f.state)
                                        ORDER BY f.session_id)
            INTO v_count, v_sessions
            FROM (SELECT u.session_id, u.state, pg_catalog.count(*) OVER () AS total
                  FROM undolog.unfinished_sessions(v_month.lower_bound,
                                                   v_month.upper_bound) AS u
                  ORDER BY u.session_id LIMIT 50) AS f;
            IF v_count > 0 THEN
                v_kept := v_kept || v_range;
                IF p_in_use = 'skip' THEN
                    RAISE WARNING USING
                        MESSAGE = pg_catalog.format(
                            '%s kept: it holds effects of %s unfinished session(s)',
                            v_month.partition_oid, v_count),
                        DETAIL = 'sessions: '
                                 || pg_catalog.array_to_string(v_sessions, ', ')
                                 || CASE WHEN v_count > 50
                                     THEN pg_catalog.format(' and %s more', v_count - 50)
                                     ELSE '' END,
                        HINT = 'Nothing is lost: the next maintenance run drops the month once '
                               'those sessions are finished. An active or failed session '
                               'finishes by itself (or: undolog sessions rollback); a halted '
                               'one needs an operator (undolog sessions resume, retry or '
                               'abandon).';
                    action := 'skipped';
                    partition_name := (SELECT c.relname FROM pg_catalog.pg_class AS c
                                       WHERE c.oid = v_month.partition_oid);
                    RETURN NEXT;
                ELSE
                    v_blocked_ranges := v_blocked_ranges || v_range;
                    v_blocked_months := v_blocked_months || v_month.partition_oid::text;
                END IF;
                CONTINUE;
            END IF;
        END IF;
        v_prune_ranges := v_prune_ranges || v_range;
    END LOOP;

    IF pg_catalog.cardinality(v_blocked_ranges) > 0 THEN
        -- A session may hold effects of several of the months: counted once, over the
        -- union of their sessions (sorted or hashed within work_mem, spilling to disk,
        -- never one array of them all), and the first 50 of it named, in one read.
        SELECT coalesce(pg_catalog.max(f.total), 0),
               pg_catalog.array_agg(pg_catalog.format('%s (%s)', f.session_id, f.state)
                                    ORDER BY f.session_id)
        INTO v_count, v_sessions
        FROM (SELECT d.session_id, d.state, pg_catalog.count(*) OVER () AS total
              FROM (SELECT DISTINCT u.session_id, u.state
                    FROM pg_catalog.unnest(v_blocked_ranges) AS r (r),
                         LATERAL undolog.unfinished_sessions(pg_catalog.lower(r.r),
                                                             pg_catalog.upper(r.r)) AS u) AS d
              ORDER BY d.session_id LIMIT 50) AS f;
        RAISE EXCEPTION USING
            ERRCODE = 'UL016',
            MESSAGE = pg_catalog.format(
                'cannot drop %s: it holds effects of %s unfinished session(s)',
                pg_catalog.array_to_string(v_blocked_months, ', '), v_count),
            DETAIL = 'sessions: ' || pg_catalog.array_to_string(v_sessions, ', ')
                     || CASE WHEN v_count > 50
                         THEN pg_catalog.format(' and %s more', v_count - 50)
                         ELSE '' END,
            HINT = 'Let those sessions finish (complete, or compensate; a halted one needs '
                   'a human), or pass p_force => true to drop their effects anyway.';
    END IF;

    -- The months to drop, read in full before the first DROP changes the catalog. A
    -- history month is kept with its effects' month, and goes with it otherwise.
    SELECT pg_catalog.array_agg(p.parent ORDER BY p.parent_order, p.lower_bound),
           pg_catalog.array_agg(p.partition_oid ORDER BY p.parent_order, p.lower_bound)
    INTO v_parents, v_partitions
    FROM (
        SELECT 1 AS parent_order, 'undolog.undolog_effect_log'::regclass AS parent, b.*
        FROM undolog.partition_bounds('undolog.undolog_effect_log') AS b
        UNION ALL
        SELECT 2, 'undolog.undolog_effect_history'::regclass, b.*
        FROM undolog.partition_bounds('undolog.undolog_effect_history') AS b
    ) AS p
    WHERE p.upper_bound <= p_older_than
      AND NOT pg_catalog.tstzrange(p.lower_bound, p.upper_bound) && ANY (v_kept);
    SELECT pg_catalog.array_agg(c.relname::text ORDER BY x.i) INTO v_names
    FROM pg_catalog.unnest(v_partitions) WITH ORDINALITY AS x (oid, i)
    INNER JOIN pg_catalog.pg_class AS c ON c.oid = x.oid;

    -- First the rows that point into the months, with no lock that blocks intercept ...
    -- then the months themselves, one DDL statement per partition. The DDL needs ACCESS
    -- EXCLUSIVE on the parent, which any open read of the journal (an analyst's query
    -- left open) holds off; a DDL statement waiting for it makes every agent's call queue
    -- behind it. So, for maintain_partitions ('skip'), each try waits at most 50 ms, three
    -- tries with pauses in which agents go on, and then the months are kept for the next
    -- run ('skipped', with a WARNING): the block rolls back, pruned rows included, so a
    -- kept month keeps its undo and approval rows. drop_partitions waits as the caller's
    -- lock_timeout says.
    BEGIN
        v_started := pg_catalog.clock_timestamp();
        FOREACH v_range IN ARRAY v_prune_ranges LOOP
            v_pruned_rows := v_pruned_rows
                             + undolog.prune_month_rows(pg_catalog.lower(v_range),
                                                        pg_catalog.upper(v_range));
        END LOOP;
        RAISE DEBUG 'undolog: pruned % undo/approval rows in % ms', v_pruned_rows,
            round(extract(epoch FROM pg_catalog.clock_timestamp() - v_started) * 1000, 1);

        IF p_in_use = 'skip' THEN
            PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
        END IF;
        FOR v_try IN 1 .. v_tries LOOP
            BEGIN
                v_started := pg_catalog.clock_timestamp();
                FOR v_i IN 1 .. coalesce(pg_catalog.cardinality(v_partitions), 0) LOOP
                    IF p_detach_only THEN
                        EXECUTE pg_catalog.format('ALTER TABLE %s DETACH PARTITION %s',
                                                  v_parents[v_i], v_partitions[v_i]);
                    ELSE
                        EXECUTE pg_catalog.format('DROP TABLE %s', v_partitions[v_i]);
                    END IF;
                END LOOP;
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                IF v_try = v_tries THEN
                    RAISE;
                END IF;
                PERFORM pg_catalog.pg_sleep(0.05 * v_try);
            END;
        END LOOP;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        v_actions := pg_catalog.array_fill(
            CASE WHEN p_detach_only THEN 'detached' ELSE 'dropped' END,
            ARRAY[coalesce(pg_catalog.cardinality(v_names), 0)]);
    EXCEPTION WHEN lock_not_available THEN
        IF p_in_use <> 'skip' THEN
            RAISE;
        END IF;
        RAISE WARNING USING
            MESSAGE = pg_catalog.format(
                '%s kept: their locks stayed busy (a transaction reading the journal is open)',
                pg_catalog.array_to_string(v_names, ', ')),
            HINT = 'Nothing is lost: the next maintenance run drops them. A transaction left '
                   'open on undolog_effect_log (pg_stat_activity: idle in transaction) '
                   'holds them off.';
        v_actions := pg_catalog.array_fill('skipped'::text,
                                           ARRAY[coalesce(pg_catalog.cardinality(v_names), 0)]);
    END;
    FOR v_i IN 1 .. coalesce(pg_catalog.cardinality(v_names), 0) LOOP
        action := v_actions[v_i];
        partition_name := v_names[v_i];
        RETURN NEXT;
    END LOOP;
    -- The DDL's start (epoch) lets a benchmark tell which calls waited for its lock.
    RAISE DEBUG 'undolog: % partitions in % ms (DDL from epoch %)',
        CASE WHEN p_detach_only THEN 'detached' ELSE 'dropped' END,
        round(extract(epoch FROM pg_catalog.clock_timestamp() - v_started) * 1000, 1),
        extract(epoch FROM v_started);
END
$$;

REVOKE ALL ON FUNCTION undolog.drop_old_partitions(timestamptz, boolean, text) FROM public;
