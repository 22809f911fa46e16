-- undolog.abandon_session: an operator closes a halted session as resolved by hand.
BEGIN;
SELECT plan(32);

\ir _helpers.psql


SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.irreversible(:'s1', 2, 'committed') AS f2 \gset
SELECT undolog.fail_session(:'s1', 'x');
SELECT pg_temp.walk(:'s1');
SELECT is(pg_temp.session_state(:'s1'), 'halted', 'the session is halted at the barrier');

-- Bad input, each writing nothing.
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', '', 'r'), 'UL008',
                       'an empty p_by');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, NULL, %L)', :'s1', 'r'), 'UL008',
                       'a NULL p_by');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, NULL)', :'s1', 'ops'), 'UL008',
                       'a NULL reason');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'ops', ' '), 'UL008',
                       'a blank reason');
SELECT throws_like(format('SELECT undolog.abandon_session(%L, %L, NULL)', :'s1', 'ops'),
                   'p_reason must say how the session was resolved%', '... the message says why');
SELECT pg_temp.refused('SELECT undolog.abandon_session(gen_random_uuid(), ''ops'', ''r'')', 'UL002',
                       'an unknown session');
SELECT pg_temp.new_session() AS s2 \gset
SELECT undolog.fail_session(:'s2', 'x');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s2', 'ops', 'r'), 'UL001',
                       'a failed (not halted) session');

SELECT is(undolog.abandon_session(:'s1', 'alice', 'customer refunded by hand'), 'halted',
          'abandon answers the state: still halted');
SELECT ok((SELECT s.state = 'halted' AND s.resolved_by = 'alice' AND s.resolved_at = now()
                  AND s.resolution = 'customer refunded by hand'
           FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s1'),
          'the session is halted and resolved: by whom, when, how');
SELECT results_eq(
    format($$SELECT action, undo_id, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    $$VALUES ('abandon', NULL::uuid, 'alice', 'customer refunded by hand')$$,
    'the decision is recorded'
);
SELECT is(pg_temp.entry_state(:'f1') || '/' || pg_temp.entry_state(:'f2'), 'pending/pending',
          'unfinished entries stay as the record of what was not undone');
SELECT ok(:'s1'::uuid NOT IN (SELECT * FROM undolog.recover()), 'recover does not offer it');

SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'bob', 'again'), 'UL001',
                       'abandoning twice');
SELECT throws_like(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'bob', 'again'),
                   '% was abandoned by alice at %', '... says who abandoned it');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L)', :'s1', 'bob'), 'UL001',
                       'resuming an abandoned session');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', :'s1'), 'UL010',
                       'claiming on an abandoned session');

-- The resolution is fixed, even for the owner; and it needs a halted session.
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET resolution = 'rewritten' WHERE session_id = %L$$, :'s1'),
                 'UL011', NULL, 'the owner cannot rewrite a resolution');
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET state = 'compensating' WHERE session_id = %L$$, :'s1'),
                 '23514', NULL, 'an abandoned session cannot leave halted, even for the owner');
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET resolved_by = 'x', resolved_at = now(), resolution = 'y' WHERE session_id = %L$$, :'s2'),
                 '23514', NULL, 'only a halted session can be resolved');

-- Privileges.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.irreversible(:'s3', 1, 'committed');
SELECT undolog.fail_session(:'s3', 'x');
SELECT pg_temp.walk(:'s3');
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s3', 'eve', 'r'), '42501', NULL,
                 'the agent role cannot abandon a session');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.abandon_session(:'s3', 'carol', 'done by hand'), 'halted', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.abandon_session(uuid, text, text)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
