-- undolog.forbid_change (0004) and undolog.set_append_only_bypass: append-only tables
-- refuse UPDATE, DELETE and TRUNCATE, except a DELETE that partition maintenance lets
-- through: the transaction-local setting names that very table (by oid) AND the current
-- user owns it. Nobody else gets through, setting or not.
BEGIN;
SELECT plan(28);

CREATE FUNCTION pg_temp.sig(p_seed text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT encode(sha256(convert_to(p_seed, 'UTF8')), 'hex') $$;
CREATE FUNCTION pg_temp.bypass(p_table regclass) RETURNS text LANGUAGE sql
AS $$ SELECT set_config('undolog.append_only_bypass', coalesce(p_table::oid::text, ''), true) $$;

SELECT has_function('undolog', 'set_append_only_bypass', ARRAY['regclass'],
                    'undolog.set_append_only_bypass(regclass) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('public', 'undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.set_append_only_bypass(regclass)', 'EXECUTE')$$,
    'no group role may call set_append_only_bypass (an internal helper)');

-- The undo history is the plain append-only table retention deletes from through the
-- bypass (prune_month_rows; the signature registry was the other until migration 0014).
-- Its guard runs once per statement, UPDATE and DELETE.
SELECT is(
    (SELECT (t.tgtype & 1) = 0 FROM pg_trigger AS t
     WHERE t.tgrelid = 'undolog.undolog_undo_history'::regclass
       AND t.tgname = 'undolog_undo_history_append_only'),
    true, 'the undo history''s append-only trigger is a statement trigger');

-- Data: two undo history rows (one of 1999, one of now), an effect in the default
-- partition and one in this month, and a history row in the history's default partition.
INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at)
VALUES ('f0000000-0000-4000-8000-000000000001', '5 minutes', now() + interval '5 minutes');
INSERT INTO undolog.undolog_undo_history
    (session_id, undo_id, event, from_state, to_state, attempt, at)
VALUES ('f0000000-0000-4000-8000-000000000001', 'f2000000-0000-4000-8000-000000000001',
        'transition', 'pending', 'compensating', 1, '1999-01-15 12:00+00'),
       ('f0000000-0000-4000-8000-000000000001', 'f2000000-0000-4000-8000-000000000002',
        'transition', 'pending', 'compensating', 1, now());
INSERT INTO undolog.undolog_effect_log
    (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
VALUES ('f1000000-0000-4000-8000-000000000001', 'f0000000-0000-4000-8000-000000000001',
        '1999-01-15 12:00+00', pg_temp.sig('fc-1'), 0, 't', 'compensable', '{}', 'executing'),
       ('f1000000-0000-4000-8000-000000000002', 'f0000000-0000-4000-8000-000000000001',
        now(), pg_temp.sig('fc-2'), 1, 't', 'compensable', '{}', 'executing');
SELECT is((SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
           WHERE effect_id = 'f1000000-0000-4000-8000-000000000001'),
          'undolog.undolog_effect_log_default', 'setup: a 1999 effect sits in the default partition');
-- A call's creation is recorded in its own row (migration 0013), not as a history row:
-- the 1999 call fails (executing -> pending), which is one.
UPDATE undolog.undolog_effect_log SET state = 'pending', error = 'boom'
WHERE effect_id = 'f1000000-0000-4000-8000-000000000001';
SELECT results_eq(
    $$SELECT effect_id, from_state, to_state FROM undolog.undolog_effect_history_default$$,
    $$VALUES ('f1000000-0000-4000-8000-000000000001'::uuid, 'executing', 'pending')$$,
    'setup: its fail is a history row in the history''s default partition');

-- Without the setting, even the owner is refused.
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'owner, no bypass: DELETE of the undo history refused (UL011)');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history WHERE false$$, 'UL011', NULL,
                 'a DELETE matching no row is refused too (statement trigger)');
SELECT throws_ok($$DELETE FROM undolog.undolog_effect_log_default$$, 'UL011', NULL,
                 'owner, no bypass: DELETE from the default partition refused');

-- The setting must name this very table.
SELECT FROM pg_temp.bypass('undolog.undolog_undo_stack');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'bypass naming another table: the undo history still refuses DELETE');
SELECT FROM set_config('undolog.append_only_bypass', 'undolog.undolog_undo_history', true);
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'bypass naming the table by name instead of oid: refused');
SELECT FROM pg_temp.bypass('undolog.undolog_effect_log_default');
SELECT throws_ok(
    format('DELETE FROM undolog.undolog_effect_log_%s',
           to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')),
    'UL011', NULL, 'bypass naming the default partition: this month''s partition still refuses');

-- Only DELETE is ever let through.
SELECT FROM pg_temp.bypass('undolog.undolog_undo_history');
SELECT throws_ok($$UPDATE undolog.undolog_undo_history SET at = now()$$,
                 'UL011', NULL, 'bypass on: UPDATE of the undo history still refused');
SELECT throws_ok($$TRUNCATE undolog.undolog_undo_history$$, 'UL011', NULL,
                 'bypass on: TRUNCATE of the undo history still refused');
SELECT FROM pg_temp.bypass('undolog.undolog_effect_history_default');
SELECT throws_ok($$UPDATE undolog.undolog_effect_history_default SET detail = '{}'$$,
                 'UL011', NULL, 'bypass on: UPDATE of effect history still refused');

-- A role that somebody wrongly granted DELETE, with the setting: refused, not the owner.
CREATE ROLE undolog_test_misgranted NOLOGIN;
GRANT USAGE ON SCHEMA undolog TO undolog_test_misgranted;
GRANT SELECT, DELETE ON undolog.undolog_undo_history TO undolog_test_misgranted;
SET LOCAL ROLE undolog_test_misgranted;
SELECT FROM pg_temp.bypass('undolog.undolog_undo_history');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'a non-owner granted DELETE, bypass set: still refused (UL011)');
RESET ROLE;

-- The group roles have no DELETE privilege at all (the operator reads the undo history).
SET LOCAL ROLE undolog_operator;
SELECT FROM pg_temp.bypass('undolog.undolog_undo_history');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, '42501', NULL,
                 'undolog_operator, bypass set: DELETE refused by privileges (42501)');
RESET ROLE;
SET LOCAL ROLE undolog_agent;
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, '42501', NULL,
                 'undolog_agent: DELETE refused by privileges (42501)');
RESET ROLE;

-- The owner with the setting naming the table: the DELETE goes through.
SELECT lives_ok(
    $$SELECT undolog.set_append_only_bypass('undolog.undolog_undo_history')$$,
    'set_append_only_bypass opens the undo history');
SELECT is(current_setting('undolog.append_only_bypass'),
          'undolog.undolog_undo_history'::regclass::oid::text,
          '... as a transaction-local setting holding its oid');
SELECT lives_ok(
    $$DELETE FROM undolog.undolog_undo_history WHERE at < '2000-01-01'$$,
    'owner, bypass on the undo history: DELETE works');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_history), 1::bigint,
          '... it deleted the one row it matched');
SELECT lives_ok($$SELECT undolog.set_append_only_bypass(NULL)$$, 'set_append_only_bypass(NULL)');
SELECT is(current_setting('undolog.append_only_bypass'), '', '... closes it');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'closed again: DELETE refused');

-- Row triggers (a partition's cloned guard) honour it the same way.
SELECT FROM undolog.set_append_only_bypass('undolog.undolog_effect_log_default');
SELECT lives_ok($$DELETE FROM undolog.undolog_effect_log_default$$,
                'owner, bypass on the default partition: DELETE of its rows works');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log), 1::bigint,
          '... only the default''s row went');
SELECT FROM undolog.set_append_only_bypass(NULL);

-- Transaction-local: a rolled-back subtransaction takes the setting with it.
SAVEPOINT before_bypass;
SELECT FROM undolog.set_append_only_bypass('undolog.undolog_undo_history');
ROLLBACK TO SAVEPOINT before_bypass;
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'a bypass set in a rolled-back savepoint is gone');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_history), 1::bigint,
          'the undo history kept its row through every refused DELETE');

SELECT * FROM finish();
ROLLBACK;
