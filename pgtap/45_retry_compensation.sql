-- undolog.retry_compensation: an operator gives a compensation that failed for good one
-- more attempt.
BEGIN;
SELECT plan(36);

\ir _helpers.psql


SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.call(:'s1', 2, 'committed', '{"name": "refund", "max_attempts": 2}') AS f2 \gset
SELECT pg_temp.undo_of(:'f2') AS u2 \gset
SELECT pg_temp.undo_of(:'f1') AS u1 \gset
SELECT undolog.fail_session(:'s1', 'x');
SELECT undolog.fail_compensation(c.undo_id, 'try 1') FROM undolog.claim_compensation(:'s1') AS c;
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u2';
SELECT is(undolog.fail_compensation(c.undo_id, 'try 2'), 'compensation_failed', 'two attempts failed')
FROM undolog.claim_compensation(:'s1') AS c;

-- Bad input, each writing nothing.
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', :'u2', ''), 'UL008',
                       'an empty p_by');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, NULL)', :'u2'), 'UL008',
                       'a NULL p_by');
SELECT pg_temp.refused('SELECT undolog.retry_compensation(gen_random_uuid(), ''ops'')', 'UL012',
                       'an unknown undo id');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', :'f2', 'ops'), 'UL012',
                       'an effect id instead of an undo id');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', :'u1', 'ops'), 'UL001',
                       'an entry that did not fail (pending)');
SELECT throws_like(format('SELECT undolog.retry_compensation(%L, %L)', :'u1', 'ops'),
                   '% is pending, not compensation_failed', '... says so');

SELECT is(undolog.retry_compensation(:'u2', 'alice', 'refund API is back'), 'compensating',
          'retry answers the session''s new state');
SELECT is(pg_temp.entry_state(:'f2') || '/' || pg_temp.effect_state(:'f2'), 'pending/compensating',
          'the entry is pending, the effect compensating');
-- ORDER BY seq, at: the call committed at once, so its creation and its commit share
-- the commit's one link (seq); the creation comes first by its time.
SELECT results_eq(
    format($$SELECT from_state, to_state FROM undolog.effect_timeline
             WHERE effect_id = %L ORDER BY seq, at$$, :'f2'),
    $$VALUES (NULL, 'executing'), ('executing', 'committed'), ('committed', 'compensating'),
             ('compensating', 'compensation_failed'), ('compensation_failed', 'compensating')$$,
    'the effect timeline keeps the failed attempt, then compensation_failed -> compensating'
);
SELECT results_eq(
    format($$SELECT action, undo_id, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    format($$VALUES ('retry', %L::uuid, 'alice', 'refund API is back')$$, :'u2'),
    'the decision is recorded'
);
SELECT ok((SELECT s.halt_undo_id IS NULL FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s1'),
          'the session no longer points at a halt');
SELECT results_eq(
    format('SELECT c.tool_name, c.attempt FROM undolog.claim_compensation(%L) AS c', :'s1'),
    $$VALUES ('step_2', 3)$$,
    'the next claim hands it out at once, as attempt 3'
);
SELECT is(undolog.fail_compensation(:'u2', 'try 3'), 'compensation_failed',
          'a retried compensation that fails again gives up at once (one attempt per retry)');
SELECT is(pg_temp.session_state(:'s1'), 'halted', '... and the session halts again');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, NULL)', :'s1'), 'UL008',
                       'resume still checks p_by');
SELECT is(undolog.retry_compensation(:'u2', 'alice', 'fixed for real'), 'compensating', 'a second retry');
SELECT undolog.complete_compensation(c.undo_id) FROM undolog.claim_compensation(:'s1') AS c;
SELECT is(pg_temp.entry_state(:'f2') || '/' || pg_temp.effect_state(:'f2'), 'compensated/compensated',
          'this time it succeeds');
SELECT is(pg_temp.walk(:'s1'), ARRAY[1], 'the walk goes on below it');
SELECT is(pg_temp.session_state(:'s1'), 'compensated', '... to the end');
SELECT is((SELECT count(*)::int FROM undolog.undolog_operator_actions WHERE session_id = :'s1'), 2,
          'both retries are recorded');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', :'u2', 'ops'), 'UL001',
                       'retrying a compensated entry');

-- A compensation_failed entry of a session that is not halted any more.
SELECT pg_temp.new_session() AS s2 \gset
SELECT pg_temp.call(:'s2', 1) AS h1 \gset
SELECT pg_temp.call(:'s2', 2, 'committed', '{"name": "x", "max_attempts": 1}') AS h2 \gset
SELECT undolog.fail_session(:'s2', 'x');
SELECT undolog.fail_compensation(c.undo_id, 'no') FROM undolog.claim_compensation(:'s2') AS c;
SELECT undolog.resume_session(:'s2', 'ops');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', pg_temp.undo_of(:'h2'), 'ops'),
                       'UL001', 'retrying while the session is compensating (not halted)');
SELECT pg_temp.walk(:'s2');
SELECT pg_temp.refused(format('SELECT undolog.retry_compensation(%L, %L)', pg_temp.undo_of(:'h2'), 'ops'),
                       'UL001', 'retrying in a compensated session');

-- Privileges.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.call(:'s3', 1, 'committed', '{"name": "x", "max_attempts": 1}') AS k1 \gset
SELECT undolog.fail_session(:'s3', 'x');
SELECT undolog.fail_compensation(c.undo_id, 'no') FROM undolog.claim_compensation(:'s3') AS c;
SELECT pg_temp.undo_of(:'k1') AS uk1 \gset
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.retry_compensation(%L, %L)', :'uk1', 'eve'), '42501', NULL,
                 'the agent role cannot retry a compensation');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.retry_compensation(:'uk1', 'carol'), 'compensating', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.retry_compensation(uuid, text, text)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
