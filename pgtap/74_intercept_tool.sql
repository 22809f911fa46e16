-- undolog.intercept_tool: a call names its tool by the registration's id. What the
-- registration fixed (name, tier, compensation) is the call's, unchecked again; what the
-- call brings (session, step, args, signature) is checked as intercept checks it. The id
-- must be a live registration of the caller's login (UL017 otherwise), and the answers
-- are intercept's: both share journal_call.
-- Logins are played with SET SESSION AUTHORIZATION: ownership is session_user, which SET
-- ROLE leaves alone; SET ROLE plays a login without the agent role (its privileges).
BEGIN;
SELECT plan(26);

\ir _helpers.psql

CREATE ROLE ul_t_it_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_it_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_it_op NOLOGIN IN ROLE undolog_operator;
CREATE ROLE ul_t_it_nobody NOLOGIN;

SELECT has_function('undolog', 'intercept_tool', ARRAY['uuid', 'uuid', 'integer', 'jsonb', 'text'],
                    'intercept_tool(session, tool_id, step, args, signature): no tier to give');
SELECT is((SELECT pg_get_function_result(p.oid) FROM pg_proc AS p
           WHERE p.oid = 'undolog.intercept_tool(uuid, uuid, integer, jsonb, text)'::regprocedure),
          (SELECT pg_get_function_result(p.oid) FROM pg_proc AS p
           WHERE p.oid = 'undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb)'
                         ::regprocedure),
          'it answers intercept''s row');

SET SESSION AUTHORIZATION ul_t_it_a;
SELECT undolog.register_tool('create_user', 'compensable',
                             '{"name": "delete_user", "args": {"soft": true}}') AS tool_a \gset
SELECT undolog.register_tool('send_email', 'irreversible') AS tool_mail \gset
SELECT undolog.begin_session('a2000000-0000-4000-8000-00000000000a', 'agent-a') AS sid \gset

-- A new call, then its replay; by name, intercept finds the same journaled call.
SELECT effect_id AS effect_a, action AS act_a FROM undolog.intercept_tool(
    :'sid', :'tool_a', 0, '{"email": "a@example.com"}', pg_temp.sig('it-a-0')) \gset
SELECT is(:'act_a'::text, 'execute', 'a new call of a registered tool executes');
SELECT undolog.commit(:'effect_a', '{"user_id": 1}');
SELECT results_eq(
    format($$SELECT effect_id, action, result_snapshot FROM undolog.intercept_tool(
        %L, %L, 0, '{"email": "a@example.com"}', pg_temp.sig('it-a-0'))$$, :'sid', :'tool_a'),
    format($$VALUES (%L::uuid, 'replay'::text, '{"user_id": 1}'::jsonb)$$, :'effect_a'),
    'made again, it replays');
SELECT results_eq(
    format($$SELECT effect_id, action FROM undolog.intercept(%L, 0, 'create_user',
        'compensable', '{"email": "a@example.com"}', pg_temp.sig('it-a-0'),
        '{"name": "delete_user", "args": {"soft": true}}')$$, :'sid'),
    format($$VALUES (%L::uuid, 'replay'::text)$$, :'effect_a'),
    'intercept, by name, replays the same call: one journal');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{"email": "b@example.com"}',
        pg_temp.sig('it-a-0'))$$, :'sid', :'tool_a'),
    'UL005', NULL, 'a known signature with other args is refused, as by intercept');

-- The registration's tier is the call's: an irreversible tool asks a person.
SELECT results_eq(
    format($$SELECT action, state FROM undolog.intercept_tool(%L, %L, 1, '{"to": "ada"}',
        pg_temp.sig('it-a-1'))$$, :'sid', :'tool_mail'),
    $$VALUES ('await_approval'::text, 'pending'::text)$$,
    'an irreversible registration''s call waits for approval (its tier is the registration''s)');
RESET SESSION AUTHORIZATION;

SELECT results_eq(
    format($$SELECT tool_id, tool_name, tier FROM undolog.undolog_effect_log
             WHERE session_id = %L ORDER BY step_index$$, :'sid'),
    format($$VALUES (%L::uuid, 'create_user'::text, 'compensable'::text),
                    (%L::uuid, 'send_email'::text, 'irreversible'::text)$$,
           :'tool_a', :'tool_mail'),
    'each effect records its registration, name and tier');
SELECT is((SELECT compensation FROM undolog.undolog_undo_stack WHERE effect_id = :'effect_a'),
          '{"name": "delete_user", "args": {"soft": true}}'::jsonb,
          'the undo entry''s compensation is the registration''s');

-- What varies per call is checked, and a refusal writes nothing.
SET SESSION AUTHORIZATION ul_t_it_b;
SELECT undolog.register_tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_b
\gset
SELECT undolog.begin_session('b2000000-0000-4000-8000-00000000000b', 'agent-b') AS sid_b \gset
RESET SESSION AUTHORIZATION;
SELECT pg_temp.journal_state() AS before_b \gset
SET SESSION AUTHORIZATION ul_t_it_b;
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{}', 'not-a-signature')$$,
           :'sid_b', :'tool_b'),
    'UL004', NULL, 'a malformed signature is refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '[1]', pg_temp.sig('it-b-0'))$$,
           :'sid_b', :'tool_b'),
    'UL008', NULL, 'args that are not an object are refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, -1, '{}', pg_temp.sig('it-b-0'))$$,
           :'sid_b', :'tool_b'),
    'UL008', NULL, 'a negative step is refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, %L, pg_temp.sig('it-b-0'))$$,
           :'sid_b', :'tool_b', repeat('{"a": ', 70) || '1' || repeat('}', 70)),
    'UL009', NULL, 'args nested past the limit are refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, NULL, 0, '{}', pg_temp.sig('it-b-0'))$$,
           :'sid_b'), 'UL008', 'tool_id is required', 'a call names its tool_id');

-- Another login's tool id admits nothing, in a session of one's own.
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{}', pg_temp.sig('it-b-0'))$$,
           :'sid_b', :'tool_a'),
    'UL017', NULL, 'another login''s tool_id is refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{}', pg_temp.sig('it-b-0'))$$,
           :'sid_b', :'tool_a'),
    'UL017', format('tool %s is not registered for ul_t_it_b', :'tool_a'),
    'the refusal names the id, not another login''s tool');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{}', pg_temp.sig('it-b-0'))$$,
           :'sid_b', gen_random_uuid()),
    'UL017', NULL, 'an id that names no registration is refused');
-- Nor does one's own tool id in another login's session.
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 5, '{}', pg_temp.sig('it-b-5'))$$,
           :'sid', :'tool_b'),
    '42501', NULL, 'another login''s session is refused');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.journal_state(), :'before_b', 'the refused calls wrote nothing');

-- A login without the agent role may not call it at all.
SET ROLE ul_t_it_nobody;
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{}', pg_temp.sig('it-n-0'))$$,
           :'sid_b', :'tool_b'),
    '42501', NULL, 'a role without undolog_agent cannot call intercept_tool');
RESET ROLE;

-- A retired registration admits nothing, a replay of its calls included; registered
-- again, the new id admits both.
SET SESSION AUTHORIZATION ul_t_it_op;
SELECT undolog.retire_tool(:'tool_a', 'alice', 'create_user moves to v2');
RESET SESSION AUTHORIZATION;
SELECT pg_temp.journal_state() AS before_retired \gset
SET SESSION AUTHORIZATION ul_t_it_a;
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 2, '{"email": "c@example.com"}',
        pg_temp.sig('it-a-2'))$$, :'sid', :'tool_a'),
    'UL017', NULL, 'a retired registration''s new call is refused');
SELECT throws_ok(
    format($$SELECT * FROM undolog.intercept_tool(%L, %L, 0, '{"email": "a@example.com"}',
        pg_temp.sig('it-a-0'))$$, :'sid', :'tool_a'),
    'UL017', NULL, 'a retired registration''s replay is refused too');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.journal_state(), :'before_retired', 'a retired registration wrote nothing');
SET SESSION AUTHORIZATION ul_t_it_a;
SELECT undolog.register_tool('create_user', 'compensable',
                             '{"name": "delete_user", "args": {"soft": true}}') AS tool_a2 \gset
SELECT isnt(:'tool_a2'::uuid, :'tool_a'::uuid, 'registered again, the tool has a new id');
SELECT results_eq(
    format($$SELECT effect_id, action FROM undolog.intercept_tool(
        %L, %L, 0, '{"email": "a@example.com"}', pg_temp.sig('it-a-0'))$$, :'sid', :'tool_a2'),
    format($$VALUES (%L::uuid, 'replay'::text)$$, :'effect_a'),
    'the new id replays the call journaled under the old one');
SELECT undolog.begin_session('a3000000-0000-4000-8000-00000000000a', 'agent-a') AS sid2 \gset
SELECT is((SELECT action FROM undolog.intercept_tool(:'sid2', :'tool_a2', 0,
               '{"email": "c@example.com"}', pg_temp.sig('it-a2-0'))),
          'execute', 'and admits new calls');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
