-- undolog.rollback_session: a person stops a live session and has its work undone.
BEGIN;
SELECT plan(18);

\ir _helpers.psql

-- Bad input, each writing nothing.
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.call(:'s1', 2) AS f2 \gset
SELECT pg_temp.refused(format('SELECT undolog.rollback_session(%L, %L, %L)', :'s1', '', 'r'),
                       'UL008', 'an empty p_by');
SELECT pg_temp.refused(format('SELECT undolog.rollback_session(%L, %L, %L)', :'s1', 'ops', E'\t'),
                       'UL008', 'a blank reason (a tab)');
SELECT pg_temp.refused('SELECT undolog.rollback_session(gen_random_uuid(), ''ops'', ''r'')',
                       'UL002', 'an unknown session');

-- An active session fails, and its walk undoes both calls LIFO.
SELECT is(undolog.rollback_session(:'s1', 'alice', 'wrong customer'), 'failed',
          'an active session is failed');
SELECT is((SELECT error FROM undolog.undolog_sessions WHERE session_id = :'s1'),
          'rolled back by alice: wrong customer', 'its error says who and why');
SELECT results_eq(
    format($$SELECT action, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    $$VALUES ('rollback', 'alice', 'wrong customer')$$,
    'the rollback is recorded as an operator action');
SELECT is(pg_temp.walk(:'s1'), ARRAY[2, 1], 'the walk then undoes the calls LIFO');
SELECT is(pg_temp.session_state(:'s1'), 'compensated', 'and the session ends compensated');
SELECT pg_temp.refused(format('SELECT undolog.rollback_session(%L, %L, %L)', :'s1', 'ops', 'again'),
                       'UL001', 'rolling back a session that is already undone');

-- A session waiting for approval: its pending request is rejected by the person.
SELECT pg_temp.new_session() AS s2 \gset
SELECT pg_temp.call(:'s2', 1) AS g1 \gset
SELECT pg_temp.irreversible(:'s2', 2, 'pending') AS g2 \gset
SELECT is(undolog.rollback_session(:'s2', 'bob', 'not today'), 'compensating',
          'a waiting session goes to its undo walk');
SELECT results_eq(
    format($$SELECT state, decided_by FROM undolog.undolog_approval_requests
             WHERE session_id = %L$$, :'s2'),
    $$VALUES ('rejected', 'bob')$$,
    'its pending approval is rejected by the person who rolled it back');
SELECT is(pg_temp.effect_state(:'g2'), 'rejected', 'the irreversible call will never run');

-- Who may: operators and approvers, not agents.
SELECT ok(has_function_privilege('undolog_approver', 'undolog.rollback_session(uuid, text, text)',
                                 'EXECUTE'), 'approvers may roll back');
SELECT ok(NOT has_function_privilege('undolog_agent', 'undolog.rollback_session(uuid, text, text)',
                                     'EXECUTE'), 'agents may not');

SELECT * FROM finish();
ROLLBACK;
