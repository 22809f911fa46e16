-- undolog.ensure_partitions(p_months_ahead): month partitions of the effect log and its
-- history from the current UTC month through p_months_ahead months later; answers the
-- names it created; idempotent; UL008 for a bad argument.
BEGIN;
SELECT plan(35);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('t', 'compensable', '{"name": "u"}') AS tool_id \gset

SELECT has_function('undolog', 'ensure_partitions', ARRAY['integer'],
                    'undolog.ensure_partitions(integer) exists');
SELECT function_returns('undolog', 'ensure_partitions', ARRAY['integer'], 'setof text',
                        'it returns setof text');
SELECT is_definer('undolog', 'ensure_partitions', ARRAY['integer'], 'it is SECURITY DEFINER');

-- Month k from now (UTC), as a partition suffix and as its bounds.
CREATE FUNCTION pg_temp.month(k integer) RETURNS text LANGUAGE sql
AS $$ SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => k), 'YYYY_MM') $$;
CREATE FUNCTION pg_temp.month_start(k integer) RETURNS timestamptz LANGUAGE sql
AS $$ SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => k)) AT TIME ZONE 'UTC' $$;

-- After install: the current and the next month exist, for both tables.
SELECT is_partition_of('undolog', 'undolog_effect_log_' || pg_temp.month(0), 'undolog', 'undolog_effect_log',
                       'after install, this month''s effect log partition exists');
SELECT is_partition_of('undolog', 'undolog_effect_log_' || pg_temp.month(1), 'undolog', 'undolog_effect_log',
                       'after install, next month''s effect log partition exists');
SELECT is_partition_of('undolog', 'undolog_effect_history_' || pg_temp.month(0), 'undolog', 'undolog_effect_history',
                       'after install, this month''s effect history partition exists');
SELECT is_partition_of('undolog', 'undolog_effect_history_' || pg_temp.month(1), 'undolog', 'undolog_effect_history',
                       'after install, next month''s effect history partition exists');
SELECT is_partition_of('undolog', 'undolog_effect_log_default', 'undolog', 'undolog_effect_log',
                       'the effect log has a default partition');

-- Idempotent: nothing to create for what exists.
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(1)$$,
                'ensure_partitions(1) again creates nothing');
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(0)$$,
                'ensure_partitions(0) creates nothing');

-- Default of 3 months ahead: creates months +2 and +3 of both tables, answers their names.
SELECT set_eq(
    $$SELECT * FROM undolog.ensure_partitions()$$,
    $$SELECT p || '_' || pg_temp.month(k)
      FROM unnest(ARRAY['undolog_effect_log', 'undolog_effect_history']) AS p,
           generate_series(2, 3) AS k$$,
    'ensure_partitions() creates months +2 and +3 of both tables and answers their names');
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(3)$$,
                'ensure_partitions(3) right after creates nothing');
SELECT is(
    (SELECT count(*) FROM pg_inherits WHERE inhparent = 'undolog.undolog_effect_log'::regclass),
    5::bigint, 'the effect log has 4 month partitions and the default, no duplicates');
SELECT is(
    (SELECT count(*) FROM pg_inherits WHERE inhparent = 'undolog.undolog_effect_history'::regclass),
    5::bigint, 'the effect history has 4 month partitions and the default');

-- Each month covers exactly [first of the month, first of the next) in UTC, whatever the
-- session's time zone.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT set_eq(
    $$SELECT * FROM undolog.ensure_partitions(5)$$,
    $$SELECT p || '_' || pg_temp.month(k)
      FROM unnest(ARRAY['undolog_effect_log', 'undolog_effect_history']) AS p,
           generate_series(4, 5) AS k$$,
    'ensure_partitions(5) under UTC+14 creates months +4 and +5');
SET LOCAL TimeZone = 'UTC';
SELECT set_eq(
    $$SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
      FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
      WHERE i.inhparent IN ('undolog.undolog_effect_log'::regclass,
                            'undolog.undolog_effect_history'::regclass)
        AND NOT c.relname LIKE '%default'$$,
    $$SELECT p || '_' || pg_temp.month(k),
             format('FOR VALUES FROM (%L) TO (%L)', pg_temp.month_start(k), pg_temp.month_start(k + 1))
      FROM unnest(ARRAY['undolog_effect_log', 'undolog_effect_history']) AS p,
           generate_series(0, 5) AS k$$,
    'months 0 to 5 exist for both tables, each bounded by UTC month starts'
);

-- A write lands in its month, not in the default partition.
SELECT is(undolog.begin_session('e0000000-0000-4000-8000-000000000001'),
          'e0000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
SELECT is((SELECT action FROM undolog.intercept('e0000000-0000-4000-8000-000000000001', 0, 't',
              'compensable', '{}', pg_temp.sig('part-1'), '{"name": "u"}')),
          'execute', 'setup: a call');
-- Its creation is recorded in its own row (migration 0013); its fail is a history row.
SELECT lives_ok($$SELECT undolog.fail((SELECT effect_id FROM undolog.undolog_undo_stack
                                       WHERE call_signature = pg_temp.sig('part-1')), 'boom')$$,
                'setup: it fails');
SELECT results_eq(
    $$SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
      UNION ALL
      SELECT DISTINCT tableoid::regclass::text FROM undolog.undolog_effect_history$$,
    $$VALUES ('undolog.undolog_effect_log_' || pg_temp.month(0)),
             ('undolog.undolog_effect_history_' || pg_temp.month(0))$$,
    'the effect and its history are in this month''s partitions');

-- Bad arguments: UL008, no partition created.
SELECT pg_temp.refused($$SELECT undolog.ensure_partitions(-1)$$, 'UL008', 'months ahead -1: UL008');
SELECT pg_temp.refused($$SELECT undolog.ensure_partitions(121)$$, 'UL008', 'months ahead 121: UL008');
SELECT pg_temp.refused($$SELECT undolog.ensure_partitions(NULL)$$, 'UL008', 'months ahead NULL: UL008');
SELECT is(
    (SELECT count(*) FROM pg_inherits WHERE inhparent = 'undolog.undolog_effect_log'::regclass),
    7::bigint, 'refused calls created no partition');

-- A write whose month has no partition is never lost: it lands in the default partition,
-- and the next maintenance moves it into the month it creates (docs/design/durability.md:
-- a write with no partition of its month is never lost).
SELECT lives_ok(format('DROP TABLE undolog.undolog_effect_log_%1$s, undolog.undolog_effect_history_%1$s',
                       pg_temp.month(0)),
                'setup: drop this month''s partitions (a month nobody created)');
SELECT is((SELECT action FROM undolog.intercept('e0000000-0000-4000-8000-000000000001', 1, 't',
              'compensable', '{}', pg_temp.sig('part-2'), '{"name": "u"}')),
          'execute', 'a call with no month partition is accepted');
SELECT is((SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
           WHERE call_signature = pg_temp.sig('part-2')),
          'undolog.undolog_effect_log_default', '... and lands in the default partition');
SELECT lives_ok($$SELECT undolog.fail((SELECT effect_id FROM undolog.undolog_undo_stack
                                       WHERE call_signature = pg_temp.sig('part-2')), 'boom')$$,
                'setup: it fails, a history row in the history''s default partition');
SELECT lives_ok($$SELECT undolog.ensure_partitions(1)$$,
                'ensure_partitions recreates the month although the default holds its rows');
SELECT is((SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
           WHERE call_signature = pg_temp.sig('part-2')),
          'undolog.undolog_effect_log_' || pg_temp.month(0),
          '... and the row moved from the default into its month');
SELECT results_eq(
    $$SELECT h.tableoid::regclass::text, h.from_state, h.to_state
      FROM undolog.undolog_effect_history AS h
      JOIN undolog.undolog_undo_stack AS u USING (session_id, effect_id, executed_at)
      WHERE u.call_signature = pg_temp.sig('part-2')$$,
    $$VALUES ('undolog.undolog_effect_history_' || pg_temp.month(0), 'executing', 'pending')$$,
    '... its history row with it');
-- The creation recorded in the row moved with it, still linked (seq 4, after the
-- session's start, part-1's creation and its fail) and hashing as written: the session's
-- chain reports only the gap the dropped month left before it (seq 2 and 3 are gone).
SELECT results_eq(
    $$SELECT v.seq, v.table_name, v.row_key, v.problem
      FROM undolog.verify_chain('e0000000-0000-4000-8000-000000000001') AS v
      ORDER BY v.problem$$,
    $$SELECT 4::bigint, 'undolog_effect_log', 'effect_id=' || u.effect_id || ' created', p.problem
      FROM undolog.undolog_undo_stack AS u, (VALUES ('link'), ('missing')) AS p (problem)
      WHERE u.call_signature = pg_temp.sig('part-2') ORDER BY p.problem$$,
    '... its creation with it, still linked: the chain reports only the dropped month''s gap');

SELECT * FROM finish();
ROLLBACK;
