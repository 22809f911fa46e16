-- undolog.partition_bounds(p_parent) and undolog.default_partition(p_parent): the range
-- partitions of a parent with their bounds read from the catalog (default excluded),
-- oldest first, the same instants whatever the session's DateStyle and TimeZone.
BEGIN;
SELECT plan(9);

SELECT has_function('undolog', 'partition_bounds', ARRAY['regclass'],
                    'undolog.partition_bounds(regclass) exists');
SELECT has_function('undolog', 'default_partition', ARRAY['regclass'],
                    'undolog.default_partition(regclass) exists');
SELECT is(undolog.default_partition('undolog.undolog_effect_log'),
          'undolog.undolog_effect_log_default'::regclass, 'the effect log''s default partition');
SELECT is(undolog.default_partition('undolog.undolog_effect_history'),
          'undolog.undolog_effect_history_default'::regclass, 'the history''s default partition');
SELECT is(undolog.default_partition('undolog.undolog_sessions'), NULL::regclass,
          'a table that is not partitioned has none');

CREATE TABLE undolog.undolog_effect_log_1998_03
PARTITION OF undolog.undolog_effect_log FOR VALUES FROM ('1998-03-01 00:00+00') TO ('1998-04-01 00:00+00');

CREATE FUNCTION pg_temp.expected() RETURNS TABLE (p regclass, lo timestamptz, hi timestamptz)
LANGUAGE sql AS $$
    VALUES ('undolog.undolog_effect_log_1998_03'::regclass,
            '1998-03-01 00:00+00'::timestamptz, '1998-04-01 00:00+00'::timestamptz)
    UNION ALL
    SELECT format('undolog.undolog_effect_log_%s', to_char(undolog.utc_month(now(), k), 'YYYY_MM'))::regclass,
           undolog.month_start(undolog.utc_month(now(), k)),
           undolog.month_start(undolog.utc_month(now(), k + 1))
    FROM generate_series(0, 1) AS k
$$;

SELECT results_eq(
    $$SELECT * FROM undolog.partition_bounds('undolog.undolog_effect_log')$$,
    $$SELECT * FROM pg_temp.expected() ORDER BY lo$$,
    'the month partitions with their UTC bounds, oldest first, default excluded');
SET LOCAL DateStyle = 'SQL, DMY';
SET LOCAL TimeZone = 'Asia/Kolkata';
SELECT results_eq(
    $$SELECT * FROM undolog.partition_bounds('undolog.undolog_effect_log')$$,
    $$SELECT * FROM pg_temp.expected() ORDER BY lo$$,
    'the same instants under DateStyle SQL, DMY and TimeZone Asia/Kolkata');
SET LOCAL DateStyle = 'German';
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT results_eq(
    $$SELECT * FROM undolog.partition_bounds('undolog.undolog_effect_log')$$,
    $$SELECT * FROM pg_temp.expected() ORDER BY lo$$,
    'the same instants under DateStyle German and TimeZone Pacific/Kiritimati');
SELECT is(current_setting('DateStyle'), 'German, DMY', 'the caller''s DateStyle is left as it was');

SELECT * FROM finish();
ROLLBACK;
