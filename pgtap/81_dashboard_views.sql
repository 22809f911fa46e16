-- The dashboard's views (sql/views/): sessions_list, session_calls,
-- undo_stack_entries, session_approvals, session_state_history, operator_action_log.
-- security_invoker, so the tables' row-level security decides: an agent reads its own
-- sessions' rows, staff read every row, and operator actions are staff-only.
BEGIN;
SELECT plan(14);

\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('payout', 'irreversible') AS tool_id \gset

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('payout', 'irreversible') AS tool_id \gset
SELECT undolog.begin_session('a1000000-0000-4000-8000-000000000001', 'agent-a');
SELECT effect_id AS e0 FROM undolog.intercept('a1000000-0000-4000-8000-000000000001', 0,
    'create_user', 'compensable', '{"email": "a@example.com"}', pg_temp.sig('d-a-0'),
    '{"name": "delete_user"}') \gset
SELECT undolog.commit(:'e0', '{"user_id": 1}');
SELECT approval_id AS a1 FROM undolog.intercept('a1000000-0000-4000-8000-000000000001', 1,
    'payout', 'irreversible', '{"cents": 5}', pg_temp.sig('d-a-1')) \gset
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT undolog.begin_session('b1000000-0000-4000-8000-000000000001', 'agent-b');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_approver;
SELECT undolog.reject(:'a1', 'alice', 'too much');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_operator;
SELECT undolog.rollback_session('b1000000-0000-4000-8000-000000000001', 'bob', 'stop');
RESET SESSION AUTHORIZATION;

SELECT results_eq(
    $$SELECT step_index, tool_name, state, args_length
      FROM undolog.session_calls WHERE session_id = 'a1000000-0000-4000-8000-000000000001'
      ORDER BY step_index$$,
    $$VALUES (0, 'create_user', 'committed', 26), (1, 'payout', 'rejected', 12)$$,
    'session_calls lists the calls with their state and payload length'
);
SELECT results_eq(
    $$SELECT stack_position > 0, step_index, tool_name, compensation_name, state
      FROM undolog.undo_stack_entries
      WHERE session_id = 'a1000000-0000-4000-8000-000000000001'
      ORDER BY stack_position DESC$$,
    $$VALUES (TRUE, 1, 'payout', NULL, 'pending'),
             (TRUE, 0, 'create_user', 'delete_user', 'pending')$$,
    'undo_stack_entries names the call each entry undoes, top of the stack first'
);
SELECT results_eq(
    $$SELECT tool_name, state, decided_by, decided_role, reason
      FROM undolog.session_approvals$$,
    $$VALUES ('payout', 'rejected', 'alice', 'ul_t_approver'::text, 'too much')$$,
    'session_approvals says who decided, as which login, and why'
);
SELECT results_eq(
    $$SELECT action, performed_by, actor, reason FROM undolog.operator_action_log$$,
    $$VALUES ('rollback', 'bob', 'ul_t_operator'::text, 'stop')$$,
    'operator_action_log records who rolled back, as which login, and why'
);
SELECT results_eq(
    $$SELECT to_state FROM undolog.session_state_history
      WHERE session_id = 'b1000000-0000-4000-8000-000000000001' ORDER BY history_id$$,
    $$VALUES ('active'), ('failed')$$,
    'session_state_history lists every state of the session'
);

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT is((SELECT array_agg(agent) FROM undolog.sessions_list), ARRAY['agent-b'],
          'an agent sees only its own sessions in sessions_list');
SELECT is((SELECT count(*) FROM undolog.session_calls), 0::bigint,
          'an agent sees none of another agent''s calls');
SELECT is((SELECT count(*) FROM undolog.session_approvals), 0::bigint,
          'an agent sees none of another agent''s approvals');
SELECT is((SELECT count(*) FROM undolog.undo_stack_entries), 0::bigint,
          'an agent sees none of another agent''s undo stack');
SELECT throws_ok($$SELECT * FROM undolog.operator_action_log$$, '42501', NULL,
                 'an agent cannot read operator actions');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT is((SELECT count(*) FROM undolog.session_approvals), 1::bigint,
          'an agent reads its own sessions'' approvals, decided ones included');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_operator;
SELECT set_eq($$SELECT agent FROM undolog.sessions_list$$,
              ARRAY['agent-a', 'agent-b'], 'an operator sees every session');
RESET SESSION AUTHORIZATION;

SELECT throws_ok($$INSERT INTO undolog.sessions_list (session_id) VALUES (gen_random_uuid())$$,
                 NULL, 'the views are read-only');
SELECT is(has_table_privilege('public', 'undolog.session_calls', 'SELECT'), FALSE,
          'PUBLIC may not read session_calls');

SELECT * FROM finish();
ROLLBACK;
