-- The views for people: sessions_overview and effect_timeline. They are security_invoker,
-- so an agent sees only its own sessions in them, and staff see all.
BEGIN;
SELECT plan(12);

\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('payout', 'irreversible') AS tool_id \gset

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('payout', 'irreversible') AS tool_id \gset
SELECT undolog.begin_session('a1000000-0000-4000-8000-000000000001', 'agent-a');
SELECT effect_id AS e0 FROM undolog.intercept('a1000000-0000-4000-8000-000000000001', 0,
    'create_user', 'compensable', '{"email": "a@example.com"}', pg_temp.sig('v-a-0'),
    '{"name": "delete_user"}') \gset
SELECT undolog.commit(:'e0', '{"user_id": 1}');
SELECT action FROM undolog.intercept('a1000000-0000-4000-8000-000000000001', 0,
    'create_user', 'compensable', '{"email": "a@example.com"}', pg_temp.sig('v-a-0'),
    '{"name": "delete_user"}');
SELECT approval_id FROM undolog.intercept('a1000000-0000-4000-8000-000000000001', 1,
    'payout', 'irreversible', '{"cents": 5}', pg_temp.sig('v-a-1'));
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT undolog.begin_session('b1000000-0000-4000-8000-000000000001', 'agent-b');
RESET SESSION AUTHORIZATION;

SELECT results_eq(
    $$SELECT state, calls, committed_calls, undone_calls, awaiting_approval_calls, replays
      FROM undolog.sessions_overview WHERE session_id = 'a1000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('awaiting_approval'::text, 2::bigint, 1::bigint, 0::bigint, 1::bigint, 1::bigint)$$,
    'sessions_overview counts the session''s calls by state'
);
-- A call's creation and commit are recorded in its own row (migration 0013): the view
-- synthesises them (no history_id, the maker and the committer as actor); the replay is
-- a history row. seq, the event's place in the session's chain, orders them all, then
-- at: the compensable call committed before any other change, so its creation and its
-- commit share the commit's one link (the creation comes first by its time).
SELECT results_eq(
    $$SELECT step_index, tool_name, event, from_state, to_state, actor, history_id IS NULL
      FROM undolog.effect_timeline WHERE session_id = 'a1000000-0000-4000-8000-000000000001'
      ORDER BY seq, at$$,
    $$VALUES (0, 'create_user', 'transition', NULL, 'executing', 'ul_t_agent_a', true),
             (0, 'create_user', 'transition', 'executing', 'committed', 'ul_t_agent_a', true),
             (0, 'create_user', 'replayed', 'committed', 'committed', 'ul_t_agent_a', false),
             (1, 'payout', 'transition', NULL, 'pending', 'ul_t_agent_a', true)$$,
    'effect_timeline lists every event of the session''s calls in order'
);
SELECT is(
    (SELECT count(DISTINCT seq) || '/' || count(seq) || '/' || count(*) FROM undolog.effect_timeline
     WHERE session_id = 'a1000000-0000-4000-8000-000000000001'),
    '3/4/4',
    'every event has a seq: the committed call''s creation and commit share one, the others their own'
);
SELECT is(
    (SELECT a.attname::text FROM pg_attribute AS a
     WHERE a.attrelid = 'undolog.effect_timeline'::regclass AND a.attnum > 0
     ORDER BY a.attnum DESC LIMIT 1),
    'seq', 'the timeline''s last column is seq');

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT is((SELECT array_agg(agent) FROM undolog.sessions_overview), ARRAY['agent-b'],
          'an agent sees only its own sessions in sessions_overview');
SELECT is((SELECT count(*) FROM undolog.effect_timeline), 0::bigint,
          'an agent sees none of another agent''s events in effect_timeline');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT is((SELECT count(*) FROM undolog.effect_timeline), 4::bigint,
          'an agent sees its own events');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_approver;
SELECT set_eq($$SELECT agent FROM undolog.sessions_overview$$,
              ARRAY['agent-a', 'agent-b'], 'an approver sees every session');
RESET SESSION AUTHORIZATION;

SELECT throws_ok($$INSERT INTO undolog.effect_timeline (session_id) VALUES (gen_random_uuid())$$,
                 NULL, 'the timeline is read-only');
SELECT is(has_table_privilege('undolog_agent', 'undolog.sessions_overview', 'SELECT'), true,
          'agents may read the overview (filtered to their sessions)');

-- A walk that compensates the newer call, then halts at the older one (its compensation
-- fails for good): only the compensated call counts as undone; the halted session then
-- shows whether an operator abandoned it.
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT undolog.begin_session('c1000000-0000-4000-8000-000000000001', 'agent-a');
SELECT pg_temp.tool('create_admin', 'compensable', '{"name": "delete_user", "max_attempts": 1}')
    AS tool_id \gset
SELECT effect_id AS c0 FROM undolog.intercept('c1000000-0000-4000-8000-000000000001', 0,
    'create_admin', 'compensable', '{"n": 0}', pg_temp.sig('v-c-0'),
    '{"name": "delete_user", "max_attempts": 1}') \gset
SELECT undolog.commit(:'c0', '{"user_id": 2}');
SELECT effect_id AS c1 FROM undolog.intercept('c1000000-0000-4000-8000-000000000001', 1,
    'create_user', 'compensable', '{"n": 1}', pg_temp.sig('v-c-1'),
    '{"name": "delete_user"}') \gset
SELECT undolog.commit(:'c1', '{"user_id": 3}');
SELECT undolog.fail_session('c1000000-0000-4000-8000-000000000001', 'gave up');
RESET SESSION AUTHORIZATION;
SELECT undo_id AS u1, attempt AS a1
FROM undolog.claim_compensation('c1000000-0000-4000-8000-000000000001') \gset
SELECT undolog.complete_compensation(:'u1', :'a1');
SELECT undo_id AS u0, attempt AS a0
FROM undolog.claim_compensation('c1000000-0000-4000-8000-000000000001') \gset
SELECT undolog.fail_compensation(:'u0', 'the API is down', :'a0');

SELECT results_eq(
    $$SELECT state, undone_calls, compensating_calls, compensation_failed_calls,
             resolved_at IS NULL
      FROM undolog.sessions_overview WHERE session_id = 'c1000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('halted'::text, 1::bigint, 0::bigint, 1::bigint, true)$$,
    'undone_calls counts compensated calls only; a halted session waits for an operator'
);
SELECT undolog.abandon_session('c1000000-0000-4000-8000-000000000001', 'alice', 'by hand');
SELECT results_eq(
    $$SELECT state, resolved_by, resolution
      FROM undolog.sessions_overview WHERE session_id = 'c1000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('halted'::text, 'alice'::text, 'by hand'::text)$$,
    'an abandoned halted session shows who resolved it and how'
);

SELECT * FROM finish();
ROLLBACK;
