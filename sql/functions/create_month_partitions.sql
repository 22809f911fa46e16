-- undolog.create_month_partitions: the month partitions of the effect log and of its
-- history for the UTC month holding p_month. Answers the names it created
-- (none when the month exists). Callers hold the partition-maintenance lock.
-- Why not a plain CREATE TABLE ... PARTITION OF: it
--   * fails when the default partition already holds rows of that month (a write made
--     while the month had no partition): here those rows are moved into the new month;
--   * takes ACCESS EXCLUSIVE on the parent, stalling every intercept until the caller
--     commits: here the month is built as a plain table and attached, which takes only
--     SHARE UPDATE EXCLUSIVE on the parent (intercepts go on) and ACCESS EXCLUSIVE on the
--     default partition, which only receives writes for months without a partition.
-- The new table has no trigger until ATTACH clones the parent's row triggers onto it, so
-- moving rows into it neither re-runs the effect guard nor writes history twice; leaving
-- the default, they pass its append-only DELETE guard by undolog.set_append_only_bypass.
-- ATTACH also builds the primary key after the rows are in. The month's bounds are
-- computed on the UTC wall clock, and printed into the DDL in ISO form in UTC (pinned
-- below), so that neither the session's TimeZone nor its DateStyle can shift them.
-- A future month is created ahead as a plain table, marked to be attached (its comment,
-- undolog.pending_partitions), and attached with short lock waits: attaching takes
-- ACCESS EXCLUSIVE on the default partition, which any open read of the parent holds
-- ACCESS SHARE on (an agent's `SELECT count(*) FROM undolog_effect_log` left open), and a
-- strong lock that queues makes every agent's call queue behind it. So it waits at most
-- 50 ms per try, three tries with a pause between in which agents go on, and then leaves
-- the month to the next run: the table stays, still marked, and is answered by
-- pending_partitions (maintain_partitions' 'pending' rows, `undolog health`). A future
-- month receives no rows yet, so nothing is lost by attaching it a day later. The current
-- or a past month (catching up, rows to move out of the default) takes the same short
-- tries: its rows stay in the default partition, where writes keep landing, until a run
-- gets the locks (a WARNING says so); waiting instead queued every agent's call behind
-- a long reader of the journal, for as long as the reader stayed.
CREATE OR REPLACE FUNCTION undolog.create_month_partitions(p_month date)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
SET datestyle = 'ISO, YMD'
SET timezone = 'UTC'
AS $$
DECLARE
    v_month date := pg_catalog.date_trunc('month', p_month::timestamp)::date;
    v_from timestamptz := undolog.month_start(v_month);
    v_to timestamptz := undolog.month_start((v_month + interval '1 month')::date);
    v_parent regclass;
    v_default regclass;
    v_name text;
    v_columns text;
    v_moved bigint;
    v_ahead boolean := v_from > now();
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    v_attached boolean;
BEGIN
    IF p_month IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'p_month is required',
            HINT = 'Pass the month to create, e.g. date_trunc(''month'', now()).';
    END IF;
    FOREACH v_parent IN ARRAY ARRAY['undolog.undolog_effect_log'::regclass,
                                    'undolog.undolog_effect_history'::regclass] LOOP
        -- The month is there already (under whatever name): nothing to do.
        CONTINUE WHEN EXISTS (
            SELECT FROM undolog.partition_bounds(v_parent) AS b
            WHERE b.lower_bound < v_to AND b.upper_bound > v_from
        );
        v_name := pg_catalog.format('%s_%s',
                                    (SELECT c.relname FROM pg_catalog.pg_class AS c
                                     WHERE c.oid = v_parent),
                                    pg_catalog.to_char(v_month, 'YYYY_MM'));
        IF pg_catalog.to_regclass(pg_catalog.format('undolog.%I', v_name)) IS NULL THEN
            EXECUTE pg_catalog.format(
                'CREATE TABLE undolog.%I (LIKE %s INCLUDING ALL EXCLUDING INDEXES)',
                v_name, v_parent);
            EXECUTE pg_catalog.format('REVOKE ALL ON undolog.%I FROM public', v_name);
            EXECUTE pg_catalog.format('COMMENT ON TABLE undolog.%I IS %L',
                                      v_name, undolog.pending_partition_mark());
        ELSIF NOT EXISTS (SELECT FROM undolog.pending_partitions() AS pp (name)
                          WHERE pp.name = v_name) THEN
            -- A detached month kept as an archive (drop_partitions(..., p_detach_only))
            -- has the name. Rows of that month, if any, stay in the default partition.
            RAISE WARNING USING
                MESSAGE = pg_catalog.format(
                    'undolog.%I exists but is not a partition of %s: month %s not created',
                    v_name, v_parent, pg_catalog.to_char(v_month, 'YYYY-MM')),
                HINT = 'Drop or rename the archived table, then run ensure_partitions again.';
            CONTINUE;
        END IF;

        v_attached := false;
        PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
        FOR v_try IN 1..3 LOOP
            BEGIN
                v_default := undolog.default_partition(v_parent);
                IF v_default IS NOT NULL AND v_from <= now() THEN
                    -- The current month, or a past one (a missed month being drained): writers
                    -- may be routing rows of it into the default right now, each holding the
                    -- parent (ROW EXCLUSIVE) while it waits for the default. Locking the default
                    -- first and a parent later (this DDL, or the DROP of maintain_partitions'
                    -- retention in the same transaction) deadlocked them (40P01 on intercepts
                    -- and commits, found by bench/faults.py's month trials). So both parents first, in the order every writer
                    -- takes them (effect log, then its history), for the rest of the transaction:
                    -- writers wait for the drain instead of failing. A future month receives no
                    -- rows and keeps the weaker locks below.
                    LOCK TABLE undolog.undolog_effect_log, undolog.undolog_effect_history
                    IN ACCESS EXCLUSIVE MODE;
                END IF;
                IF v_default IS NOT NULL THEN
                    -- Lock first, as ATTACH will: no write can slip into the default for this
                    -- month between the move and the attach.
                    EXECUTE pg_catalog.format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE',
                                              v_parent);
                    EXECUTE pg_catalog.format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE',
                                              v_default);
                    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', '
                                                 ORDER BY a.attnum)
                    INTO v_columns
                    FROM pg_catalog.pg_attribute AS a
                    WHERE a.attrelid = v_parent AND a.attnum > 0 AND NOT a.attisdropped;
                    PERFORM undolog.set_append_only_bypass(v_default);
                    EXECUTE pg_catalog.format(
                        'WITH moved AS (DELETE FROM %1$s '
                        'WHERE executed_at >= $1 AND executed_at < $2 RETURNING %2$s) INSERT INTO undolog.%3$I (%2$s) SELECT %2$s FROM moved',
                        v_default, v_columns, v_name)
                    USING v_from, v_to;
                    GET DIAGNOSTICS v_moved = ROW_COUNT;
                    PERFORM undolog.set_append_only_bypass(NULL);
                    IF v_moved > 0 THEN
                        RAISE NOTICE USING MESSAGE = pg_catalog.format(
                            'moved %s rows of %s from %s into undolog.%I',
                            v_moved, pg_catalog.to_char(v_month, 'YYYY-MM'), v_default, v_name);
                    END IF;
                END IF;

                EXECUTE pg_catalog.format(
                    'ALTER TABLE %s ATTACH PARTITION undolog.%I FOR VALUES FROM (%L) TO (%L)',
                    v_parent, v_name, v_from, v_to);
                -- TRUNCATE of a partition skips the parent's statement triggers.
                EXECUTE pg_catalog.format(
                    'CREATE TRIGGER %I BEFORE TRUNCATE ON undolog.%I '
                    'FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change()',
                    (SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.oid = v_parent)
                    || '_no_truncate',
                    v_name);
                EXECUTE pg_catalog.format('COMMENT ON TABLE undolog.%I IS NULL', v_name);
                v_attached := true;
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                -- The short wait ran out (the block rolled back, moved rows included):
                -- pause, agents go on.
                IF v_try < 3 THEN
                    PERFORM pg_catalog.pg_sleep(0.05 * v_try);
                END IF;
            END;
        END LOOP;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        IF NOT v_attached AND v_ahead THEN
            RAISE NOTICE USING MESSAGE = pg_catalog.format(
                'undolog.%I is created but not yet attached (its locks were busy): the next '
                'maintenance run attaches it', v_name);
            CONTINUE;
        ELSIF NOT v_attached THEN
            RAISE WARNING USING
                MESSAGE = pg_catalog.format(
                    'undolog.%I is created but not yet attached, its month''s rows are still '
                    'in %s (their locks stayed busy: a transaction reading the journal is open)',
                    v_name, v_default),
                HINT = 'Nothing is lost and writes go on into the default partition: the next '
                       'maintenance run moves them. A transaction left open on the journal '
                       '(pg_stat_activity: idle in transaction) holds the month off.';
            CONTINUE;
        END IF;
        RETURN NEXT v_name;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.create_month_partitions(date) FROM public;
