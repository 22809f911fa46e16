-- The tool registry: an agent's call must name a live registered tool of its session's
-- owner, with the registered tier and compensation, and the undo entry takes its
-- compensation from the registration. Only the session's owner reports a call's outcome:
-- neither a login that also approves nor an operator may commit or fail it.
-- Logins are played with SET SESSION AUTHORIZATION: ownership is session_user.
BEGIN;
SELECT plan(27);

\ir _helpers.psql

CREATE ROLE ul_t_tools_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_tools_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_tools_both NOLOGIN IN ROLE undolog_agent, undolog_approver;
CREATE ROLE ul_t_tools_oncall NOLOGIN IN ROLE undolog_agent, undolog_operator;

SET SESSION AUTHORIZATION ul_t_tools_a;
SELECT undolog.register_tool('create_user', 'compensable',
                             '{"name": "delete_user", "args": {"soft": true}}') AS tool_a \gset
SELECT is(undolog.register_tool('create_user', 'compensable',
                                '{"name": "delete_user", "args": {"soft": true}}'),
          :'tool_a'::uuid, 'registering the same definition again answers the same tool');
SELECT throws_ok(
    $$SELECT undolog.register_tool('create_user', 'irreversible')$$,
    'UL018', NULL, 'a live registration cannot change its tier');
SELECT throws_ok(
    $$SELECT undolog.register_tool('create_user', 'compensable', '{"name": "drop_table"}')$$,
    'UL018', NULL, 'a live registration cannot change its compensation');
SELECT throws_ok(
    $$SELECT undolog.register_tool('create_user', 'compensable', '{"nam": "x"}')$$,
    'UL007', NULL, 'a registration is validated like a call''s tool (check_tool)');
SELECT throws_ok(
    $$SELECT undolog.register_tool('ship', 'safe')$$,
    'UL006', NULL, 'a registration''s tier is compensable or irreversible');
SELECT throws_ok(
    $$SELECT undolog.register_tool('ship', 'irreversible', NULL, 'ul_t_tools_b')$$,
    '42501', NULL, 'an agent cannot register a tool for another login');
SELECT undolog.register_tool('pay', 'irreversible') AS tool_pay \gset

SELECT undolog.begin_session('a1000000-0000-4000-8000-00000000000a', 'agent-a');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-00000000000a', 0, 'drop_db',
        'compensable', '{}', pg_temp.sig('tools-a-0'), '{"name": "undrop"}')$$,
    'UL017', 'tool drop_db is not registered for ul_t_tools_a',
    'a call naming no registered tool is refused');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-00000000000a', 0, 'pay',
        'compensable', '{}', pg_temp.sig('tools-a-0'), '{"name": "refund"}')$$,
    'UL018', NULL, 'a call cannot choose another tier than its tool''s');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-00000000000a', 0, 'create_user',
        'compensable', '{}', pg_temp.sig('tools-a-0'),
        '{"name": "mcp:payments/process_payout", "args": {"to": "mallory"}}')$$,
    'UL018', NULL, 'a call cannot bring its own compensation');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-00000000000a', 0, 'create_user',
        'compensable', '{}', pg_temp.sig('tools-a-0'),
        '{"name": "delete_user", "args": {"soft": true}, "max_attempts": 100}')$$,
    'UL018', NULL, 'nor its own max_attempts');
SELECT effect_id AS effect_a FROM undolog.intercept(
    'a1000000-0000-4000-8000-00000000000a', 0, 'create_user', 'compensable',
    '{"email": "a@example.com"}', pg_temp.sig('tools-a-0'),
    '{"name": "delete_user", "args": {"soft": true}}') \gset
RESET SESSION AUTHORIZATION;

SELECT is((SELECT tool_id FROM undolog.undolog_effect_log WHERE effect_id = :'effect_a'),
          :'tool_a'::uuid, 'the effect records its registration');
SELECT is((SELECT compensation FROM undolog.undolog_undo_stack WHERE effect_id = :'effect_a'),
          '{"name": "delete_user", "args": {"soft": true}}'::jsonb,
          'the undo entry''s compensation is the registration''s');

-- Another agent login: a's tools are not its tools.
SET SESSION AUTHORIZATION ul_t_tools_b;
SELECT undolog.begin_session('b1000000-0000-4000-8000-00000000000b', 'agent-b');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('b1000000-0000-4000-8000-00000000000b', 0, 'create_user',
        'compensable', '{}', pg_temp.sig('tools-b-0'),
        '{"name": "delete_user", "args": {"soft": true}}')$$,
    'UL017', NULL, 'another owner''s registration does not admit the call');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_tools), 0,
          'an agent reads only its own login''s tools');
RESET SESSION AUTHORIZATION;

-- Outcomes are the owner's: a login that also approves, or an operator, cannot report one.
SET SESSION AUTHORIZATION ul_t_tools_both;
SELECT throws_ok(format($$SELECT undolog.commit(%L, '{"forged": true}')$$, :'effect_a'),
    '42501', NULL, 'an agent+approver login cannot commit another agent''s call');
SELECT throws_ok(format($$SELECT undolog.fail(%L, 'forged')$$, :'effect_a'),
    '42501', NULL, 'an agent+approver login cannot fail another agent''s call');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ul_t_tools_oncall;
SELECT throws_ok(format($$SELECT undolog.commit(%L, '{"forged": true}')$$, :'effect_a'),
    '42501', NULL, 'an operator cannot commit another agent''s call');
SELECT throws_ok(format($$SELECT undolog.fail(%L, 'forged')$$, :'effect_a'),
    '42501', NULL, 'an operator cannot fail another agent''s call');
SELECT throws_ok($$SELECT undolog.heartbeat('a1000000-0000-4000-8000-00000000000a')$$,
    '42501', NULL, 'an operator cannot renew another agent''s lease');
SELECT throws_ok($$SELECT undolog.fail_session('a1000000-0000-4000-8000-00000000000a', 'x')$$,
    '42501', NULL, 'an operator stops a session with rollback_session, not fail_session');
-- An operator pins a tool for an agent login before it runs.
SELECT isnt(undolog.register_tool('refund', 'compensable', '{"name": "charge"}',
                                  'ul_t_tools_b'), NULL,
            'an operator may register a tool for an agent login');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT registered_by FROM undolog.undolog_tools
           WHERE tool_name = 'refund' AND owner_role = 'ul_t_tools_b'),
          'ul_t_tools_oncall', 'the registration names the login that made it');

-- Retirement: operator only, recorded; the tool's new calls are then refused.
SET SESSION AUTHORIZATION ul_t_tools_oncall;
SELECT undolog.retire_tool(:'tool_pay', 'alice', 'payouts move to the MCP proxy');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT (retired_by, retire_reason, retired_actor)::text FROM undolog.undolog_tools
           WHERE tool_id = :'tool_pay'),
          '(alice,"payouts move to the MCP proxy",ul_t_tools_oncall)',
          'a retirement records who, why and from which login');
SET SESSION AUTHORIZATION ul_t_tools_a;
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-00000000000a', 1, 'pay',
        'irreversible', '{}', pg_temp.sig('tools-a-1'))$$,
    'UL017', NULL, 'a retired tool''s new calls are refused');
RESET SESSION AUTHORIZATION;

-- A descriptor that disagrees with the registration (only a write around the API can
-- make one: forged here with the undo stack's guard off) is never run: the walk halts.
ALTER TABLE undolog.undolog_undo_stack DISABLE TRIGGER USER;
UPDATE undolog.undolog_undo_stack SET compensation = '{"name": "mcp:payments/process_payout",
    "args": {"to": "mallory"}}' WHERE effect_id = :'effect_a';
ALTER TABLE undolog.undolog_undo_stack ENABLE TRIGGER USER;
SET SESSION AUTHORIZATION ul_t_tools_a;
SELECT undolog.commit(:'effect_a', '{"user_id": 1}');
SELECT undolog.fail_session('a1000000-0000-4000-8000-00000000000a', 'gave up');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT count(*)::integer
           FROM undolog.claim_compensation('a1000000-0000-4000-8000-00000000000a')), 0,
          'a forged descriptor is not handed to a walker');
SELECT is(pg_temp.session_state('a1000000-0000-4000-8000-00000000000a'), 'halted',
          'the walk halts for a person instead');
SELECT matches((SELECT error FROM undolog.undolog_sessions
                WHERE session_id = 'a1000000-0000-4000-8000-00000000000a'),
               'process_payout.*registered with.*delete_user',
               'the reason names the forged and the registered compensation');

SELECT * FROM finish();
ROLLBACK;
