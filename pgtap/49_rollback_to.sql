-- undolog.rollback_to: undo a live session down to a step, through the same walk as a
-- failed session's, and let it go on.
BEGIN;
SELECT plan(70);

\ir _helpers.psql

CREATE FUNCTION pg_temp.new_call(p_session uuid, p_step integer) RETURNS text LANGUAGE sql
AS $$
    SELECT pg_temp.tool('step_' || p_step, 'compensable', '{"name": "undo_step"}');
    SELECT i.action FROM undolog.intercept(
        p_session, p_step, 'step_' || p_step, 'compensable', jsonb_build_object('step', p_step),
        pg_temp.sig(p_session || '/' || p_step), '{"name": "undo_step"}') AS i
$$;

-- Bad input, each writing nothing.
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 0) AS f0 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.call(:'s1', 2) AS f2 \gset
SELECT pg_temp.call(:'s1', 3) AS f3 \gset
SELECT pg_temp.refused(format('SELECT undolog.rollback_to(%L, 2, %L)', :'s1', E' \t'),
                       'UL008', 'a blank reason');
SELECT pg_temp.refused(format('SELECT undolog.rollback_to(%L, -1, %L)', :'s1', 'r'),
                       'UL008', 'a negative step');
SELECT pg_temp.refused('SELECT undolog.rollback_to(gen_random_uuid(), 0, ''r'')',
                       'UL002', 'an unknown session');
SELECT pg_temp.refused(format('SELECT undolog.rollback_to(%L, 4, %L)', :'s1', 'r'),
                       'UL021', 'a step after the last one: nothing to undo');

-- The plan: what will be undone, last first, down to step 2.
SELECT results_eq(
    format('SELECT step_index, action FROM undolog.rollback_to_plan(%L, 2)', :'s1'),
    $$VALUES (3, 'undo'), (2, 'undo')$$,
    'the plan lists steps 3 then 2');

SELECT is(undolog.rollback_to(:'s1', 2, 'wrong address', 'alice'), 'compensating',
          'the session goes to its walk');
SELECT ok((SELECT undo_floor = (SELECT stack_position FROM undolog.undolog_undo_stack
                                WHERE effect_id = :'f2')
           FROM undolog.undolog_sessions WHERE session_id = :'s1'),
          'its floor is step 2''s entry');
SELECT results_eq(
    format($$SELECT action, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    $$VALUES ('rollback_to', 'alice', 'step 2: wrong address')$$,
    'an operator''s rollback_to is an operator action');
SELECT results_eq(
    format($$SELECT detail -> 'rollback_to' ->> 'by', detail -> 'rollback_to' ->> 'reason',
                    (detail -> 'rollback_to' ->> 'step')::integer
             FROM undolog.undolog_session_history
             WHERE session_id = %L AND from_state = 'active' AND to_state = 'compensating'$$,
           :'s1'),
    $$VALUES ('alice', 'wrong address', 2)$$,
    'the history says who asked, why, down to which step');
SELECT pg_temp.refused(format('SELECT pg_temp.new_call(%L, 4)', :'s1'),
                       'UL010', 'a new call while the partial walk runs');
SELECT pg_temp.refused(format('SELECT undolog.rollback_to(%L, 0, %L)', :'s1', 'again'),
                       'UL001', 'a second rollback_to while the walk runs');
SELECT lives_ok(format('SELECT undolog.heartbeat(%L)', :'s1'),
                'the agent''s heartbeat goes on during the partial walk');
SELECT ok(:'s1'::uuid IN (SELECT session_id FROM undolog.due_sessions),
          'the session is due for the worker');

SELECT is(pg_temp.walk(:'s1'), ARRAY[3, 2], 'the walk undoes steps 3 and 2, last first');
SELECT results_eq(
    format('SELECT state, undo_floor FROM undolog.undolog_sessions WHERE session_id = %L', :'s1'),
    $$VALUES ('active'::text, NULL::bigint)$$,
    'then the session is active again, without a floor');
SELECT results_eq(
    format($$SELECT e.step_index, e.state FROM undolog.undolog_effect_log AS e
             WHERE e.session_id = %L ORDER BY e.step_index$$, :'s1'),
    $$VALUES (0, 'committed'), (1, 'committed'), (2, 'compensated'), (3, 'compensated')$$,
    'steps 0 and 1 stand, 2 and 3 are undone');
SELECT is((SELECT detail -> 'rolled_back_to' ->> 'by' FROM undolog.undolog_session_history
           WHERE session_id = :'s1' AND from_state = 'compensating' AND to_state = 'active'),
          'alice', 'its return to active is in the history too');
SELECT ok(:'s1'::uuid NOT IN (SELECT session_id FROM undolog.due_sessions),
          'and nothing below the floor is due');
SELECT pg_temp.refused(format('SELECT pg_temp.new_call(%L, 3)', :'s1'),
                       'UL022', 'a replay of an undone step');
SELECT throws_like(format('SELECT pg_temp.new_call(%L, 2)', :'s1'),
                   'step 2 (step_2, effect %) was undone by rollback_to%',
                   'the refusal names the step');
SELECT is(pg_temp.new_call(:'s1', 4), 'execute', 'a new call at a later step runs');
SELECT is(pg_temp.new_call(:'s1', 0), 'replay', 'a call below the floor still replays');

-- The rest is still undone by a later whole walk.
SELECT lives_ok(format('SELECT undolog.commit(%L, %L)',
                       (SELECT effect_id FROM undolog.undolog_effect_log
                        WHERE session_id = :'s1' AND step_index = 4), '{}'),
                'step 4 commits');
SELECT is(undolog.fail_session(:'s1', 'later failure'), 'failed', 'the session fails later');
SELECT is(pg_temp.walk(:'s1'), ARRAY[4, 1, 0], 'its whole walk undoes what was left, once');
SELECT is(pg_temp.session_state(:'s1'), 'compensated', 'and it ends compensated');

-- An irreversible call in the range halts the walk where it stands.
SELECT pg_temp.new_session() AS s2 \gset
SELECT pg_temp.call(:'s2', 0) AS g0 \gset
SELECT pg_temp.irreversible(:'s2', 1, 'committed') AS g1 \gset
SELECT pg_temp.call(:'s2', 2) AS g2 \gset
SELECT results_eq(
    format('SELECT step_index, action FROM undolog.rollback_to_plan(%L, 1)', :'s2'),
    $$VALUES (2, 'undo'), (1, 'stop')$$,
    'the plan shows where the walk will stop');
SELECT is(undolog.rollback_to(:'s2', 1, 'undo the mail'), 'compensating', 'undo to step 1');
SELECT is(pg_temp.walk(:'s2'), ARRAY[2], 'the walk undoes step 2');
SELECT is(pg_temp.session_state(:'s2'), 'halted', 'and halts at the irreversible call');
SELECT ok(undolog.heartbeat(:'s2') > now(),
          'the agent''s heartbeat goes on while the partial walk is halted');
SELECT is(undolog.resume_session(:'s2', 'bob', 'handled by hand'), 'compensating',
          'a person resumes past it');
SELECT is(pg_temp.walk(:'s2'), '{}'::integer[], 'nothing is left above the floor');
SELECT is(pg_temp.session_state(:'s2'), 'active', 'the session goes on');
SELECT is(pg_temp.effect_state(:'g0'), 'committed', 'step 0, below the floor, stands');

-- A failed call in the range is passed (it never acted); made again it is refused.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.call(:'s3', 0) AS h0 \gset
SELECT pg_temp.call(:'s3', 1, 'failed') AS h1 \gset
SELECT is(undolog.rollback_to(:'s3', 1, 'r'), 'compensating', 'undo to a failed call');
SELECT is(pg_temp.walk(:'s3'), '{}'::integer[], 'it is skipped');
SELECT pg_temp.refused(format('SELECT pg_temp.new_call(%L, 1)', :'s3'),
                       'UL022', 'a retry of a step the partial walk passed');

-- rollback_session during a partial walk makes it the whole walk.
SELECT is(undolog.rollback_to(:'s3', 0, 'r'), 'compensating', 'undo the rest to step 0');
SELECT is(undolog.rollback_session(:'s3', 'carol', 'stop it all'), 'compensating',
          'a person rolls the whole session back while it walks');
SELECT is(pg_temp.walk(:'s3'), ARRAY[0], 'the walk goes on');
SELECT is(pg_temp.session_state(:'s3'), 'compensated', 'and the session ends compensated');

-- rollback_last: the last n calls, in the walk's order, whatever their step indexes.
SELECT pg_temp.new_session() AS s5 \gset
SELECT pg_temp.call(:'s5', 5) AS m5 \gset
SELECT pg_temp.call(:'s5', 1) AS m1 \gset
SELECT pg_temp.call(:'s5', 3) AS m3 \gset
SELECT pg_temp.refused(format('SELECT undolog.rollback_last(%L, 0, %L)', :'s5', 'r'),
                       'UL008', 'a count of 0');
SELECT pg_temp.refused(format('SELECT undolog.rollback_last(%L, 4, %L)', :'s5', 'r'),
                       'UL021', 'more calls than there are');
SELECT is(undolog.rollback_last(:'s5', 2, 'the last two', 'dan'), 'compensating',
          'undo the last two calls');
SELECT is(pg_temp.walk(:'s5'), ARRAY[3, 1], 'the two latest, last first, not step 5');
SELECT is((SELECT reason FROM undolog.undolog_operator_actions WHERE session_id = :'s5'),
          'last 2: the last two', 'recorded with its count');

-- rollback_last counts the calls the walk would undo: a failed call at the top (the plan's
-- skip) is not one of them, so "the last call" is the committed one below it.
SELECT pg_temp.new_session() AS s6 \gset
SELECT pg_temp.call(:'s6', 0) AS n0 \gset
SELECT pg_temp.call(:'s6', 1) AS n1 \gset
SELECT pg_temp.call(:'s6', 2, 'failed') AS n2 \gset
SELECT is(undolog.rollback_last(:'s6', 1, 'the last call', 'dan'), 'compensating',
          'undo the last call above a failed one');
SELECT ok((SELECT undo_floor = (SELECT stack_position FROM undolog.undolog_undo_stack
                                WHERE effect_id = :'n1')
           FROM undolog.undolog_sessions WHERE session_id = :'s6'),
          'the floor is the last committed call''s entry, not the failed call''s');
SELECT is(pg_temp.walk(:'s6'), ARRAY[1], 'the walk undoes step 1 and passes the failed step 2');
SELECT is(pg_temp.effect_state(:'n0'), 'committed', 'step 0 stands');
SELECT pg_temp.new_session() AS s7 \gset
SELECT pg_temp.call(:'s7', 0, 'failed') AS p0 \gset
SELECT pg_temp.refused(format('SELECT undolog.rollback_last(%L, 1, %L)', :'s7', 'r'),
                       'UL021', 'only a failed call: nothing to undo');

-- The agent itself: only where the database allows it.
CREATE ROLE ul_t_self NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_nobody NOLOGIN;
SET SESSION AUTHORIZATION ul_t_self;
SELECT pg_temp.new_session() AS s4 \gset
SELECT pg_temp.call(:'s4', 0) AS k0 \gset
SELECT throws_ok(format('SELECT undolog.rollback_to(%L, 0, %L)', :'s4', 'mine'),
                 '42501', NULL, 'an agent may not undo its session by default');
RESET SESSION AUTHORIZATION;
SELECT format('ALTER DATABASE %I SET undolog.agent_rollback_to = on', current_database()) \gexec
SET SESSION AUTHORIZATION ul_t_other;
SELECT throws_ok(format('SELECT undolog.rollback_to(%L, 0, %L)', :'s4', 'not mine'),
                 '42501', NULL, 'another agent may not undo it, even when allowed');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ul_t_self;
SELECT throws_ok(format('SELECT undolog.rollback_to(%L, 0, %L, %L)', :'s4', 'mine', 'alice'),
                 'UL008', NULL, 'an agent cannot name someone else as who asked');
SELECT is(undolog.rollback_to(:'s4', 0, 'my last step was wrong'), 'compensating',
          'the owner may, once the database allows it');
RESET SESSION AUTHORIZATION;
SELECT results_eq(
    format($$SELECT detail -> 'rollback_to' ->> 'by', detail -> 'rollback_to' ->> 'login'
             FROM undolog.undolog_session_history
             WHERE session_id = %L AND to_state = 'compensating'$$, :'s4'),
    $$VALUES ('ul_t_self', 'ul_t_self')$$,
    'the history names the agent');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_operator_actions
           WHERE session_id = :'s4'), 0, 'no operator action for an agent''s own undo');
SET ROLE ul_t_nobody;
SELECT throws_ok(format('SELECT undolog.rollback_to(%L, 0, %L)', :'s4', 'x'),
                 '42501', NULL, 'a role without the engine''s roles may not call it');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
