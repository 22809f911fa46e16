-- undolog.create_month_partitions: the month partitions of the effect log and of its
-- history for the UTC month holding p_month. Answers the names it created (none when
-- both exist). Callers hold the partition-maintenance advisory lock.
CREATE OR REPLACE FUNCTION undolog.create_month_partitions(p_month date)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_from timestamptz := date_trunc('month', p_month)::timestamp AT TIME ZONE 'UTC';
    v_to timestamptz := (date_trunc('month', p_month) + interval '1 month')::timestamp
                        AT TIME ZONE 'UTC';
    v_parent text;
    v_name text;
BEGIN
    FOREACH v_parent IN ARRAY ARRAY['undolog_effect_log', 'undolog_effect_history'] LOOP
        v_name := v_parent || '_' || to_char(p_month, 'YYYY_MM');
        CONTINUE WHEN to_regclass('undolog.' || v_name) IS NOT NULL;
        EXECUTE format(
            'CREATE TABLE undolog.%I PARTITION OF undolog.%I FOR VALUES FROM (%L) TO (%L)',
            v_name, v_parent, v_from, v_to
        );
        EXECUTE format('REVOKE ALL ON undolog.%I FROM public', v_name);
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE TRUNCATE ON undolog.%I '
            'FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change()',
            v_parent || '_no_truncate', v_name
        );
        RETURN NEXT v_name;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.create_month_partitions(date) FROM public;
