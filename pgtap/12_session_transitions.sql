-- undolog.session_transition_allowed(from, to): the session state machine of
-- docs/design/state-machines.md,
-- checked for every (from, to) pair, and the sessions guard trigger that enforces it on
-- every write and records every change in undolog_session_history.
BEGIN;
SELECT plan(28);
\ir _helpers.psql

SELECT has_function('undolog', 'session_transition_allowed', ARRAY['text', 'text'],
                    'undolog.session_transition_allowed(text, text) exists');
SELECT volatility_is('undolog', 'session_transition_allowed', ARRAY['text', 'text'],
                     'immutable', 'it is IMMUTABLE');

CREATE TEMP TABLE session_states (state text PRIMARY KEY);
INSERT INTO session_states VALUES
    ('active'), ('completed'), ('failed'), ('awaiting_approval'), ('compensating'),
    ('compensated'), ('halted');

-- The machine: active -> completed | failed | awaiting_approval; failed -> compensating;
-- awaiting_approval -> active (approved) | compensating (rejected);
-- compensating -> compensated | halted; halted -> compensating (a human resumes the walk);
-- active -> compensating -> active: a partial walk (rollback_to; the guard also wants its
-- undo_floor, so a bare UPDATE is still refused below).
CREATE TEMP TABLE expected_valid (from_state text, to_state text);
INSERT INTO expected_valid VALUES
    ('active', 'completed'), ('active', 'failed'), ('active', 'awaiting_approval'),
    ('active', 'compensating'), ('compensating', 'active'),
    ('failed', 'compensating'),
    ('awaiting_approval', 'active'), ('awaiting_approval', 'compensating'),
    ('compensating', 'compensated'), ('compensating', 'halted'),
    ('halted', 'compensating');

CREATE TEMP VIEW all_pairs AS
SELECT f.state AS from_state, s.state AS to_state,
       undolog.session_transition_allowed(f.state, s.state) AS allowed
FROM session_states AS f CROSS JOIN session_states AS s;

SELECT is((SELECT count(*) FROM all_pairs), 49::bigint, 'the cross product covers 7 x 7 states');
SELECT results_eq(
    $$SELECT from_state, to_state, allowed FROM all_pairs ORDER BY 1, 2$$,
    $$SELECT a.from_state, a.to_state,
             EXISTS (SELECT FROM expected_valid AS v
                     WHERE (v.from_state, v.to_state) = (a.from_state, a.to_state))
      FROM all_pairs AS a ORDER BY 1, 2$$,
    'session_transition_allowed answers the expected value for all 49 pairs'
);
SELECT set_eq(
    $$SELECT from_state, to_state FROM all_pairs WHERE allowed$$,
    $$SELECT from_state, to_state FROM expected_valid$$,
    'the allowed pairs are exactly the 11 expected ones'
);
SELECT is_empty($$SELECT * FROM all_pairs WHERE allowed IS NULL$$, 'no pair answers NULL');
SELECT is_empty(
    $$SELECT * FROM all_pairs WHERE allowed AND from_state IN ('completed', 'compensated')$$,
    'completed and compensated are final');

-- The guard trigger, by direct UPDATE of undolog_sessions (as the owner).
SELECT is(undolog.begin_session('22222222-2222-4222-8222-222222222222'),
          '22222222-2222-4222-8222-222222222222'::uuid, 'setup: a session');
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    SELECT state FROM undolog.undolog_sessions
    WHERE session_id = '22222222-2222-4222-8222-222222222222' $$;
CREATE FUNCTION pg_temp.history_count() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM undolog.undolog_session_history
    WHERE session_id = '22222222-2222-4222-8222-222222222222' $$;

SELECT throws_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'compensated'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'UL001', NULL, 'guard refuses active -> compensated by direct UPDATE');
SELECT throws_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'compensating'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'UL001', NULL, 'guard refuses active -> compensating (the session must fail first)');
SELECT is(pg_temp.state() || '/' || pg_temp.history_count(), 'active/1',
          'refused updates left the session active with its 1 history row');

SELECT lives_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'failed', error = 'boom'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'guard accepts active -> failed by direct UPDATE');
SELECT lives_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'compensating'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'guard accepts failed -> compensating');
SELECT throws_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'active'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'UL001', NULL, 'guard refuses compensating -> active');
SELECT lives_ok(
    $$UPDATE undolog.undolog_sessions SET state = 'halted'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'guard accepts compensating -> halted');
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = '22222222-2222-4222-8222-222222222222' ORDER BY history_id$$,
    $$VALUES (NULL::text, 'active'), ('active', 'failed'), ('failed', 'compensating'),
             ('compensating', 'halted')$$,
    'every accepted change is in the history, in order'
);
SELECT is(
    (SELECT detail FROM undolog.undolog_session_history
     WHERE session_id = '22222222-2222-4222-8222-222222222222' AND to_state = 'failed'),
    '{"error": "boom"}'::jsonb, 'the failed row of the history carries the error');
SELECT is(
    (SELECT array_agg(h.to_state ORDER BY h.history_id) FROM undolog.undolog_session_history AS h
     WHERE h.session_id = '22222222-2222-4222-8222-222222222222' AND h.actor = session_user),
    ARRAY['active', 'failed', 'compensating', 'halted'],
    'each history row names its actor (the session user)');

-- Not a state change: no history row.
SELECT lives_ok(
    $$UPDATE undolog.undolog_sessions SET agent = 'renamed'
      WHERE session_id = '22222222-2222-4222-8222-222222222222'$$,
    'an UPDATE that keeps the state is accepted');
SELECT is(pg_temp.history_count(), 4::bigint, '... and writes no history row');

-- A session starts active.
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_sessions (session_id, state, lease_duration, lease_expires_at)
      VALUES (gen_random_uuid(), 'completed', '1 minute', now())$$,
    'UL001', NULL, 'guard refuses a session inserted in another state than active');

-- The guard and the validator agree on every pair: one session per (from, to), put in
-- its from-state with triggers off, then moved by a direct UPDATE, triggers on.
SET LOCAL session_replication_role = replica;
-- The partial walk's pairs move as rollback_to and its walk move them: with the floor.
INSERT INTO undolog.undolog_sessions
    (session_id, agent, state, lease_duration, lease_expires_at, undo_floor, undo_to)
SELECT gen_random_uuid(), 'matrix:' || a.to_state, a.from_state, '1 minute', now(),
       CASE WHEN (a.from_state, a.to_state) = ('compensating', 'active') THEN 1 END,
       CASE WHEN (a.from_state, a.to_state) = ('compensating', 'active') THEN '{}'::jsonb END
FROM all_pairs AS a
WHERE a.from_state <> a.to_state;
SET LOCAL session_replication_role = DEFAULT;

CREATE FUNCTION pg_temp.guard_outcomes()
RETURNS TABLE (from_state text, to_state text, accepted boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT s.session_id, s.state, split_part(s.agent, ':', 2) AS target
             FROM undolog.undolog_sessions AS s WHERE s.agent LIKE 'matrix:%' LOOP
        from_state := r.state;
        to_state := r.target;
        BEGIN
            UPDATE undolog.undolog_sessions AS s
            SET state = r.target,
                undo_floor = CASE WHEN (r.state, r.target) = ('active', 'compensating')
                                  THEN 1 END,
                undo_to = coalesce(s.undo_to, CASE WHEN r.target = 'compensating'
                                                    THEN '{}'::jsonb END)
            WHERE s.session_id = r.session_id;
            accepted := true;
        EXCEPTION WHEN SQLSTATE 'UL001' THEN
            accepted := false;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE TEMP TABLE guard_outcomes AS SELECT * FROM pg_temp.guard_outcomes();

SELECT is((SELECT count(*) FROM guard_outcomes), 42::bigint,
          'the guard was tried on all 42 pairs with from <> to');
SELECT set_eq(
    $$SELECT from_state, to_state FROM guard_outcomes WHERE accepted$$,
    $$SELECT from_state, to_state FROM expected_valid$$,
    'the guard accepts exactly the expected pairs (and refuses the 31 others with UL001)'
);
SELECT set_eq(
    $$SELECT h.from_state, h.to_state
      FROM undolog.undolog_session_history AS h
      JOIN undolog.undolog_sessions AS s USING (session_id)
      WHERE s.agent LIKE 'matrix:%'$$,
    $$SELECT from_state, to_state FROM expected_valid$$,
    'each accepted change wrote its history row, each refused one none'
);


-- updated_at: every change of the row stamps a later one, also within one transaction
-- (now() is the same all through it), so no two versions of a session share it
-- (expect_session tells the version an operator read by it alone).
SELECT pg_temp.new_session() AS stamped \gset
SELECT s.updated_at AS stamp0 FROM undolog.undolog_sessions AS s
WHERE s.session_id = :'stamped' \gset
SELECT undolog.heartbeat(:'stamped');
SELECT s.updated_at AS stamp1 FROM undolog.undolog_sessions AS s
WHERE s.session_id = :'stamped' \gset
SELECT ok(:'stamp1'::timestamptz > :'stamp0'::timestamptz,
          'an update in the same transaction as the insert stamps a later updated_at');
UPDATE undolog.undolog_sessions SET state = 'failed', error = 'x'
WHERE session_id = :'stamped';
SELECT s.updated_at AS stamp2 FROM undolog.undolog_sessions AS s
WHERE s.session_id = :'stamped' \gset
SELECT ok(:'stamp2'::timestamptz > :'stamp1'::timestamptz,
          '... and the next one a later one still, whatever it changes');
UPDATE undolog.undolog_sessions SET updated_at = :'stamp0'::timestamptz - interval '1 day'
WHERE session_id = :'stamped';
SELECT ok((SELECT s.updated_at FROM undolog.undolog_sessions AS s
           WHERE s.session_id = :'stamped') > :'stamp2'::timestamptz,
          'an update cannot set it back: the guard stamps it');
SELECT ok(:'stamp0'::timestamptz >= now(),
          'a row changed first in this transaction is stamped now() (never earlier)');

SELECT * FROM finish();
ROLLBACK;
