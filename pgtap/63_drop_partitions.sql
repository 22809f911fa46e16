-- undolog.drop_partitions(p_older_than, p_detach_only, p_force): drops (or detaches) every
-- month of the effect log and its history that ends at or before the cut-off (UTC months,
-- whatever the session's TimeZone), one DDL each, with the undo entries (each call's
-- exactly-once key), their history and the approval rows of those effects, through the
-- append-only guards that still refuse everybody else. A month holding effects of an unfinished session is refused (UL016, the sessions
-- in DETAIL, nothing dropped) unless forced. Never the current month (UL008).
BEGIN;
SELECT plan(58);
SET LOCAL client_min_messages = warning;

\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset

CREATE FUNCTION pg_temp.strong_locks() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT l.relation::regclass::text || ' ' || l.mode FROM pg_locks AS l
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
      AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')
      AND l.relation IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = 'undolog'::regnamespace)
$$;
-- The rows tied to the effects of a UTC month (YYYY_MM), in each table.
CREATE FUNCTION pg_temp.rows_of(p_month text) RETURNS text LANGUAGE sql AS $$
    SELECT format('effects=%s history=%s undo=%s approvals=%s',
        (SELECT count(*) FROM undolog.undolog_effect_log AS t
         WHERE to_char(t.executed_at AT TIME ZONE 'UTC', 'YYYY_MM') = p_month),
        (SELECT count(*) FROM undolog.undolog_effect_history AS t
         WHERE to_char(t.executed_at AT TIME ZONE 'UTC', 'YYYY_MM') = p_month),
        (SELECT count(*) FROM undolog.undolog_undo_stack AS t
         WHERE to_char(t.executed_at AT TIME ZONE 'UTC', 'YYYY_MM') = p_month),
        (SELECT count(*) FROM undolog.undolog_approval_requests AS t
         WHERE to_char(t.executed_at AT TIME ZONE 'UTC', 'YYYY_MM') = p_month))
$$;
-- SQLSTATE, message and detail of the error p_sql raises.
CREATE FUNCTION pg_temp.error_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
BEGIN
    EXECUTE p_sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
                            v_detail = PG_EXCEPTION_DETAIL;
    RETURN v_state || E'\n' || v_message || E'\n' || v_detail;
END $$;

SELECT has_function('undolog', 'drop_partitions',
                    ARRAY['timestamp with time zone', 'boolean', 'boolean'],
                    'undolog.drop_partitions(timestamptz, boolean, boolean) exists');
SELECT function_returns('undolog', 'drop_partitions',
                        ARRAY['timestamp with time zone', 'boolean', 'boolean'], 'setof text',
                        'it returns setof text');
SELECT is_definer('undolog', 'drop_partitions',
                  ARRAY['timestamp with time zone', 'boolean', 'boolean'], 'it is SECURITY DEFINER');
SELECT ok((SELECT 'search_path=undolog, pg_temp' = ANY (p.proconfig) FROM pg_proc AS p
           WHERE p.oid = 'undolog.drop_partitions(timestamptz, boolean, boolean)'::regprocedure),
          'its search_path is pinned to undolog, pg_temp');
SELECT ok(has_function_privilege('undolog_operator',
                                 'undolog.drop_partitions(timestamptz, boolean, boolean)', 'EXECUTE'),
          'undolog_operator may call it');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r WHERE r.rolname IN ('undolog_agent', 'undolog_approver')
        AND has_function_privilege(r.oid, 'undolog.drop_partitions(timestamptz, boolean, boolean)', 'EXECUTE')
      UNION ALL
      SELECT 'public' FROM pg_proc AS p, aclexplode(p.proacl) AS a
      WHERE p.oid = 'undolog.drop_partitions(timestamptz, boolean, boolean)'::regprocedure
        AND a.grantee = 0$$,
    'undolog_agent, undolog_approver and PUBLIC may not');

-- Nothing that old: nothing dropped, and no lock that could stall an intercept.
SELECT is_empty($$SELECT * FROM undolog.drop_partitions('2000-01-01 00:00+00')$$,
                'nothing older than 2000: nothing dropped');
SELECT is_empty($$SELECT * FROM pg_temp.strong_locks()$$,
                '... and no lock stronger than ROW EXCLUSIVE taken on any undolog table');
SELECT ok(EXISTS (
              SELECT FROM pg_locks AS l
              WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted
                AND l.relation = 'undolog.undolog_maintenance_lock'::regclass
                AND l.mode = 'RowShareLock')
          AND (SELECT m.xmax::text FROM undolog.undolog_maintenance_lock AS m)
              = (pg_current_xact_id()::text::bigint % 4294967296)::text,
          '... under the partition-maintenance lock (its row locked)');

-- Bad arguments.
SELECT throws_ok($$SELECT undolog.drop_partitions(NULL)$$, 'UL008', NULL, 'cut-off NULL: UL008');
SELECT throws_ok($$SELECT undolog.drop_partitions(now())$$, 'UL008', NULL,
                 'cut-off now(): UL008 (the current month is never dropped)');
SELECT throws_ok(
    format('SELECT undolog.drop_partitions(%L::timestamptz + interval ''1 microsecond'')',
           undolog.month_start(undolog.utc_month(now()))),
    'UL008', NULL, 'cut-off one microsecond into the current month: UL008');
SELECT lives_ok(
    format('SELECT undolog.drop_partitions(%L)', undolog.month_start(undolog.utc_month(now()))),
    'cut-off exactly at the start of the current month: accepted');
SELECT throws_ok($$SELECT undolog.drop_partitions('2000-01-01', NULL)$$, 'UL008', NULL,
                 'p_detach_only NULL: UL008');
SELECT throws_ok($$SELECT undolog.drop_partitions('2000-01-01', false, NULL)$$, 'UL008', NULL,
                 'p_force NULL: UL008');

-- Four months of 2024 with finished sessions, January to April; this month, a live call.
-- Each month's compensable call has two history rows (a fail and its retry); the
-- irreversible one none (a creation is recorded in the effect's own row).
SELECT FROM generate_series(1, 4) AS m,
            LATERAL undolog.create_month_partitions(make_date(2024, m, 1)) AS c;
CREATE TEMP TABLE fx (label text PRIMARY KEY, session_id uuid, effect_id uuid);
INSERT INTO fx VALUES ('jan', pg_temp.add_session('completed'), NULL),
                      ('feb', pg_temp.add_session('compensated'), NULL),
                      ('mar', pg_temp.add_session('completed'), NULL);
SELECT FROM fx, LATERAL (VALUES
    ('jan', '2024-01-01 00:00:00+00'::timestamptz, 'irreversible'),
    ('jan', '2024-01-31 23:59:59.999999+00', 'compensable'),
    ('feb', '2024-02-01 00:00:00+00', 'compensable'),
    ('feb', '2024-02-29 23:59:59.999999+00', 'irreversible'),
    ('mar', '2024-03-01 00:00:00+00', 'irreversible'),
    ('mar', '2024-03-15 12:00:00+00', 'compensable')) AS v (label, at, tier),
    LATERAL pg_temp.add_effect(fx.session_id, v.at, v.tier) AS e
WHERE fx.label = v.label;
SELECT is(undolog.begin_session('d6000000-0000-4000-8000-000000000001'),
          'd6000000-0000-4000-8000-000000000001'::uuid, 'setup: a live session');
SELECT is((SELECT action FROM undolog.intercept('d6000000-0000-4000-8000-000000000001', 0, 'create_user',
               'compensable', '{}', repeat('d6', 32), '{"name": "delete_user"}')),
          'execute', 'setup: a live call this month');
CREATE TEMP TABLE this_month AS
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM') AS m,
       pg_temp.rows_of(to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')) AS rows_before;
SELECT is(pg_temp.rows_of('2024_01'), 'effects=2 history=2 undo=2 approvals=1',
          'setup: January 2024''s rows');
SELECT is(pg_temp.rows_of('2024_02'), 'effects=2 history=2 undo=2 approvals=1',
          'setup: February 2024''s rows');

-- The cut-off at the last microsecond of February (written from UTC+14): only January
-- ends at or before it.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT results_eq(
    $$SELECT * FROM undolog.drop_partitions('2024-03-01 13:59:59.999999')$$,
    $$VALUES ('undolog_effect_log_2024_01'), ('undolog_effect_history_2024_01')$$,
    'UTC+14, cut-off 29 Feb 23:59:59.999999 UTC: January is dropped, effect log then history');
SELECT hasnt_table('undolog', 'undolog_effect_log_2024_01', 'January''s effect log is gone');
SELECT hasnt_table('undolog', 'undolog_effect_history_2024_01', 'January''s history is gone');
SELECT is(pg_temp.rows_of('2024_01'), 'effects=0 history=0 undo=0 approvals=0',
          'no undo or approval row of January is left');
SELECT is(pg_temp.rows_of('2024_02'), 'effects=2 history=2 undo=2 approvals=1',
          'February (a microsecond younger than the cut-off) is whole');
SELECT is(current_setting('undolog.append_only_bypass', true), '',
          'the append-only bypass is closed after the drop');

-- The cut-off at 00:00 UTC on 1 March (written from Los Angeles, where it is 29 Feb).
SET LOCAL TimeZone = 'America/Los_Angeles';
SELECT results_eq(
    $$SELECT * FROM undolog.drop_partitions('2024-02-29 16:00:00')$$,
    $$VALUES ('undolog_effect_log_2024_02'), ('undolog_effect_history_2024_02')$$,
    'Los Angeles, cut-off 1 Mar 00:00 UTC: February (the leap month) is dropped');
SELECT is(pg_temp.rows_of('2024_02'), 'effects=0 history=0 undo=0 approvals=0',
          'no row of February is left');
SELECT is(pg_temp.rows_of('2024_03'), 'effects=2 history=2 undo=2 approvals=1',
          'March, starting exactly at the cut-off, is whole');
SELECT is(pg_temp.rows_of(m), rows_before, 'this month is whole') FROM this_month;
SET LOCAL TimeZone = 'UTC';

-- April 2024: one session in each unfinished state, and a completed one; May: an active one.
SELECT FROM undolog.create_month_partitions('2024-05-01');
INSERT INTO fx
SELECT 'apr-' || s, pg_temp.add_session(s), NULL
FROM unnest(ARRAY['active', 'awaiting_approval', 'failed', 'compensating', 'halted', 'completed']) AS s;
INSERT INTO fx VALUES ('may-active', pg_temp.add_session('active'), NULL);
UPDATE fx SET effect_id = pg_temp.add_effect(session_id, '2024-04-10 08:00+00') WHERE label LIKE 'apr-%';
UPDATE fx SET effect_id = pg_temp.add_effect(session_id, '2024-05-31 23:59:59.999999+00', 'irreversible')
WHERE label = 'may-active';
CREATE TEMP TABLE april_before AS SELECT pg_temp.rows_of('2024_04') AS r, pg_temp.rows_of('2024_05') AS m;
CREATE TEMP TABLE refusal AS
SELECT pg_temp.error_of($$SELECT * FROM undolog.drop_partitions('2024-06-01 00:00+00')$$) AS e;

SELECT throws_ok($$SELECT * FROM undolog.drop_partitions('2024-06-01 00:00+00')$$, 'UL016', NULL,
                 'April and May hold unfinished sessions: UL016');
SELECT is(split_part(e, E'\n', 2),
          'cannot drop undolog_effect_log_2024_04, undolog_effect_log_2024_05: it holds effects of 6 unfinished session(s)',
          'the message names the months and counts the sessions') FROM refusal;
SELECT ok(position(format('%s (%s)', fx.session_id, substr(fx.label, 5)) IN refusal.e) > 0,
          format('DETAIL names the %s session of April', substr(fx.label, 5)))
FROM fx, refusal
WHERE fx.label LIKE 'apr-%' AND fx.label <> 'apr-completed' ORDER BY fx.label;
SELECT ok(position(format('%s (active)', fx.session_id) IN refusal.e) > 0,
          'DETAIL names May''s active session') FROM fx, refusal WHERE fx.label = 'may-active';
SELECT ok(position(fx.session_id::text IN refusal.e) = 0,
          'DETAIL does not name the completed session') FROM fx, refusal WHERE fx.label = 'apr-completed';
SELECT is(pg_temp.rows_of('2024_04'), r, 'refused: April is whole') FROM april_before;
SELECT is(pg_temp.rows_of('2024_05'), m, 'refused: May is whole') FROM april_before;
SELECT is(pg_temp.rows_of('2024_03'), 'effects=2 history=2 undo=2 approvals=1',
          'refused: March, droppable, was not dropped either (all or nothing)');

-- Detach only, forced: April leaves the journal but stays whole, as a plain table.
SELECT results_eq(
    $$SELECT * FROM undolog.drop_partitions('2024-05-01 00:00+00', p_detach_only => true, p_force => true)$$,
    $$VALUES ('undolog_effect_log_2024_03'), ('undolog_effect_log_2024_04'),
             ('undolog_effect_history_2024_03'), ('undolog_effect_history_2024_04')$$,
    'detach-only, forced: March and April are detached');
SELECT has_table('undolog', 'undolog_effect_log_2024_04', 'April''s effect log still exists');
SELECT is_empty($$SELECT FROM pg_inherits WHERE inhrelid IN ('undolog.undolog_effect_log_2024_04'::regclass,
                                                             'undolog.undolog_effect_history_2024_04'::regclass)$$,
                '... no longer a partition');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log_2024_04), 6::bigint,
          'the archived April keeps its six effects');
SELECT is(pg_temp.rows_of('2024_04'), 'effects=0 history=0 undo=0 approvals=0',
          'the journal has no row of April left (undo entries, their signatures with them, pruned)');
SELECT throws_ok($$TRUNCATE undolog.undolog_effect_history_2024_04$$, 'UL011', NULL,
                 'the archived history still refuses TRUNCATE');
SELECT is((SELECT state FROM undolog.undolog_sessions
           WHERE session_id = (SELECT session_id FROM fx WHERE label = 'apr-halted')),
          'halted', 'a forced drop leaves the sessions themselves as they were');

-- Forced drop of May, its active session's effect and undo entry with it.
SET LOCAL ROLE undolog_operator;
SELECT results_eq(
    $$SELECT * FROM undolog.drop_partitions('2024-06-01 00:00+00', p_force => true)$$,
    $$VALUES ('undolog_effect_log_2024_05'), ('undolog_effect_history_2024_05')$$,
    'undolog_operator, forced: May is dropped');
RESET ROLE;
SELECT is(pg_temp.rows_of('2024_05'), 'effects=0 history=0 undo=0 approvals=0',
          'no row of May is left');
SELECT is(pg_temp.rows_of(m), rows_before, 'this month is still whole') FROM this_month;
SET LOCAL ROLE undolog_agent;
SELECT throws_ok($$SELECT * FROM undolog.drop_partitions('2024-06-01 00:00+00')$$, '42501', NULL,
                 'undolog_agent: permission denied (42501)');
RESET ROLE;

-- The journal is as append-only as before for everybody, the owner included: the undo
-- history, which the drops deleted from through the bypass, refuses again, and the live
-- call's exactly-once key, its undo entry's signature, cannot change.
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'after the drops: DELETE of the undo history refused');
SELECT throws_ok(format('UPDATE undolog.undolog_undo_stack SET call_signature = %L
                         WHERE session_id = %L', repeat('d7', 32), 'd6000000-0000-4000-8000-000000000001'),
                 'UL011', NULL, 'after the drops: the live call''s signature cannot change');
SELECT throws_ok($$DELETE FROM undolog.undolog_effect_log$$, 'UL011', NULL,
                 'after the drops: DELETE of the effect log refused');
SELECT throws_ok($$DELETE FROM undolog.undolog_effect_history$$, 'UL011', NULL,
                 'after the drops: DELETE of the effect history refused');
SELECT throws_ok(format('TRUNCATE undolog.undolog_effect_log_%s', m), 'UL011', NULL,
                 'after the drops: TRUNCATE of this month refused') FROM this_month;
SELECT is((SELECT action FROM undolog.intercept('d6000000-0000-4000-8000-000000000001', 0, 'create_user',
               'compensable', '{}', repeat('d6', 32), '{"name": "delete_user"}')),
          'in_progress', 'the live call is still journaled (asked again: in progress)');

SELECT * FROM finish();
ROLLBACK;
