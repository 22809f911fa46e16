-- undolog.ensure_partitions(p_months_ahead) (0004): the months from the current UTC month
-- through p_months_ahead later, for the effect log and its history; first drains the
-- default partitions (rows written while their month had no partition move into their
-- month, even a past one); idempotent; serialised by the partition-maintenance advisory
-- lock; a no-op takes no lock that could stall an intercept; operator only.
BEGIN;
SELECT plan(39);
SET LOCAL client_min_messages = warning;

\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset

CREATE FUNCTION pg_temp.month(k integer) RETURNS text LANGUAGE sql
AS $$ SELECT to_char(undolog.utc_month(now(), k), 'YYYY_MM') $$;
CREATE FUNCTION pg_temp.names(VARIADIC k integer[]) RETURNS SETOF text LANGUAGE sql
AS $$ SELECT p || '_' || pg_temp.month(m)
      FROM unnest(k) AS m, unnest(ARRAY['undolog_effect_log', 'undolog_effect_history']) AS p $$;
CREATE FUNCTION pg_temp.strong_locks() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT l.relation::regclass::text || ' ' || l.mode FROM pg_locks AS l
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
      AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')
      AND l.relation IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = 'undolog'::regnamespace)
$$;

SELECT has_function('undolog', 'ensure_partitions', ARRAY['integer'],
                    'undolog.ensure_partitions(integer) exists');
SELECT function_returns('undolog', 'ensure_partitions', ARRAY['integer'], 'setof text',
                        'it returns setof text');
SELECT is_definer('undolog', 'ensure_partitions', ARRAY['integer'], 'it is SECURITY DEFINER');
SELECT ok((SELECT 'search_path=undolog, pg_temp' = ANY (p.proconfig) FROM pg_proc AS p
           WHERE p.oid = 'undolog.ensure_partitions(integer)'::regprocedure),
          'its search_path is pinned to undolog, pg_temp');
SELECT ok(has_function_privilege('undolog_operator', 'undolog.ensure_partitions(integer)', 'EXECUTE'),
          'undolog_operator may call it');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r WHERE r.rolname IN ('undolog_agent', 'undolog_approver')
        AND has_function_privilege(r.oid, 'undolog.ensure_partitions(integer)', 'EXECUTE')
      UNION ALL
      SELECT 'public' FROM pg_proc AS p, aclexplode(p.proacl) AS a
      WHERE p.oid = 'undolog.ensure_partitions(integer)'::regprocedure AND a.grantee = 0$$,
    'undolog_agent, undolog_approver and PUBLIC may not');

-- Nothing to do (install made this month and the next): no partition, no strong lock.
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(1)$$,
                'months 0 and 1 exist: ensure_partitions(1) creates nothing');
SELECT is_empty($$SELECT * FROM pg_temp.strong_locks()$$,
                '... and holds no lock stronger than ROW EXCLUSIVE on any undolog table');
SELECT ok(EXISTS (
              SELECT FROM pg_locks AS l
              WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted
                AND l.relation = 'undolog.undolog_maintenance_lock'::regclass
                AND l.mode = 'RowShareLock')
          AND (SELECT m.xmax::text FROM undolog.undolog_maintenance_lock AS m)
              = (pg_current_xact_id()::text::bigint % 4294967296)::text,
          '... but it holds the partition-maintenance lock (its row locked) until the transaction ends');

-- The months are UTC's: from a zone where it is already tomorrow, or still yesterday.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT set_eq($$SELECT * FROM undolog.ensure_partitions(2)$$, $$SELECT pg_temp.names(2)$$,
              'UTC+14: ensure_partitions(2) creates UTC month +2 of both tables');
SET LOCAL TimeZone = 'America/Los_Angeles';
SELECT set_eq($$SELECT * FROM undolog.ensure_partitions(3)$$, $$SELECT pg_temp.names(3)$$,
              'Los Angeles: ensure_partitions(3) creates UTC month +3');
SELECT is(
    (SELECT b.lower_bound || ' / ' || b.upper_bound
     FROM undolog.partition_bounds('undolog.undolog_effect_log') AS b
     WHERE b.partition_oid = ('undolog.undolog_effect_log_' || pg_temp.month(3))::regclass),
    undolog.month_start(undolog.utc_month(now(), 3)) || ' / '
    || undolog.month_start(undolog.utc_month(now(), 4)),
    'month +3 is bounded by UTC month starts');
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(3)$$, 'idempotent: again, nothing');
SET LOCAL TimeZone = 'UTC';

-- Rows in the default partitions: a month long past, a month beyond the horizon.
CREATE TEMP TABLE fx AS
SELECT pg_temp.add_effect(pg_temp.add_session(), '2019-05-31 23:59:59.999999+00') AS effect_id
UNION ALL
SELECT pg_temp.add_effect(pg_temp.add_session(), '2019-05-01 00:00:00+00', 'irreversible')
UNION ALL
SELECT pg_temp.add_effect(pg_temp.add_session('active'), undolog.month_start(undolog.utc_month(now(), 10)));
CREATE TEMP TABLE effects_before AS SELECT * FROM undolog.undolog_effect_log;
CREATE TEMP TABLE history_before AS SELECT * FROM undolog.undolog_effect_history;
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log_default), 3::bigint,
          'setup: three effects in the default partition');
SELECT set_eq(
    $$SELECT * FROM undolog.ensure_partitions(3)$$,
    $$VALUES ('undolog_effect_log_2019_05'), ('undolog_effect_history_2019_05')
      UNION ALL SELECT pg_temp.names(10)$$,
    'ensure_partitions(3) creates May 2019 and month +10, the months of the default''s rows');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_log_default$$,
                'the effect log default is empty');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_history_default$$,
                'the history default is empty');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log_2019_05), 2::bigint,
          'both May 2019 effects are in May 2019');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log AS e
           WHERE e.tableoid = ('undolog.undolog_effect_log_' || pg_temp.month(10))::regclass),
          1::bigint, 'the effect of month +10 is in month +10');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_log$$, $$SELECT * FROM effects_before$$,
              'every effect is still there, unchanged');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_history$$, $$SELECT * FROM history_before$$,
              'every history row is still there, unchanged');
SELECT is_empty($$SELECT * FROM undolog.ensure_partitions(3)$$, 'drained: again, nothing');

-- This month's partitions gone (nobody created them): a call still succeeds, into the
-- default, and so do its fail and its retry (history rows, into the history's default);
-- ensure_partitions brings the month back with the call and its history in it; commit
-- works. The call's creation and commit are recorded in its own row (migration 0013).
SELECT lives_ok(format('DROP TABLE undolog.undolog_effect_log_%1$s, undolog.undolog_effect_history_%1$s',
                       pg_temp.month(0)),
                'setup: this month''s partitions dropped');
SELECT is(undolog.begin_session('e6000000-0000-4000-8000-000000000001'),
          'e6000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
CREATE TEMP TABLE call AS
SELECT * FROM undolog.intercept('e6000000-0000-4000-8000-000000000001', 0, 'create_user',
                                'compensable', '{"name": "ada"}', repeat('e6', 32),
                                '{"name": "delete_user"}');
SELECT is((SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
           WHERE effect_id = (SELECT effect_id FROM call)),
          'undolog.undolog_effect_log_default', 'the call was journaled, in the default partition');
SELECT lives_ok($$SELECT undolog.fail((SELECT effect_id FROM call), 'timeout')$$, 'it fails');
SELECT is((SELECT action FROM undolog.intercept('e6000000-0000-4000-8000-000000000001', 0,
               'create_user', 'compensable', '{"name": "ada"}', repeat('e6', 32),
               '{"name": "delete_user"}')),
          'execute', 'the same call again: it executes again');
SELECT set_eq($$SELECT * FROM undolog.ensure_partitions(0)$$, $$SELECT pg_temp.names(0)$$,
              'ensure_partitions(0) recreates this month');
SELECT is((SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
           WHERE effect_id = (SELECT effect_id FROM call)),
          'undolog.undolog_effect_log_' || pg_temp.month(0), '... with the call moved into it');
SELECT lives_ok($$SELECT undolog.commit((SELECT effect_id FROM call), '{"id": 7}')$$,
                'the moved call commits');
SELECT results_eq(
    $$SELECT tableoid::regclass::text, from_state, to_state FROM undolog.undolog_effect_history
      WHERE effect_id = (SELECT effect_id FROM call) ORDER BY history_id$$,
    $$SELECT 'undolog.undolog_effect_history_' || pg_temp.month(0), f, t
      FROM (VALUES (1, 'executing', 'pending'), (2, 'pending', 'executing'))
           AS v (n, f, t) ORDER BY n$$,
    'its history rows (the fail, the retry) are in this month''s history partition');
SELECT results_eq(
    $$SELECT from_state, to_state, history_id IS NULL AS in_row FROM undolog.effect_timeline
      WHERE effect_id = (SELECT effect_id FROM call) ORDER BY seq$$,
    $$VALUES (NULL, 'executing', true), ('executing', 'pending', false),
             ('pending', 'executing', false), ('executing', 'committed', true)$$,
    'its whole life in order: the creation (moved with its row), the fail, the retry, the commit');
SELECT is_empty($$SELECT * FROM undolog.verify_chain('e6000000-0000-4000-8000-000000000001')$$,
                'the session''s chain verifies: the moved rows are linked as they were written');

-- Bad arguments; roles.
SELECT throws_ok($$SELECT undolog.ensure_partitions(-1)$$, 'UL008', NULL, 'months ahead -1: UL008');
SELECT throws_ok($$SELECT undolog.ensure_partitions(121)$$, 'UL008', NULL, 'months ahead 121: UL008');
SELECT throws_ok($$SELECT undolog.ensure_partitions(NULL)$$, 'UL008', NULL, 'months ahead NULL: UL008');
SELECT array_agg(n)::text AS want4 FROM pg_temp.names(4) AS n \gset
SET LOCAL ROLE undolog_operator;
SELECT set_eq($$SELECT * FROM undolog.ensure_partitions(4)$$, :'want4'::text[],
              'undolog_operator: ensure_partitions(4) creates month +4');
RESET ROLE;
SELECT is((SELECT c.relowner FROM pg_class AS c
           WHERE c.oid = ('undolog.undolog_effect_log_' || pg_temp.month(4))::regclass),
          (SELECT p.proowner FROM pg_proc AS p
           WHERE p.oid = 'undolog.ensure_partitions(integer)'::regprocedure),
          '... owned by the engine''s owner, not by the operator');
SET LOCAL ROLE undolog_agent;
SELECT throws_ok($$SELECT undolog.ensure_partitions(5)$$, '42501', NULL,
                 'undolog_agent: permission denied (42501)');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
