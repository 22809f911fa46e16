-- undolog.fail(p_effect_id, p_error): the body reported an error; executing -> pending
-- with the error, so that the same call may run again. UL003 unknown, UL001 not executing.
BEGIN;
SELECT plan(34);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('tool_a', 'compensable', '{"name": "undo"}') AS tool_id \gset
SELECT pg_temp.tool('tool_z', 'compensable', '{"name": "undo"}') AS tool_id \gset

SELECT has_function('undolog', 'fail', ARRAY['uuid', 'text', 'boolean'],
                    'undolog.fail(uuid, text, boolean) exists (p_async DEFAULT false)');
SELECT function_returns('undolog', 'fail', ARRAY['uuid', 'text', 'boolean'], 'text',
                        'it returns text (pending, or late)');
SELECT is_definer('undolog', 'fail', ARRAY['uuid', 'text', 'boolean'], 'it is SECURITY DEFINER');

SELECT is(undolog.begin_session('fa000000-0000-4000-8000-000000000001'),
          'fa000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
CREATE TEMP TABLE fx (name text PRIMARY KEY, effect_id uuid);
CREATE FUNCTION pg_temp.new_call(p_name text, p_step integer) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.tool('tool_' || p_name, 'compensable', '{"name": "undo"}');
    INSERT INTO fx
    SELECT p_name, i.effect_id
    FROM undolog.intercept('fa000000-0000-4000-8000-000000000001', p_step, 'tool_' || p_name,
                           'compensable', jsonb_build_object('n', p_step),
                           pg_temp.sig('fail-' || p_name), '{"name": "undo"}') AS i;
    RETURN (SELECT e.state FROM undolog.undolog_effect_log AS e
            WHERE e.effect_id = (SELECT f.effect_id FROM fx AS f WHERE f.name = p_name));
END
$$;
CREATE FUNCTION pg_temp.eid(p_name text) RETURNS uuid LANGUAGE sql
AS $$ SELECT effect_id FROM fx WHERE name = p_name $$;

SELECT is(pg_temp.new_call('a', 0), 'executing', 'setup: effect a executing');
SELECT is(pg_temp.new_call('b', 1), 'executing', 'setup: effect b executing');
SELECT is(pg_temp.new_call('c', 2), 'executing', 'setup: effect c executing');

SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('a'), 'HTTP 503')$$, 'fail of an executing effect');
SELECT results_eq(
    $$SELECT state, error, result_snapshot, attempts FROM undolog.undolog_effect_log
      WHERE effect_id = pg_temp.eid('a')$$,
    $$VALUES ('pending', 'HTTP 503', NULL::jsonb, 1)$$,
    'the effect is back to pending, with the error, no result');
SELECT results_eq(
    $$SELECT event, from_state, to_state, detail FROM undolog.undolog_effect_history
      WHERE effect_id = pg_temp.eid('a') ORDER BY history_id DESC LIMIT 1$$,
    $$VALUES ('transition', 'executing', 'pending', '{"error": "HTTP 503"}'::jsonb)$$,
    'history records executing -> pending with the error');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('a')),
          1::bigint, 'the undo entry stays (the walk skips entries of pending effects)');

-- NULL error, very long error.
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('b'), NULL)$$, 'fail with a NULL error');
SELECT is((SELECT error FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('b')),
          'failed', 'a NULL error is stored as ''failed''');
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('c'), repeat('e', 100000))$$,
                'fail with an error of 100 000 characters');
SELECT is((SELECT length(error) FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c')),
          8192, 'the error is cut to 8192 characters');

-- The same call again executes again; fail then commit works on the second attempt.
SELECT is((SELECT action FROM undolog.intercept('fa000000-0000-4000-8000-000000000001', 0,
              'tool_a', 'compensable', '{"n": 0}', pg_temp.sig('fail-a'), '{"name": "undo"}')),
          'execute', 'the failed call made again: execute');
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('a'), '{"ok": true}')$$,
                'the second attempt commits');
SELECT results_eq(
    $$SELECT state, error, result_snapshot, attempts FROM undolog.undolog_effect_log
      WHERE effect_id = pg_temp.eid('a')$$,
    $$VALUES ('committed', NULL::text, '{"ok": true}'::jsonb, 2)$$,
    'committed on attempt 2, the old error gone');

-- Refusals: SQLSTATE, and nothing written.
SELECT pg_temp.refused($$SELECT undolog.fail(pg_temp.eid('a'), 'too late')$$,
                       'UL001', 'fail of a committed effect: UL001');
SELECT pg_temp.refused($$SELECT undolog.fail(pg_temp.eid('b'), 'again')$$,
                       'UL001', 'failing twice (the effect is pending): UL001');
SELECT pg_temp.refused($$SELECT undolog.fail('99999999-9999-4999-8999-999999999999', 'x')$$,
                       'UL003', 'fail of an unknown effect: UL003');
SELECT pg_temp.refused($$SELECT undolog.fail(NULL, 'x')$$,
                       'UL003', 'fail of a NULL effect id: UL003');

-- p_async => true: the transaction commits asynchronously (opt-in, this transaction only)
-- only when fail is its first write; here an intent was journaled before in it, so it
-- stays durable (tests/engine/test_durability.py shows the asynchronous case).
SELECT is((SELECT action FROM undolog.intercept('fa000000-0000-4000-8000-000000000001', 90, 'tool_z',
              'compensable', '{}', pg_temp.sig('fail-async'), '{"name": "undo"}')),
          'execute', 'setup: an executing effect');
SELECT is(undolog.fail((SELECT effect_id FROM undolog.undolog_undo_stack
                        WHERE call_signature = pg_temp.sig('fail-async')), 'boom', true)
          || '/' || current_setting('synchronous_commit'),
          'pending/on', 'fail(..., p_async => true) after an intent in the same transaction: pending, still durable');

-- fail_effect(session_id, effect_id, error, async): fail with the session first.
SELECT has_function('undolog', 'fail_effect', ARRAY['uuid', 'uuid', 'text', 'boolean'],
                    'undolog.fail_effect(uuid, uuid, text, boolean) exists (session first)');
SELECT is(pg_temp.new_call('s1', 50), 'executing', 'setup: effect s1 executing');
SELECT pg_temp.refused(
    $$SELECT undolog.fail_effect('fa000000-0000-4000-8000-0000000000ff'::uuid, pg_temp.eid('s1'), 'x')$$,
    'UL003', 'session-first fail naming another session: UL003');
SELECT is(undolog.fail_effect('fa000000-0000-4000-8000-000000000001'::uuid, pg_temp.eid('s1'), 'boom'),
          'pending', 'session-first fail of an executing effect: pending');
SELECT is((SELECT error FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('s1')),
          'boom', 'its error is recorded');

SELECT * FROM finish();
ROLLBACK;
