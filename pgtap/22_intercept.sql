-- undolog.intercept(session, step, tool, tier, args, signature, compensation): the one
-- call an agent makes before a journaled tool body runs. New calls, duplicates (replay,
-- in_progress, retry after fail), lying clients (UL005), a signature forged under another
-- session (a new call of that session, nothing of the first), sessions that take no new
-- calls (UL010), and every kind of bad input, each refused with its SQLSTATE, writing
-- nothing.
BEGIN;
SELECT plan(186);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('send_sms', 'irreversible') AS tool_id \gset
SELECT pg_temp.tool('create_admin', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('charge_card', 'compensable', '{"name": "refund"}') AS tool_id \gset

SELECT has_function('undolog', 'intercept',
                    ARRAY['uuid', 'integer', 'text', 'text', 'jsonb', 'text', 'jsonb'],
                    'undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb) exists');
SELECT is_definer('undolog', 'intercept',
                  ARRAY['uuid', 'integer', 'text', 'text', 'jsonb', 'text', 'jsonb'],
                  'it is SECURITY DEFINER');

-- Every intercept below is recorded here under a name, with the row it answered.
CREATE TEMP TABLE calls (
    name text PRIMARY KEY, effect_id uuid, action text, state text,
    result_snapshot jsonb, approval_id uuid
);
CREATE FUNCTION pg_temp.call(
    p_name text, p_session uuid, p_step integer, p_tool text, p_tier text, p_args jsonb,
    p_sig_seed text, p_compensation jsonb DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_temp.try_tool(p_tool, p_tier, p_compensation);
    INSERT INTO calls
    SELECT p_name, i.effect_id, i.action, i.state, i.result_snapshot, i.approval_id
    FROM undolog.intercept(p_session, p_step, p_tool, p_tier, p_args, pg_temp.sig(p_sig_seed),
                           p_compensation) AS i;
    RETURN (SELECT c.action FROM calls AS c WHERE c.name = p_name);
END
$$;
CREATE FUNCTION pg_temp.eid(p_name text) RETURNS uuid LANGUAGE sql
AS $$ SELECT effect_id FROM calls WHERE name = p_name $$;
CREATE FUNCTION pg_temp.effect(p_name text) RETURNS undolog.undolog_effect_log LANGUAGE sql
AS $$ SELECT * FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid(p_name) $$;

-- S1 runs the main story; S2 stays active for retries and bad input; S3, S4 are for
-- the human decisions.
SELECT is(undolog.begin_session('5e550000-0000-4000-8000-000000000001'),
          '5e550000-0000-4000-8000-000000000001'::uuid, 'setup: session S1');
SELECT is(undolog.begin_session('5e550000-0000-4000-8000-000000000002'),
          '5e550000-0000-4000-8000-000000000002'::uuid, 'setup: session S2');

------------------------------------------------------------------------------------------
-- A new COMPENSABLE call: execute; effect executing; undo entry; its creation recorded
-- in its own row (no history row), not linked yet: intercept's insert fires no trigger,
-- the call is linked at its first change of state (its commit, normally: one link).
------------------------------------------------------------------------------------------
SELECT is(pg_temp.call('c1', '5e550000-0000-4000-8000-000000000001', 0, 'create_user',
                       'compensable', '{"name": "ada"}', 'c1', '{"name": "delete_user"}'),
          'execute', 'new compensable call: action execute');
SELECT results_eq(
    $$SELECT state, result_snapshot, approval_id, effect_id IS NOT NULL FROM calls WHERE name = 'c1'$$,
    $$VALUES ('executing', NULL::jsonb, NULL::uuid, true)$$,
    '... answering state executing, an effect id, no result, no approval');
SELECT results_eq(
    $$SELECT session_id, call_signature, step_index, tool_name, tier, args, state,
             result_snapshot, error, attempts, replay_count, last_replayed_at
      FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c1')$$,
    $$VALUES ('5e550000-0000-4000-8000-000000000001'::uuid, pg_temp.sig('c1'), 0, 'create_user',
              'compensable', '{"name": "ada"}'::jsonb, 'executing', NULL::jsonb, NULL::text,
              1, 0, NULL::timestamptz)$$,
    'the effect row holds the call, executing, attempt 1');
-- The call's exactly-once key (session, signature) is its undo entry's (migration 0014):
-- the entry maps the signature to the effect's key.
SELECT results_eq(
    $$SELECT session_id, effect_id, executed_at FROM undolog.undolog_undo_stack
      WHERE call_signature = pg_temp.sig('c1')$$,
    $$SELECT session_id, effect_id, executed_at FROM undolog.undolog_effect_log
      WHERE effect_id = pg_temp.eid('c1')$$,
    'the undo entry maps the signature to the effect''s key');
SELECT results_eq(
    $$SELECT session_id, executed_at, call_signature, compensation, max_attempts, state, attempts
      FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('c1')$$,
    $$SELECT session_id, executed_at, call_signature, '{"name": "delete_user", "args": {}}'::jsonb,
             NULL::integer, 'pending', 0
      FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c1')$$,
    'one undo-stack entry holds the call''s signature and the descriptor, args defaulting to {}');
SELECT is_empty(
    $$SELECT * FROM undolog.undolog_effect_history WHERE effect_id = pg_temp.eid('c1')$$,
    'no history row: the creation is recorded in the effect''s own row');
SELECT results_eq(
    $$SELECT event, from_state, to_state, actor = session_user, history_id, seq
      FROM undolog.effect_timeline WHERE effect_id = pg_temp.eid('c1') ORDER BY seq, at$$,
    $$VALUES ('transition', NULL::text, 'executing', true, NULL::bigint, NULL::bigint)$$,
    'its one event: NULL -> executing by this login (pending -> executing in one step), no seq yet');
SELECT results_eq(
    $$SELECT events_in_row, chain_seq, chain_prev, chain_hash, commit_seq, commit_prev, commit_hash
      FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c1')$$,
    $$VALUES (true, NULL::bigint, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bytea, NULL::bytea)$$,
    'the row: events_in_row, no link yet (chain_* and commit_* NULL)');
SELECT is(
    (SELECT tableoid::regclass::text FROM undolog.undolog_effect_log
     WHERE effect_id = pg_temp.eid('c1')),
    'undolog.undolog_effect_log_' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM'),
    'the effect lands in the current month''s partition');
SELECT is(pg_temp.session_state('5e550000-0000-4000-8000-000000000001'), 'active',
          'the session stays active');

-- A second one, with descriptor args and max_attempts: pushed above the first.
SELECT is(pg_temp.call('c2', '5e550000-0000-4000-8000-000000000001', 1, 'create_user',
                       'compensable', '{"name": "bob"}', 'c2',
                       '{"name": "delete_user", "args": {"soft": true}, "max_attempts": 5}'),
          'execute', 'second compensable call: execute');
SELECT results_eq(
    $$SELECT compensation, max_attempts FROM undolog.undolog_undo_stack
      WHERE effect_id = pg_temp.eid('c2')$$,
    $$VALUES ('{"name": "delete_user", "args": {"soft": true}}'::jsonb, 5)$$,
    'its entry keeps the descriptor args; max_attempts goes to its own column');
SELECT cmp_ok(
    (SELECT stack_position FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('c2')),
    '>',
    (SELECT stack_position FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('c1')),
    'the later call sits higher on the undo stack');

------------------------------------------------------------------------------------------
-- Duplicates of an executing call: in_progress, nothing written.
------------------------------------------------------------------------------------------
CREATE TEMP TABLE before_dup AS SELECT pg_temp.journal_state() AS s;
SELECT is(pg_temp.call('c1_while_executing', '5e550000-0000-4000-8000-000000000001', 0,
                       'create_user', 'compensable', '{"name": "ada"}', 'c1',
                       '{"name": "delete_user"}'),
          'in_progress', 'duplicate of an executing call: in_progress');
SELECT results_eq(
    $$SELECT effect_id, state, result_snapshot FROM calls WHERE name = 'c1_while_executing'$$,
    $$SELECT pg_temp.eid('c1'), 'executing', NULL::jsonb$$,
    '... naming the original effect, executing, no result');
SELECT is(pg_temp.journal_state(), (SELECT s FROM before_dup),
          '... and nothing written (no second effect, undo entry or history row)');

------------------------------------------------------------------------------------------
-- A new IRREVERSIBLE call: await_approval; pending effect; approval request; barrier;
-- session suspended.
------------------------------------------------------------------------------------------
SELECT is(pg_temp.call('i1', '5e550000-0000-4000-8000-000000000001', 2, 'send_email',
                       'irreversible', '{"to": "ada"}', 'i1'),
          'await_approval', 'new irreversible call: action await_approval');
SELECT results_eq(
    $$SELECT state, result_snapshot, approval_id IS NOT NULL FROM calls WHERE name = 'i1'$$,
    $$VALUES ('pending', NULL::jsonb, true)$$,
    '... answering state pending and an approval id');
SELECT results_eq(
    $$SELECT tier, state, attempts FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('i1')$$,
    $$VALUES ('irreversible', 'pending', 0)$$,
    'the effect is pending, never attempted');
SELECT results_eq(
    $$SELECT approval_id, session_id, state, decided_at FROM undolog.undolog_approval_requests
      WHERE effect_id = pg_temp.eid('i1')$$,
    $$SELECT approval_id, '5e550000-0000-4000-8000-000000000001'::uuid, 'pending', NULL::timestamptz
      FROM calls WHERE name = 'i1'$$,
    'one approval request, pending, with the answered approval id');
SELECT results_eq(
    $$SELECT count(*), count(compensation), max(stack_position) > (SELECT stack_position
        FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('c2'))
      FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('i1')$$,
    $$VALUES (1::bigint, 0::bigint, true)$$,
    'one barrier undo entry (compensation NULL), above the earlier calls');
SELECT is_empty(
    $$SELECT * FROM undolog.undolog_effect_history WHERE effect_id = pg_temp.eid('i1')$$,
    'no history row: its creation too is recorded in its own row');
SELECT results_eq(
    $$SELECT event, from_state, to_state, actor = session_user, history_id, seq IS NOT NULL
      FROM undolog.effect_timeline WHERE effect_id = pg_temp.eid('i1') ORDER BY seq, at$$,
    $$VALUES ('transition', NULL::text, 'pending', true, NULL::bigint, true)$$,
    'its one event: NULL -> pending by this login, linked');
-- An IRREVERSIBLE call is linked when it is inserted (a person may read it for hours
-- before deciding): its creation's link in chain_*, before its approval request's.
SELECT results_eq(
    $$SELECT e.events_in_row, e.chain_seq IS NOT NULL, e.chain_prev IS NOT NULL,
             e.chain_hash IS NOT NULL, e.chain_seq < a.chain_seq, e.commit_seq IS NULL
      FROM undolog.undolog_effect_log AS e
      JOIN undolog.undolog_approval_requests AS a USING (session_id, effect_id, executed_at)
      WHERE e.effect_id = pg_temp.eid('i1')$$,
    $$VALUES (true, true, true, true, true, true)$$,
    'the row: events_in_row, linked at once in chain_* (before its approval request), no commit_*');
SELECT is(pg_temp.session_state('5e550000-0000-4000-8000-000000000001'), 'awaiting_approval',
          'the session is awaiting_approval');
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = '5e550000-0000-4000-8000-000000000001' ORDER BY history_id DESC LIMIT 1$$,
    $$VALUES ('active', 'awaiting_approval')$$,
    'the session history records active -> awaiting_approval');

-- Asking again while it waits: the same approval, nothing written.
DELETE FROM before_dup;
INSERT INTO before_dup SELECT pg_temp.journal_state();
SELECT is(pg_temp.call('i1_again', '5e550000-0000-4000-8000-000000000001', 2, 'send_email',
                       'irreversible', '{"to": "ada"}', 'i1'),
          'await_approval', 'duplicate of a pending irreversible call: await_approval');
SELECT is((SELECT approval_id FROM calls WHERE name = 'i1_again'),
          (SELECT approval_id FROM calls WHERE name = 'i1'), '... with the same approval id');
SELECT is(pg_temp.journal_state(), (SELECT s FROM before_dup), '... and nothing written');

-- A new acting call on a session that waits for a person: UL010, nothing written. (A new
-- IRREVERSIBLE call only asks too, with its own request: 53_ask_at_once.sql.)
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 3, 'create_user',
        'compensable', '{}', pg_temp.sig('new-on-awaiting'), '{"name": "delete_user"}')$$,
    'UL010', 'new compensable call on an awaiting_approval session: UL010');

------------------------------------------------------------------------------------------
-- Duplicate of a committed call: replay the cached result, count the replay.
------------------------------------------------------------------------------------------
SELECT lives_ok($$SELECT undolog.commit(pg_temp.eid('c1'), '{"user_id": 42}')$$,
                'setup: commit c1');
SELECT is(pg_temp.call('c1_replay', '5e550000-0000-4000-8000-000000000001', 0, 'create_user',
                       'compensable', '{"name": "ada"}', 'c1', '{"name": "delete_user"}'),
          'replay', 'duplicate of a committed call: replay (even on a suspended session)');
SELECT results_eq(
    $$SELECT effect_id, state, result_snapshot, approval_id FROM calls WHERE name = 'c1_replay'$$,
    $$SELECT pg_temp.eid('c1'), 'committed', '{"user_id": 42}'::jsonb, NULL::uuid$$,
    '... answering the original effect, committed, with its cached result');
SELECT results_eq(
    $$SELECT state, replay_count, last_replayed_at FROM undolog.undolog_effect_log
      WHERE effect_id = pg_temp.eid('c1')$$,
    $$VALUES ('committed', 1, now())$$,
    'the effect stays committed; replay_count 1, last_replayed_at set');
SELECT results_eq(
    $$SELECT event, from_state, to_state, detail FROM undolog.undolog_effect_history
      WHERE effect_id = pg_temp.eid('c1') ORDER BY history_id DESC LIMIT 1$$,
    $$VALUES ('replayed', 'committed', 'committed', '{"replay_count": 1}'::jsonb)$$,
    'a replayed event is appended to the original''s history');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_log WHERE call_signature = pg_temp.sig('c1')),
          1::bigint, 'a replay never creates a second effect');
-- The replay's insert of an undo entry met the (session, signature) key and did nothing:
-- the entry it found is the original's, and it is the only one.
SELECT results_eq(
    $$SELECT effect_id, undo_id FROM undolog.undolog_undo_stack
      WHERE session_id = '5e550000-0000-4000-8000-000000000001'
        AND call_signature = pg_temp.sig('c1')$$,
    $$SELECT pg_temp.eid('c1'), pg_temp.undo_of(pg_temp.eid('c1'))$$,
    '... nor a second undo entry: the signature''s one entry is the original effect''s');
SELECT is(pg_temp.call('c1_replay2', '5e550000-0000-4000-8000-000000000001', 0, 'create_user',
                       'compensable', '{"name": "ada"}', 'c1', '{"name": "delete_user"}'),
          'replay', 'a second duplicate replays too');
SELECT is((SELECT replay_count || '/' || (SELECT count(*) FROM undolog.undolog_effect_history AS h
                                          WHERE h.effect_id = e.effect_id AND h.event = 'replayed')
           FROM undolog.undolog_effect_log AS e WHERE e.effect_id = pg_temp.eid('c1')),
          '2/2', '... replay_count 2, two replayed events');

------------------------------------------------------------------------------------------
-- Same signature, different call: a lying client (UL005), nothing written.
------------------------------------------------------------------------------------------
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 7, 'create_user',
        'compensable', '{"name": "ada"}', pg_temp.sig('c1'), '{"name": "delete_user"}')$$,
    'UL005', 'same signature, another step: UL005');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 0, 'create_admin',
        'compensable', '{"name": "ada"}', pg_temp.sig('c1'), '{"name": "delete_user"}')$$,
    'UL005', 'same signature, another tool: UL005');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 0, 'create_user',
        'compensable', '{"name": "eve"}', pg_temp.sig('c1'), '{"name": "delete_user"}')$$,
    'UL005', 'same signature, other args: UL005');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 0, 'create_user',
        'irreversible', '{"name": "ada"}', pg_temp.sig('c1'))$$,
    'UL005', 'same signature, another tier: UL005');
SELECT is((SELECT replay_count FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('c1')),
          2, 'no mismatch was counted as a replay');

------------------------------------------------------------------------------------------
-- The same signature under another session: signatures are unique per session only (the
-- preimage holds the session id, so this one is forged). It is looked up in its own
-- session, where it is a new call: it gets nothing of the first session's (not its
-- effect, not its result, not its approval).
------------------------------------------------------------------------------------------
SELECT is(undolog.begin_session('5e550000-0000-4000-8000-00000000000a'),
          '5e550000-0000-4000-8000-00000000000a'::uuid, 'setup: session S10');
SELECT is(pg_temp.call('forged_c1', '5e550000-0000-4000-8000-00000000000a', 0, 'create_user',
                       'compensable', '{"name": "ada"}', 'c1', '{"name": "delete_user"}'),
          'execute', 'c1''s signature under another session: a new call of that session');
SELECT results_eq(
    $$SELECT e.session_id, e.state, e.result_snapshot, e.replay_count,
             c.effect_id <> pg_temp.eid('c1'), c.result_snapshot
      FROM calls AS c JOIN undolog.undolog_effect_log AS e ON e.effect_id = c.effect_id
      WHERE c.name = 'forged_c1'$$,
    $$VALUES ('5e550000-0000-4000-8000-00000000000a'::uuid, 'executing', NULL::jsonb, 0,
              true, NULL::jsonb)$$,
    '... its own effect, executing: not c1''s effect nor its committed result');
SELECT is(pg_temp.call('forged_i1', '5e550000-0000-4000-8000-00000000000a', 2, 'send_email',
                       'irreversible', '{"to": "ada"}', 'i1'),
          'await_approval', 'i1''s signature under another session: a new call awaiting approval');
SELECT ok((SELECT approval_id IS NOT NULL AND approval_id <> (SELECT approval_id FROM calls
                                                               WHERE name = 'i1')
           FROM calls WHERE name = 'forged_i1'),
          '... with an approval request of its own, not i1''s');
SELECT results_eq(
    $$SELECT session_id, count(*) FROM undolog.undolog_undo_stack
      WHERE call_signature IN (pg_temp.sig('c1'), pg_temp.sig('i1'))
      GROUP BY session_id ORDER BY session_id$$,
    $$VALUES ('5e550000-0000-4000-8000-000000000001'::uuid, 2::bigint),
             ('5e550000-0000-4000-8000-00000000000a'::uuid, 2::bigint)$$,
    'the undo stack holds each signature once per session: one entry per call');
SELECT results_eq(
    $$SELECT u.effect_id FROM undolog.undolog_undo_stack AS u
      WHERE u.session_id = '5e550000-0000-4000-8000-00000000000a'
        AND u.call_signature = pg_temp.sig('c1')$$,
    $$SELECT pg_temp.eid('forged_c1')$$,
    '... S10''s entry for c1''s signature is its own call''s, a separate effect');
-- Replayed in its own session, the forged call finds its own effect again, not c1's.
SELECT is(pg_temp.call('forged_c1_again', '5e550000-0000-4000-8000-00000000000a', 0, 'create_user',
                       'compensable', '{"name": "ada"}', 'c1', '{"name": "delete_user"}'),
          'in_progress', 'c1''s signature again in S10: in_progress, S10''s call still executing');
SELECT is((SELECT effect_id FROM calls WHERE name = 'forged_c1_again'), pg_temp.eid('forged_c1'),
          '... naming S10''s effect, not c1''s');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack
           WHERE session_id = '5e550000-0000-4000-8000-00000000000a'
             AND call_signature = pg_temp.sig('c1')),
          1::bigint, '... and S10 still has one entry for that signature');

------------------------------------------------------------------------------------------
-- Fail, then the same call again: it executes again (attempt 2).
------------------------------------------------------------------------------------------
SELECT is(pg_temp.call('r1', '5e550000-0000-4000-8000-000000000002', 0, 'charge_card',
                       'compensable', '{"cents": 500}', 'r1', '{"name": "refund"}'),
          'execute', 'setup: a compensable call on S2');
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('r1'), 'card declined')$$, 'setup: it fails');
SELECT is(pg_temp.call('r1_retry', '5e550000-0000-4000-8000-000000000002', 0, 'charge_card',
                       'compensable', '{"cents": 500}', 'r1', '{"name": "refund"}'),
          'execute', 'the same call after fail: execute again');
SELECT results_eq(
    $$SELECT effect_id, state FROM calls WHERE name = 'r1_retry'$$,
    $$SELECT pg_temp.eid('r1'), 'executing'$$, '... the same effect, executing');
SELECT results_eq(
    $$SELECT state, attempts, error FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('r1')$$,
    $$VALUES ('executing', 2, NULL::text)$$, 'attempts 2, the old error cleared');
-- The creation is in the row (linked by the fail, before the fail's history row); the
-- fail and the retry are history rows.
SELECT results_eq(
    $$SELECT from_state, to_state, history_id IS NULL AS in_row FROM undolog.effect_timeline
      WHERE effect_id = pg_temp.eid('r1') ORDER BY seq, at$$,
    $$VALUES (NULL::text, 'executing', true), ('executing', 'pending', false),
             ('pending', 'executing', false)$$,
    'timeline: created executing (in the row), pending (failed), executing again');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack WHERE effect_id = pg_temp.eid('r1')),
          1::bigint, 'still one undo entry for the effect');

-- A failed call cannot be retried once the session is no longer active.
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('r1'), 'declined again')$$, 'setup: it fails again');
SELECT is(undolog.begin_session('5e550000-0000-4000-8000-000000000005'),
          '5e550000-0000-4000-8000-000000000005'::uuid, 'setup: session S5');
SELECT is(pg_temp.call('r5', '5e550000-0000-4000-8000-000000000005', 0, 'charge_card',
                       'compensable', '{"cents": 1}', 'r5', '{"name": "refund"}'),
          'execute', 'setup: a call on S5');
SELECT lives_ok($$SELECT undolog.fail(pg_temp.eid('r5'), 'declined')$$, 'setup: it fails');
SELECT is(undolog.fail_session('5e550000-0000-4000-8000-000000000005', 'gave up'), 'failed',
          'setup: S5 fails');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000005', 0, 'charge_card',
        'compensable', '{"cents": 1}', pg_temp.sig('r5'), '{"name": "refund"}')$$,
    'UL010', 'retrying a failed call on a failed session: UL010');

------------------------------------------------------------------------------------------
-- After a human decision (made here by direct UPDATEs, as approve()/reject() would).
------------------------------------------------------------------------------------------
SELECT is(undolog.begin_session('5e550000-0000-4000-8000-000000000003'),
          '5e550000-0000-4000-8000-000000000003'::uuid, 'setup: session S3');
SELECT is(pg_temp.call('rej', '5e550000-0000-4000-8000-000000000003', 0, 'delete_repo',
                       'irreversible', '{"repo": "x"}', 'rej'),
          'await_approval', 'setup: an irreversible call on S3');
SELECT lives_ok($$UPDATE undolog.undolog_effect_log SET state = 'rejected'
                  WHERE effect_id = pg_temp.eid('rej')$$, 'setup: a human rejects it');
SELECT is(pg_temp.call('rej_again', '5e550000-0000-4000-8000-000000000003', 0, 'delete_repo',
                       'irreversible', '{"repo": "x"}', 'rej'),
          'rejected', 'the same call after a rejection: rejected');
SELECT results_eq(
    $$SELECT effect_id, state, approval_id FROM calls WHERE name = 'rej_again'$$,
    $$SELECT effect_id, 'rejected', approval_id FROM calls WHERE name = 'rej'$$,
    '... naming the effect, rejected, and its approval id');

SELECT is(undolog.begin_session('5e550000-0000-4000-8000-000000000004'),
          '5e550000-0000-4000-8000-000000000004'::uuid, 'setup: session S4');
SELECT is(pg_temp.call('appr', '5e550000-0000-4000-8000-000000000004', 0, 'wire_money',
                       'irreversible', '{"cents": 100}', 'appr'),
          'await_approval', 'setup: an irreversible call on S4');
SELECT lives_ok($$UPDATE undolog.undolog_effect_log SET state = 'approved'
                  WHERE effect_id = pg_temp.eid('appr')$$, 'setup: a human approves it');
SELECT lives_ok($$UPDATE undolog.undolog_sessions SET state = 'active'
                  WHERE session_id = '5e550000-0000-4000-8000-000000000004'$$,
                'setup: ... and the session resumes');
SELECT is(pg_temp.call('appr_again', '5e550000-0000-4000-8000-000000000004', 0, 'wire_money',
                       'irreversible', '{"cents": 100}', 'appr'),
          'execute', 'the same call after approval: execute');
SELECT results_eq(
    $$SELECT state, attempts FROM undolog.undolog_effect_log WHERE effect_id = pg_temp.eid('appr')$$,
    $$VALUES ('executing', 1)$$, 'the approved effect is executing, attempt 1');

------------------------------------------------------------------------------------------
-- A call that was undone never runs again (UL001).
------------------------------------------------------------------------------------------
SELECT lives_ok($$UPDATE undolog.undolog_effect_log SET state = 'compensating'
                  WHERE effect_id = pg_temp.eid('c2')$$, 'setup: c2 is being compensated');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 1, 'create_user',
        'compensable', '{"name": "bob"}', pg_temp.sig('c2'),
        '{"name": "delete_user", "args": {"soft": true}, "max_attempts": 5}')$$,
    'UL001', 'the same call while it is being compensated: UL001');
SELECT lives_ok($$UPDATE undolog.undolog_effect_log SET state = 'compensated'
                  WHERE effect_id = pg_temp.eid('c2')$$, 'setup: c2 is compensated');
SELECT pg_temp.refused(
    $$SELECT * FROM undolog.intercept('5e550000-0000-4000-8000-000000000001', 1, 'create_user',
        'compensable', '{"name": "bob"}', pg_temp.sig('c2'),
        '{"name": "delete_user", "args": {"soft": true}, "max_attempts": 5}')$$,
    'UL001', 'the same call once compensated: UL001');

------------------------------------------------------------------------------------------
-- Bad input on the active session S2: each refused with its SQLSTATE, nothing written.
------------------------------------------------------------------------------------------
CREATE FUNCTION pg_temp.bad(
    p_description text, p_errcode text, p_session text, p_step text, p_tool text,
    p_tier text, p_args text, p_sig text, p_compensation text
)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_temp.refused(
        format('SELECT * FROM undolog.intercept(%s, %s, %s, %s, %s, %s, %s)',
               p_session, p_step, p_tool, p_tier, p_args, p_sig, p_compensation),
        p_errcode, p_description);
END
$$;
-- The arguments are SQL expressions; a good call is
--   ('5e55...0002', 10, 'create_user', 'compensable', '{"a": 1}', sig('bad'), '{"name": "d"}')
CREATE TEMP TABLE bad_calls (
    n serial, description text, errcode text, session text, step text, tool text,
    tier text, args text, sig text, compensation text
);
INSERT INTO bad_calls (description, errcode, session, step, tool, tier, args, sig, compensation)
SELECT d, e,
       coalesce(s, $q$'5e550000-0000-4000-8000-000000000002'::uuid$q$), coalesce(st, '10'),
       coalesce(t, $q$'create_user'$q$), coalesce(ti, $q$'compensable'$q$),
       coalesce(a, $q$'{"a": 1}'::jsonb$q$), coalesce(g, $q$pg_temp.sig('bad')$q$),
       coalesce(c, $q$'{"name": "d"}'::jsonb$q$)
FROM (VALUES
    ('signature too short: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, $q$'abc123'$q$, NULL),
    ('signature of 63 characters: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, $q$left(pg_temp.sig('bad'), 63)$q$, NULL),
    ('signature of 65 characters: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, $q$pg_temp.sig('bad') || 'a'$q$, NULL),
    ('signature in uppercase: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, $q$upper(pg_temp.sig('bad'))$q$, NULL),
    ('signature not hex: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, $q$repeat('g', 64)$q$, NULL),
    ('signature NULL: UL004', 'UL004', NULL, NULL, NULL, NULL, NULL, 'NULL::text', NULL),
    ('unknown session: UL002', 'UL002', $q$'99999999-9999-4999-8999-999999999999'::uuid$q$, NULL, NULL, NULL, NULL, NULL, NULL),
    ('tier safe: UL006', 'UL006', NULL, NULL, NULL, $q$'safe'$q$, NULL, NULL, 'NULL::jsonb'),
    ('tier unknown: UL006', 'UL006', NULL, NULL, NULL, $q$'reversible'$q$, NULL, NULL, NULL),
    ('tier in uppercase: UL006', 'UL006', NULL, NULL, NULL, $q$'COMPENSABLE'$q$, NULL, NULL, NULL),
    ('tier NULL: UL006', 'UL006', NULL, NULL, NULL, 'NULL::text', NULL, NULL, NULL),
    ('compensable without compensation: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, 'NULL::jsonb'),
    ('irreversible with a compensation: UL007', 'UL007', NULL, NULL, NULL, $q$'irreversible'$q$, NULL, NULL, NULL),
    ('descriptor an array: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'["d"]'::jsonb$q$),
    ('descriptor a string: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'"d"'::jsonb$q$),
    ('descriptor without name: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"args": {}}'::jsonb$q$),
    ('descriptor with an empty name: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": " "}'::jsonb$q$),
    ('descriptor with a numeric name: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": 1}'::jsonb$q$),
    ('descriptor args not an object: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "args": [1]}'::jsonb$q$),
    ('descriptor with an unknown key: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "retries": 3}'::jsonb$q$),
    ('descriptor max_attempts 0: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "max_attempts": 0}'::jsonb$q$),
    ('descriptor max_attempts 101: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "max_attempts": 101}'::jsonb$q$),
    ('descriptor max_attempts 2.5: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "max_attempts": 2.5}'::jsonb$q$),
    ('descriptor max_attempts a string: UL007', 'UL007', NULL, NULL, NULL, NULL, NULL, NULL, $q$'{"name": "d", "max_attempts": "3"}'::jsonb$q$),
    ('args an array: UL008', 'UL008', NULL, NULL, NULL, NULL, $q$'[1, 2]'::jsonb$q$, NULL, NULL),
    ('args a string: UL008', 'UL008', NULL, NULL, NULL, NULL, $q$'"x"'::jsonb$q$, NULL, NULL),
    ('args JSON null: UL008', 'UL008', NULL, NULL, NULL, NULL, $q$'null'::jsonb$q$, NULL, NULL),
    ('args NULL: UL008', 'UL008', NULL, NULL, NULL, NULL, 'NULL::jsonb', NULL, NULL),
    ('negative step: UL008', 'UL008', NULL, '-1', NULL, NULL, NULL, NULL, NULL),
    ('step NULL: UL008', 'UL008', NULL, 'NULL::integer', NULL, NULL, NULL, NULL, NULL),
    ('empty tool name: UL008', 'UL008', NULL, NULL, $q$''$q$, NULL, NULL, NULL, NULL),
    ('blank tool name: UL008', 'UL008', NULL, NULL, $q$'   '$q$, NULL, NULL, NULL, NULL),
    ('tool name NULL: UL008', 'UL008', NULL, NULL, 'NULL::text', NULL, NULL, NULL, NULL),
    ('tool name of 201 characters: UL008', 'UL008', NULL, NULL, $q$repeat('t', 201)$q$, NULL, NULL, NULL, NULL),
    ('session NULL: UL008', 'UL008', 'NULL::uuid', NULL, NULL, NULL, NULL, NULL, NULL),
    ('args over 1 MiB: UL009', 'UL009', NULL, NULL, NULL, NULL,
     $q$jsonb_build_object('blob', repeat('x', 1048576))$q$, NULL, NULL),
    ('compensation over 1 MiB: UL009', 'UL009', NULL, NULL, NULL, NULL, NULL, NULL,
     $q$jsonb_build_object('name', 'd', 'args', jsonb_build_object('blob', repeat('x', 1048576)))$q$),
    -- numbers no finite double holds: a few bytes of jsonb, refused before any is printed
    ('args holding 1e131071 (131,072 digits as text): UL008', 'UL008', NULL, NULL, NULL, NULL,
     $q$'{"a": [1, {"n": 1e131071}]}'::jsonb$q$, NULL, NULL),
    ('args holding -1e309: UL008', 'UL008', NULL, NULL, NULL, NULL,
     $q$'{"n": -1e309}'::jsonb$q$, NULL, NULL),
    ('args holding 1e-400 (a double reads it as 0): UL008', 'UL008', NULL, NULL, NULL, NULL,
     $q$'{"n": 1e-400}'::jsonb$q$, NULL, NULL),
    ('compensation args holding 1e400: UL008', 'UL008', NULL, NULL, NULL, NULL, NULL, NULL,
     $q$'{"name": "d", "args": {"n": 1e400}}'::jsonb$q$),
    ('args of 4,000 numbers 1e131071 (500 MB as text): UL008', 'UL008', NULL, NULL, NULL, NULL,
     $q$(SELECT jsonb_object_agg('k' || i, '1e131071'::jsonb) FROM generate_series(1, 4000) AS i)$q$,
     NULL, NULL),
    ('args of 10,000 zeros 0e-16383 (160 MB as text): UL009', 'UL009', NULL, NULL, NULL, NULL,
     $q$(SELECT jsonb_object_agg('k' || i, '0e-16383'::jsonb) FROM generate_series(1, 10000) AS i)$q$,
     NULL, NULL),
    -- jsonb takes 12,000 levels; a walk of every level runs out of stack (54001) on them
    ('args nested 12,000 deep, holding 1e400: UL009 (the depth first)', 'UL009', NULL, NULL,
     NULL, NULL,
     $q$('{"a": ' || repeat('[', 12000) || '1e400' || repeat(']', 12000) || '}')::jsonb$q$,
     NULL, NULL)
) AS v (d, e, s, st, t, ti, a, g, c);

SELECT is((SELECT count(*) FROM bad_calls), 44::bigint, 'setup: 44 bad calls');
SELECT pg_temp.bad(description, errcode, session, step, tool, tier, args, sig, compensation)
FROM bad_calls ORDER BY n;

-- The boundaries are accepted.
SELECT pg_temp.tool('at_limit', 'compensable', '{"name": "d", "max_attempts": 100}')
    AS tool_id \gset
SELECT pg_temp.tool(repeat('t', 200), 'compensable', '{"name": "d", "max_attempts": 1}')
    AS tool_id \gset
SELECT is(
    (SELECT action FROM undolog.intercept(
        '5e550000-0000-4000-8000-000000000002', 20, 'at_limit', 'compensable',
        jsonb_build_object('b', repeat('x', 1048576 - pg_column_size(jsonb_build_object('b', '')))),
        pg_temp.sig('at-limit'), '{"name": "d", "max_attempts": 100}')),
    'execute', 'args of exactly 1 MiB, max_attempts 100: accepted');
SELECT is(
    (SELECT action FROM undolog.intercept(
        '5e550000-0000-4000-8000-000000000002', 21, repeat('t', 200), 'compensable', '{}',
        pg_temp.sig('tool-200'), '{"name": "d", "max_attempts": 1}')),
    'execute', 'a tool name of 200 characters, max_attempts 1: accepted');
SELECT is(
    (SELECT action FROM undolog.intercept(
        '5e550000-0000-4000-8000-000000000002', 22, 'at_limit', 'compensable',
        '{"max": 1.7976931348623157e308, "min": -4.9406564584124654e-324, "big": 1e300,
          "tenth": 0.1, "safe": 9007199254740991, "zero": -0.0, "id": 18446744073709551615}',
        pg_temp.sig('doubles'), '{"name": "d", "max_attempts": 100}')),
    'execute', 'args of numbers a double holds (its largest, its smallest, a 64-bit id): accepted');

SELECT * FROM finish();
ROLLBACK;
