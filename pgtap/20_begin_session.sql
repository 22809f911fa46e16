-- undolog.begin_session(p_session_id, p_agent, p_metadata, p_lease): start a session, or
-- resume it (an active one has its lease renewed; any other is answered unchanged).
BEGIN;
SELECT plan(34);
\ir _helpers.psql

SELECT has_function('undolog', 'begin_session', ARRAY['uuid', 'text', 'jsonb', 'interval'],
                    'undolog.begin_session(uuid, text, jsonb, interval) exists');
SELECT function_returns('undolog', 'begin_session', ARRAY['uuid', 'text', 'jsonb', 'interval'],
                        'uuid', 'it returns the session id (uuid)');
SELECT is_definer('undolog', 'begin_session', ARRAY['uuid', 'text', 'jsonb', 'interval'],
                  'it is SECURITY DEFINER');

-- A new session, every argument given.
SELECT is(undolog.begin_session('33333333-3333-4333-8333-333333333333', 'agent-a',
                                '{"run": 7}', '90 seconds'),
          '33333333-3333-4333-8333-333333333333'::uuid, 'a given id is answered back');
SELECT results_eq(
    $$SELECT agent, metadata, state, lease_duration, lease_expires_at, error
      FROM undolog.undolog_sessions WHERE session_id = '33333333-3333-4333-8333-333333333333'$$,
    $$VALUES ('agent-a', '{"run": 7}'::jsonb, 'active', '90 seconds'::interval,
              now() + '90 seconds'::interval, NULL::text)$$,
    'the session is active, with its agent, metadata and a lease of now() + p_lease'
);
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = '33333333-3333-4333-8333-333333333333'$$,
    $$VALUES (NULL::text, 'active')$$,
    'its history has one row: NULL -> active'
);

-- Defaults: a new id, no agent, {} metadata, a 5 minute lease.
CREATE TEMP TABLE generated AS SELECT undolog.begin_session() AS session_id;
SELECT isnt((SELECT session_id FROM generated), NULL, 'no id given: a new id is answered');
SELECT results_eq(
    $$SELECT s.agent, s.metadata, s.state, s.lease_duration, s.lease_expires_at
      FROM undolog.undolog_sessions AS s JOIN generated USING (session_id)$$,
    $$VALUES (NULL::text, '{}'::jsonb, 'active', '5 minutes'::interval, now() + '5 minutes'::interval)$$,
    'defaults: no agent, {} metadata, a 5 minute lease'
);
SELECT isnt(undolog.begin_session(), (SELECT session_id FROM generated),
            'each call without an id gets a different id');

-- Resuming an active session renews its lease (here with a new duration) and changes
-- nothing else.
SELECT is(undolog.begin_session('33333333-3333-4333-8333-333333333333', 'agent-b',
                                '{"run": 8}', '10 minutes'),
          '33333333-3333-4333-8333-333333333333'::uuid, 'resuming answers the same id');
SELECT results_eq(
    $$SELECT count(*) FROM undolog.undolog_sessions
      WHERE session_id = '33333333-3333-4333-8333-333333333333'$$,
    $$VALUES (1::bigint)$$, 'resuming creates no second row');
SELECT results_eq(
    $$SELECT agent, metadata, state, lease_duration, lease_expires_at
      FROM undolog.undolog_sessions WHERE session_id = '33333333-3333-4333-8333-333333333333'$$,
    $$VALUES ('agent-a', '{"run": 7}'::jsonb, 'active', '10 minutes'::interval,
              now() + '10 minutes'::interval)$$,
    'resuming renews the lease (now() + the new p_lease), keeps agent and metadata'
);
SELECT is(
    (SELECT count(*) FROM undolog.undolog_session_history
     WHERE session_id = '33333333-3333-4333-8333-333333333333'),
    1::bigint, 'resuming writes no session history (the state did not change)');

-- A session in any other state is answered unchanged.
SELECT is(undolog.complete_session('33333333-3333-4333-8333-333333333333'), 'completed',
          'setup: the session completes');
CREATE TEMP TABLE before_resume AS
SELECT * FROM undolog.undolog_sessions WHERE session_id = '33333333-3333-4333-8333-333333333333';
SELECT is(undolog.begin_session('33333333-3333-4333-8333-333333333333', NULL, '{}', '1 hour'),
          '33333333-3333-4333-8333-333333333333'::uuid, 'a completed session id is answered back');
SELECT results_eq(
    $$SELECT * FROM undolog.undolog_sessions WHERE session_id = '33333333-3333-4333-8333-333333333333'$$,
    $$SELECT * FROM before_resume$$,
    'a completed session is left unchanged: still completed, lease not renewed'
);
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = '33333333-3333-4333-8333-333333333333'
      AND history_id > (SELECT max(history_id) FROM undolog.undolog_session_history
                        WHERE to_state = 'completed'
                          AND session_id = '33333333-3333-4333-8333-333333333333')$$,
    $$SELECT NULL::text, NULL::text WHERE false$$,
    'resuming a completed session writes no session history'
);

-- Boundaries of the lease: 1 second and 1 day are accepted.
SELECT lives_ok($$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{}', '1 second')$$,
                'a lease of exactly 1 second is accepted');
SELECT lives_ok($$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{}', '1 day')$$,
                'a lease of exactly 1 day is accepted');

-- Bad input: its SQLSTATE, and nothing written.
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{}', NULL)$$,
    'UL008', 'NULL lease: UL008');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{}', '999 milliseconds')$$,
    'UL008', 'lease under 1 second: UL008');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{}', '1 day 1 second')$$,
    'UL008', 'lease over 1 day: UL008');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, '[1, 2]')$$,
    'UL008', 'metadata an array: UL008');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, NULL)$$,
    'UL008', 'metadata NULL: UL008');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL,
                                   jsonb_build_object('blob', repeat('x', 1100000)))$$,
    'UL009', 'metadata over 1 MiB: UL009');
SELECT pg_temp.refused(
    $$SELECT undolog.begin_session(gen_random_uuid(), NULL, '{"budget": -1e400}')$$,
    'UL008', 'metadata holding a number no double holds (-1e400): UL008');

SELECT throws_ok($$SELECT undolog.begin_session(NULL, repeat('a', 201))$$,
    'UL008', 'agent must be at most 200 characters', 'an agent name over 200 characters: UL008');

SELECT * FROM finish();
ROLLBACK;
