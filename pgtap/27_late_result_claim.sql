-- A result that arrived late (after the undo walk took its call: 26_late_result.sql) is
-- handed to the call's compensation by the next claim of its entry, when the effect has
-- no result of its own: a compensation built from the result (a created record's id)
-- can then run. The effect is not changed (no commit is recorded in its row), the session
-- stays flagged for an operator, a claim already handed out is not changed under its
-- walker, and a late error report hands nothing.
BEGIN;
SELECT plan(27);
\ir _helpers.psql

-- 1. A late commit before the claim of the next attempt: that claim carries the result.
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1, 'executing', '{"name": "delete_user"}') AS f1 \gset
SELECT pg_temp.undo_of(:'f1') AS u1 \gset
SELECT undolog.fail_session(:'s1', 'lease expired');
SELECT results_eq(
    format('SELECT c.undo_id, c.result_snapshot, c.attempt FROM undolog.claim_compensation(%L) AS c',
           :'s1'),
    format($$VALUES (%L::uuid, NULL::jsonb, 1)$$, :'u1'),
    'setup: the walk takes the executing call, with no result (outcome unknown)'
);
SELECT is(undolog.fail_compensation(:'u1', 'result.user_id: no result'), 'retry',
          'setup: its compensation could not be built; it will be retried');
SELECT is(undolog.commit(:'f1', '{"user_id": 7}'), 'late', 'the result arrives late');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u1';
SELECT results_eq(
    format('SELECT c.undo_id, c.result_snapshot, c.attempt FROM undolog.claim_compensation(%L) AS c',
           :'s1'),
    format($$VALUES (%L::uuid, '{"user_id": 7}'::jsonb, 2)$$, :'u1'),
    'the next claim of the entry (same undo_id) hands the late result'
);
SELECT results_eq(
    format($$SELECT state, result_snapshot, committed_at, committed_by
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, :'f1'),
    $$VALUES ('compensating', NULL::jsonb, NULL::timestamptz, NULL::text)$$,
    'the effect is unchanged: still the walk''s, no commit recorded in its row'
);
SELECT is((SELECT needs_attention FROM undolog.sessions_overview WHERE session_id = :'s1'),
          true, 'the session is still flagged for an operator');
SELECT lives_ok(format('SELECT undolog.complete_compensation(%L, 2)', :'u1'),
                'the compensation built from it completes');
SELECT is_empty(format('SELECT * FROM undolog.claim_compensation(%L)', :'s1'),
                'the walk ends');
SELECT is(pg_temp.session_state(:'s1'), 'compensated', '... compensated');
SELECT is_empty(format('SELECT * FROM undolog.verify_chain(%L)', :'s1'),
                'the session''s history chain verifies');

-- 2. A late commit after the claim: the running claim is not changed under its walker.
SELECT pg_temp.new_session() AS s2 \gset
SELECT pg_temp.call(:'s2', 1, 'executing', '{"name": "delete_user"}') AS f2 \gset
SELECT pg_temp.undo_of(:'f2') AS u2 \gset
SELECT undolog.fail_session(:'s2', 'rolled back by an operator');
SELECT is((SELECT c.result_snapshot FROM undolog.claim_compensation(:'s2') AS c), NULL,
          'setup: the walk takes the executing call, with no result');
CREATE TEMP TABLE claimed AS
SELECT u.state, u.attempts, u.claimed_by, u.claimed_at, u.claimed_until
FROM undolog.undolog_undo_stack AS u WHERE u.undo_id = :'u2';
SELECT is(undolog.commit(:'f2', '{"user_id": 8}'), 'late', 'its result arrives while it runs');
SELECT results_eq(
    format($$SELECT u.state, u.attempts, u.claimed_by, u.claimed_at, u.claimed_until
             FROM undolog.undolog_undo_stack AS u WHERE u.undo_id = %L$$, :'u2'),
    'SELECT * FROM claimed',
    'the claim in flight is unchanged'
);
SELECT is((SELECT result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = :'f2'), NULL,
          '... and so is its effect');
SELECT is_empty(format('SELECT * FROM undolog.claim_compensation(%L)', :'s2'),
                'the entry is not handed out again while its claim is live');
SELECT lives_ok(format('SELECT undolog.complete_compensation(%L, 1)', :'u2'),
                'the running attempt reports as it was claimed');
SELECT is_empty(format('SELECT * FROM undolog.claim_compensation(%L)', :'s2'),
                'nothing is run twice: the walk ends');
SELECT is(pg_temp.session_state(:'s2'), 'compensated', '... compensated');

-- 3. A late error report: nothing to hand.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.call(:'s3', 1, 'executing', '{"name": "delete_user"}') AS f3 \gset
SELECT pg_temp.undo_of(:'f3') AS u3 \gset
SELECT undolog.fail_session(:'s3', 'lease expired');
SELECT undolog.fail_compensation(c.undo_id, 'no result') FROM undolog.claim_compensation(:'s3') AS c;
SELECT is(undolog.fail(:'f3', 'HTTP 500'), 'late', 'a late error report');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u3';
SELECT results_eq(
    format('SELECT c.undo_id, c.result_snapshot, c.attempt FROM undolog.claim_compensation(%L) AS c',
           :'s3'),
    format($$VALUES (%L::uuid, NULL::jsonb, 2)$$, :'u3'),
    'the next claim hands no result'
);

-- 4. A late commit of a NULL result hands JSON null, as commit stores it in time.
SELECT pg_temp.new_session() AS s4 \gset
SELECT pg_temp.call(:'s4', 1, 'executing', '{"name": "delete_user"}') AS f4 \gset
SELECT pg_temp.undo_of(:'f4') AS u4 \gset
SELECT undolog.fail_session(:'s4', 'lease expired');
SELECT undolog.fail_compensation(c.undo_id, 'no result') FROM undolog.claim_compensation(:'s4') AS c;
SELECT is(undolog.commit(:'f4', NULL), 'late', 'a late commit of no result');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u4';
SELECT is((SELECT c.result_snapshot FROM undolog.claim_compensation(:'s4') AS c), 'null'::jsonb,
          'the next claim hands JSON null');

-- 5. The first of several late commits; an effect's recorded commit is never replaced.
SELECT pg_temp.new_session() AS s5 \gset
SELECT pg_temp.call(:'s5', 1, 'executing', '{"name": "delete_user"}') AS f5 \gset
SELECT pg_temp.undo_of(:'f5') AS u5 \gset
SELECT pg_temp.call(:'s5', 2, 'committed', '{"name": "delete_user"}') AS f6 \gset
SELECT pg_temp.undo_of(:'f6') AS u6 \gset
SELECT undolog.fail_session(:'s5', 'lease expired');
SELECT undolog.fail_compensation(c.undo_id, 'try 1') FROM undolog.claim_compensation(:'s5') AS c;
SELECT is(undolog.commit(:'f6', '{"id": 99}'), 'late', 'a second commit of a committed call arrives late');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u6';
SELECT results_eq(
    format('SELECT c.undo_id, c.result_snapshot FROM undolog.claim_compensation(%L) AS c', :'s5'),
    format($$VALUES (%L::uuid, '{"id": 2}'::jsonb)$$, :'u6'),
    'a committed call''s compensation gets its recorded result, not a late one'
);
SELECT undolog.complete_compensation(:'u6');
SELECT undolog.fail_compensation(c.undo_id, 'try 1') FROM undolog.claim_compensation(:'s5') AS c;
SELECT undolog.commit(:'f5', '{"user_id": 1}');
SELECT undolog.commit(:'f5', '{"user_id": 2}');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u5';
SELECT results_eq(
    format('SELECT c.undo_id, c.result_snapshot FROM undolog.claim_compensation(%L) AS c', :'s5'),
    format($$VALUES (%L::uuid, '{"user_id": 1}'::jsonb)$$, :'u5'),
    'of several late commits, the first (the one sessions_overview names) is handed'
);

-- 6. A late result is handed as it arrived: its null members too, at any depth (a
-- compensation reads {"parent_id": null} as "no parent", and a missing key fails it).
SELECT pg_temp.new_session() AS s7 \gset
SELECT pg_temp.call(:'s7', 1, 'executing', '{"name": "delete_user"}') AS f7 \gset
SELECT pg_temp.undo_of(:'f7') AS u7 \gset
SELECT undolog.fail_session(:'s7', 'lease expired');
SELECT undolog.fail_compensation(c.undo_id, 'no result') FROM undolog.claim_compensation(:'s7') AS c;
SELECT is(undolog.commit(:'f7', '{"user_id": 7, "parent_id": null, "tags": {"team": null}}'),
          'late', 'a late result with null members');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = :'u7';
SELECT is((SELECT c.result_snapshot FROM undolog.claim_compensation(:'s7') AS c),
          '{"user_id": 7, "parent_id": null, "tags": {"team": null}}'::jsonb,
          'the next claim hands the late result with its null members');

SELECT * FROM finish();
ROLLBACK;
