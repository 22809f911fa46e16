-- undolog.recover: expired leases become failed sessions; answers the sessions whose undo
-- walk must run.
BEGIN;
SELECT plan(40);

\ir _helpers.psql


-- Start from a known world: nothing but what this test makes.
SELECT is_empty('SELECT * FROM undolog.recover()', 'nothing to recover in an empty journal');

-- An agent that died (lease expired) and one that is alive.
SELECT pg_temp.new_session() AS dead \gset
SELECT pg_temp.call(:'dead', 1) AS dead_f1 \gset
SELECT pg_temp.new_session() AS alive \gset
SELECT pg_temp.call(:'alive', 1);
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id = :'dead';
-- An expired session waiting for a human is not the agent's death.
SELECT pg_temp.new_session() AS waiting \gset
SELECT pg_temp.irreversible(:'waiting', 1, 'pending');
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id = :'waiting';

SELECT set_eq('SELECT * FROM undolog.recover()', format('VALUES (%L::uuid)', :'dead'),
              'recover answers the session whose lease expired');
SELECT is(pg_temp.session_state(:'dead'), 'failed', '... it is failed now');
SELECT is((SELECT s.error FROM undolog.undolog_sessions AS s WHERE s.session_id = :'dead'),
          'lease expired', '... with error ''lease expired''');
SELECT results_eq(
    format($$SELECT from_state, to_state, detail FROM undolog.undolog_session_history
             WHERE session_id = %L AND from_state IS NOT NULL$$, :'dead'),
    $$VALUES ('active', 'failed', '{"error": "lease expired"}'::jsonb)$$,
    '... recorded in its history'
);
SELECT is(pg_temp.session_state(:'alive'), 'active', 'a session with a live lease is untouched');
SELECT is(pg_temp.session_state(:'waiting'), 'awaiting_approval',
          'an expired session awaiting approval is untouched');
SELECT throws_ok(format('SELECT * FROM undolog.intercept(%L, 2, %L, %L, %L, %L, %L)', :'dead',
                        'late', 'compensable', '{}', pg_temp.sig('late'), '{"name": "x"}'),
                 'UL010', NULL, 'the dead agent''s new calls are refused');
SELECT set_eq('SELECT * FROM undolog.recover()', format('VALUES (%L::uuid)', :'dead'),
              'a second recover answers the same session (its walk has not run)');

-- Compensating sessions: in flight under a live claim -> not offered; expired -> offered.
SELECT c.undo_id AS dead_u1 FROM undolog.claim_compensation(:'dead') AS c \gset
SELECT is_empty('SELECT * FROM undolog.recover()',
                'a session whose top entry is in flight under a live claim is not offered');
UPDATE undolog.undolog_undo_stack SET claimed_until = now() - interval '1 second'
WHERE undo_id = :'dead_u1';
SELECT set_eq('SELECT * FROM undolog.recover()', format('VALUES (%L::uuid)', :'dead'),
              'once its claim expired it is offered again');
-- Waiting for a retry -> not offered; due -> offered.
SELECT undolog.fail_compensation(:'dead_u1', 'down');
SELECT is_empty('SELECT * FROM undolog.recover()',
                'a session whose top entry waits for its retry is not offered');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'dead_u1';
SELECT set_eq('SELECT * FROM undolog.recover()', format('VALUES (%L::uuid)', :'dead'),
              'once the retry is due it is offered');
-- Nothing left but the final claim -> offered; compensated -> not.
SELECT c.undo_id AS dead_u1b FROM undolog.claim_compensation(:'dead') AS c \gset
SELECT undolog.complete_compensation(:'dead_u1b');
SELECT set_eq('SELECT * FROM undolog.recover()', format('VALUES (%L::uuid)', :'dead'),
              'a compensating session with nothing left is offered (its last claim ends the walk)');
SELECT is(pg_temp.walk(:'dead'), '{}'::integer[], 'that claim answers no row');
SELECT is(pg_temp.session_state(:'dead'), 'compensated', '... and ends the walk');
SELECT is_empty('SELECT * FROM undolog.recover()', 'a compensated session is not offered');

-- Halted and completed sessions are not offered.
SELECT pg_temp.new_session() AS halted \gset
SELECT pg_temp.irreversible(:'halted', 1, 'committed');
SELECT undolog.fail_session(:'halted', 'x');
SELECT pg_temp.walk(:'halted');
SELECT pg_temp.new_session() AS done \gset
SELECT undolog.complete_session(:'done');
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id = :'done';
SELECT is_empty('SELECT * FROM undolog.recover()', 'halted and completed sessions are not offered');
SELECT is(pg_temp.session_state(:'halted') || '/' || pg_temp.session_state(:'done'), 'halted/completed',
          '... and stay as they are');

-- undolog.fail_expired_sessions, recover's part 1 on its own: p_limit fails at most that
-- many, in session order; the rest are left for the next call (the binding calls it 50
-- at a time, a transaction each, before recover()).
SELECT pg_temp.new_session() AS lim_a \gset
SELECT pg_temp.new_session() AS lim_b \gset
SELECT pg_temp.new_session() AS lim_c \gset
SELECT pg_temp.new_session() AS lim_live \gset
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id IN (:'lim_a', :'lim_b', :'lim_c', :'lim_live');
CREATE TEMP TABLE lim_order AS
SELECT session_id, row_number() OVER (ORDER BY session_id) AS n
FROM undolog.undolog_sessions
WHERE session_id IN (:'lim_a', :'lim_b', :'lim_c');
GRANT SELECT ON lim_order TO PUBLIC;
-- The fourth one's lease has not run out yet (its agent heartbeated): not failed.
UPDATE undolog.undolog_sessions SET lease_expires_at = now() + interval '1 hour'
WHERE session_id = :'lim_live';
SET LOCAL ROLE undolog_operator;
SELECT results_eq(
    'SELECT * FROM undolog.fail_expired_sessions(p_limit => 1)',
    'SELECT session_id FROM lim_order WHERE n = 1',
    'a limit of 1 fails one session, the first expired in session order'
);
SELECT results_eq(
    'SELECT * FROM undolog.fail_expired_sessions(p_limit => 1)',
    'SELECT session_id FROM lim_order WHERE n = 2',
    'the next call fails the next one'
);
SELECT results_eq(
    'SELECT * FROM undolog.fail_expired_sessions(p_limit => 5)',
    'SELECT session_id FROM lim_order WHERE n = 3',
    'a call answering fewer than its limit has failed every session due'
);
SELECT is_empty('SELECT * FROM undolog.fail_expired_sessions(p_limit => 1)',
                'then a call with a limit finds nothing more');
RESET ROLE;
SELECT results_eq(
    format($$SELECT state || '/' || error FROM undolog.undolog_sessions
             WHERE session_id IN (%L, %L, %L) GROUP BY 1$$, :'lim_a', :'lim_b', :'lim_c'),
    $$VALUES ('failed/lease expired'::text)$$,
    'each is failed with error ''lease expired'', as by recover()'
);
SELECT results_eq(
    format($$SELECT count(*)::integer FROM undolog.undolog_session_history
             WHERE session_id IN (%L, %L, %L) AND to_state = 'failed'$$,
           :'lim_a', :'lim_b', :'lim_c'),
    'VALUES (3)',
    '... with its history row'
);
SELECT is(pg_temp.session_state(:'lim_live'), 'active',
          'a session whose lease has not run out is not failed');
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id = :'lim_live';
SET LOCAL ROLE undolog_operator;
SELECT results_eq('SELECT * FROM undolog.fail_expired_sessions()',
                  format('VALUES (%L::uuid)', :'lim_live'),
                  'without a limit (NULL): every one due, once its lease ran out');
SELECT throws_ok(
    'SELECT undolog.fail_expired_sessions(p_limit => 0)',
    'UL008', 'p_limit must be at least 1, not 0',
    'a limit of 0 is refused (UL008)'
);
SELECT throws_ok('SELECT undolog.fail_expired_sessions(-1)', 'UL008',
                 'p_limit must be at least 1, not -1', 'a negative limit is refused (UL008)');
RESET ROLE;

-- The oldest expired lease first, whatever the ids: a lease that ran out before a flood
-- of short ones is failed within the batches that take what expired before it. These
-- two expired in the reverse order of their ids.
SELECT pg_temp.new_session() AS old_a \gset
SELECT pg_temp.new_session() AS old_b \gset
CREATE TEMP TABLE old_order AS
SELECT session_id, row_number() OVER (ORDER BY session_id) AS n
FROM undolog.undolog_sessions
WHERE session_id IN (:'old_a', :'old_b');
GRANT SELECT ON old_order TO PUBLIC;
UPDATE undolog.undolog_sessions AS s SET lease_expires_at = now() - o.n * interval '1 minute'
FROM old_order AS o WHERE s.session_id = o.session_id;
SET LOCAL ROLE undolog_operator;
SELECT results_eq(
    'SELECT * FROM undolog.fail_expired_sessions(p_limit => 1)',
    'SELECT session_id FROM old_order WHERE n = 2',
    'the lease that expired first is failed first, though its id is the greater'
);
RESET ROLE;
-- recover(p_limit): at most that many failed in its transaction, the oldest first; the
-- walks due are answered all the same.
SELECT pg_temp.new_session() AS old_c \gset
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 second'
WHERE session_id = :'old_c';
SET LOCAL ROLE undolog_operator;
SELECT ok(
    (SELECT pg_catalog.array_agg(r.r) FROM undolog.recover(p_limit => 1) AS r)
    @> (SELECT pg_catalog.array_agg(o.session_id) FROM old_order AS o),
    'recover(p_limit => 1) fails the older of the two leases left and answers both walks'
);
RESET ROLE;
SELECT is(pg_temp.session_state(:'old_c'), 'active', '... and leaves the newer one for the next run');
SET LOCAL ROLE undolog_operator;
SELECT throws_ok('SELECT * FROM undolog.recover(p_limit => 0)', 'UL008',
                 'p_limit must be at least 1, not 0', 'recover refuses a limit of 0 (UL008)');
SELECT ok(:'old_c' IN (SELECT * FROM undolog.recover()), 'recover() alone fails every one due');
RESET ROLE;
-- The scan of fail_expired_sessions reads the partial index in its order: no sort, which
-- grew with the sessions of one expiry (all those one statement began share it).
CREATE FUNCTION pg_temp.plan_of(p_query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) ' || p_query;
END
$$;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT matches(
    (SELECT string_agg(p, E'\n') FROM pg_temp.plan_of(
        $$SELECT x.session_id FROM undolog.undolog_sessions AS x
          WHERE x.state = 'active' AND x.lease_expires_at <= now()
          ORDER BY x.lease_expires_at, x.session_id$$) AS p),
    '^Index (Only )?Scan using undolog_sessions_lease_idx on undolog_sessions x\s+Index Cond: \(lease_expires_at <= now\(\)\)$',
    'the expired leases are one range of undolog_sessions_lease_idx, in its order, unsorted'
);
RESET enable_seqscan;
RESET enable_bitmapscan;

-- Privileges.
SET LOCAL ROLE undolog_agent;
SELECT throws_ok('SELECT * FROM undolog.recover()', '42501', NULL, 'the agent role cannot recover');
SELECT throws_ok('SELECT * FROM undolog.fail_expired_sessions(1)', '42501', NULL,
                 '... nor fail expired sessions');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT lives_ok('SELECT * FROM undolog.recover()', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.recover(integer)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p
           WHERE p.oid = 'undolog.fail_expired_sessions(integer)'::regprocedure),
          '... and so is fail_expired_sessions');

SELECT * FROM finish();
ROLLBACK;
