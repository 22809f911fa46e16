-- undolog.resume_session: an operator moves a halted walk on past where it stopped.
BEGIN;
SELECT plan(37);

\ir _helpers.psql


-- Halted at a barrier: 1 (compensable), 2 (irreversible, committed), 3 (compensable).
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.irreversible(:'s1', 2, 'committed') AS f2 \gset
SELECT pg_temp.call(:'s1', 3) AS f3 \gset
SELECT undolog.fail_session(:'s1', 'x');
SELECT is(pg_temp.walk(:'s1'), ARRAY[3], 'the walk halts at the committed irreversible call');

-- Bad input first, each writing nothing.
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L, %L)', :'s1', '', 'r'), 'UL008',
                       'an empty p_by');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L, %L)', :'s1', '   ', 'r'), 'UL008',
                       'a blank p_by');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, NULL, %L)', :'s1', 'r'), 'UL008',
                       'a NULL p_by');
SELECT throws_like(format('SELECT undolog.resume_session(%L, NULL)', :'s1'),
                   'p_by must name the operator%', '... the message says what p_by is for');
SELECT pg_temp.refused('SELECT undolog.resume_session(gen_random_uuid(), ''ops'')', 'UL002',
                       'an unknown session');
SELECT pg_temp.new_session() AS active \gset
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L)', :'active', 'ops'), 'UL001',
                       'a session that is not halted (active)');
SELECT throws_like(format('SELECT undolog.resume_session(%L, %L)', :'active', 'ops'),
                   '% is active, not halted', '... says so');

SELECT is(undolog.resume_session(:'s1', 'alice', 'payout reversed by hand'), 'compensating',
          'resume answers the new state, compensating');
SELECT is(pg_temp.entry_state(:'f2'), 'skipped', 'the barrier entry is skipped');
SELECT is(pg_temp.effect_state(:'f2'), 'committed', 'the irreversible effect stays committed');
SELECT is((SELECT s.halt_undo_id FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s1'), NULL,
          'the session no longer points at a halt');
SELECT results_eq(
    format($$SELECT action, undo_id, performed_by, reason, actor FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    format($$VALUES ('resume', %L::uuid, 'alice', 'payout reversed by hand', session_user::text COLLATE "default")$$,
           pg_temp.undo_of(:'f2')),
    'the decision is recorded: what, which entry, who, why, from which login'
);
SELECT results_eq(
    format($$SELECT from_state, to_state FROM undolog.undolog_undo_history WHERE undo_id = %L$$,
           pg_temp.undo_of(:'f2')),
    $$VALUES ('pending', 'skipped')$$,
    'the undo history records the skip'
);
SELECT results_eq(
    format($$SELECT from_state, to_state FROM undolog.undolog_session_history
             WHERE session_id = %L ORDER BY history_id DESC LIMIT 2$$, :'s1'),
    $$VALUES ('halted', 'compensating'), ('compensating', 'halted')$$,
    'the session history shows halted -> compensating'
);
SELECT is(pg_temp.walk(:'s1'), ARRAY[1], 'the walk goes on below the barrier');
SELECT is(pg_temp.session_state(:'s1'), 'compensated', '... to the end');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L)', :'s1', 'alice'), 'UL001',
                       'resuming a compensated session');

-- Halted at a compensation that failed for good: resume leaves it failed, goes on below.
SELECT pg_temp.new_session() AS s2 \gset
SELECT pg_temp.call(:'s2', 1) AS g1 \gset
SELECT pg_temp.irreversible(:'s2', 2, 'committed') AS g2 \gset
SELECT pg_temp.call(:'s2', 3) AS g3 \gset
SELECT pg_temp.call(:'s2', 4, 'committed', '{"name": "undo_step", "max_attempts": 1}') AS g4 \gset
SELECT undolog.fail_session(:'s2', 'x');
SELECT undolog.fail_compensation(c.undo_id, 'gone') FROM undolog.claim_compensation(:'s2') AS c;
SELECT is(pg_temp.session_state(:'s2'), 'halted', 'a compensation that failed for good halts the walk');
SELECT is(undolog.resume_session(:'s2', 'bob'), 'compensating', 'resume (no reason given)');
SELECT is(pg_temp.entry_state(:'g4') || '/' || pg_temp.effect_state(:'g4'),
          'compensation_failed/compensation_failed', 'the failed compensation stays failed');
SELECT results_eq(
    format($$SELECT action, undo_id, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s2'),
    format($$VALUES ('resume', %L::uuid, 'bob', NULL::text)$$, pg_temp.undo_of(:'g4')),
    'the decision names the entry passed'
);
SELECT is(pg_temp.walk(:'s2'), ARRAY[3], 'the walk goes on below it ...');
SELECT is(pg_temp.session_state(:'s2') || '/' || pg_temp.entry_state(:'g2'), 'halted/pending',
          '... and halts again at the barrier further down, which the resume did not skip');
SELECT is(undolog.resume_session(:'s2', 'bob', 'handled'), 'compensating', 'a second resume ...');
SELECT is(pg_temp.entry_state(:'g2'), 'skipped', '... skips that barrier');
SELECT is(pg_temp.walk(:'s2'), ARRAY[1], '... and the walk finishes');

-- Privileges.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.irreversible(:'s3', 1, 'committed');
SELECT undolog.fail_session(:'s3', 'x');
SELECT pg_temp.walk(:'s3');
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.resume_session(%L, %L)', :'s3', 'eve'), '42501', NULL,
                 'the agent role cannot resume a session');
RESET ROLE;
SET LOCAL ROLE undolog_approver;
SELECT throws_ok(format('SELECT undolog.resume_session(%L, %L)', :'s3', 'eve'), '42501', NULL,
                 'nor can the approver role');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.resume_session(:'s3', 'carol'), 'compensating', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.resume_session(uuid, text, text)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
