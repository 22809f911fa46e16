-- undolog.replace_tool: an operator registers a tool and, when the live registration
-- differs, retires it (recorded with who and why) and registers the new one in the same
-- transaction; an agent and an approver may not; the same definition again retires
-- nothing; rolled back, nothing of it stays.
-- Logins are played with SET SESSION AUTHORIZATION: ownership is session_user.
BEGIN;
SELECT plan(19);

CREATE ROLE ul_t_replace_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_replace_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_replace_operator NOLOGIN IN ROLE undolog_operator;

SET SESSION AUTHORIZATION ul_t_replace_agent;
SELECT undolog.register_tool('pay_out', 'compensable', '{"name": "noop"}') AS theirs \gset
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL, NULL,
        'fail_session', 'ada', 'it pays out')$$,
    '42501', NULL, 'an agent may not replace a registration, not even its own');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_replace_approver;
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
        'ul_t_replace_agent', 'fail_session', 'ada', 'it pays out')$$,
    '42501', NULL, 'an approver may not replace a registration');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_replace_operator;
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
        'ul_t_replace_agent', 'fail_session', ' ', 'it pays out')$$,
    'UL008', NULL, 'a replacement names who decides (p_by)');
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
        'ul_t_replace_agent', 'fail_session', 'ada', E'\t')$$,
    'UL008', NULL, 'and says why (p_reason)');
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'compensable', '{"name": "noop"}',
        'ul_t_replace_agent', 'fail_session', 'ada', NULL)$$,
    'UL008', NULL, 'even when the live registration is already the one asked for');
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'safe', NULL,
        'ul_t_replace_agent', 'fail_session', 'ada', 'it pays out')$$,
    'UL006', NULL, 'the new definition is checked as register_tool checks it');
SELECT throws_ok(
    $$SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
        'no_such_login_x', 'fail_session', 'ada', 'it pays out')$$,
    'UL008', 'p_owner no_such_login_x is not a role', 'the owner is a role');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_tools WHERE retired_at IS NOT NULL),
          0, 'a refused replacement retires nothing');

-- Rolled back, the replacement leaves the agent's registration live.
SAVEPOINT before_replace;
SELECT * FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
    'ul_t_replace_agent', 'fail_session', 'ada', 'it pays out');
ROLLBACK TO SAVEPOINT before_replace;
SELECT is((SELECT tool_id FROM undolog.undolog_tools
           WHERE owner_role = 'ul_t_replace_agent' AND tool_name = 'pay_out'
             AND retired_at IS NULL),
          :'theirs'::uuid, 'a replacement rolled back leaves the live registration live');

SELECT tool_id AS ours, retired FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
    'ul_t_replace_agent', 'fail_session', 'ada', 'it pays out') \gset
SELECT is(:'retired'::uuid, :'theirs'::uuid, 'it answers the registration it retired');
SELECT isnt(:'ours'::uuid, :'theirs'::uuid, 'and the new registration''s id');
RESET SESSION AUTHORIZATION;

SELECT is((SELECT (retired_by, retire_reason, retired_actor)::text FROM undolog.undolog_tools
           WHERE tool_id = :'theirs'),
          '(ada,"it pays out",ul_t_replace_operator)',
          'the retirement records who, why and from which login, as retire_tool does');
SELECT is((SELECT (tool_id, tier, compensation IS NULL, registered_by)::text
           FROM undolog.undolog_tools
           WHERE owner_role = 'ul_t_replace_agent' AND tool_name = 'pay_out'
             AND retired_at IS NULL),
          pg_catalog.format('(%s,irreversible,t,ul_t_replace_operator)', :'ours'),
          'the live registration is the operator''s');

SET SESSION AUTHORIZATION ul_t_replace_agent;
SELECT throws_ok(
    $$SELECT undolog.register_tool('pay_out', 'compensable', '{"name": "noop"}')$$,
    'UL018', NULL, 'the agent''s own definition is then refused');
SELECT is(undolog.register_tool('pay_out', 'irreversible'), :'ours'::uuid,
          'the operator''s is the agent''s tool');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_replace_operator;
SELECT results_eq(
    $$SELECT tool_id, retired FROM undolog.replace_tool('pay_out', 'irreversible', NULL,
        'ul_t_replace_agent', 'fail_session', 'ada', 'again')$$,
    pg_catalog.format($$VALUES (%L::uuid, NULL::uuid)$$, :'ours'),
    'the same definition again replaces nothing: the live id, nothing retired');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_tools
           WHERE owner_role = 'ul_t_replace_agent'), 2,
          'and writes nothing');
SELECT is((SELECT retired FROM undolog.replace_tool('refund', 'compensable',
               '{"name": "charge"}', 'ul_t_replace_agent', 'fail_session', 'ada', 'pinned')),
          NULL, 'a tool with no live registration is registered, nothing retired');
RESET SESSION AUTHORIZATION;

SELECT is((SELECT count(*)::integer FROM undolog.undolog_tools
           WHERE owner_role = 'ul_t_replace_agent' AND retired_at IS NULL), 2,
          'one live registration per tool');

SELECT * FROM finish();
ROLLBACK;
