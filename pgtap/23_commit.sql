-- undolog.commit(p_effect_id, p_result): the body succeeded; executing -> committed, the
-- result cached for replays. UL003 unknown effect, UL001 not executing, UL009 too large.
BEGIN;
SELECT plan(61);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('tool_a', 'compensable', '{"name": "undo"}') AS tool_id \gset
SELECT pg_temp.tool('big', 'compensable', '{"name": "undo"}') AS tool_id \gset
SELECT pg_temp.tool('a', 'compensable', '{"name": "undo"}') AS tool_id \gset

SELECT has_function('undolog', 'commit', ARRAY['uuid', 'jsonb', 'boolean'],
                    'undolog.commit(uuid, jsonb, boolean) exists (p_async DEFAULT false)');
SELECT function_returns('undolog', 'commit', ARRAY['uuid', 'jsonb', 'boolean'], 'text',
                        'it returns text (committed, or late)');
SELECT is_definer('undolog', 'commit', ARRAY['uuid', 'jsonb', 'boolean'], 'it is SECURITY DEFINER');

SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000001'),
          'c0000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
CREATE TEMP TABLE fx (name text PRIMARY KEY, effect_id uuid);
CREATE FUNCTION pg_temp.new_call(p_name text, p_step integer, p_tier text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.tool('tool_' || p_name, p_tier,
                         CASE p_tier WHEN 'compensable' THEN '{"name": "undo"}'::jsonb END);
    INSERT INTO fx
    SELECT p_name, i.effect_id
    FROM undolog.intercept('c0000000-0000-4000-8000-000000000001', p_step, 'tool_' || p_name,
                           p_tier, '{}', pg_temp.sig('commit-' || p_name),
                           CASE p_tier WHEN 'compensable' THEN '{"name": "undo"}'::jsonb END) AS i;
    RETURN (SELECT e.state FROM undolog.undolog_effect_log AS e
            WHERE e.effect_id = (SELECT f.effect_id FROM fx AS f WHERE f.name = p_name));
END
$$;
CREATE FUNCTION pg_temp.eid(p_name text) RETURNS uuid LANGUAGE sql
AS $$ SELECT effect_id FROM fx WHERE name = p_name $$;

SELECT is(pg_temp.new_call('a', 0, 'compensable'), 'executing', 'setup: effect a executing');
SELECT is(pg_temp.new_call('b', 1, 'compensable'), 'executing', 'setup: effect b executing');
SELECT is(pg_temp.new_call('c', 2, 'compensable'), 'executing', 'setup: effect c executing');

-- Commit with a result.
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('a'), '{"user_id": 42, "tags": ["x"]}')$$,
                'commit of an executing effect');
SELECT results_eq(
    $$SELECT state, result_snapshot, error, attempts FROM undolog.undolog_effect_log
      WHERE effect_id = pg_temp.eid('a')$$,
    $$VALUES ('committed', '{"user_id": 42, "tags": ["x"]}'::jsonb, NULL::text, 1)$$,
    'the effect is committed with its result cached');
-- The commit is recorded in the effect's own row (migration 0013), not as a history row:
-- when, by whom. It was the call's first change of state, so it is the call's one link
-- (commit_*, its record the whole call): the creation has no link of its own (chain_*
-- NULL).
SELECT results_eq(
    $$SELECT committed_at IS NOT NULL, committed_by = session_user, commit_seq IS NOT NULL,
             commit_prev IS NOT NULL, commit_hash IS NOT NULL, chain_seq IS NULL,
             chain_prev IS NULL, chain_hash IS NULL,
             (SELECT count(*) FROM undolog.undolog_effect_history AS h
              WHERE h.effect_id = e.effect_id)
      FROM undolog.undolog_effect_log AS e WHERE e.effect_id = pg_temp.eid('a')$$,
    $$VALUES (true, true, true, true, true, true, true, true, 0::bigint)$$,
    'the row records the commit: when, by this login, one link (commit_*, no chain_*); no history row');
-- Both events in the timeline, at the one link's seq: the creation first by its time.
SELECT results_eq(
    $$SELECT event, from_state, to_state, history_id, seq = e.commit_seq
      FROM undolog.effect_timeline AS t
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)
      WHERE t.effect_id = pg_temp.eid('a') ORDER BY t.seq, t.at$$,
    $$VALUES ('transition', NULL::text, 'executing', NULL::bigint, true),
             ('transition', 'executing', 'committed', NULL::bigint, true)$$,
    'the timeline shows its creation, then executing -> committed, both at the commit''s seq');
SELECT results_eq(
    $$SELECT state, compensation FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('a')$$,
    $$VALUES ('pending', '{"name": "undo", "args": {}}'::jsonb)$$,
    'its undo entry stays on the stack, due if the session fails');
SELECT results_eq(
    $$SELECT action, result_snapshot FROM undolog.intercept('c0000000-0000-4000-8000-000000000001',
        0, 'tool_a', 'compensable', '{}', pg_temp.sig('commit-a'), '{"name": "undo"}')$$,
    $$VALUES ('replay', '{"user_id": 42, "tags": ["x"]}'::jsonb)$$,
    'the same call now replays the committed result');

-- A NULL result is stored as JSON null, so that a replay can tell "no result" apart.
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('b'), NULL)$$, 'commit with a NULL result');
SELECT results_eq(
    $$SELECT state, result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('b')$$,
    $$VALUES ('committed', 'null'::jsonb)$$,
    'a NULL result is stored as JSON null');

-- A scalar result is fine too.
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('c'), '"done"')$$, 'commit with a scalar result');
SELECT is((SELECT result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c')),
          '"done"'::jsonb, 'a scalar result is stored as given');

-- The session's chain: a COMPENSABLE call's intercept moves its head by nothing (the
-- insert fires no trigger), its commit by one link.
SELECT seq AS head0 FROM undolog.undolog_chain_heads
WHERE session_id = 'c0000000-0000-4000-8000-000000000001' \gset
SELECT is(pg_temp.new_call('d', 4, 'compensable'), 'executing', 'setup: effect d executing');
SELECT is((SELECT seq FROM undolog.undolog_chain_heads
           WHERE session_id = 'c0000000-0000-4000-8000-000000000001') - :head0,
          0::bigint, 'the intercept of a compensable call adds no link to the session''s chain');
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('d'), '{"d": 1}')$$, 'commit of effect d');
SELECT results_eq(
    format($$SELECT h.seq - %s, e.commit_seq = h.seq, e.commit_hash = h.head, e.chain_seq IS NULL
             FROM undolog.undolog_chain_heads AS h
             JOIN undolog.undolog_effect_log AS e USING (session_id)
             WHERE h.session_id = 'c0000000-0000-4000-8000-000000000001'
               AND e.effect_id = pg_temp.eid('d')$$, :head0),
    $$VALUES (1::bigint, true, true, true)$$,
    '... its commit adds one: the head is its commit_* link, and it has no chain_* link');

-- A call that failed, was retried, then committed: the fail was its first change, so it
-- linked the creation (chain_*) before the fail's history row; the commit, later, has a
-- link of its own (commit_*), after the retry's history row.
SELECT is(pg_temp.new_call('f', 5, 'compensable'), 'executing', 'setup: effect f executing');
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('f'), 'boom')$$, 'setup: f fails');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000001', 5, 'tool_f',
              'compensable', '{}', pg_temp.sig('commit-f'), '{"name": "undo"}')),
          'execute', 'setup: f retried, executing again');
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('f'), '{"f": 1}')$$, 'commit of the retried f');
SELECT results_eq(
    $$SELECT e.chain_seq IS NOT NULL, e.commit_seq IS NOT NULL,
             e.chain_seq < fail.chain_seq, fail.chain_seq < retry.chain_seq,
             retry.chain_seq < e.commit_seq
      FROM undolog.undolog_effect_log AS e
      JOIN undolog.undolog_effect_history AS fail
          ON fail.effect_id = e.effect_id
         AND (fail.from_state, fail.to_state) = ('executing', 'pending')
      JOIN undolog.undolog_effect_history AS retry
          ON retry.effect_id = e.effect_id
         AND (retry.from_state, retry.to_state) = ('pending', 'executing')
      WHERE e.effect_id = pg_temp.eid('f')$$,
    $$VALUES (true, true, true, true, true)$$,
    'both links: chain_seq (creation) < the fail''s history row < the retry''s < commit_seq');
SELECT is((SELECT e.commit_seq - e.chain_seq FROM undolog.undolog_effect_log AS e
           WHERE e.effect_id = pg_temp.eid('f')),
          3::bigint, '... consecutive: creation, fail, retry, commit');

-- Refusals: SQLSTATE, and nothing written.
SELECT pg_temp.refused($$SELECT undolog.commit(pg_temp.eid('a'), '{"user_id": 43}')$$,
                       'UL001', 'committing twice: UL001');
SELECT is((SELECT result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('a')),
          '{"user_id": 42, "tags": ["x"]}'::jsonb, 'the first result is kept');

SELECT is(pg_temp.new_call('irr', 3, 'irreversible'), 'pending',
          'setup: an irreversible effect, pending approval');
SELECT pg_temp.refused($$SELECT undolog.commit(pg_temp.eid('irr'), '{}')$$,
                       'UL001', 'commit of a pending effect (never approved, never run): UL001');

SELECT pg_temp.refused($$SELECT undolog.commit('99999999-9999-4999-8999-999999999999', '{}')$$,
                       'UL003', 'commit of an unknown effect: UL003');
SELECT pg_temp.refused($$SELECT undolog.commit(NULL, '{}')$$,
                       'UL003', 'commit of a NULL effect id: UL003');

SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000002'),
          'c0000000-0000-4000-8000-000000000002'::uuid, 'setup: a second session');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000002', 0, 'big',
              'compensable', '{}', pg_temp.sig('commit-big'), '{"name": "undo"}')),
          'execute', 'setup: an executing effect on it');
SELECT pg_temp.refused(
    $$SELECT undolog.commit(
        (SELECT effect_id FROM undolog.undolog_undo_stack
         WHERE call_signature = pg_temp.sig('commit-big')),
        jsonb_build_object('blob', repeat('x', 1048576)))$$,
    'UL009', 'a result over 1 MiB: UL009');
SELECT pg_temp.refused(
    $$SELECT undolog.commit(
        (SELECT effect_id FROM undolog.undolog_undo_stack
         WHERE call_signature = pg_temp.sig('commit-big')),
        '{"id": 7, "total": 1e131071}')$$,
    'UL008', 'a result holding a number no double holds (1e131071): UL008');
SELECT is((SELECT state FROM undolog.undolog_effect_log
           WHERE call_signature = pg_temp.sig('commit-big')),
          'executing', 'the effect is still executing: it can be committed with a smaller result');
SELECT lives_ok(
    $$SELECT undolog.commit(
        (SELECT effect_id FROM undolog.undolog_undo_stack
         WHERE call_signature = pg_temp.sig('commit-big')),
        jsonb_build_object('b', repeat('x', 1048576 - pg_column_size(jsonb_build_object('b', '')))))$$,
    'a result of exactly 1 MiB is accepted');

-- p_async: the result commits asynchronously, for this transaction only, when asked, and
-- only when commit is the transaction's first write (tests/engine/test_durability.py shows that
-- case). Here the transaction journaled an intent first, so it stays durable.
-- A client that turned synchronous_commit off still gets a durable intent.
SET LOCAL synchronous_commit = off;
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000002', 1, 'a',
              'compensable', '{}', pg_temp.sig('commit-async'), '{"name": "undo"}')),
          'execute', 'setup: another executing effect');
SELECT is(current_setting('synchronous_commit'), 'on',
          'a client''s synchronous_commit = off is overridden by intercept: the intent commits durably');
SELECT is(undolog.commit((SELECT effect_id FROM undolog.undolog_undo_stack
                          WHERE call_signature = pg_temp.sig('commit-async')), '{"ok": 1}', true),
          'committed', 'commit(..., p_async => true) answers committed');
SELECT is(current_setting('synchronous_commit'), 'on',
          '... and the transaction, which journaled an intent before, still commits durably');
SELECT ok(NOT EXISTS (SELECT FROM pg_proc AS p, unnest(p.proconfig) AS c
                      WHERE p.oid = 'undolog.commit(uuid, jsonb, boolean)'::regprocedure
                        AND c LIKE 'synchronous_commit=%'),
          'commit has no synchronous_commit SET clause (one would be undone before COMMIT)');
-- commit_effect(session_id, effect_id, result, async): the same call with the session first,
-- routable by its first argument; an effect of another session is unknown there (UL003).
SELECT has_function('undolog', 'commit_effect', ARRAY['uuid', 'uuid', 'jsonb', 'boolean'],
                    'undolog.commit_effect(uuid, uuid, jsonb, boolean) exists (session first)');
SELECT is_definer('undolog', 'commit_effect', ARRAY['uuid', 'uuid', 'jsonb', 'boolean'],
                  'the session-first form is SECURITY DEFINER');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000002', 10, 'a',
              'compensable', '{}', pg_temp.sig('commit-s1'), '{"name": "undo"}')),
          'execute', 'setup: effect s1 executing, in the second session');
INSERT INTO fx SELECT 's1', u.effect_id FROM undolog.undolog_undo_stack AS u
WHERE u.call_signature = pg_temp.sig('commit-s1');
SELECT pg_temp.refused(
    $$SELECT undolog.commit_effect('c0000000-0000-4000-8000-000000000001'::uuid, pg_temp.eid('s1'), '{}')$$,
    'UL003', 'session-first commit naming another session: UL003');
SELECT is(undolog.commit_effect('c0000000-0000-4000-8000-000000000002'::uuid, pg_temp.eid('s1'),
                         '{"n": 1}'),
          'committed', 'session-first commit of an executing effect: committed');
SELECT is((SELECT result_snapshot FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('s1')),
          '{"n": 1}'::jsonb, 'its result is cached');
SELECT pg_temp.refused(
    $$SELECT undolog.commit_effect('c0000000-0000-4000-8000-000000000002'::uuid, pg_temp.eid('s1'), '{}')$$,
    'UL001', 'session-first commit twice: UL001');
SELECT pg_temp.refused(
    $$SELECT undolog.commit_effect('c0000000-0000-4000-8000-000000000002'::uuid,
                            '99999999-9999-4999-8999-999999999999'::uuid, '{}')$$,
    'UL003', 'session-first commit of an unknown effect: UL003');

SELECT * FROM finish();
ROLLBACK;
