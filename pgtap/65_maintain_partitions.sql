-- undolog.maintain_partitions(p_months_ahead, p_retention_months): the one scheduled
-- entry point. Drains the default partitions, drops the months past retention (the
-- argument, else the setting undolog.retention_months, else 12; UTC months, every row
-- younger than that many months kept), keeps (and reports) a month an unfinished session
-- still needs instead of failing, and creates the months ahead. Answers (action, partition).
BEGIN;
SELECT plan(28);
SET LOCAL client_min_messages = error;

\ir _helpers.psql

CREATE FUNCTION pg_temp.month(k integer) RETURNS text LANGUAGE sql
AS $$ SELECT to_char(undolog.utc_month(now(), k), 'YYYY_MM') $$;
-- (action, partition) rows for both tables of the months k.
CREATE FUNCTION pg_temp.both(p_action text, VARIADIC k integer[])
RETURNS TABLE (action text, partition text) LANGUAGE sql
AS $$ SELECT p_action, p || '_' || pg_temp.month(m)
      FROM unnest(k) AS m, unnest(ARRAY['undolog_effect_log', 'undolog_effect_history']) AS p $$;
CREATE FUNCTION pg_temp.strong_locks() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT l.relation::regclass::text || ' ' || l.mode FROM pg_locks AS l
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
      AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')
      AND l.relation IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = 'undolog'::regnamespace)
$$;
CREATE FUNCTION pg_temp.months() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT c.relname::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'undolog.undolog_effect_log'::regclass AND c.relname <> 'undolog_effect_log_default'
$$;

SELECT has_function('undolog', 'maintain_partitions', ARRAY['integer', 'integer'],
                    'undolog.maintain_partitions(integer, integer) exists');
SELECT is_definer('undolog', 'maintain_partitions', ARRAY['integer', 'integer'],
                  'it is SECURITY DEFINER');
SELECT ok((SELECT 'search_path=undolog, pg_temp' = ANY (p.proconfig) FROM pg_proc AS p
           WHERE p.oid = 'undolog.maintain_partitions(integer, integer)'::regprocedure),
          'its search_path is pinned to undolog, pg_temp');
SELECT ok(has_function_privilege('undolog_operator', 'undolog.maintain_partitions(integer, integer)', 'EXECUTE'),
          'undolog_operator may call it');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r WHERE r.rolname IN ('undolog_agent', 'undolog_approver')
        AND has_function_privilege(r.oid, 'undolog.maintain_partitions(integer, integer)', 'EXECUTE')
      UNION ALL
      SELECT 'public' FROM pg_proc AS p, aclexplode(p.proacl) AS a
      WHERE p.oid = 'undolog.maintain_partitions(integer, integer)'::regprocedure AND a.grantee = 0$$,
    'undolog_agent, undolog_approver and PUBLIC may not');

-- Nothing to do: no row, and no lock that could stall an intercept.
SELECT is_empty($$SELECT * FROM undolog.maintain_partitions(1)$$,
                'right after install, maintain_partitions(1) has nothing to do');
SELECT is_empty($$SELECT * FROM pg_temp.strong_locks()$$,
                '... and takes no lock stronger than ROW EXCLUSIVE on any undolog table');

-- Bad arguments and settings: UL008, nothing done.
SELECT throws_ok($$SELECT * FROM undolog.maintain_partitions(-1)$$, 'UL008', NULL, 'months ahead -1: UL008');
SELECT throws_ok($$SELECT * FROM undolog.maintain_partitions(3, 0)$$, 'UL008', NULL, 'retention 0: UL008');
SET LOCAL undolog.retention_months = 'a year';
SELECT throws_ok($$SELECT * FROM undolog.maintain_partitions(3)$$, 'UL008', NULL,
                 'setting undolog.retention_months = ''a year'': UL008');
SET LOCAL undolog.retention_months = '';
SELECT set_eq($$SELECT * FROM pg_temp.months()$$, $$SELECT 'undolog_effect_log_' || pg_temp.month(k)
                                                    FROM generate_series(0, 1) AS k$$,
              'refused runs created nothing');

-- Months -20 (its rows in the default partition), -14 (an active session), -13, -12 and
-- -2 (completed sessions). The current UTC month is month 0.
SELECT FROM unnest(ARRAY[-14, -13, -12, -2]) AS k,
            LATERAL undolog.create_month_partitions(undolog.utc_month(now(), k)) AS c;
CREATE TEMP TABLE fx (k integer PRIMARY KEY, session_id uuid);
INSERT INTO fx SELECT k, pg_temp.add_session(CASE k WHEN -14 THEN 'active' ELSE 'completed' END)
FROM unnest(ARRAY[-20, -14, -13, -12, -2]) AS k;
SELECT FROM fx, LATERAL pg_temp.add_effect(fx.session_id, undolog.month_start(undolog.utc_month(now(), fx.k))) AS e1,
            LATERAL pg_temp.add_effect(fx.session_id,
                undolog.month_start(undolog.utc_month(now(), fx.k + 1)) - interval '1 microsecond',
                'irreversible') AS e2;
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log_default), 2::bigint,
          'setup: month -20''s two effects are in the default partition');

-- Retention 12, run from UTC+14: month -13 ends before the cut-off (start of month -12).
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT set_eq(
    $$SELECT * FROM undolog.maintain_partitions(3, 12)$$,
    $$SELECT * FROM pg_temp.both('created', -20, 2, 3)
      UNION ALL SELECT * FROM pg_temp.both('dropped', -20, -13)
      UNION ALL VALUES ('skipped', 'undolog_effect_log_' || pg_temp.month(-14))$$,
    'UTC+14, retention 12: drains month -20, drops it and -13, skips -14, creates +2 and +3');
SET LOCAL TimeZone = 'UTC';
SELECT set_eq($$SELECT * FROM pg_temp.months()$$,
              $$SELECT 'undolog_effect_log_' || pg_temp.month(k) FROM unnest(ARRAY[-14, -12, -2, 0, 1, 2, 3]) AS k$$,
              'the effect log has months -14, -12, -2 and 0 to 3');
SELECT has_table('undolog', 'undolog_effect_history_' || pg_temp.month(-14),
                 'month -14''s history is kept with its effects');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_log_default$$, 'the default partition is empty');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack AS u
           WHERE u.session_id IN (SELECT session_id FROM fx WHERE k IN (-20, -13))),
          0::bigint, 'the undo entries (the calls'' exactly-once keys) of the dropped months are gone');
SELECT is((SELECT count(*) FROM undolog.undolog_approval_requests AS a
           WHERE a.session_id IN (SELECT session_id FROM fx WHERE k IN (-20, -13))),
          0::bigint, 'and their approval requests');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack AS u
           WHERE u.session_id IN (SELECT session_id FROM fx WHERE k IN (-14, -12, -2))),
          6::bigint, 'the kept months keep every undo entry, each with its signature');

SELECT results_eq($$SELECT * FROM undolog.maintain_partitions(3, 12)$$,
                  $$SELECT * FROM (VALUES ('skipped', 'undolog_effect_log_' || pg_temp.month(-14))) AS v (a, p)$$,
                  'again: only the skipped month is reported');

-- The setting, from Los Angeles; the argument wins over it.
SET LOCAL TimeZone = 'America/Los_Angeles';
SET LOCAL undolog.retention_months = '2';
SELECT set_eq(
    $$SELECT * FROM undolog.maintain_partitions(3)$$,
    $$SELECT * FROM pg_temp.both('dropped', -12)
      UNION ALL VALUES ('skipped', 'undolog_effect_log_' || pg_temp.month(-14))$$,
    'Los Angeles, setting 2: month -12 is dropped, -2 (ending at the cut-off''s month) kept');
SET LOCAL undolog.retention_months = '1';
SELECT is_empty($$SELECT * FROM undolog.maintain_partitions(3, 24)$$,
                'setting 1, argument 24: the argument wins, nothing is past retention');
SELECT has_table('undolog', 'undolog_effect_log_' || pg_temp.month(-2), 'month -2 is there');

-- Once the session finishes, its month goes at the next run; as the operator.
UPDATE undolog.undolog_sessions SET state = 'completed'
WHERE session_id = (SELECT session_id FROM fx WHERE k = -14);
SELECT array_agg(a || ' ' || p ORDER BY a, p)::text AS want
FROM pg_temp.both('dropped', -14, -2) AS b (a, p) \gset
SET LOCAL ROLE undolog_operator;
SELECT is((SELECT array_agg(action || ' ' || partition ORDER BY action, partition)::text
           FROM undolog.maintain_partitions(3)),
          :'want', 'undolog_operator, setting 1: months -14 (now finished) and -2 are dropped');
RESET ROLE;
SET LOCAL ROLE undolog_agent;
SELECT throws_ok($$SELECT * FROM undolog.maintain_partitions(3)$$, '42501', NULL,
                 'undolog_agent: permission denied (42501)');
RESET ROLE;
SELECT set_eq($$SELECT * FROM pg_temp.months()$$,
              $$SELECT 'undolog_effect_log_' || pg_temp.month(k) FROM generate_series(0, 3) AS k$$,
              'left: the current month and the three ahead');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack), 0::bigint,
          'and no undo entry of any dropped month');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'the undo history, deleted from through the bypass, is still append-only');

SELECT * FROM finish();
ROLLBACK;
