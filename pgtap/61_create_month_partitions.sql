-- undolog.create_month_partitions(p_month): the effect log's and the history's
-- partitions of the UTC month holding p_month, bounded by UTC month starts whatever the
-- session's TimeZone or DateStyle, protected like every month (cloned row triggers, its
-- own TRUNCATE trigger, no grant), and filled with that month's rows from the default
-- partitions, which it empties of them.
BEGIN;
SELECT plan(32);
SET LOCAL client_min_messages = error;

\ir _helpers.psql

CREATE FUNCTION pg_temp.bounds(p_table text) RETURNS text LANGUAGE sql AS $$
    SELECT b.lower_bound AT TIME ZONE 'UTC' || ' .. ' || b.upper_bound AT TIME ZONE 'UTC'
    FROM pg_inherits AS i,
         LATERAL undolog.partition_bounds(i.inhparent) AS b
    WHERE i.inhrelid = format('undolog.%I', p_table)::regclass
      AND b.partition_oid = i.inhrelid
$$;
CREATE FUNCTION pg_temp.home(p_effect uuid) RETURNS text LANGUAGE sql AS $$
    SELECT tableoid::regclass::text FROM undolog.undolog_effect_log WHERE effect_id = p_effect
$$;

SELECT has_function('undolog', 'create_month_partitions', ARRAY['date'],
                    'undolog.create_month_partitions(date) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.create_month_partitions(date)', 'EXECUTE')$$,
    'internal: no group role may call create_month_partitions');

-- Effects written while February and March 2028 have no partition: the default takes them.
-- Compensable fixture calls: each has two history rows (a fail and its retry) and its
-- creation and commit recorded in its own row (migration 0013).
CREATE TEMP TABLE fx (label text PRIMARY KEY, effect_id uuid);
INSERT INTO fx (label, effect_id) VALUES
    ('feb-last', pg_temp.add_effect(pg_temp.add_session(), '2028-02-29 23:59:59.999999+00')),
    ('mar-first', pg_temp.add_effect(pg_temp.add_session(), '2028-03-01 00:00:00+00')),
    ('feb-first', pg_temp.add_effect(pg_temp.add_session(), '2028-02-01 00:00:00+00'));
CREATE TEMP TABLE effects_before AS
SELECT e.* FROM undolog.undolog_effect_log AS e JOIN fx USING (effect_id);
CREATE TEMP TABLE history_before AS
SELECT h.* FROM undolog.undolog_effect_history AS h JOIN fx USING (effect_id);
CREATE TEMP TABLE undo_before AS SELECT * FROM undolog.undolog_undo_stack;
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log_default), 3::bigint,
          'setup: three effects in the default partition');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_history_default), 6::bigint,
          'setup: their six history rows in the history default');
SELECT is((SELECT count(*) FROM effects_before
           WHERE chain_hash IS NOT NULL AND commit_hash IS NOT NULL AND committed_at IS NOT NULL),
          3::bigint, 'setup: each effect''s row records its creation and its commit, linked');

-- February 2028 (a leap month), created from a session ten hours ahead of UTC's month.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SET LOCAL DateStyle = 'SQL, DMY';
SELECT results_eq(
    $$SELECT * FROM undolog.create_month_partitions('2028-02-17')$$,
    $$VALUES ('undolog_effect_log_2028_02'), ('undolog_effect_history_2028_02')$$,
    'UTC+14, DateStyle SQL: February 2028 is created for both tables, names answered');
SET LOCAL DateStyle = 'ISO';
SELECT is(pg_temp.bounds('undolog_effect_log_2028_02'),
          '2028-02-01 00:00:00 .. 2028-03-01 00:00:00',
          'its effect log month is [1 Feb 00:00 UTC, 1 Mar 00:00 UTC): the leap day included');
SELECT is(pg_temp.bounds('undolog_effect_history_2028_02'),
          '2028-02-01 00:00:00 .. 2028-03-01 00:00:00', 'its history month has the same bounds');
SELECT is(pg_temp.home(effect_id), 'undolog.undolog_effect_log_2028_02',
          '23:59:59.999999 UTC on 29 Feb moved into February') FROM fx WHERE label = 'feb-last';
SELECT is(pg_temp.home(effect_id), 'undolog.undolog_effect_log_2028_02',
          '00:00 UTC on 1 Feb moved into February') FROM fx WHERE label = 'feb-first';
SELECT is(pg_temp.home(effect_id), 'undolog.undolog_effect_log_default',
          '00:00 UTC on 1 Mar stayed in the default (March has no partition yet)')
FROM fx WHERE label = 'mar-first';
SELECT is((SELECT count(*) FROM undolog.undolog_effect_history_2028_02), 4::bigint,
          'the two February effects'' four history rows moved with them');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_history_default), 2::bigint,
          'March''s two history rows are still in the default');

-- March 2028 from Los Angeles, where 1 Mar 00:00 UTC is still 29 Feb.
SET LOCAL TimeZone = 'America/Los_Angeles';
SELECT results_eq(
    $$SELECT * FROM undolog.create_month_partitions('2028-03-31')$$,
    $$VALUES ('undolog_effect_log_2028_03'), ('undolog_effect_history_2028_03')$$,
    'Los Angeles: March 2028 is created');
SELECT is(pg_temp.bounds('undolog_effect_log_2028_03'),
          '2028-03-01 00:00:00 .. 2028-04-01 00:00:00', 'its bounds are UTC''s March');
SELECT is(pg_temp.home(effect_id), 'undolog.undolog_effect_log_2028_03',
          '00:00 UTC on 1 Mar moved into March') FROM fx WHERE label = 'mar-first';
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_log_default$$,
                'the effect log default is empty');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_history_default$$,
                'the history default is empty');

-- Nothing was lost or changed on the way.
SELECT set_eq(
    $$SELECT e.* FROM undolog.undolog_effect_log AS e JOIN fx USING (effect_id)$$,
    $$SELECT * FROM effects_before$$,
    'the effects are unchanged, every column (the creation and commit recorded in them too)');
SELECT set_eq(
    $$SELECT h.* FROM undolog.undolog_effect_history AS h JOIN fx USING (effect_id)$$,
    $$SELECT * FROM history_before$$,
    'the history rows are unchanged, ids included');
SELECT set_eq($$SELECT * FROM undolog.undolog_undo_stack$$,
              $$SELECT * FROM undo_before$$,
              'the undo entries are untouched, the calls'' signatures (exactly-once keys) with them');
SELECT is(current_setting('undolog.append_only_bypass', true), '',
          'the append-only bypass is closed again');

-- The new months are protected like any other.
SELECT has_pk('undolog', 'undolog_effect_log_2028_02', 'February''s effect log has its primary key');
SELECT set_eq(
    $$SELECT t.tgname::text FROM pg_trigger AS t
      WHERE t.tgrelid = 'undolog.undolog_effect_log_2028_02'::regclass$$,
    ARRAY['undolog_effect_log_guard', 'undolog_effect_log_guard_insert',
          'undolog_effect_log_no_delete', 'undolog_effect_log_no_truncate'],
    'February''s effect log has the two guards (update, insert), no-delete and no-truncate triggers');
-- The clones are the parent's triggers: the insert guard keeps its WHEN (a new
-- COMPENSABLE call, executing, fires no trigger in the new month either).
SELECT set_eq(
    $$SELECT replace(pg_get_triggerdef(t.oid), t.tgrelid::regclass::text, 'T') FROM pg_trigger AS t
      WHERE t.tgrelid = 'undolog.undolog_effect_log_2028_02'::regclass
        AND t.tgname::text LIKE 'undolog_effect_log_guard%'$$,
    $$SELECT replace(pg_get_triggerdef(t.oid), t.tgrelid::regclass::text, 'T') FROM pg_trigger AS t
      WHERE t.tgrelid = 'undolog.undolog_effect_log'::regclass
        AND t.tgname::text LIKE 'undolog_effect_log_guard%'
        AND pg_get_triggerdef(t.oid) LIKE '%BEFORE UPDATE ON%'
            <> (pg_get_triggerdef(t.oid) LIKE '%BEFORE INSERT ON% WHEN %')$$,
    '... the guards as on the parent: BEFORE UPDATE, and BEFORE INSERT with its WHEN');
SELECT throws_ok($$DELETE FROM undolog.undolog_effect_log_2028_02$$, 'UL011', NULL,
                 'DELETE from the new month is refused');
SELECT throws_ok($$TRUNCATE undolog.undolog_effect_history_2028_03$$, 'UL011', NULL,
                 'TRUNCATE of the new history month is refused');
SELECT throws_ok(
    $$UPDATE undolog.undolog_effect_log SET tool_name = 'other' WHERE executed_at = '2028-02-01 00:00+00'$$,
    'UL011', NULL, 'an identity column of a moved effect cannot change');
SELECT is_empty(
    $$SELECT c.relname FROM pg_class AS c
      WHERE c.relname LIKE 'undolog_effect%2028_0%' AND c.relkind = 'r' AND c.relacl IS NOT NULL
        AND EXISTS (SELECT FROM aclexplode(c.relacl) AS a WHERE a.grantee <> c.relowner)$$,
    'nobody but the owner holds a privilege on the new months');

-- Idempotent; a month that exists under another name is not created twice; a name taken
-- by a table that is not a partition (an archived month) is warned about and skipped.
SELECT is_empty($$SELECT * FROM undolog.create_month_partitions('2028-02-01')$$,
                'February again: nothing to create');
CREATE TABLE undolog.custom_history_2031_01
PARTITION OF undolog.undolog_effect_history FOR VALUES FROM ('2031-01-01 00:00+00') TO ('2031-02-01 00:00+00');
SELECT results_eq($$SELECT * FROM undolog.create_month_partitions('2031-01-09')$$,
                  $$VALUES ('undolog_effect_log_2031_01')$$,
                  'a month whose history partition exists under another name: only the effect log''s');
CREATE TABLE undolog.undolog_effect_log_2032_05 (LIKE undolog.undolog_effect_log);
SELECT results_eq($$SELECT * FROM undolog.create_month_partitions('2032-05-01')$$,
                  $$VALUES ('undolog_effect_history_2032_05')$$,
                  'an effect log month whose name a plain table holds is skipped (with a warning)');

SELECT * FROM finish();
ROLLBACK;
