-- undolog.effect_transition_allowed(tier, from, to): the effect state machine of
-- docs/design/state-machines.md, checked for every (tier, from, to) triple, and the effect log's guard
-- trigger that enforces it on every write, whoever makes it.
BEGIN;
SELECT plan(41);
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
-- A new call's creation is recorded in its own row, not as a history row: one event.
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
-- history_id), the rest from the history.
SELECT results_eq(
    format($$SELECT event, from_state, to_state, history_id IS NULL AS in_row
             FROM undolog.effect_timeline WHERE effect_id = %L ORDER BY seq$$, pg_temp.fx('comp')),
    $$VALUES ('transition', NULL::text, 'executing', true),
             ('transition', 'executing', 'committed', true),
             ('transition', 'committed', 'compensating', false)$$,
    'the compensable effect''s timeline holds every transition, in order'
);
SELECT results_eq(
    format($$SELECT event, from_state, to_state, history_id IS NULL AS in_row
             FROM undolog.effect_timeline WHERE effect_id = %L ORDER BY seq$$, pg_temp.fx('irr')),
    $$VALUES ('transition', NULL::text, 'pending', true),
             ('transition', 'pending', 'approved', false)$$,
    'the irreversible effect''s timeline holds every transition, in order'
);
SELECT results_eq(
    format($$SELECT committed_at IS NOT NULL, committed_by = session_user, chain_seq < commit_seq
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, pg_temp.fx('comp')),
    $$VALUES (true, true, true)$$,
    'the direct UPDATE''s commit is recorded in the row: when, by this login, linked after the creation'
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
    format($$SELECT result_snapshot, commit_hash IS NOT NULL, chain_hash IS NOT NULL
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, pg_temp.fx('comp')),
    $$VALUES (NULL::jsonb, true, true)$$,
    '... the committed effect''s result and links are as recorded');

-- The guard also checks INSERTs: an effect starts as intercept writes it, a compensable
-- one executing, an irreversible one pending (the creation record's state follows from
-- the tier).
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

-- The guard and the validator agree on every triple: one effect per (tier, from, to),
-- put in its from-state with triggers off (session_replication_role = replica), then
-- moved to its to-state by a direct UPDATE, triggers on.
SET LOCAL session_replication_role = replica;
INSERT INTO undolog.undolog_effect_log
    (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
SELECT gen_random_uuid(), '11111111-1111-4111-8111-111111111111', now(),
       pg_temp.sig(a.tier || a.from_state || a.to_state), 100 + row_number() OVER (), 'matrix',
       a.tier, jsonb_build_object('to', a.to_state), a.from_state
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
-- (the matrix rows were inserted with triggers off: no creation is recorded for them).
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

SELECT * FROM finish();
ROLLBACK;
