-- undolog.complete_session(p_session_id) and undolog.fail_session(p_session_id, p_error):
-- active -> completed / active -> failed; answer the new state. UL002 unknown session,
-- UL001 when the session is not active (including completing or failing it twice).
BEGIN;
SELECT plan(44);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('t', 'compensable', '{"name": "u"}') AS tool_id \gset
SELECT pg_temp.tool('wire', 'irreversible') AS tool_id \gset
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset

SELECT has_function('undolog', 'complete_session', ARRAY['uuid'],
                    'undolog.complete_session(uuid) exists');
SELECT function_returns('undolog', 'complete_session', ARRAY['uuid'], 'text', 'it returns text');
SELECT is_definer('undolog', 'complete_session', ARRAY['uuid'], 'it is SECURITY DEFINER');
SELECT has_function('undolog', 'fail_session', ARRAY['uuid', 'text'],
                    'undolog.fail_session(uuid, text) exists');
SELECT function_returns('undolog', 'fail_session', ARRAY['uuid', 'text'], 'text', 'it returns text');
SELECT is_definer('undolog', 'fail_session', ARRAY['uuid', 'text'], 'it is SECURITY DEFINER');

SELECT is(undolog.begin_session('5c000000-0000-4000-8000-000000000001'),
          '5c000000-0000-4000-8000-000000000001'::uuid, 'setup: session A');
SELECT is(undolog.begin_session('5c000000-0000-4000-8000-000000000002'),
          '5c000000-0000-4000-8000-000000000002'::uuid, 'setup: session B');
SELECT is(undolog.begin_session('5c000000-0000-4000-8000-000000000003'),
          '5c000000-0000-4000-8000-000000000003'::uuid, 'setup: session C');

-- complete_session
SELECT is(undolog.complete_session('5c000000-0000-4000-8000-000000000001'), 'completed',
          'complete_session answers completed');
SELECT results_eq(
    $$SELECT state, error FROM undolog.undolog_sessions
      WHERE session_id = '5c000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('completed', NULL::text)$$, 'the session is completed');
SELECT results_eq(
    $$SELECT from_state, to_state, detail FROM undolog.undolog_session_history
      WHERE session_id = '5c000000-0000-4000-8000-000000000001' ORDER BY history_id$$,
    $$VALUES (NULL::text, 'active', NULL::jsonb), ('active', 'completed', NULL)$$,
    'history: NULL -> active, active -> completed');
SELECT pg_temp.refused($$SELECT undolog.complete_session('5c000000-0000-4000-8000-000000000001')$$,
                       'UL001', 'completing twice: UL001');
SELECT pg_temp.refused($$SELECT undolog.fail_session('5c000000-0000-4000-8000-000000000001', 'x')$$,
                       'UL001', 'failing a completed session: UL001');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5c000000-0000-4000-8000-000000000001', 0, 't', 'compensable',
        '{}', pg_temp.sig('after-complete'), '{"name": "u"}')$$,
    'UL010', 'a completed session takes no new call: UL010');

-- fail_session
SELECT is(undolog.fail_session('5c000000-0000-4000-8000-000000000002', 'agent crashed'), 'failed',
          'fail_session answers failed');
SELECT results_eq(
    $$SELECT state, error FROM undolog.undolog_sessions
      WHERE session_id = '5c000000-0000-4000-8000-000000000002'$$,
    $$VALUES ('failed', 'agent crashed')$$, 'the session is failed, with its error');
SELECT results_eq(
    $$SELECT from_state, to_state, detail FROM undolog.undolog_session_history
      WHERE session_id = '5c000000-0000-4000-8000-000000000002' ORDER BY history_id$$,
    $$VALUES (NULL::text, 'active', NULL::jsonb),
             ('active', 'failed', '{"error": "agent crashed"}'::jsonb)$$,
    'history: NULL -> active, active -> failed with the error');
SELECT pg_temp.refused($$SELECT undolog.fail_session('5c000000-0000-4000-8000-000000000002', 'y')$$,
                       'UL001', 'failing twice: UL001');
SELECT pg_temp.refused($$SELECT undolog.complete_session('5c000000-0000-4000-8000-000000000002')$$,
                       'UL001', 'completing a failed session: UL001');

SELECT is(undolog.fail_session('5c000000-0000-4000-8000-000000000003', NULL), 'failed',
          'fail_session with a NULL error');
SELECT is((SELECT error FROM undolog.undolog_sessions
           WHERE session_id = '5c000000-0000-4000-8000-000000000003'),
          'failed', 'a NULL error is stored as ''failed''');

SELECT is(undolog.fail_session(undolog.begin_session('5c000000-0000-4000-8000-000000000005'),
                                repeat('e', 20000)),
          'failed', 'fail_session with an error of 20 000 characters');
SELECT is((SELECT length(error) FROM undolog.undolog_sessions
           WHERE session_id = '5c000000-0000-4000-8000-000000000005'),
          8192, 'the error is cut to 8192 characters');

-- A session awaiting approval can be neither completed nor failed by the agent.
SELECT is(undolog.begin_session('5c000000-0000-4000-8000-000000000004'),
          '5c000000-0000-4000-8000-000000000004'::uuid, 'setup: session D');
SELECT is((SELECT action FROM undolog.intercept('5c000000-0000-4000-8000-000000000004', 0, 'wire',
              'irreversible', '{}', pg_temp.sig('d-irr'))),
          'await_approval', 'setup: D awaits an approval');
SELECT pg_temp.refused($$SELECT undolog.complete_session('5c000000-0000-4000-8000-000000000004')$$,
                       'UL001', 'completing an awaiting_approval session: UL001');
SELECT pg_temp.refused($$SELECT undolog.fail_session('5c000000-0000-4000-8000-000000000004', 'x')$$,
                       'UL001', 'failing an awaiting_approval session: UL001');

-- Unknown sessions.
SELECT pg_temp.refused($$SELECT undolog.complete_session('99999999-9999-4999-8999-999999999999')$$,
                       'UL002', 'completing an unknown session: UL002');
SELECT pg_temp.refused($$SELECT undolog.fail_session('99999999-9999-4999-8999-999999999999', 'x')$$,
                       'UL002', 'failing an unknown session: UL002');

-- A session with a call still executing (its outcome unknown) cannot complete: it must
-- fail, so that the walk compensates the call.
SELECT undolog.begin_session('c0000000-0000-4000-8000-00000000000e') IS NOT NULL AS began \gset
SELECT effect_id AS running FROM undolog.intercept('c0000000-0000-4000-8000-00000000000e', 0,
    'create_user', 'compensable', '{}', encode(sha256('complete-running'::bytea), 'hex'),
    '{"name": "delete_user"}') \gset
SELECT pg_temp.journal_state() AS before_complete \gset
SELECT throws_ok($$SELECT undolog.complete_session('c0000000-0000-4000-8000-00000000000e')$$,
    'UL001', 'session c0000000-0000-4000-8000-00000000000e cannot complete: step 0 (create_user) is still executing',
    'a session with an executing call cannot complete');
SELECT is(pg_temp.journal_state(), :'before_complete', 'the refused completion wrote nothing');
SELECT lives_ok(format($$SELECT undolog.commit(%L, '{}')$$, :'running'), 'the call commits');
SELECT is(undolog.complete_session('c0000000-0000-4000-8000-00000000000e'), 'completed',
          'then the session completes');
SELECT throws_ok($$SELECT undolog.complete_session('c0000000-0000-4000-8000-0000000000ff')$$,
    'UL002', NULL, 'completing an unknown session: UL002');

SELECT * FROM finish();
ROLLBACK;
