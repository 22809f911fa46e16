-- undolog.drain_default_partitions(): every month with rows in a default partition (of
-- the effect log or of its history) gets its partitions, and the rows move there.
-- Normally the defaults are empty and it does nothing. Internal: no group role may call it.
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;

\ir _helpers.psql

SELECT has_function('undolog', 'drain_default_partitions', ARRAY[]::text[],
                    'undolog.drain_default_partitions() exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.drain_default_partitions()', 'EXECUTE')$$,
    'internal: no group role may call it');
SELECT is_empty($$SELECT * FROM undolog.drain_default_partitions()$$,
                'empty defaults: nothing to drain');

-- Rows of three months in the defaults, one of them history rows alone (its effect's
-- month exists, its history month was dropped by hand). Each fixture call has two history
-- rows (a fail and its retry) and its creation and commit recorded in its own row.
SELECT FROM (SELECT pg_temp.add_session() AS s) AS x,
     LATERAL (VALUES ('1995-01-31 23:59:59.999999+00'::timestamptz), ('1995-03-01 00:00:00+00'))
         AS v (at),
     LATERAL pg_temp.add_effect(x.s, v.at) AS e;
SELECT FROM undolog.create_month_partitions('1995-06-01');
DROP TABLE undolog.undolog_effect_history_1995_06;
SELECT FROM pg_temp.add_effect(pg_temp.add_session(), '1995-06-10 00:00+00');
CREATE TEMP TABLE history_before AS SELECT * FROM undolog.undolog_effect_history;
CREATE TEMP TABLE effects_before AS SELECT * FROM undolog.undolog_effect_log;
SELECT is((SELECT count(*) FROM effects_before
           WHERE chain_hash IS NOT NULL AND commit_hash IS NOT NULL AND committed_at IS NOT NULL),
          3::bigint, 'setup: each effect''s row records its creation and its commit, linked');

SELECT set_eq(
    $$SELECT * FROM undolog.drain_default_partitions()$$,
    $$VALUES ('undolog_effect_log_1995_01'), ('undolog_effect_history_1995_01'),
             ('undolog_effect_log_1995_03'), ('undolog_effect_history_1995_03'),
             ('undolog_effect_history_1995_06')$$,
    'January, March and June''s history are created; nothing else');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_log_default$$, 'the effect log default is empty');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_history_default$$, 'the history default is empty');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_history_1995_06), 2::bigint,
          'June''s history rows are in June''s new history partition');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_history$$, $$SELECT * FROM history_before$$,
              'every history row is there, unchanged');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_log$$, $$SELECT * FROM effects_before$$,
              'every effect is there, unchanged: its recorded creation and commit moved with it');
SELECT is_empty($$SELECT * FROM undolog.drain_default_partitions()$$, 'drained: nothing more');

SELECT * FROM finish();
ROLLBACK;
