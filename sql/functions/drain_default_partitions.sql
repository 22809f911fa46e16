-- undolog.drain_default_partitions: give every month that has rows in a default partition
-- (effect log or history) its month partitions, moving the rows there (see
-- create_month_partitions). The default partition only ever receives writes for months
-- without a partition, e.g. when maintenance fell behind a month boundary; draining it
-- keeps every row in a month that retention can later drop as a whole, and the default
-- empty, so that attaching a month never has much to scan. Answers the names created.
-- Normally there is nothing to drain and this takes no lock stronger than a read.
-- Callers hold the partition-maintenance lock.
CREATE OR REPLACE FUNCTION undolog.drain_default_partitions()
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_parent regclass;
    v_default regclass;
    v_months date[] := '{}'::date[];
    v_found date[];
    v_month date;
BEGIN
    FOREACH v_parent IN ARRAY ARRAY['undolog.undolog_effect_log'::regclass,
                                    'undolog.undolog_effect_history'::regclass] LOOP
        v_default := undolog.default_partition(v_parent);
        CONTINUE WHEN v_default IS NULL;
        EXECUTE pg_catalog.format(
            'SELECT pg_catalog.array_agg(DISTINCT undolog.utc_month(d.executed_at)) FROM %s AS d',
            v_default)
        INTO v_found;
        v_months := v_months || coalesce(v_found, '{}'::date[]);
    END LOOP;
    FOR v_month IN SELECT DISTINCT m.month FROM pg_catalog.unnest(v_months) AS m (month)
                   ORDER BY m.month LOOP
        RETURN QUERY SELECT undolog.create_month_partitions(v_month);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.drain_default_partitions() FROM public;
