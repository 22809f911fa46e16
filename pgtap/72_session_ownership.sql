-- Writes are the owner's: an agent cannot intercept into, commit or fail in, heartbeat,
-- resume, complete or fail another agent's session (42501), and nothing is written when
-- it tries. Neither may an approver or operator make or report calls: people act through
-- approve/reject and the recorded operator functions (rollback_session here).
-- Logins are played with SET SESSION AUTHORIZATION: ownership is session_user.
BEGIN;
SELECT plan(24);

\ir _helpers.psql

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
-- an on-call engineer: may call the agent API, and as an operator may act on any session
CREATE ROLE ul_t_oncall NOLOGIN IN ROLE undolog_agent, undolog_operator;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_a \gset
SELECT undolog.begin_session('a0000000-0000-4000-8000-00000000000a', 'agent-a');
SELECT effect_id AS effect_a FROM undolog.intercept(
    'a0000000-0000-4000-8000-00000000000a', 0, 'create_user', 'compensable',
    '{"email": "a@example.com"}', pg_temp.sig('own-a-0'), '{"name": "delete_user"}') \gset
RESET SESSION AUTHORIZATION;

SELECT is(
    (SELECT owner_role FROM undolog.undolog_sessions
     WHERE session_id = 'a0000000-0000-4000-8000-00000000000a'),
    'ul_t_agent_a', 'the session belongs to the login that began it');

CREATE TEMP TABLE before_b AS SELECT pg_temp.journal_state() AS state;
GRANT SELECT ON before_b TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a0000000-0000-4000-8000-00000000000a', 1, 'send_email',
        'compensable', '{"to": "x@example.com"}', pg_temp.sig('own-b-1'), '{"name": "recall"}')$$,
    '42501', 'session a0000000-0000-4000-8000-00000000000a belongs to another role',
    'another agent cannot intercept into the session');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a0000000-0000-4000-8000-00000000000a', 0, 'create_user',
        'compensable', '{"email": "a@example.com"}', pg_temp.sig('own-a-0'),
        '{"name": "delete_user"}')$$,
    '42501', NULL, 'another agent cannot even replay the session''s calls');
SELECT throws_ok(format($$SELECT undolog.commit(%L, '{"stolen": true}')$$, :'effect_a'),
    '42501', NULL, 'another agent cannot commit the session''s effect');
SELECT throws_ok(format($$SELECT undolog.fail(%L, 'sabotage')$$, :'effect_a'),
    '42501', NULL, 'another agent cannot fail the session''s effect');
SELECT throws_ok($$SELECT undolog.heartbeat('a0000000-0000-4000-8000-00000000000a')$$,
    '42501', NULL, 'another agent cannot renew the session''s lease');
SELECT throws_ok($$SELECT undolog.fail_session('a0000000-0000-4000-8000-00000000000a', 'x')$$,
    '42501', NULL, 'another agent cannot fail the session (and start its undo walk)');
SELECT throws_ok($$SELECT undolog.complete_session('a0000000-0000-4000-8000-00000000000a')$$,
    '42501', NULL, 'another agent cannot complete the session');
SELECT throws_ok(
    $$SELECT undolog.begin_session('a0000000-0000-4000-8000-00000000000a', 'b', '{}', '1 day')$$,
    '42501', NULL, 'another agent cannot resume the session');
RESET SESSION AUTHORIZATION;

SELECT is(pg_temp.journal_state(), (SELECT state FROM before_b),
          'nothing was written by the other agent''s attempts');

-- The owner goes on as before.
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT lives_ok(format($$SELECT undolog.commit(%L, '{"user_id": 1}')$$, :'effect_a'),
                'the owner commits its effect');
SELECT lives_ok($$SELECT undolog.heartbeat('a0000000-0000-4000-8000-00000000000a')$$,
                'the owner renews its lease');
SELECT is(undolog.begin_session('a0000000-0000-4000-8000-00000000000a'),
          'a0000000-0000-4000-8000-00000000000a'::uuid, 'the owner resumes its session');
SELECT is(
    (SELECT action FROM undolog.intercept('a0000000-0000-4000-8000-00000000000a', 0,
        'create_user', 'compensable', '{"email": "a@example.com"}', pg_temp.sig('own-a-0'),
        '{"name": "delete_user"}')),
    'replay', 'the owner replays its call');
RESET SESSION AUTHORIZATION;

-- Staff do not act as the agent: an operator cannot renew its lease, but stops any
-- session through rollback_session, which records who and why.
SET SESSION AUTHORIZATION ul_t_oncall;
SELECT throws_ok($$SELECT undolog.heartbeat('a0000000-0000-4000-8000-00000000000a')$$,
                 '42501', NULL, 'an operator cannot renew another agent''s lease');
SELECT is(undolog.rollback_session('a0000000-0000-4000-8000-00000000000a', 'oncall',
                                   'operator stop'),
          'failed', 'an operator may roll back any session');
RESET SESSION AUTHORIZATION;

SELECT is(
    (SELECT actor FROM undolog.undolog_session_history
     WHERE session_id = 'a0000000-0000-4000-8000-00000000000a' AND to_state = 'failed'),
    'ul_t_oncall', 'the history names the operator who failed it');
SELECT is(
    (SELECT state FROM undolog.undolog_effect_log WHERE effect_id = :'effect_a'),
    'committed', 'the owner''s commit stands');

SELECT throws_ok(
    $$UPDATE undolog.undolog_sessions SET owner_role = 'ul_t_agent_b'
      WHERE session_id = 'a0000000-0000-4000-8000-00000000000a'$$,
    'UL011', NULL, 'ownership itself cannot be moved, even by the owner of the tables');

-- A login holding both the agent and the approver role cannot approve its own call.
CREATE ROLE ul_t_both NOLOGIN IN ROLE undolog_agent, undolog_approver;
SET SESSION AUTHORIZATION ul_t_both;
SELECT pg_temp.tool('payout', 'irreversible') AS tool_payout \gset
SELECT undolog.begin_session('b0000000-0000-4000-8000-00000000000b');
SELECT approval_id AS own_approval FROM undolog.intercept(
    'b0000000-0000-4000-8000-00000000000b', 0, 'payout', 'irreversible', '{"cents": 1}',
    pg_temp.sig('own-approval')) \gset
SELECT throws_ok(format($$SELECT undolog.approve(%L, 'me')$$, :'own_approval'),
    '42501', NULL, 'a login cannot approve its own call');
SELECT is(undolog.reject(:'own_approval', 'me', 'changed my mind'), 'rejected',
          'it may still reject it');
RESET SESSION AUTHORIZATION;

-- A login that can become the maker (a member of its login: SET ROLE, then set its
-- password), or that the maker can become, is the maker.
SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT pg_temp.tool('payout', 'irreversible') AS tool_payout_b \gset
SELECT undolog.begin_session('c0000000-0000-4000-8000-00000000000c');
SELECT approval_id AS b_approval FROM undolog.intercept(
    'c0000000-0000-4000-8000-00000000000c', 0, 'payout', 'irreversible', '{"cents": 2}',
    pg_temp.sig('b-approval')) \gset
RESET SESSION AUTHORIZATION;
CREATE ROLE ul_t_boss NOLOGIN IN ROLE undolog_approver;
GRANT ul_t_agent_b TO ul_t_boss;
SET SESSION AUTHORIZATION ul_t_boss;
SELECT throws_ok(format($$SELECT undolog.approve(%L, 'boss')$$, :'b_approval'),
    '42501', NULL, 'a member of the maker''s login cannot approve its call');
RESET SESSION AUTHORIZATION;
REVOKE ul_t_agent_b FROM ul_t_boss;
GRANT ul_t_boss TO ul_t_agent_b;
SET SESSION AUTHORIZATION ul_t_boss;
SELECT throws_ok(format($$SELECT undolog.approve(%L, 'boss')$$, :'b_approval'),
    '42501', NULL, 'nor a login the maker is a member of');
RESET SESSION AUTHORIZATION;
REVOKE ul_t_boss FROM ul_t_agent_b;
SET SESSION AUTHORIZATION ul_t_boss;
SELECT is(undolog.approve(:'b_approval', 'boss'), 'approved',
          'once neither is the other''s member, it approves');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
