-- undolog.complete_compensation: an in-flight compensation succeeded.
BEGIN;
SELECT plan(38);

\ir _helpers.psql


CREATE TEMP TABLE s1 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e1 AS
SELECT step, pg_temp.call((SELECT sid FROM s1), step) AS effect_id
FROM generate_series(1, 2) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s1), 'x');
CREATE TEMP TABLE c1 AS SELECT * FROM undolog.claim_compensation((SELECT sid FROM s1));
SELECT undo_id AS u2, effect_id AS f2 FROM c1 \gset
SELECT pg_temp.undo_of(effect_id) AS u1, effect_id AS f1 FROM e1 WHERE step = 1 \gset

SELECT lives_ok(format('SELECT undolog.complete_compensation(%L)', :'u2'),
                'completing the in-flight entry');
SELECT is(pg_temp.entry_state(:'f2'), 'compensated', 'the entry is compensated');
SELECT is(pg_temp.effect_state(:'f2'), 'compensated', 'the effect is compensated');
-- Its creation and commit are recorded in its row (no history_id), the undoing as
-- history rows. It committed before any other change: one link (its commit) stands for
-- both, so the creation shows the commit's seq and comes first by its time (ORDER BY
-- seq, at).
SELECT results_eq(
    format($$SELECT from_state, to_state, history_id IS NULL AS in_row
             FROM undolog.effect_timeline WHERE effect_id = %L ORDER BY seq, at$$, :'f2'),
    $$VALUES (NULL, 'executing', true), ('executing', 'committed', true),
             ('committed', 'compensating', false), ('compensating', 'compensated', false)$$,
    'the effect timeline holds the whole life of the call and its undoing'
);
-- The walk taking a committed call writes only its history rows: no late creation link,
-- chain_* stays NULL, the commit its one in-row link, before the undoing's links.
SELECT results_eq(
    format($$SELECT e.chain_seq, e.chain_prev, e.chain_hash, e.commit_seq IS NOT NULL
             FROM undolog.undolog_effect_log AS e WHERE e.effect_id = %L$$, :'f2'),
    $$VALUES (NULL::bigint, NULL::bytea, NULL::bytea, true)$$,
    'the compensated call keeps chain_* NULL: its one link is its commit'
);
SELECT results_eq(
    format($$SELECT t.seq = e.commit_seq, t.seq > e.commit_seq
             FROM undolog.effect_timeline AS t
             JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)
             WHERE t.effect_id = %L ORDER BY t.seq, t.at$$, :'f2'),
    $$VALUES (true, false), (true, false), (false, true), (false, true)$$,
    '... its creation and commit at the commit''s seq, compensating and compensated after it'
);
SELECT results_eq(
    format($$SELECT from_state, to_state, attempt FROM undolog.undolog_undo_history
             WHERE undo_id = %L ORDER BY history_id$$, :'u2'),
    $$VALUES ('pending', 'compensating', 1), ('compensating', 'compensated', 1)$$,
    'the undo history records claim and completion'
);
SELECT is(pg_temp.session_state((SELECT sid FROM s1)), 'compensating',
          'the session stays compensating: the walk goes on');

-- Bad input: completing twice, completing what is not in flight, unknown ids.
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L)', :'u2'), 'UL001',
                       'completing twice');
SELECT throws_like(format('SELECT undolog.complete_compensation(%L)', :'u2'),
                   'invalid undo entry transition compensated -> compensated',
                   '... says what is wrong');
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L)', :'u1'), 'UL001',
                       'completing an entry that was never claimed');
SELECT pg_temp.refused('SELECT undolog.complete_compensation(gen_random_uuid())', 'UL012',
                       'completing an unknown undo id');
SELECT throws_like('SELECT undolog.complete_compensation(''00000000-0000-0000-0000-000000000000'')',
                   'unknown undo entry 00000000-0000-0000-0000-000000000000',
                   '... names it');
SELECT pg_temp.refused('SELECT undolog.complete_compensation(NULL)', 'UL012',
                       'completing a NULL undo id');
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L)', :'f1'), 'UL012',
                       'completing with an effect id instead of an undo id');

-- A foreign entry: another session's, not in flight.
CREATE TEMP TABLE s2 AS SELECT pg_temp.new_session() AS sid;
SELECT pg_temp.undo_of(pg_temp.call((SELECT sid FROM s2), 1)) AS foreign_undo \gset
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L)', :'foreign_undo'), 'UL001',
                       'completing another (active) session''s entry');

-- The last entry: the session becomes compensated at the next claim.
SELECT is((SELECT c.undo_id FROM undolog.claim_compensation((SELECT sid FROM s1)) AS c), :'u1'::uuid,
          'the next claim hands out step 1');
SELECT undolog.complete_compensation(:'u1', 1);
SELECT is(pg_temp.session_state((SELECT sid FROM s1)), 'compensating',
          'after the last completion the session is still compensating ...');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s1))$$,
                '... the next claim finds nothing left ...');
SELECT is(pg_temp.session_state((SELECT sid FROM s1)), 'compensated', '... and ends the walk');
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L)', :'u1'), 'UL001',
                       'completing an entry of a compensated session');

-- Stale and late walkers.
CREATE TEMP TABLE s3 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e3 AS
SELECT step, pg_temp.call((SELECT sid FROM s3), step) AS effect_id
FROM generate_series(1, 2) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s3), 'x');
SELECT c.undo_id AS u3, c.effect_id AS f3 FROM undolog.claim_compensation((SELECT sid FROM s3)) AS c \gset
UPDATE undolog.undolog_undo_stack SET claimed_until = now() - interval '1 second' WHERE undo_id = :'u3';
SELECT is((SELECT c.attempt FROM undolog.claim_compensation((SELECT sid FROM s3)) AS c), 2,
          'an expired claim is handed out again as attempt 2');
SELECT pg_temp.refused(format('SELECT undolog.complete_compensation(%L, 1)', :'u3'), 'UL001',
                       'the walker of attempt 1 reporting late, with its attempt');
SELECT throws_like(format('SELECT undolog.complete_compensation(%L, 1)', :'u3'),
                   'stale claim: attempt 1 of undo entry % was superseded by attempt 2',
                   '... is told its claim is stale');
UPDATE undolog.undolog_undo_stack SET claimed_until = now() - interval '1 second' WHERE undo_id = :'u3';
SELECT lives_ok(format('SELECT undolog.complete_compensation(%L, 2)', :'u3'),
                'a completion after the claim expired (not yet re-claimed) is accepted');
SELECT is(pg_temp.entry_state(:'f3'), 'compensated', '... the entry is compensated');

-- Privileges.
SELECT c.undo_id AS u4 FROM undolog.claim_compensation((SELECT sid FROM s3)) AS c \gset
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.complete_compensation(%L)', :'u4'), '42501', NULL,
                 'the agent role cannot complete compensations');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT lives_ok(format('SELECT undolog.complete_compensation(%L)', :'u4'), 'the operator role can');
RESET ROLE;
SELECT ok(NOT has_function_privilege('public', 'undolog.complete_compensation(uuid, integer)', 'EXECUTE'),
          'PUBLIC cannot execute it');
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
           FROM pg_proc AS p WHERE p.oid = 'undolog.complete_compensation(uuid, integer)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path');

SELECT * FROM finish();
ROLLBACK;
