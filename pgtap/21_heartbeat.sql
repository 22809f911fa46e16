-- undolog.heartbeat(p_session_id): renew the lease of an active (or awaiting_approval)
-- session by its lease duration; answers the new expiry.
BEGIN;
SELECT plan(22);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('wire_money', 'irreversible') AS tool_id \gset

SELECT has_function('undolog', 'heartbeat', ARRAY['uuid'], 'undolog.heartbeat(uuid) exists');
SELECT function_returns('undolog', 'heartbeat', ARRAY['uuid'], 'timestamp with time zone',
                        'it returns timestamptz');
SELECT is_definer('undolog', 'heartbeat', ARRAY['uuid'], 'it is SECURITY DEFINER');

SELECT is(undolog.begin_session('44444444-4444-4444-8444-444444444444', NULL, '{}', '2 minutes'),
          '44444444-4444-4444-8444-444444444444'::uuid, 'setup: an active session, lease 2 minutes');
-- Let the lease run out (a direct update of the lease is not a state change).
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 hour'
WHERE session_id = '44444444-4444-4444-8444-444444444444';

SELECT is(undolog.heartbeat('44444444-4444-4444-8444-444444444444'), now() + interval '2 minutes',
          'heartbeat answers now() + the lease duration');
SELECT is((SELECT lease_expires_at FROM undolog.undolog_sessions
           WHERE session_id = '44444444-4444-4444-8444-444444444444'),
          now() + interval '2 minutes', 'and stores it as the new lease expiry');
SELECT is((SELECT state || '/' || lease_duration FROM undolog.undolog_sessions
           WHERE session_id = '44444444-4444-4444-8444-444444444444'),
          'active/00:02:00', 'state and lease duration are unchanged');
SELECT is((SELECT count(*) FROM undolog.undolog_session_history
           WHERE session_id = '44444444-4444-4444-8444-444444444444'),
          1::bigint, 'a heartbeat writes no session history');

-- A session awaiting approval still holds its lease.
SELECT is((SELECT action FROM undolog.intercept('44444444-4444-4444-8444-444444444444', 0,
                                                'wire_money', 'irreversible', '{}',
                                                pg_temp.sig('hb-irr'))),
          'await_approval', 'setup: an irreversible call suspends the session');
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 hour'
WHERE session_id = '44444444-4444-4444-8444-444444444444';
SELECT is(undolog.heartbeat('44444444-4444-4444-8444-444444444444'), now() + interval '2 minutes',
          'heartbeat renews the lease of an awaiting_approval session');
SELECT is((SELECT lease_expires_at FROM undolog.undolog_sessions
           WHERE session_id = '44444444-4444-4444-8444-444444444444'),
          now() + interval '2 minutes', 'and stores it');

-- Other states: UL010, nothing written. Unknown session: UL002.
SELECT is(undolog.begin_session('44444444-4444-4444-8444-000000000001'), '44444444-4444-4444-8444-000000000001'::uuid,
          'setup: a second session');
SELECT is(undolog.complete_session('44444444-4444-4444-8444-000000000001'), 'completed',
          'setup: it completes');
SELECT pg_temp.refused($$SELECT undolog.heartbeat('44444444-4444-4444-8444-000000000001')$$,
                       'UL010', 'heartbeat of a completed session: UL010');
SELECT is(undolog.fail_session(undolog.begin_session('44444444-4444-4444-8444-000000000002'), 'x'),
          'failed', 'setup: a third session fails');
SELECT pg_temp.refused($$SELECT undolog.heartbeat('44444444-4444-4444-8444-000000000002')$$,
                       'UL010', 'heartbeat of a failed session: UL010 (recovery owns it now)');
SELECT pg_temp.refused($$SELECT undolog.heartbeat('99999999-9999-4999-8999-999999999999')$$,
                       'UL002', 'heartbeat of an unknown session: UL002');
SELECT pg_temp.refused($$SELECT undolog.heartbeat(NULL)$$,
                       'UL002', 'heartbeat of a NULL session: UL002');

SELECT * FROM finish();
ROLLBACK;
