-- undolog.drop_old_partitions(p_older_than, p_detach_only, p_in_use): the work shared by
-- drop_partitions ('refuse' or 'force') and maintain_partitions ('skip'). Here: 'skip'
-- keeps a month an unfinished session holds, with its history, and reports it; the other
-- months go, effect log before history; a bad mode is refused. Internal.
BEGIN;
SELECT plan(8);
SET LOCAL client_min_messages = error;

\ir _helpers.psql

SELECT has_function('undolog', 'drop_old_partitions',
                    ARRAY['timestamp with time zone', 'boolean', 'text'],
                    'undolog.drop_old_partitions(timestamptz, boolean, text) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.drop_old_partitions(timestamptz, boolean, text)', 'EXECUTE')$$,
    'internal: no group role may call it');
SELECT throws_ok($$SELECT * FROM undolog.drop_old_partitions('2000-01-01', false, 'maybe')$$,
                 'UL008', NULL, 'mode ''maybe'': UL008');

SELECT FROM generate_series(1, 3) AS m,
            LATERAL undolog.create_month_partitions(make_date(1994, m, 1)) AS c;
SELECT FROM pg_temp.add_effect(pg_temp.add_session('completed'), '1994-01-05+00');
SELECT FROM pg_temp.add_effect(pg_temp.add_session('halted'), '1994-02-05+00');
SELECT FROM pg_temp.add_effect(pg_temp.add_session('compensated'), '1994-03-05+00');

SELECT results_eq(
    $$SELECT * FROM undolog.drop_old_partitions('1994-04-01+00', false, 'skip')$$,
    $$VALUES ('skipped', 'undolog_effect_log_1994_02'),
             ('dropped', 'undolog_effect_log_1994_01'), ('dropped', 'undolog_effect_log_1994_03'),
             ('dropped', 'undolog_effect_history_1994_01'), ('dropped', 'undolog_effect_history_1994_03')$$,
    'skip: February (a halted session) is reported and kept; January and March go');
SELECT has_table('undolog', 'undolog_effect_log_1994_02', 'February''s effect log is kept');
SELECT has_table('undolog', 'undolog_effect_history_1994_02', '... and its history with it');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack
           WHERE executed_at >= '1994-01-01+00' AND executed_at < '1994-04-01+00'),
          1::bigint, 'only February''s undo entry (its call''s signature) is left');
SELECT results_eq(
    $$SELECT * FROM undolog.drop_old_partitions('1994-04-01+00', true, 'force')$$,
    $$VALUES ('detached', 'undolog_effect_log_1994_02'), ('detached', 'undolog_effect_history_1994_02')$$,
    'force, detach-only: February is detached');

SELECT * FROM finish();
ROLLBACK;
