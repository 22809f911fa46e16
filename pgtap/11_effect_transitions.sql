-- undolog.effect_transition_allowed(tier, from, to): the effect state machine of
-- docs/design/state-machines.md, checked for every (tier, from, to) triple, and the effect log's guard
-- trigger that enforces it on every write, whoever makes it.
BEGIN;
SELECT plan(50);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('send_email', 'irreversible') AS tool_id \gset

SELECT has_function('undolog', 'effect_transition_allowed', ARRAY['text', 'text', 'text'],
                    'undolog.effect_transition_allowed(text, text, text) exists');
SELECT volatility_is('undolog', 'effect_transition_allowed', ARRAY['text', 'text', 'text'],
                     'immutable', 'it is IMMUTABLE');

CREATE TEMP TABLE effect_states (state text PRIMARY KEY);
INSERT INTO effect_states VALUES
    ('pending'), ('executing'), ('committed'), ('compensating'), ('compensated'),
    ('compensation_failed'), ('approved'), ('rejected'), ('replayed');
CREATE TEMP TABLE tiers (tier text PRIMARY KEY);
INSERT INTO tiers VALUES ('compensable'), ('irreversible');

-- The expected valid triples, from docs/design/state-machines.md: compensating, compensated and
-- compensation_failed are COMPENSABLE only; approved/rejected IRREVERSIBLE only; an
-- IRREVERSIBLE call executes only after approval (pending -> approved -> executing).
-- pending -> replayed is in the contract though the engine never takes it (a replay
-- leaves the original committed); the validator allows it for both tiers.
-- compensation_failed -> compensating: an operator's retry_compensation.
CREATE TEMP TABLE expected_valid (tier text, from_state text, to_state text);
INSERT INTO expected_valid VALUES
    ('compensable', 'pending', 'executing'),
    ('compensable', 'pending', 'replayed'),
    ('compensable', 'executing', 'committed'),
    ('compensable', 'executing', 'pending'),
    ('compensable', 'executing', 'compensating'),
    ('compensable', 'committed', 'compensating'),
    ('compensable', 'compensating', 'compensated'),
    ('compensable', 'compensating', 'compensation_failed'),
    ('compensable', 'compensation_failed', 'compensating'),
    ('irreversible', 'pending', 'approved'),
    ('irreversible', 'pending', 'rejected'),
    ('irreversible', 'pending', 'replayed'),
    ('irreversible', 'executing', 'committed'),
    ('irreversible', 'executing', 'pending'),
    ('irreversible', 'approved', 'executing');

CREATE TEMP VIEW all_triples AS
SELECT t.tier, f.state AS from_state, s.state AS to_state,
       undolog.effect_transition_allowed(t.tier, f.state, s.state) AS allowed
FROM tiers AS t CROSS JOIN effect_states AS f CROSS JOIN effect_states AS s;

SELECT is((SELECT count(*) FROM all_triples), 162::bigint,
          'the cross product covers 2 tiers x 9 x 9 states');
SELECT is((SELECT count(*) FROM expected_valid), 15::bigint, '15 valid triples expected');

-- Every triple, valid or not, against the table above (false, not NULL, when invalid).
SELECT results_eq(
    $$SELECT tier, from_state, to_state, allowed FROM all_triples ORDER BY 1, 2, 3$$,
    $$SELECT a.tier, a.from_state, a.to_state,
             EXISTS (SELECT FROM expected_valid AS v
                     WHERE (v.tier, v.from_state, v.to_state)
                         = (a.tier, a.from_state, a.to_state))
      FROM all_triples AS a ORDER BY 1, 2, 3$$,
    'effect_transition_allowed answers the expected value for all 162 triples'
);
SELECT set_eq(
    $$SELECT tier, from_state, to_state FROM all_triples WHERE allowed$$,
    $$SELECT tier, from_state, to_state FROM expected_valid$$,
    'the allowed triples are exactly the expected ones'
);
SELECT is_empty($$SELECT * FROM all_triples WHERE allowed IS NULL$$,
                'no triple answers NULL');
SELECT is_empty($$SELECT * FROM all_triples WHERE allowed AND from_state = to_state$$,
                'no state transitions to itself');
SELECT is_empty(
    $$SELECT * FROM all_triples WHERE allowed
      AND from_state IN ('compensated', 'rejected', 'replayed')$$,
    'compensated, rejected and replayed are final'
);

-- The guard trigger: direct UPDATEs of the effect log (as the owner, who bypasses any
-- grant) still go through the state machine.
SELECT is(undolog.begin_session('11111111-1111-4111-8111-111111111111'),
          '11111111-1111-4111-8111-111111111111'::uuid, 'setup: a session');
CREATE TEMP TABLE fx AS
SELECT 'comp'::text AS name, i.effect_id
FROM undolog.intercept('11111111-1111-4111-8111-111111111111', 0, 'create_user', 'compensable',
                       '{"name": "ada"}', pg_temp.sig('guard-comp'), '{"name": "delete_user"}') AS i;
INSERT INTO fx
SELECT 'irr', i.effect_id
FROM undolog.intercept('11111111-1111-4111-8111-111111111111', 1, 'send_email', 'irreversible',
                       '{"to": "ada"}', pg_temp.sig('guard-irr'), NULL) AS i;

CREATE FUNCTION pg_temp.fx(p_name text) RETURNS uuid LANGUAGE sql
AS $$ SELECT effect_id FROM fx WHERE name = p_name $$;
CREATE FUNCTION pg_temp.fx_state(p_name text) RETURNS text LANGUAGE sql
AS $$ SELECT e.state FROM undolog.undolog_effect_log AS e WHERE e.effect_id = pg_temp.fx(p_name) $$;
CREATE FUNCTION pg_temp.fx_history(p_name text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM undolog.undolog_effect_history AS h WHERE h.effect_id = pg_temp.fx(p_name) $$;
-- Every event of the effect's life: its history rows and the two its own row records
-- (its creation and its commit, migration 0013), as undolog.effect_timeline shows them.
CREATE FUNCTION pg_temp.fx_events(p_name text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM undolog.effect_timeline AS t WHERE t.effect_id = pg_temp.fx(p_name) $$;

SELECT is(pg_temp.fx_state('comp'), 'executing', 'setup: the compensable effect is executing');
SELECT is(pg_temp.fx_state('irr'), 'pending', 'setup: the irreversible effect is pending');

SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'compensated' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'UL001', NULL, 'guard refuses executing -> compensated by direct UPDATE');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'approved' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'UL001', NULL, 'guard refuses executing -> approved (and approval is not for compensable)');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'executing' WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'UL001', NULL, 'guard refuses irreversible pending -> executing (no approval)');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'compensating' WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'UL001', NULL, 'guard refuses irreversible pending -> compensating');
-- A new call's creation is recorded in its own row, not as a history row: one event
-- (the COMPENSABLE call's not linked yet: it is linked at its first change of state).
SELECT is(pg_temp.fx_state('comp') || '/' || pg_temp.fx_history('comp') || '/'
          || pg_temp.fx_events('comp'), 'executing/0/1',
          'refused updates left the compensable effect executing, no history row, its creation its one event');
SELECT is(pg_temp.fx_state('irr') || '/' || pg_temp.fx_history('irr') || '/'
          || pg_temp.fx_events('irr'), 'pending/0/1',
          'refused updates left the irreversible effect pending, no history row, its creation its one event');

-- Valid transitions are accepted and recorded, one event each: the commit in the row
-- itself (committed_at, committed_by, its link), every other one as a history row.
SELECT lives_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'committed' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'guard accepts executing -> committed by direct UPDATE');
SELECT lives_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'compensating' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'guard accepts committed -> compensating');
SELECT lives_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'approved' WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'guard accepts irreversible pending -> approved');
-- The whole life, in chain order: the creation and the commit from the row (no
-- history_id), the rest from the history. The compensable call committed before any
-- other change: its creation and its commit share the commit's one link (same seq), the
-- creation first by its time (ORDER BY seq, at, as the view's comment says).
SELECT results_eq(
    format($$SELECT event, from_state, to_state, history_id IS NULL AS in_row
             FROM undolog.effect_timeline WHERE effect_id = %L ORDER BY seq, at$$, pg_temp.fx('comp')),
    $$VALUES ('transition', NULL::text, 'executing', true),
             ('transition', 'executing', 'committed', true),
             ('transition', 'committed', 'compensating', false)$$,
    'the compensable effect''s timeline holds every transition, in order'
);
SELECT results_eq(
    format($$SELECT event, from_state, to_state, history_id IS NULL AS in_row
             FROM undolog.effect_timeline WHERE effect_id = %L ORDER BY seq, at$$, pg_temp.fx('irr')),
    $$VALUES ('transition', NULL::text, 'pending', true),
             ('transition', 'pending', 'approved', false)$$,
    'the irreversible effect''s timeline holds every transition, in order'
);
-- Its commit was its first change: one link, commit_*, whose record is the whole call;
-- chain_* stays NULL (the committed -> compensating above linked only a history row).
SELECT results_eq(
    format($$SELECT committed_at IS NOT NULL, committed_by = session_user,
                    commit_seq IS NOT NULL, chain_seq IS NULL, chain_prev IS NULL,
                    chain_hash IS NULL
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, pg_temp.fx('comp')),
    $$VALUES (true, true, true, true, true, true)$$,
    'the direct UPDATE''s commit is recorded in the row: when, by this login, its one link (no chain_*)'
);
SELECT results_eq(
    format($$SELECT count(*), count(DISTINCT seq)
             FROM undolog.effect_timeline WHERE effect_id = %L AND history_id IS NULL$$,
           pg_temp.fx('comp')),
    $$VALUES (2::bigint, 1::bigint)$$,
    '... its creation and its commit in the timeline share that one seq'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'committed' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'UL001', NULL, 'guard refuses compensating -> committed');
SELECT lives_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'compensated' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'guard accepts compensating -> compensated');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET state = 'compensating' WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'UL001', NULL, 'guard refuses compensated -> compensating (compensated is final)');

-- A change that is not a state change (updated_at, error ...) writes no history.
SELECT lives_ok(
    format($$UPDATE undolog.undolog_effect_log SET error = 'note' WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'an UPDATE that keeps the state is accepted');
SELECT is(pg_temp.fx_history('irr'), 1::bigint, '... and writes no history row');

-- The recorded creation and commit are identity: never changed, not even by the owner;
-- the result is part of the recorded commit once it is made.
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET committed_at = committed_at - interval '1 second'
             WHERE effect_id = %L$$, pg_temp.fx('comp')),
    'UL011', NULL, 'guard refuses a change of committed_at');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET commit_hash = '\x00'::bytea WHERE effect_id = %L$$,
           pg_temp.fx('comp')),
    'UL011', NULL, 'guard refuses a change of commit_hash');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET chain_hash = '\x00'::bytea WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'UL011', NULL, 'guard refuses a change of chain_hash (the creation''s link)');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET result_snapshot = '{"forged": true}'
             WHERE effect_id = %L$$, pg_temp.fx('comp')),
    'UL011', NULL, 'guard refuses a change of a committed effect''s result_snapshot');
SELECT results_eq(
    format($$SELECT result_snapshot, commit_hash IS NOT NULL, chain_hash IS NULL
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, pg_temp.fx('comp')),
    $$VALUES (NULL::jsonb, true, true)$$,
    '... the committed effect''s result and its one link (commit_*) are as recorded');
-- events_in_row tells a row written since migration 0013 from an older one: identity too
-- (flipped to false, a call would pass for one whose events are history rows).
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET events_in_row = false WHERE effect_id = %L$$,
           pg_temp.fx('irr')),
    'UL011', NULL, 'guard refuses a change of events_in_row');
SELECT throws_ok(
    format($$UPDATE undolog.undolog_effect_log SET events_in_row = false, state = 'executing'
             WHERE effect_id = %L$$, pg_temp.fx('irr')),
    'UL011', NULL, '... also together with a valid state change (approved -> executing)');

-- The guard also checks INSERTs: an effect starts as intercept writes it, a compensable
-- one executing, an irreversible one pending (the creation record's state follows from
-- the tier). The insert trigger's WHEN spares only the canonical compensable insert
-- (compensable, executing): every other insert still fires the guard and is refused.
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
      VALUES (gen_random_uuid(), '11111111-1111-4111-8111-111111111111', now(),
              repeat('c', 64), 9, 't', 'compensable', '{}', 'committed')$$,
    'UL001', NULL, 'guard refuses an effect inserted committed');
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
      VALUES (gen_random_uuid(), '11111111-1111-4111-8111-111111111111', now(),
              repeat('c', 64), 9, 't', 'irreversible', '{}', 'executing')$$,
    'UL001', NULL, 'guard refuses an irreversible effect inserted executing');
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
      VALUES (gen_random_uuid(), '11111111-1111-4111-8111-111111111111', now(),
              repeat('c', 64), 9, 't', 'compensable', '{}', 'pending')$$,
    'UL001', NULL, 'guard refuses a compensable effect inserted pending');
-- The canonical compensable insert (what intercept writes) fires no trigger: it passes,
-- marked events_in_row (the column's default), and is not linked (no chain_*, no
-- commit_*): the session's head does not move.
SELECT seq AS head_before FROM undolog.undolog_chain_heads
WHERE session_id = '11111111-1111-4111-8111-111111111111' \gset
SELECT lives_ok(
    $$INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
      VALUES ('11111111-1111-4111-8111-0000000000c1', '11111111-1111-4111-8111-111111111111', now(),
              repeat('c', 64), 9, 't', 'compensable', '{}', 'executing')$$,
    'the canonical compensable insert (executing) passes');
SELECT results_eq(
    $$SELECT events_in_row, chain_seq, chain_prev, chain_hash, commit_seq, commit_prev, commit_hash
      FROM undolog.undolog_effect_log WHERE effect_id = '11111111-1111-4111-8111-0000000000c1'$$,
    $$VALUES (true, NULL::bigint, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bytea, NULL::bytea)$$,
    '... events_in_row, not linked (chain_* and commit_* NULL)');
SELECT is((SELECT seq FROM undolog.undolog_chain_heads
           WHERE session_id = '11111111-1111-4111-8111-111111111111'),
          :head_before::bigint, '... the session''s head did not move');
-- A compensable insert that says anything more (a forged record, link or older kind)
-- fires the guard, which keeps none of it: the row is as intercept would have written it.
SELECT lives_ok(
    $$INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args,
         state, events_in_row, committed_at, committed_by, chain_seq, chain_hash, replay_count)
      VALUES ('11111111-1111-4111-8111-0000000000c2', '11111111-1111-4111-8111-111111111111', now(),
              repeat('d', 64), 10, 't', 'compensable', '{}', 'executing', false, now(), 'forger',
              7, '\x00', 3)$$,
    'a compensable insert with a forged record passes the guard ...');
SELECT results_eq(
    $$SELECT events_in_row, committed_at, committed_by, chain_seq, chain_hash, replay_count
      FROM undolog.undolog_effect_log WHERE effect_id = '11111111-1111-4111-8111-0000000000c2'$$,
    $$VALUES (true, NULL::timestamptz, NULL::text, NULL::bigint, NULL::bytea, 0)$$,
    '... which cleared it: in-row events to come, nothing recorded, not linked');

-- The guard and the validator agree on every triple: one effect per (tier, from, to),
-- put in its from-state with triggers off (session_replication_role = replica), then
-- moved to its to-state by a direct UPDATE, triggers on. They are written as rows from
-- before migration 0013 (events_in_row false): no creation of theirs is recorded (an
-- in-row row would be linked at its first change and its creation shown in the
-- timeline), so the timeline holds exactly the transitions the guard accepted.
SET LOCAL session_replication_role = replica;
INSERT INTO undolog.undolog_effect_log
    (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state,
     events_in_row)
SELECT gen_random_uuid(), '11111111-1111-4111-8111-111111111111', now(),
       pg_temp.sig(a.tier || a.from_state || a.to_state), 100 + row_number() OVER (), 'matrix',
       a.tier, jsonb_build_object('to', a.to_state), a.from_state, false
FROM all_triples AS a
WHERE a.from_state <> a.to_state;
SET LOCAL session_replication_role = DEFAULT;

CREATE FUNCTION pg_temp.guard_outcomes()
RETURNS TABLE (tier text, from_state text, to_state text, accepted boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT e.effect_id, e.tier, e.state, e.args ->> 'to' AS target
             FROM undolog.undolog_effect_log AS e WHERE e.tool_name = 'matrix' LOOP
        tier := r.tier;
        from_state := r.state;
        to_state := r.target;
        BEGIN
            UPDATE undolog.undolog_effect_log AS e SET state = r.target
            WHERE e.effect_id = r.effect_id;
            accepted := true;
        EXCEPTION WHEN SQLSTATE 'UL001' THEN
            accepted := false;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE TEMP TABLE guard_outcomes AS SELECT * FROM pg_temp.guard_outcomes();

SELECT is((SELECT count(*) FROM guard_outcomes), 144::bigint,
          'the guard was tried on all 144 triples with from <> to');
SELECT set_eq(
    $$SELECT tier, from_state, to_state FROM guard_outcomes WHERE accepted$$,
    $$SELECT tier, from_state, to_state FROM expected_valid$$,
    'the guard accepts exactly the expected triples (and refuses the 130 others with UL001)'
);
-- Recorded once each: the timeline holds the history rows and the commits in their rows
-- (the matrix rows were inserted with triggers off, as older rows: no creation is
-- recorded for them, none is linked).
SELECT bag_eq(
    $$SELECT t.tier, t.from_state, t.to_state
      FROM undolog.effect_timeline AS t
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)
      WHERE e.tool_name = 'matrix'$$,
    $$SELECT tier, from_state, to_state FROM expected_valid$$,
    'each accepted transition was recorded once, each refused one not at all'
);
SELECT results_eq(
    $$SELECT e.tier, e.committed_by = session_user, e.commit_seq IS NOT NULL,
             (SELECT count(*) FROM undolog.undolog_effect_history AS h
              WHERE h.effect_id = e.effect_id)
      FROM undolog.undolog_effect_log AS e
      WHERE e.tool_name = 'matrix' AND e.committed_at IS NOT NULL ORDER BY e.tier$$,
    $$VALUES ('compensable', true, true, 0::bigint),
             ('irreversible', true, true, 0::bigint)$$,
    'the two commits (executing -> committed) are recorded in their rows, linked, not as history rows'
);
SELECT is_empty(
    $$SELECT FROM undolog.undolog_effect_log
      WHERE tool_name = 'matrix' AND (chain_seq IS NOT NULL OR events_in_row)$$,
    '... and no older (events_in_row false) row got a creation link');

SELECT * FROM finish();
ROLLBACK;
