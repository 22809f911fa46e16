-- A commit or fail that arrives after the undo walk took its effect (the agent was paused
-- past its lease): recorded in the effect's history (what, when, from whom), the session
-- flagged for an operator (sessions_overview.needs_attention, derived from that record),
-- answered 'late'; the effect's state is the
-- walk's (docs/design/durability.md: the journal must not say "undone" of an effect
-- that stands).
BEGIN;
SELECT plan(17);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset

SELECT is(undolog.begin_session('1a7e0000-0000-4000-8000-000000000001'),
          '1a7e0000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
CREATE TEMP TABLE fx AS
SELECT i.effect_id
FROM undolog.intercept('1a7e0000-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
                       '{"email": "a@example.com"}', pg_temp.sig('late-0'),
                       '{"name": "delete_user"}') AS i;
SELECT is(undolog.fail_session('1a7e0000-0000-4000-8000-000000000001', 'lease expired'),
          'failed', 'setup: the session fails (as recovery does when the lease runs out)');
SELECT is((SELECT c.effect_id FROM undolog.claim_compensation('1a7e0000-0000-4000-8000-000000000001') AS c),
          (SELECT effect_id FROM fx), 'setup: the walk claims the call');
SELECT is((SELECT state FROM undolog.undolog_effect_log WHERE effect_id = (SELECT effect_id FROM fx)),
          'compensating', 'setup: the effect is compensating');
SELECT is((SELECT needs_attention FROM undolog.sessions_overview
           WHERE session_id = '1a7e0000-0000-4000-8000-000000000001'),
          false, 'the session needs no attention yet');

-- The paused agent wakes and reports its body's result, asking for an asynchronous commit.
SELECT is(undolog.commit((SELECT effect_id FROM fx), '{"user_id": 7}', true), 'late',
          'the late commit answers late instead of raising (a raise would roll back its record)');
SELECT is(current_setting('synchronous_commit'), 'on',
          'the late record commits durably although the caller asked for an asynchronous commit');
SELECT is((SELECT state FROM undolog.undolog_effect_log WHERE effect_id = (SELECT effect_id FROM fx)),
          'compensating', 'the effect stays where the walk has it');
SELECT results_eq(
    $$SELECT event, from_state, to_state, actor = session_user, detail->>'arrived', detail->'result'
      FROM undolog.undolog_effect_history
      WHERE effect_id = (SELECT effect_id FROM fx) AND event LIKE 'late%'$$,
    $$VALUES ('late_commit', 'compensating', 'compensating', true, 'committed',
              '{"user_id": 7}'::jsonb)$$,
    'the effect''s history records what arrived, from whom'
);
SELECT ok((SELECT (detail->>'arrived_at')::timestamptz <= clock_timestamp()
           FROM undolog.undolog_effect_history
           WHERE effect_id = (SELECT effect_id FROM fx) AND event = 'late_commit'),
          '... and when');
SELECT is((SELECT needs_attention FROM undolog.sessions_overview
           WHERE session_id = '1a7e0000-0000-4000-8000-000000000001'),
          true, 'sessions_overview flags the session for an operator');
SELECT ok((SELECT attention_reason LIKE 'a commit arrived at % for effect '
                  || (SELECT effect_id FROM fx) || ' after the undo walk took it (compensating)%'
           FROM undolog.sessions_overview
           WHERE session_id = '1a7e0000-0000-4000-8000-000000000001'),
          '... with the reason');

-- The compensation finishes; a late fail is recorded the same way.
SELECT undolog.complete_compensation(
    (SELECT u.undo_id FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = (SELECT effect_id FROM fx)));
SELECT is(undolog.fail((SELECT effect_id FROM fx), 'HTTP 500'), 'late',
          'a fail arriving for a compensated effect answers late');
SELECT results_eq(
    $$SELECT event, from_state, detail->>'arrived', detail->>'error'
      FROM undolog.undolog_effect_history
      WHERE effect_id = (SELECT effect_id FROM fx) AND event = 'late_fail'$$,
    $$VALUES ('late_fail', 'compensated', 'pending', 'HTTP 500')$$,
    '... recorded in the history with its error'
);

-- Not every refused commit is late: a second commit of a committed call is still UL001.
SELECT is(undolog.begin_session('1a7e0000-0000-4000-8000-000000000002'),
          '1a7e0000-0000-4000-8000-000000000002'::uuid, 'setup: another session');
CREATE TEMP TABLE fy AS
SELECT i.effect_id
FROM undolog.intercept('1a7e0000-0000-4000-8000-000000000002', 0, 'create_user', 'compensable',
                       '{}', pg_temp.sig('late-1'), '{"name": "delete_user"}') AS i;
SELECT undolog.commit((SELECT effect_id FROM fy), '{}');
SELECT pg_temp.refused(format('SELECT undolog.commit(%L, %L)', (SELECT effect_id FROM fy), '{}'),
                       'UL001', 'committing a committed call twice is still refused (UL001)');

SELECT * FROM finish();
ROLLBACK;
