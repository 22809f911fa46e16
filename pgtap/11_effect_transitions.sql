-- undolog.effect_transition_allowed(tier, from, to): the effect state machine of
-- docs/design/state-machines.md, checked for every (tier, from, to) triple, and the effect log's guard
-- trigger that enforces it on every write, whoever makes it.
BEGIN;
SELECT plan(33);
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
SELECT is(pg_temp.fx_state('comp') || '/' || pg_temp.fx_history('comp'), 'executing/1',
          'refused updates left the compensable effect executing with its 1 history row');
SELECT is(pg_temp.fx_state('irr') || '/' || pg_temp.fx_history('irr'), 'pending/1',
          'refused updates left the irreversible effect pending with its 1 history row');

-- Valid transitions are accepted and recorded, one history row each.
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
SELECT results_eq(
    format($$SELECT event, from_state, to_state FROM undolog.undolog_effect_history
             WHERE effect_id = %L ORDER BY history_id$$, pg_temp.fx('comp')),
    $$VALUES ('transition', NULL::text, 'executing'),
             ('transition', 'executing', 'committed'), ('transition', 'committed', 'compensating')$$,
    'the compensable effect''s history holds every transition, in order'
);
SELECT results_eq(
    format($$SELECT event, from_state, to_state FROM undolog.undolog_effect_history
             WHERE effect_id = %L ORDER BY history_id$$, pg_temp.fx('irr')),
    $$VALUES ('transition', NULL::text, 'pending'), ('transition', 'pending', 'approved')$$,
    'the irreversible effect''s history holds every transition, in order'
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
SELECT is(pg_temp.fx_history('irr'), 2::bigint, '... and writes no history row');

-- The guard also checks INSERTs: an effect starts pending (or executing, compensable).
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
SELECT set_eq(
    $$SELECT e.tier, h.from_state, h.to_state
      FROM undolog.undolog_effect_history AS h
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      WHERE e.tool_name = 'matrix'$$,
    $$SELECT tier, from_state, to_state FROM expected_valid$$,
    'each accepted transition wrote its history row, each refused one none'
);

SELECT * FROM finish();
ROLLBACK;
