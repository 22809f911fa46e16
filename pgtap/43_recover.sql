-- undolog.recover: expired leases become failed sessions; answers the sessions whose undo
-- walk must run.
BEGIN;
SELECT plan(22);

-- Helpers for the saga suites (pg_temp: gone with the ROLLBACK). Approvals are simulated
-- with the owner's direct UPDATEs, which the guard triggers still validate.
CREATE FUNCTION pg_temp.sig(p_seed text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT encode(sha256(convert_to(p_seed, 'UTF8')), 'hex') $$;

-- Everything the engine writes, as one text: equal before and after = nothing written.
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql
AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.session_id) FROM undolog.undolog_sessions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_session_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.effect_id) FROM undolog.undolog_effect_log AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_effect_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.stack_position) FROM undolog.undolog_undo_stack AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_undo_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.action_id) FROM undolog.undolog_operator_actions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.approval_id) FROM undolog.undolog_approval_requests AS t)
    ))
$$;

-- Two tests: p_sql raises p_errcode, and it wrote nothing.
CREATE FUNCTION pg_temp.refused(p_sql text, p_errcode text, p_description text)
RETURNS SETOF text LANGUAGE plpgsql
AS $$
DECLARE
    v_before text := pg_temp.fingerprint();
BEGIN
    RETURN NEXT throws_ok(p_sql, p_errcode::char(5), NULL, p_description);
    RETURN NEXT is(pg_temp.fingerprint(), v_before, p_description || ': nothing written');
END
$$;

CREATE FUNCTION pg_temp.new_session() RETURNS uuid LANGUAGE sql
AS $$ SELECT undolog.begin_session() $$;

-- A COMPENSABLE call at step p_step, left p_outcome: committed, failed (reported: the
-- effect is pending again) or executing (the agent died mid-call). Answers its effect id.
CREATE FUNCTION pg_temp.call(
    p_session uuid, p_step integer, p_outcome text DEFAULT 'committed',
    p_compensation jsonb DEFAULT '{"name": "undo_step"}'
) RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'step_' || p_step, 'compensable',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step), p_compensation) AS i;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, jsonb_build_object('id', p_step));
    ELSIF p_outcome = 'failed' THEN
        PERFORM undolog.fail(v_effect, 'boom');
    END IF;
    RETURN v_effect;
END
$$;

-- An IRREVERSIBLE call at step p_step, left p_outcome:
--   pending   awaiting a decision (session awaiting_approval)
--   rejected  a human rejected it (session awaiting_approval -> compensating)
--   approved  approved, not yet made again (session active)
--   executing approved and running (session active)
--   committed approved, run, committed (session active)
CREATE FUNCTION pg_temp.irreversible(p_session uuid, p_step integer, p_outcome text)
RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step)) AS i;
    IF p_outcome = 'pending' THEN
        RETURN v_effect;
    END IF;
    UPDATE undolog.undolog_approval_requests AS a
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END,
        decided_at = now(), decided_by = 'pgtap'
    WHERE a.effect_id = v_effect;
    UPDATE undolog.undolog_effect_log AS e
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END
    WHERE e.effect_id = v_effect;
    UPDATE undolog.undolog_sessions AS s
    SET state = CASE p_outcome WHEN 'rejected' THEN 'compensating' ELSE 'active' END
    WHERE s.session_id = p_session;
    IF p_outcome IN ('executing', 'committed') THEN
        PERFORM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                                  jsonb_build_object('step', p_step),
                                  pg_temp.sig(p_session || '/' || p_step));
    END IF;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, '{"done": true}');
    END IF;
    RETURN v_effect;
END
$$;

CREATE FUNCTION pg_temp.undo_of(p_effect uuid) RETURNS uuid LANGUAGE sql
AS $$ SELECT u.undo_id FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.entry_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT u.state FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.effect_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT e.state FROM undolog.undolog_effect_log AS e WHERE e.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.session_state(p_session uuid) RETURNS text LANGUAGE sql
AS $$ SELECT s.state FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session $$;

-- Claim and answer the claimed effect's step (NULL: no row).
CREATE FUNCTION pg_temp.claim_step(p_session uuid) RETURNS integer LANGUAGE sql
AS $$ SELECT (c.args ->> 'step')::integer FROM undolog.claim_compensation(p_session) AS c $$;

-- The whole walk, each claim completed at once: the steps in the order they were undone.
CREATE FUNCTION pg_temp.walk(p_session uuid) RETURNS integer[] LANGUAGE plpgsql
AS $$
DECLARE
    v_claim record;
    v_steps integer[] := '{}';
BEGIN
    LOOP
        SELECT c.* INTO v_claim FROM undolog.claim_compensation(p_session) AS c;
        EXIT WHEN NOT FOUND;
        PERFORM undolog.complete_compensation(v_claim.undo_id);
        v_steps := v_steps || (v_claim.args ->> 'step')::integer;
    END LOOP;
    RETURN v_steps;
END
$$;

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

-- Privileges.
SET LOCAL ROLE undolog_agent;
SELECT throws_ok('SELECT * FROM undolog.recover()', '42501', NULL, 'the agent role cannot recover');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT lives_ok('SELECT * FROM undolog.recover()', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.recover()'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
