-- The views for people: sessions_overview and effect_timeline. They are security_invoker,
-- so an agent sees only its own sessions in them, and staff see all.
BEGIN;
SELECT plan(8);

\ir _helpers.psql

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;

SET SESSION AUTHORIZATION ul_t_agent_a;
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
SELECT results_eq(
    $$SELECT step_index, tool_name, event, from_state, to_state
      FROM undolog.effect_timeline WHERE session_id = 'a1000000-0000-4000-8000-000000000001'
      ORDER BY history_id$$,
    $$VALUES (0, 'create_user', 'transition', NULL, 'executing'),
             (0, 'create_user', 'transition', 'executing', 'committed'),
             (0, 'create_user', 'replayed', 'committed', 'committed'),
             (1, 'payout', 'transition', NULL, 'pending')$$,
    'effect_timeline lists every event of the session''s calls in order'
);

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

SELECT * FROM finish();
ROLLBACK;
