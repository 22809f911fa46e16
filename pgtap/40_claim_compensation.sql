-- undolog.claim_compensation: the undo walk, entry by entry, strictly LIFO.
BEGIN;
SELECT plan(80);

\ir _helpers.psql


-- LIFO ------------------------------------------------------------------------------
CREATE TEMP TABLE s1 AS
SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e1 AS
SELECT step, pg_temp.call((SELECT sid FROM s1), step) AS effect_id
FROM generate_series(1, 3) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s1), 'the agent crashed');

SELECT results_eq(
    $$SELECT c.tool_name, c.compensation, c.args, c.result_snapshot, c.attempt,
             c.effect_id = (SELECT effect_id FROM e1 WHERE step = 3),
             c.undo_id = pg_temp.undo_of((SELECT effect_id FROM e1 WHERE step = 3))
      FROM undolog.claim_compensation((SELECT sid FROM s1)) AS c$$,
    $$VALUES ('step_3', '{"name": "undo_step", "args": {}}'::jsonb, '{"step": 3}'::jsonb,
              '{"id": 3}'::jsonb, 1, true, true)$$,
    'the first claim hands out the top entry: descriptor, original args, result, attempt 1'
);
SELECT is(pg_temp.session_state((SELECT sid FROM s1)), 'compensating',
          'the first claim moves the session failed -> compensating');
SELECT is(pg_temp.effect_state((SELECT effect_id FROM e1 WHERE step = 3)), 'compensating',
          'the claimed effect is compensating (committed -> compensating)');
SELECT is(pg_temp.entry_state((SELECT effect_id FROM e1 WHERE step = 3)), 'compensating',
          'the claimed entry is in flight');
SELECT ok((SELECT u.claimed_until = now() + interval '5 minutes' AND u.claimed_at = now()
                  AND u.claimed_by LIKE session_user || ' (pid %)' AND u.attempts = 1
           FROM undolog.undolog_undo_stack AS u
           WHERE u.effect_id = (SELECT effect_id FROM e1 WHERE step = 3)),
          'the claim records who, when, attempt 1, and expires after the default 5 minutes');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s1))$$,
                'while the top entry is in flight, a second claim answers no row');
SELECT is(pg_temp.entry_state((SELECT effect_id FROM e1 WHERE step = 2)), 'pending',
          '... and never hands out the entry below it');
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = (SELECT sid FROM s1) ORDER BY history_id$$,
    $$VALUES (NULL, 'active'), ('active', 'failed'), ('failed', 'compensating')$$,
    'the session history shows failed -> compensating once'
);
SELECT results_eq(
    $$SELECT event, from_state, to_state, attempt FROM undolog.undolog_undo_history
      WHERE undo_id = pg_temp.undo_of((SELECT effect_id FROM e1 WHERE step = 3))$$,
    $$VALUES ('transition', 'pending', 'compensating', 1)$$,
    'the undo history records the claim'
);
SELECT undolog.complete_compensation(pg_temp.undo_of((SELECT effect_id FROM e1 WHERE step = 3)));
SELECT is(pg_temp.walk((SELECT sid FROM s1)), ARRAY[2, 1],
          'the walk goes on strictly down the stack: 2 then 1');
SELECT is(pg_temp.session_state((SELECT sid FROM s1)), 'compensated',
          'the claim that finds nothing left marks the session compensated');
SELECT is((SELECT array_agg(pg_temp.effect_state(effect_id) ORDER BY step) FROM e1),
          ARRAY['compensated', 'compensated', 'compensated'],
          'every effect is compensated');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s1))$$,
                'claiming on a compensated session answers no row (a late walker finds it over)');
SELECT is((SELECT count(*)::int FROM undolog.undolog_session_history
           WHERE session_id = (SELECT sid FROM s1) AND to_state = 'compensated'), 1,
          '... and changes nothing');

-- Empty stack -----------------------------------------------------------------------
CREATE TEMP TABLE s2 AS SELECT pg_temp.new_session() AS sid;
SELECT undolog.fail_session((SELECT sid FROM s2), 'nothing done yet');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s2))$$,
                'an empty stack: no row');
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = (SELECT sid FROM s2) AND from_state IS NOT NULL ORDER BY history_id$$,
    $$VALUES ('active', 'failed'), ('failed', 'compensating'), ('compensating', 'compensated')$$,
    '... and the session goes failed -> compensating -> compensated'
);

-- Skips of calls that never acted; compensation of unknown outcomes --------------------
CREATE TEMP TABLE s3 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e3 AS
SELECT 1 AS step, pg_temp.call((SELECT sid FROM s3), 1) AS effect_id;
INSERT INTO e3 VALUES (2, pg_temp.call((SELECT sid FROM s3), 2, 'failed'));
INSERT INTO e3 VALUES (3, pg_temp.call((SELECT sid FROM s3), 3, 'failed'));
INSERT INTO e3 VALUES (4, pg_temp.call((SELECT sid FROM s3), 4, 'executing'));
SELECT undolog.fail_session((SELECT sid FROM s3), 'the agent crashed mid-call');
SELECT results_eq(
    $$SELECT c.tool_name, c.args, c.result_snapshot, c.attempt
      FROM undolog.claim_compensation((SELECT sid FROM s3)) AS c$$,
    $$VALUES ('step_4', '{"step": 4}'::jsonb, NULL::jsonb, 1)$$,
    'an executing effect (outcome unknown) is compensated, with no result snapshot'
);
SELECT is(pg_temp.effect_state((SELECT effect_id FROM e3 WHERE step = 4)), 'compensating',
          '... its effect goes executing -> compensating');
SELECT results_eq(
    $$SELECT from_state, to_state, history_id IS NULL AS in_row FROM undolog.effect_timeline
      WHERE effect_id = (SELECT effect_id FROM e3 WHERE step = 4) ORDER BY seq$$,
    $$VALUES (NULL, 'executing', true), ('executing', 'compensating', false)$$,
    '... as its timeline shows (its creation in its row, the claim a history row)'
);
SELECT is(
    undolog.commit((SELECT effect_id FROM e3 WHERE step = 4), '{}'),
    'late',
    'a late commit of the call being compensated is not applied: answered late (recorded, 26_late_result.sql)'
);
SELECT undolog.complete_compensation(pg_temp.undo_of((SELECT effect_id FROM e3 WHERE step = 4)));
SELECT is(pg_temp.claim_step((SELECT sid FROM s3)), 1,
          'the next claim skips both failed (pending) calls and hands out step 1');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e3),
          ARRAY['compensating', 'skipped', 'skipped', 'compensated'],
          'the failed calls'' entries are skipped');
SELECT is((SELECT array_agg(pg_temp.effect_state(effect_id) ORDER BY step) FROM e3),
          ARRAY['compensating', 'pending', 'pending', 'compensated'],
          '... and their effects stay pending: they never acted');
SELECT undolog.complete_compensation(pg_temp.undo_of((SELECT effect_id FROM e3 WHERE step = 1)));
SELECT is(pg_temp.walk((SELECT sid FROM s3)), '{}'::integer[], 'nothing more to claim');
SELECT is(pg_temp.session_state((SELECT sid FROM s3)), 'compensated', 'the session is compensated');

-- Barriers ------------------------------------------------------------------------------
-- A committed irreversible call halts the walk; entries below it stay pending.
CREATE TEMP TABLE s4 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e4 AS SELECT 1 AS step, pg_temp.call((SELECT sid FROM s4), 1) AS effect_id;
INSERT INTO e4 VALUES (2, pg_temp.irreversible((SELECT sid FROM s4), 2, 'committed'));
INSERT INTO e4 VALUES (3, pg_temp.call((SELECT sid FROM s4), 3));
SELECT undolog.fail_session((SELECT sid FROM s4), 'failed after the payout');
SELECT is(pg_temp.walk((SELECT sid FROM s4)), ARRAY[3],
          'the walk undoes what is above a committed irreversible call, then stops');
SELECT is(pg_temp.session_state((SELECT sid FROM s4)), 'halted', 'the session is halted');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e4),
          ARRAY['pending', 'pending', 'compensated'],
          'the barrier and every entry below it stay pending');
SELECT is(pg_temp.effect_state((SELECT effect_id FROM e4 WHERE step = 2)), 'committed',
          'the irreversible effect stays committed');
SELECT ok((SELECT s.halt_undo_id = pg_temp.undo_of((SELECT effect_id FROM e4 WHERE step = 2))
                  AND s.error LIKE 'the undo walk reached irreversible call irreversible_2 %committed%'
           FROM undolog.undolog_sessions AS s WHERE s.session_id = (SELECT sid FROM s4)),
          'the session remembers the barrier it halted at, and why');
SELECT ok((SELECT h.detail ->> 'error' LIKE 'the undo walk reached irreversible call%'
           FROM undolog.undolog_session_history AS h
           WHERE h.session_id = (SELECT sid FROM s4) AND h.to_state = 'halted'),
          'the reason is in the session history');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s4)),
               'UL010', 'claiming on a halted session');
SELECT throws_like(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s4)),
                   '%is halted: its undo walk is stopped until an operator acts',
                   '... with a message that says an operator must act');

-- An executing irreversible call (it may have acted) halts too.
CREATE TEMP TABLE s5 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e5 AS SELECT 1 AS step, pg_temp.call((SELECT sid FROM s5), 1) AS effect_id;
INSERT INTO e5 VALUES (2, pg_temp.irreversible((SELECT sid FROM s5), 2, 'executing'));
SELECT undolog.fail_session((SELECT sid FROM s5), 'died during the payout');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s5))$$,
                'an executing irreversible call at the top: no row');
SELECT is(pg_temp.session_state((SELECT sid FROM s5)), 'halted', '... the session halts');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e5),
          ARRAY['pending', 'pending'], '... nothing below is touched');

-- Irreversible calls that never acted are skipped: approved but not made again ...
CREATE TEMP TABLE s6 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e6 AS SELECT 1 AS step, pg_temp.call((SELECT sid FROM s6), 1) AS effect_id;
INSERT INTO e6 VALUES (2, pg_temp.irreversible((SELECT sid FROM s6), 2, 'approved'));
INSERT INTO e6 VALUES (3, pg_temp.call((SELECT sid FROM s6), 3));
SELECT undolog.fail_session((SELECT sid FROM s6), 'failed before making the approved call');
SELECT is(pg_temp.walk((SELECT sid FROM s6)), ARRAY[3, 1],
          'an approved-but-not-run irreversible call is passed');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e6),
          ARRAY['compensated', 'skipped', 'compensated'], '... its barrier is skipped');
SELECT is(pg_temp.effect_state((SELECT effect_id FROM e6 WHERE step = 2)), 'approved',
          '... its effect stays approved');
SELECT is(pg_temp.session_state((SELECT sid FROM s6)), 'compensated', '... the session is compensated');

-- ... rejected ...
CREATE TEMP TABLE s7 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e7 AS SELECT 1 AS step, pg_temp.call((SELECT sid FROM s7), 1) AS effect_id;
INSERT INTO e7 VALUES (2, pg_temp.irreversible((SELECT sid FROM s7), 2, 'rejected'));
SELECT is(pg_temp.session_state((SELECT sid FROM s7)), 'compensating',
          'a rejection moves the session straight to compensating');
SELECT is(pg_temp.walk((SELECT sid FROM s7)), ARRAY[1], 'a rejected irreversible call is passed');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e7),
          ARRAY['compensated', 'skipped'], '... its barrier is skipped');
SELECT is(pg_temp.session_state((SELECT sid FROM s7)), 'compensated', '... the session is compensated');

-- ... still pending (no decision was ever made).
CREATE TEMP TABLE s8 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e8 AS SELECT 1 AS step, pg_temp.call((SELECT sid FROM s8), 1) AS effect_id;
INSERT INTO e8 VALUES (2, pg_temp.irreversible((SELECT sid FROM s8), 2, 'pending'));
UPDATE undolog.undolog_sessions SET state = 'compensating' WHERE session_id = (SELECT sid FROM s8);
SELECT is(pg_temp.walk((SELECT sid FROM s8)), ARRAY[1], 'an undecided irreversible call is passed');
SELECT is((SELECT array_agg(pg_temp.entry_state(effect_id) ORDER BY step) FROM e8),
          ARRAY['compensated', 'skipped'], '... its barrier is skipped');

-- Due times and claim expiry --------------------------------------------------------------
CREATE TEMP TABLE s9 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e9 AS
SELECT step, pg_temp.call((SELECT sid FROM s9), step, 'committed',
                          '{"name": "undo_step", "args": {"hard": true}, "max_attempts": 2}')
       AS effect_id
FROM generate_series(1, 2) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s9), 'x');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() + interval '1 minute'
WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2);
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s9))$$,
                'a top entry whose next attempt is in the future: no row');
SELECT is(pg_temp.entry_state((SELECT effect_id FROM e9 WHERE step = 1)), 'pending',
          '... and the entry below is not handed out instead');
UPDATE undolog.undolog_undo_stack SET next_attempt_at = now()
WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2);
SELECT results_eq(
    $$SELECT c.compensation, c.attempt FROM undolog.claim_compensation((SELECT sid FROM s9), '2 seconds') AS c$$,
    $$VALUES ('{"name": "undo_step", "args": {"hard": true}}'::jsonb, 1)$$,
    'once due it is handed out, with the descriptor''s args'
);
SELECT is((SELECT claimed_until FROM undolog.undolog_undo_stack
           WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2)),
          now() + interval '2 seconds', 'p_claim_timeout sets the claim expiry');
-- The walker dies: its claim expires and the entry is handed out again.
UPDATE undolog.undolog_undo_stack SET claimed_until = now() - interval '1 second'
WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2);
SET LOCAL undolog.claim_timeout = '30 seconds';
SELECT results_eq(
    $$SELECT c.args, c.attempt FROM undolog.claim_compensation((SELECT sid FROM s9)) AS c$$,
    $$VALUES ('{"step": 2}'::jsonb, 2)$$,
    'an expired claim is handed out again, as attempt 2'
);
SELECT is((SELECT claimed_until FROM undolog.undolog_undo_stack
           WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2)),
          now() + interval '30 seconds', 'the GUC undolog.claim_timeout sets the claim expiry');
SELECT results_eq(
    $$SELECT event, from_state, to_state, attempt FROM undolog.undolog_undo_history
      WHERE undo_id = pg_temp.undo_of((SELECT effect_id FROM e9 WHERE step = 2)) ORDER BY history_id$$,
    $$VALUES ('transition', 'pending', 'compensating', 1), ('reclaimed', 'compensating', 'compensating', 2)$$,
    'the undo history records the re-claim'
);
-- It dies again, on its last allowed attempt (max_attempts 2): the entry is given up.
UPDATE undolog.undolog_undo_stack SET claimed_until = now() - interval '1 second'
WHERE effect_id = (SELECT effect_id FROM e9 WHERE step = 2);
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s9))$$,
                'an expired claim of the last allowed attempt is not handed out again');
SELECT is(pg_temp.entry_state((SELECT effect_id FROM e9 WHERE step = 2)) || '/' ||
          pg_temp.effect_state((SELECT effect_id FROM e9 WHERE step = 2)) || '/' ||
          pg_temp.session_state((SELECT sid FROM s9)),
          'compensation_failed/compensation_failed/halted',
          '... it is given up (compensation_failed) and the session halts');
SELECT ok((SELECT s.error LIKE 'compensation undo_step of step_2 % failed after 2 attempt(s): the claim of attempt 2 expired%'
           FROM undolog.undolog_sessions AS s WHERE s.session_id = (SELECT sid FROM s9)),
          '... saying why');
SELECT is(pg_temp.entry_state((SELECT effect_id FROM e9 WHERE step = 1)), 'pending',
          '... and the entry below stays pending');

-- Bad input -------------------------------------------------------------------------------
CREATE TEMP TABLE s10 AS SELECT pg_temp.new_session() AS sid;
SELECT pg_temp.call((SELECT sid FROM s10), 1);
SELECT pg_temp.refused('SELECT * FROM undolog.claim_compensation(gen_random_uuid())', 'UL002',
               'claiming on an unknown session');
SELECT pg_temp.refused('SELECT * FROM undolog.claim_compensation(NULL)', 'UL002',
               'claiming on a NULL session');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s10)),
               'UL010', 'claiming on an active session');
SELECT undolog.fail_session((SELECT sid FROM s10), 'x');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L, %L)', (SELECT sid FROM s10), '0 seconds'),
               'UL008', 'a claim timeout of zero');
SET LOCAL undolog.claim_timeout = 'soon';
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s10)),
               'UL008', 'a claim_timeout GUC that is not an interval');
SET LOCAL undolog.claim_timeout = '';
SET LOCAL undolog.default_max_attempts = '0';
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s10)),
               'UL008', 'a default_max_attempts GUC out of range');
RESET undolog.default_max_attempts;
SELECT pg_temp.refused(format('SELECT undolog.fail_session(%L, %L)', (SELECT sid FROM s10), 'again'),
               'UL001', 'failing a session twice');

CREATE TEMP TABLE s11 AS SELECT pg_temp.new_session() AS sid;
SELECT undolog.complete_session((SELECT sid FROM s11));
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s11)),
               'UL010', 'claiming on a completed session');
CREATE TEMP TABLE s12 AS SELECT pg_temp.new_session() AS sid;
SELECT pg_temp.irreversible((SELECT sid FROM s12), 1, 'pending');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s12)),
               'UL010', 'claiming on a session awaiting approval');

-- Privileges ------------------------------------------------------------------------------
SELECT sid AS s10 FROM s10 \gset
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT * FROM undolog.claim_compensation(%L)', :'s10'),
                 '42501', NULL, 'the agent role cannot claim compensations');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is((SELECT c.tool_name FROM undolog.claim_compensation(:'s10') AS c), 'step_1',
          'the operator role can');
RESET ROLE;
SELECT ok(NOT has_function_privilege('public', 'undolog.claim_compensation(uuid, interval)', 'EXECUTE'),
          'PUBLIC cannot execute it');
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
           FROM pg_proc AS p WHERE p.oid = 'undolog.claim_compensation(uuid, interval)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path');

SELECT * FROM finish();
ROLLBACK;
